"""Benchmark: the demo as shipped (4-bit blocks) against float32, and exact self-speculation
(not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_quant.py [--repeats 3] [--new-tokens 32]

One process, all systems interleaved in every repeat (the order reversed every other
repeat), greedy decoding of one row on the demo's chat prompts:

* genlab float32 (the default), int8 and int4 (``genlab.load("demo", quantization=...)``);
* float32 drafted by its own int4 copy (``assistant_model=``): the float32 model's own
  tokens (checked), with the tokens per float32 forward pass (acceptance);
* llama.cpp on the same GGUF file, when ``llama_cpp`` (llama-cpp-python) can be imported:
  benchmark-only, never a dependency.

Also printed: the read bandwidth (a 1 GB sum, before each repeat), each mode's weight bytes
and the bound they give (bandwidth / bytes read per token), and the top-1 agreement and mean
KL per token of int8 and int4 against float32 (``lm.compare``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import genlab  # noqa: E402

# isort: split
import torch  # noqa: E402
from bench_decoder import demo_gguf_path, measure_bandwidth  # noqa: E402

from genlab.experiments.agreement import summary  # noqa: E402
from genlab.runtime.matmul import weight_bytes  # noqa: E402

PROMPTS = ["What is the capital of France?", "Write one sentence about the sea."]


class CountingForward:
    """Counts the forward passes of a model (the float32 model under self-speculation)."""

    def __init__(self, model):
        self.model, self.calls, self._real = model, 0, model.forward

    def __enter__(self):
        def forward(*args, **kwargs):
            self.calls += 1
            return self._real(*args, **kwargs)

        self.model.forward = forward
        return self

    def __exit__(self, *exc):
        del self.model.forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    n = args.new_tokens
    fp32 = genlab.load("demo")
    int8 = genlab.load("demo", quantization="int8")
    int4 = genlab.load("demo", quantization="int4")
    for lm in (fp32, int8, int4):
        lm.cache.max_bytes = 0  # every pass computed: this measures the model, not the cache
    common = dict(chat=True, max_new_tokens=n, min_new_tokens=n)
    plain = {p: fp32.generate(p, **common).sequences for p in PROMPTS}
    accepted = []

    def speculative(prompt):
        with CountingForward(fp32.model) as counting:
            out = fp32.generate(prompt, assistant_model=int4.model, **common)
        assert torch.equal(out.sequences, plain[prompt]), "self-speculation changed the tokens"
        accepted.append(n / counting.calls)

    runs = {
        "genlab float32": lambda p: fp32.generate(p, **common),
        "genlab int8": lambda p: int8.generate(p, **common),
        "genlab int4": lambda p: int4.generate(p, **common),
        "float32 + int4 drafts": speculative,
    }
    try:
        from llama_cpp import Llama

        llm = Llama(demo_gguf_path(), n_ctx=512, n_threads=torch.get_num_threads(), verbose=False)

        def llama_cpp(prompt):
            chat = [{"role": "user", "content": prompt}]
            text = fp32.tokenizer.apply_chat_template(chat, add_generation_prompt=True)
            text = text if isinstance(text, str) else fp32.tokenizer.decode(text)
            llm.reset()
            llm(text, max_tokens=n, temperature=0.0, top_k=1)

        runs["llama.cpp (same GGUF)"] = llama_cpp
    except ImportError:
        print("llama.cpp: llama_cpp not importable (pip install llama-cpp-python to compare)")
    for run in runs.values():  # warm-up
        run(PROMPTS[0])
    times = {name: [] for name in runs}
    bandwidth = []
    for repeat in range(args.repeats):
        bandwidth.append(measure_bandwidth(repeats=3))
        order = list(runs) if repeat % 2 == 0 else list(runs)[::-1]
        for name in order:
            for prompt in PROMPTS:
                start = time.perf_counter()
                runs[name](prompt)
                times[name].append(time.perf_counter() - start)
    bw = statistics.median(bandwidth)
    sizes = {
        "genlab float32": weight_bytes(fp32.model),
        "genlab int8": weight_bytes(int8.model),
        "genlab int4": weight_bytes(int4.model),
    }
    base = n / statistics.median(times["genlab float32"])
    print(
        f"\ndemo, greedy, {n} new tokens, chat prompts {len(PROMPTS)}, {args.repeats} repeats, "
        f"{torch.get_num_threads()} threads; read bandwidth {bw:.1f} GB/s "
        f"({', '.join(f'{b:.1f}' for b in bandwidth)})"
    )
    print(
        f"{'':26}{'tok/s':>8}{'x float32':>11}{'weights MB':>12}{'bound tok/s':>13}{'of bound':>10}"
    )
    for name, values in times.items():
        rate = n / statistics.median(values)
        size = sizes.get(name)
        bound = bw * 1e9 / size if size else None
        print(
            f"{name:26}{rate:>8.1f}{rate / base:>11.2f}"
            f"{size / 1e6 if size else float('nan'):>12.0f}"
            f"{bound if bound else float('nan'):>13.1f}"
            f"{(f'{rate / bound:.0%}' if bound else '-'):>10}"
        )
    print(
        f"self-speculation: {statistics.median(accepted):.2f} tokens per float32 forward pass "
        "(drafts of the int4 copy accepted), tokens equal to float32 greedy: yes"
    )
    print("\nagainst float32 (lm.compare, 4 chat prompts, 32 tokens each):")
    for lm in (int8, int4):
        s = summary(fp32.compare(lm, max_new_tokens=32))
        print(
            f"  {lm.name:20} top-1 agreement {s['top1_agreement']:.1%}, mean KL "
            f"{s['mean_kl']:.4f} nats per token over {s['tokens']} tokens"
        )


if __name__ == "__main__":
    main()
