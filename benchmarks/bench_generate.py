"""Benchmark: genlab's step loop against transformers' own ``generate()`` on one model.

Run from the repository root::

    .venv/bin/python benchmarks/bench_generate.py [--new-tokens 24] [--repeats 3] [--random]

Both systems drive the *same* transformers ``LlamaForCausalLM`` object (genlab through its
adapter, :class:`genlab.models.hf.HFModel`), with the same prompt and config, so the
difference is the cost of the generation loop itself. By default the model is the embedded
demo (SmolLM2-135M-Instruct, read with :func:`genlab.models.gguf.read_gguf` and loaded into
transformers); ``--random`` uses a mid-size random Llama instead.

For greedy and sampling (``top_p=0.9``), batch 1 and 4, it prints tokens/s of

* ``transformers``: ``model.generate(...)``;
* ``genlab``: ``genlab.generate(model, ...)``;
* ``genlab+trace``: the same with ``trace=True`` (top-k of every stage recorded);
* ``genlab+hooks``: with observing no-op hooks registered at ``logits``, ``scores``,
  ``select`` and ``step_end``,

and the ratios genlab / transformers, the cost of tracing and of unused hooks in %. The
systems run interleaved in one process after a warm-up; each number is the median of
``--repeats`` runs; ``--clock cpu`` times process CPU seconds instead of wall seconds
(tokens per CPU-second), which other jobs on a shared machine disturb much less. Every
generation makes exactly ``--new-tokens`` tokens (``min_new_tokens`` keeps EOS away), and
greedy tokens are checked to be equal first.

transformers is the reference here only; genlab's runtime never imports it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genlab  # noqa: E402
from genlab.run.engine import Run  # noqa: E402

PROMPT = "The history of the city of Paris begins"
SYSTEMS = ("transformers", "genlab", "genlab+trace", "genlab+hooks")
HOOK_POINTS = ("logits", "scores", "select", "step_end")


# ---- the model -------------------------------------------------------------------------------


def demo_model():
    """(transformers LlamaForCausalLM, prompt ids (1, len)) built from the embedded GGUF."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from genlab.models.gguf import find_demo_gguf, read_gguf

    ckpt = read_gguf(find_demo_gguf())
    model = LlamaForCausalLM(LlamaConfig(**ckpt.config)).eval()
    missing, unexpected = model.load_state_dict(ckpt.state_dict, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    ids = torch.tensor([ckpt.tokenizer.encode(PROMPT)], dtype=torch.long)  # (1, len)
    return model, ids, "SmolLM2-135M-Instruct (demo GGUF, float32)"


def random_model(seed: int = 0):
    """A mid-size random Llama (about 110M parameters) and a random prompt."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(3, config.vocab_size, (1, 12))  # (1, 12)
    return model, ids, "random Llama (768 hidden, 12 layers)"


# ---- one generation per system -----------------------------------------------------------------


def _noop(value, *, step):
    return None


def generation(system: str, model, ids, config: dict) -> Callable[[], torch.LongTensor]:
    """A no-argument function that runs one generation and returns its sequences."""
    mask = torch.ones_like(ids)
    if system == "transformers":
        return lambda: model.generate(input_ids=ids, attention_mask=mask, **config)
    if system == "genlab":
        return lambda: genlab.generate(model, input_ids=ids, attention_mask=mask, **config)
    if system == "genlab+trace":
        return lambda: Run(model, input_ids=ids, attention_mask=mask, trace=True, **config).run()

    def with_hooks():
        run = Run(model, input_ids=ids, attention_mask=mask, **config)
        for point in HOOK_POINTS:
            run.add_hook(point, _noop)
        return run.run()

    return with_hooks


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(fn: Callable[[], torch.LongTensor], seed: int, clock: str = "wall") -> float:
    """Seconds one generation takes: wall clock, or this process's CPU time (all threads),
    which a machine shared with other jobs disturbs much less."""
    now = CLOCKS[clock]
    torch.manual_seed(seed)
    start = now()
    fn()
    return now() - start


# ---- the benchmark ---------------------------------------------------------------------------


def check_greedy_parity(model, ids, new_tokens: int) -> None:
    config = dict(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=2
    )
    ref = generation("transformers", model, ids, config)()
    ours = generation("genlab", model, ids, config)()
    if not torch.equal(ref, ours):
        raise RuntimeError(f"greedy tokens differ:\n{ref.tolist()}\n{ours.tolist()}")


def bench_case(
    model, ids, *, sample: bool, batch: int, new_tokens: int, repeats: int, clock: str = "wall"
) -> dict:
    """Median seconds per system for one (mode, batch) case, systems interleaved."""
    config = dict(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=2, do_sample=sample
    )
    if sample:
        config["top_p"] = 0.9
    batch_ids = ids.expand(batch, -1).contiguous()  # (batch, len)
    fns = {s: generation(s, model, batch_ids, config) for s in SYSTEMS}
    for fn in fns.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    for rep in range(repeats):
        for system, fn in fns.items():
            times[system].append(timed(fn, seed=rep, clock=clock))
    return {s: statistics.median(t) for s, t in times.items()}


def report(rows: list[dict], new_tokens: int) -> str:
    head = (
        f"{'mode':<9}{'batch':>5} "
        + "".join(f"{s + ' tok/s':>20}" for s in SYSTEMS)
        + f"{'genlab/hf':>11}{'trace cost':>12}{'hooks cost':>12}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        secs = row["seconds"]
        tps = {s: row["batch"] * new_tokens / secs[s] for s in SYSTEMS}
        lines.append(
            f"{row['mode']:<9}{row['batch']:>5} "
            + "".join(f"{tps[s]:>20.1f}" for s in SYSTEMS)
            + f"{tps['genlab'] / tps['transformers']:>11.3f}"
            + f"{100 * (secs['genlab+trace'] / secs['genlab'] - 1):>11.1f}%"
            + f"{100 * (secs['genlab+hooks'] / secs['genlab'] - 1):>11.1f}%"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--random", action="store_true", help="use a random mid-size Llama")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall time, or process CPU time (steadier on a busy machine)",
    )
    args = parser.parse_args(argv)
    if args.new_tokens < 1 or args.repeats < 1:
        raise ValueError("--new-tokens and --repeats must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    model, ids, name = random_model() if args.random else demo_model()
    print(
        f"model: {name}; prompt {ids.shape[1]} tokens; {args.new_tokens} new tokens; "
        f"median of {args.repeats} ({args.clock} clock); torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    with torch.inference_mode():
        check_greedy_parity(model, ids, args.new_tokens)
        print("greedy tokens: genlab == transformers")
        print(report([], args.new_tokens), flush=True)
        rows = []
        for sample in (False, True):
            for batch in args.batches:
                secs = bench_case(
                    model,
                    ids,
                    sample=sample,
                    batch=batch,
                    new_tokens=args.new_tokens,
                    repeats=args.repeats,
                    clock=args.clock,
                )
                rows.append(
                    {"mode": "sample" if sample else "greedy", "batch": batch, "seconds": secs}
                )
                print(report(rows[-1:], args.new_tokens).splitlines()[-1], flush=True)
    print("\nsummary\n" + report(rows, args.new_tokens))


if __name__ == "__main__":
    main()
