"""What ``generate(..., return_dict_in_generate=True)`` returns, and transition scores.

The four output classes carry the reference's names and fields (transformers 4.56.2), so
code written against ``transformers.generation`` reads them unchanged:

* attribute access: ``out.sequences``, ``out.scores``;
* string keys: ``out["sequences"]`` (a ``KeyError`` for a field that is ``None``);
* integers and slices over the fields that are not ``None``, in declaration order:
  ``out[0]`` is ``sequences``; ``out.to_tuple()`` gives all of them;
* ``keys()``, ``values()``, ``items()``, ``len(out)``, ``"scores" in out``, ``dict(out)``.

Shapes, with ``rows = batch * num_return_sequences`` and ``beams = batch * num_beams``:

* ``sequences``: (rows, prompt_len + generated) LongTensor;
* ``scores`` / ``logits``: one (rows or beams, vocab) tensor per generated token;
* ``sequences_scores``: (rows,) and ``beam_indices``: (rows, generated), -1 after the end.

Example::

    >>> out = GenerateDecoderOnlyOutput(sequences=torch.tensor([[5, 7]]))
    >>> list(out.keys()), out[0] is out.sequences, "scores" in out
    (['sequences'], True, False)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

__all__ = [
    "GenerateDecoderOnlyOutput",
    "GenerateEncoderDecoderOutput",
    "GenerateBeamDecoderOnlyOutput",
    "GenerateBeamEncoderDecoderOutput",
    "GreedySearchDecoderOnlyOutput",
    "ContrastiveSearchDecoderOnlyOutput",
    "SampleDecoderOnlyOutput",
    "GreedySearchEncoderDecoderOutput",
    "ContrastiveSearchEncoderDecoderOutput",
    "SampleEncoderDecoderOutput",
    "BeamSearchDecoderOnlyOutput",
    "BeamSampleDecoderOnlyOutput",
    "BeamSearchEncoderDecoderOutput",
    "BeamSampleEncoderDecoderOutput",
    "GenerateNonBeamOutput",
    "GenerateBeamOutput",
    "GenerateOutput",
    "compute_transition_scores",
]

Tensors = tuple[torch.Tensor, ...]
LayerTensors = tuple[tuple[torch.Tensor, ...], ...]


class _OutputFields(Mapping):
    """Dict-like and tuple-like views over a dataclass's fields that are not ``None``.

    Subclasses are dataclasses whose first field is required and whose other fields
    default to ``None``; a field set to ``None`` is absent from every view.
    """

    def keys(self) -> list[str]:  # type: ignore[override]
        """Names of the fields that hold a value, in declaration order."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def to_tuple(self) -> tuple[Any, ...]:
        """The values of the fields that are not ``None``, in declaration order."""
        return tuple(getattr(self, name) for name in self.keys())

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(
                    f"{key!r}: not set on this {type(self).__name__}; the fields set are "
                    f"{self.keys()} (scores, logits, attentions and hidden states are kept "
                    "only when generate() is asked for them, e.g. output_scores=True)"
                )
            return getattr(self, key)
        return self.to_tuple()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        names = [f.name for f in fields(self)]
        if key not in names:
            raise KeyError(f"{key!r}: not a field of {type(self).__name__}; fields: {names}")
        setattr(self, key, value)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.keys()


@dataclass
class GenerateDecoderOnlyOutput(_OutputFields):
    """Decoder-only model, greedy search or sampling (also assisted and contrastive).

    sequences: (rows, seq_len) prompt and generated tokens
    scores: per step (rows, vocab), the processed scores (output_scores=True)
    logits: per step (rows, vocab), the raw model logits (output_logits=True)
    attentions: per step, per layer (rows, heads, new_len, seq_len) (output_attentions=True)
    hidden_states: per step, per layer (rows, new_len, hidden) (output_hidden_states=True)
    past_key_values: the model's cache after the last step
    """

    sequences: torch.LongTensor
    scores: Tensors | None = None
    logits: Tensors | None = None
    attentions: LayerTensors | None = None
    hidden_states: LayerTensors | None = None
    past_key_values: Any = None


