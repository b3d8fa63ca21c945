"""Record transformers 4.52.4's DoLa decoding outputs as test fixtures.

transformers 4.56.2 (the project's reference) fetches DoLa from the Hub, so the last version
that runs it locally, 4.52.4, is the reference for it, as for contrastive search. Run this
file with 4.52.4 importable (see tests/record_contrastive_fixtures.py)::

    pip install --no-deps --target /tmp/tf452 transformers==4.52.4 "tokenizers>=0.21,<0.22"
    PYTHONPATH=/tmp/tf452 .venv/bin/python tests/record_dola_fixtures.py

It writes tests/fixtures/dola_4_52_4.pt: the weight checksums of the tiny models below and,
per case, the sequences (and scores / logits when asked).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from record_contrastive_fixtures import PADDED, record  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "dola_4_52_4.pt"

#: (seed, overrides of tiny_llama's config); the comments give the candidate layers
MODELS = {
    "untied_2": dict(seed=0, vocab=96),  # low [0], high [1]
    "untied_6": dict(seed=4, vocab=64, num_hidden_layers=6),  # low [0, 2], high [3, 5]
    "tied_4": dict(seed=5, vocab=64, num_hidden_layers=4, tie_word_embeddings=True),  # [2]
}

OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)

#: name -> (model, input_ids, attention_mask, generate kwargs)
CASES = {
    "high_batch_left_padding": (
        "untied_6",
        *PADDED,
        dict(dola_layers="high", max_new_tokens=10, **OUT),
    ),
    "low_repetition_penalty": (
        "untied_6",
        [[3, 14, 15, 9, 26, 3, 14]],
        None,
        dict(dola_layers="low", repetition_penalty=1.2, max_new_tokens=12, **OUT),
    ),
    "layer_list_beyond_depth_dropped": (
        "untied_6",
        [[5, 6, 7, 8], [9, 10, 11, 12]],
        None,
        dict(dola_layers=[0, 4, 9], max_new_tokens=8, **OUT),
    ),
    "one_candidate_two_layers": (
        "untied_2",
        [[3, 14, 15, 9, 26]],
        None,
        dict(dola_layers="high", max_new_tokens=8, **OUT),
    ),
    "tied_embeddings_skip_layer_0": (
        "tied_4",
        [[1, 2, 3, 4, 5]],
        None,
        dict(dola_layers="low", max_new_tokens=8, eos_token_id=None, **OUT),
    ),
    "sampling_top_k": (
        "untied_6",
        [[3, 14, 15, 9, 26]],
        None,
        dict(dola_layers="high", do_sample=True, top_k=10, max_new_tokens=10, seed=7, **OUT),
    ),
    "plain_tensor": ("untied_6", [[1, 2, 3]], None, dict(dola_layers=[2], max_new_tokens=6)),
}


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    torch.save(record(MODELS, CASES), FIXTURE)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
