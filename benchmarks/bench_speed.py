"""Benchmark: batch 1 and batch 16 against transformers and the bandwidth bound, the weight
form chosen, and bfloat16 against float32 (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_speed.py [--new-tokens 48] [--repeats 3]

In one process, on the demo model's weights (SmolLM2-135M-Instruct, float32 from the
GGUF file, the same tensors for genlab and transformers):

1. the weight form genlab chose (``matmul.choose_form``: packed, split or both) and why;
2. greedy tokens of the demo prompts equal to transformers' (float32; and bfloat16 against
   transformers built with ``dtype=torch.bfloat16``), and the logits' largest difference:
   genlab bf16 vs transformers fp32 beside transformers bf16 vs its own fp32;
3. timings, all systems interleaved in every repeat, the read bandwidth measured before
   each repeat (sum of 1 GB): greedy batch 1 decoding (genlab in the chosen form and in
   each forced form, transformers' ``generate``), 16 sampled rows
   (``num_return_sequences=16``) against one sampled row, bfloat16 against float32 for
   both systems. Decoding rates exclude the prompt (a generation of N tokens minus one of
   1 token).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import genlab  # noqa: E402  (before torch: genlab's thread defaults, see genlab/runtime/threads.py)

# isort: split
import torch  # noqa: E402
from bench_decoder import (  # noqa: E402
    demo_gguf_path,
    greedy_genlab,
    greedy_hf,
    load_reference,
    measure_bandwidth,
    weight_bytes_per_token,
)

from genlab.models.architectures import build_decoder  # noqa: E402
from genlab.runtime import matmul as mm  # noqa: E402

DEMO_PROMPTS = [
    ("chat", "What is the capital of France?"),
    ("plain", "The three primary colours are"),
]


def prompt_ids(tokenizer, kind: str, text: str) -> torch.Tensor:
    if kind == "chat":
        messages = [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt"
        )
    return tokenizer(text, return_tensors="pt").input_ids


@torch.inference_mode()
def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    if hasattr(model, "new_cache"):  # genlab decoder
        out = model.forward(
            ids, attention_mask=torch.ones_like(ids),
            position_ids=torch.arange(ids.shape[1])[None], cache=model.new_cache(1),
            logits_to_keep=0,
        )  # fmt: skip
        return out.logits.float()
    return model(ids).logits.float()


def genlab_seconds(lm, ids, new_tokens: int, rows: int = 1, sample: bool = False) -> float:
    cfg = dict(do_sample=sample, top_k=50 if sample else None, num_return_sequences=rows)
    start = time.perf_counter()
    genlab.generate(
        lm, input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, **cfg,
    )  # fmt: skip
    return time.perf_counter() - start


def hf_seconds(hf, ids, new_tokens: int) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        hf.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
            min_new_tokens=new_tokens, do_sample=False,
        )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.new_tokens
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY')}, load average {os.getloadavg()[0]:.1f} "
        "(the machine is shared: other processes run beside this one)"
    )
    path = demo_gguf_path()
    hf32, tokenizer = load_reference(path)
    hf16, _ = load_reference(path, torch.bfloat16)
    config, state = hf32.config.to_dict(), hf32.state_dict()

    choice = mm.choose_form(torch.float32, "cpu")
    choice16 = mm.choose_form(torch.bfloat16, "cpu")
    print(f"\nweight form, float32: {choice.form}: {choice.reason}")
    print(f"weight form, bfloat16: {choice16.form}: {choice16.reason}")

    models = {"genlab fp32": build_decoder(config, dict(state), name="demo")}
    for form in ("packed", "split"):
        if form != choice.form:
            models[f"genlab fp32 {form}"] = build_decoder(
                config, dict(state), name="demo", packed=form == "packed"
            )
    models["genlab bf16"] = build_decoder(config, dict(state), name="demo", dtype=torch.bfloat16)
    g32, g16 = models["genlab fp32"], models["genlab bf16"]
    bytes32, bytes16 = weight_bytes_per_token(g32), weight_bytes_per_token(g16)
    print(
        f"weights read per token: fp32 {bytes32 / 1e6:.0f} MB, bf16 {bytes16 / 1e6:.0f} MB "
        f"({bytes16 / bytes32:.2f}x)"
    )

    print("\nparity on the demo prompts (24 greedy tokens, EOS suppressed):")
    eos = hf32.generation_config.eos_token_id
    for kind, text in DEMO_PROMPTS:
        ids = prompt_ids(tokenizer, kind, text)
        same32 = greedy_genlab(g32, ids, 24, eos, False)[0] == greedy_hf(hf32, ids, 24, False)[0]
        same16 = greedy_genlab(g16, ids, 24, eos, False)[0] == greedy_hf(hf16, ids, 24, False)[0]
        l32, l16 = logits_of(hf32, ids), logits_of(hf16, ids)
        ours32, ours16 = logits_of(g32, ids), logits_of(g16, ids)
        print(
            f"  {kind:5s} tokens equal: fp32 {same32}, bf16 {same16} | max |logit diff|: genlab "
            f"fp32 vs transformers fp32 {(ours32 - l32).abs().max():.1e}; genlab bf16 vs "
            f"transformers fp32 {(ours16 - l32).abs().max():.3f}, transformers bf16 vs its fp32 "
            f"{(l16 - l32).abs().max():.3f}; genlab bf16 vs transformers bf16 "
            f"{(ours16 - l16).abs().max():.3f}"
        )

    ids = prompt_ids(tokenizer, *DEMO_PROMPTS[0])
    probe = torch.ones(250_000_000, dtype=torch.float32)
    runs = {
        **{name: (lambda k=1, m=m: genlab_seconds(m, ids, k)) for name, m in models.items()},
        "transformers fp32": lambda k=1: hf_seconds(hf32, ids, k),
        "transformers bf16": lambda k=1: hf_seconds(hf16, ids, k),
        "genlab fp32, 1 sampled row": lambda k=1: genlab_seconds(g32, ids, k, 1, True),
        "genlab fp32, 16 sampled rows": lambda k=1: genlab_seconds(g32, ids, k, 16, True),
    }
    for run in runs.values():  # warm-up
        run(4)
    full = {name: [] for name in runs}
    one = {name: [] for name in runs}
    bandwidth = []
    for repeat in range(args.repeats):
        bandwidth.append(measure_bandwidth(probe, repeats=3))
        order = list(runs) if repeat % 2 == 0 else list(runs)[::-1]
        for name in order:
            one[name].append(runs[name](1))
            full[name].append(runs[name](n))
    del probe
    bw = statistics.median(bandwidth)
    print(
        f"\nread bandwidth before each repeat: {', '.join(f'{b:.1f}' for b in bandwidth)} GB/s "
        f"(median {bw:.1f}); bound for fp32 = {bw * 1e9 / bytes32:.1f} tok/s, "
        f"bf16 = {bw * 1e9 / bytes16:.1f} tok/s"
    )
    print(f"decoding, {n} new tokens, median of {args.repeats} (prompt excluded):")
    rate, best = {}, {}
    for name in runs:
        rows = 16 if "16 sampled" in name else 1
        per_step = [(f - o) / (n - 1) for f, o in zip(full[name], one[name], strict=True)]
        rate[name] = rows / statistics.median(per_step)
        best[name] = rows / min(per_step)
    print(f"  {'':30s} {'median':>12s} {'best':>12s}  of the bound (median bandwidth)")
    for name in runs:
        bytes_ = bytes16 if "bf16" in name else bytes32
        extra = ""
        if "sampled" not in name:
            extra = f"{bytes_ * rate[name] / 1e9 / bw:6.0%} {bytes_ * best[name] / 1e9 / bw:6.0%}"
        print(f"  {name:30s} {rate[name]:7.1f} tok/s {best[name]:7.1f} tok/s  {extra}")
    for label, r in (("median", rate), ("best", best)):
        hf = r["transformers fp32"]
        print(
            f"\n{label}: greedy batch 1 genlab / transformers fp32 = "
            f"{r['genlab fp32'] / hf:.2f}x; 16 sampled rows / 1 sampled row = "
            f"{r['genlab fp32, 16 sampled rows'] / r['genlab fp32, 1 sampled row']:.2f}x; "
            f"bf16 / fp32: genlab {r['genlab bf16'] / r['genlab fp32']:.2f}x, transformers "
            f"{r['transformers bf16'] / hf:.2f}x"
        )
        for name in models:
            if name.startswith("genlab fp32 "):
                ratio = r["genlab fp32"] / r[name]
                print(f"  chosen form ({choice.form}) / {name}: {ratio:.2f}x")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