@dataclass
class GenerateEncoderDecoderOutput(_OutputFields):
    """Encoder-decoder model, greedy search or sampling.

    sequences: (rows, decoder_len) decoder start token and generated tokens
    scores / logits: per step (rows, vocab)
    encoder_attentions: per layer (rows, heads, src_len, src_len)
    encoder_hidden_states: embeddings then per layer (rows, src_len, hidden)
    decoder_attentions / cross_attentions: per step, per layer (rows, heads, new_len, len)
    decoder_hidden_states: per step, per layer (rows, new_len, hidden)
    past_key_values: the model's cache after the last step
    """

    sequences: torch.LongTensor
    scores: Tensors | None = None
    logits: Tensors | None = None
    encoder_attentions: Tensors | None = None
    encoder_hidden_states: Tensors | None = None
    decoder_attentions: LayerTensors | None = None
    cross_attentions: LayerTensors | None = None
    decoder_hidden_states: LayerTensors | None = None
    past_key_values: Any = None


@dataclass
class GenerateBeamDecoderOnlyOutput(_OutputFields):
    """Decoder-only model, beam search (also beam sampling, group and constrained beams).

    sequences: (rows, seq_len), rows = batch * num_return_sequences
    sequences_scores: (rows,) length-normalised sum of the chosen tokens' log-probs
    scores: per step (beams, vocab), each beam's processed log-probs
    logits: per step (beams, vocab), raw model logits
    beam_indices: (rows, generated) the beam row each token came from, -1 after the end
    attentions / hidden_states / past_key_values: as in GenerateDecoderOnlyOutput
    """

    sequences: torch.LongTensor
    sequences_scores: torch.Tensor | None = None
    scores: Tensors | None = None
    logits: Tensors | None = None
    beam_indices: torch.LongTensor | None = None
    attentions: LayerTensors | None = None
    hidden_states: LayerTensors | None = None
    past_key_values: Any = None


@dataclass
class GenerateBeamEncoderDecoderOutput(_OutputFields):
    """Encoder-decoder model, beam search; fields as the beam and encoder-decoder classes."""

    sequences: torch.LongTensor
    sequences_scores: torch.Tensor | None = None
    scores: Tensors | None = None
    logits: Tensors | None = None
    beam_indices: torch.LongTensor | None = None
    encoder_attentions: Tensors | None = None
    encoder_hidden_states: Tensors | None = None
    decoder_attentions: LayerTensors | None = None
    cross_attentions: LayerTensors | None = None
    decoder_hidden_states: LayerTensors | None = None
    past_key_values: Any = None


# Older names the reference still exports (one class per decoding mode before 4.39).
GreedySearchDecoderOnlyOutput = GenerateDecoderOnlyOutput
ContrastiveSearchDecoderOnlyOutput = GenerateDecoderOnlyOutput
SampleDecoderOnlyOutput = GenerateDecoderOnlyOutput
GreedySearchEncoderDecoderOutput = GenerateEncoderDecoderOutput
ContrastiveSearchEncoderDecoderOutput = GenerateEncoderDecoderOutput
SampleEncoderDecoderOutput = GenerateEncoderDecoderOutput
BeamSearchDecoderOnlyOutput = GenerateBeamDecoderOnlyOutput
BeamSampleDecoderOnlyOutput = GenerateBeamDecoderOnlyOutput
BeamSearchEncoderDecoderOutput = GenerateBeamEncoderDecoderOutput
BeamSampleEncoderDecoderOutput = GenerateBeamEncoderDecoderOutput

# Type annotations for whatever generate() may return as an object.
GenerateNonBeamOutput = GenerateDecoderOnlyOutput | GenerateEncoderDecoderOutput
GenerateBeamOutput = GenerateBeamDecoderOnlyOutput | GenerateBeamEncoderDecoderOutput
GenerateOutput = GenerateNonBeamOutput | GenerateBeamOutput


