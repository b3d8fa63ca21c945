"""Logits processors, one class per processor (same names, arguments and numbers as
transformers 4.56.2), and :func:`build_processors`, which assembles them from a config.

>>> import torch
>>> from genlab.processors import LogitsProcessorList, TopKLogitsWarper
>>> LogitsProcessorList([TopKLogitsWarper(1)])(None, torch.tensor([[1.0, 2.0]])).tolist()
[[-inf, 2.0]]
"""

from .base import (
    WARPER_NAMES,
    LogitsProcessor,
    LogitsProcessorList,
    call_processor,
    extra_call_parameters,
    is_warper,
    stage_name_of,
)
from .bias import NoBadWordsLogitsProcessor, SequenceBiasLogitsProcessor
from .build import build_processors, eos_token_ids, merge_user_processors
from .forcing import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    PrefixConstrainedLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)
from .guidance import (
    ClassifierFreeGuidanceLogitsProcessor,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
)
from .normalize import InfNanRemoveLogitsProcessor, LogitNormalization
from .penalties import (
    EncoderNoRepeatNGramLogitsProcessor,
    EncoderRepetitionPenaltyLogitsProcessor,
    ExponentialDecayLengthPenalty,
    HammingDiversityLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    banned_next_tokens,
    ngram_table,
)
from .samplers import (
    DRYLogitsProcessor,
    DynamicTemperatureLogitsWarper,
    MirostatLogitsWarper,
    MirostatV2LogitsWarper,
    QuadraticSmoothingLogitsWarper,
    TopNSigmaLogitsWarper,
    XTCLogitsWarper,
    dry_breakers,
)
from .warpers import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

__all__ = [
    "WARPER_NAMES",
    "ClassifierFreeGuidanceLogitsProcessor",
    "DRYLogitsProcessor",
    "DynamicTemperatureLogitsWarper",
    "EncoderNoRepeatNGramLogitsProcessor",
    "EncoderRepetitionPenaltyLogitsProcessor",
    "EpsilonLogitsWarper",
    "EtaLogitsWarper",
    "ExponentialDecayLengthPenalty",
    "ForcedBOSTokenLogitsProcessor",
    "ForcedEOSTokenLogitsProcessor",
    "HammingDiversityLogitsProcessor",
    "InfNanRemoveLogitsProcessor",
    "LogitNormalization",
    "LogitsProcessor",
    "LogitsProcessorList",
    "MinLengthLogitsProcessor",
    "MinNewTokensLengthLogitsProcessor",
    "MinPLogitsWarper",
    "MirostatLogitsWarper",
    "MirostatV2LogitsWarper",
    "NoBadWordsLogitsProcessor",
    "NoRepeatNGramLogitsProcessor",
    "PrefixConstrainedLogitsProcessor",
    "QuadraticSmoothingLogitsWarper",
    "RepetitionPenaltyLogitsProcessor",
    "SequenceBiasLogitsProcessor",
    "SuppressTokensAtBeginLogitsProcessor",
    "SuppressTokensLogitsProcessor",
    "TemperatureLogitsWarper",
    "TopKLogitsWarper",
    "TopNSigmaLogitsWarper",
    "TopPLogitsWarper",
    "TypicalLogitsWarper",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor",
    "XTCLogitsWarper",
    "banned_next_tokens",
    "build_processors",
    "call_processor",
    "dry_breakers",
    "eos_token_ids",
    "extra_call_parameters",
    "is_warper",
    "merge_user_processors",
    "ngram_table",
    "stage_name_of",
]