def compute_transition_scores(
    sequences: torch.Tensor,
    scores: Sequence[torch.Tensor],
    beam_indices: torch.Tensor | None = None,
    normalize_logits: bool = False,
) -> torch.Tensor:
    """The score each generated token had when it was chosen.

    sequences: (rows, seq_len) LongTensor; its last ``generated`` columns are the tokens
    scores: one (score_rows, vocab) tensor per step, as recorded by generate()
    beam_indices: (rows, >= generated) LongTensor from beam search, -1 after a row ended;
        None means row r of ``sequences`` was scored in row r of ``scores`` at every step
    normalize_logits: log-softmax each step's scores over the vocabulary first
    returns: (rows, generated) tensor, scores' dtype; 0 where a beam had already ended.
        ``generated`` is the longest row's length (``len(scores)`` without beams).

    With beam search and ``normalize_logits=False``, a row's sum divided by
    ``row_length ** length_penalty`` is that row's ``sequences_scores``.

    Example::

        >>> scores = (torch.tensor([[0.0, 2.0]]), torch.tensor([[3.0, 1.0]]))
        >>> compute_transition_scores(torch.tensor([[9, 1, 0]]), scores)
        tensor([[2., 3.]])
    """
    _check_transition_inputs(sequences, scores, beam_indices)
    stacked = _stack_steps(scores, normalize_logits).to(sequences.device)  # (rows', V, steps)
    if beam_indices is None:
        beam_indices = _own_row_every_step(stacked.shape[0], len(scores), sequences.device)
    beam_indices = beam_indices.to(sequences.device)

    ended = beam_indices < 0  # (rows, cols)
    generated = int((~ended).sum(-1).max())  # the longest row decides the width
    if generated > len(scores):
        raise ValueError(
            f"beam_indices: rows have up to {generated} non-negative entries but scores has "
            f"only {len(scores)} steps; pass the beam_indices and scores of the same generate() run"
        )
    ended = ended[:, :generated]
    beams = beam_indices[:, :generated].clamp(min=0)  # (rows, generated); ended rows -> beam 0
    tokens = sequences[:, sequences.shape[-1] - generated :]  # (rows, generated)
    steps = torch.arange(generated, device=sequences.device).expand_as(tokens)
    chosen = stacked[beams, tokens, steps]  # (rows, generated)
    return chosen.masked_fill(ended, 0.0)


def _stack_steps(scores: Sequence[torch.Tensor], normalize: bool) -> torch.Tensor:
    """Scores of every step as one (score_rows, vocab, steps) tensor, log-softmaxed if asked.

    Steps go last and the log-softmax runs over the middle (vocabulary) dimension: the same
    layout the reference normalises in, so the results agree bit for bit.
    """
    stacked = torch.stack(tuple(scores), dim=-1)  # (score_rows, vocab, steps)
    if normalize:
        stacked = torch.nn.functional.log_softmax(stacked, dim=1)
    return stacked


def _own_row_every_step(rows: int, steps: int, device: torch.device) -> torch.Tensor:
    """(rows, steps) beam indices saying every row always continued itself."""
    return torch.arange(rows, device=device).view(-1, 1).expand(-1, steps)


def _check_transition_inputs(
    sequences: torch.Tensor, scores: Sequence[torch.Tensor], beam_indices: torch.Tensor | None
) -> None:
    """ValueError, before any work, for inputs that could not come from one generate() run."""
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
        got = tuple(sequences.shape) if isinstance(sequences, torch.Tensor) else type(sequences)
        raise ValueError(
            f"sequences: expected a 2-D (rows, seq_len) LongTensor (output.sequences); got {got}"
        )
    if sequences.is_floating_point() or sequences.is_complex():
        raise ValueError(f"sequences: expected integer token ids; got dtype {sequences.dtype}")
    if isinstance(scores, torch.Tensor) or len(scores) == 0:
        raise ValueError(
            "scores: expected a non-empty tuple with one (rows, vocab_size) tensor per generated "
            "token (output.scores, from generate(..., output_scores=True, "
            "return_dict_in_generate=True))"
        )
    shapes = {tuple(s.shape) for s in scores}
    first = tuple(scores[0].shape)
    if len(shapes) != 1 or len(first) != 2:
        raise ValueError(
            f"scores: every step must be a (rows, vocab_size) tensor of one shape; got shapes "
            f"{sorted(shapes)}"
        )
    if sequences.shape[1] < len(scores):
        raise ValueError(
            f"sequences: has {sequences.shape[1]} columns but scores has {len(scores)} steps; "
            "pass the full output.sequences (prompt included) of the same run"
        )
    if beam_indices is None:
        if sequences.shape[0] != first[0]:
            raise ValueError(
                f"sequences: {sequences.shape[0]} rows but each step of scores has {first[0]} "
                "rows; after beam search pass beam_indices=output.beam_indices"
            )
        return
    if not isinstance(beam_indices, torch.Tensor) or beam_indices.dim() != 2:
        raise ValueError(
            "beam_indices: expected a 2-D (rows, generated) LongTensor (output.beam_indices)"
        )
    if beam_indices.shape[0] != sequences.shape[0]:
        raise ValueError(
            f"beam_indices: {beam_indices.shape[0]} rows but sequences has "
            f"{sequences.shape[0]}; they must come from the same run"
        )
    if beam_indices.numel() and int(beam_indices.max()) >= first[0]:
        raise ValueError(
            f"beam_indices: contains {int(beam_indices.max())} but scores have only {first[0]} "
            f"rows (valid beam indices are -1 and 0..{first[0] - 1})"
        )
