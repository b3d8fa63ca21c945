"""`python -m genlab.demo`: the embedded model, offline, in under a minute.

Greedy and 4-beam generation for a chat prompt and a plain prompt, then the per-token
transition scores of the greedy chat answer.
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="demo", help="'demo', a folder or a Hub id")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args(argv)

    import pandas as pd
    import torch

    import genlab

    torch.set_num_threads(max(1, torch.get_num_threads()))
    t0 = time.perf_counter()
    lm = genlab.load(args.model)
    print(
        f"loaded {lm.name!r} in {time.perf_counter() - t0:.1f} s "
        f"({lm.info.architecture}, {lm.info.num_hidden_layers} layers, "
        f"vocab {lm.info.vocab_size})\n"
    )

    prompts = [
        ("chat", "What is the capital of France?"),
        ("plain", "The three primary colours are"),
    ]
    greedy_chat = None
    for kind, prompt in prompts:
        chat = kind == "chat"
        for label, cfg in (("greedy", {}), ("4-beam", {"num_beams": 4})):
            t = time.perf_counter()
            res = lm.generate(prompt, chat=chat, max_new_tokens=args.max_new_tokens, **cfg)
            dt = time.perf_counter() - t
            n = res.generated_ids.shape[1]
            print(
                f"[{kind} | {label}] {prompt!r}\n  -> {res.text.strip()!r}"
                f"   ({n} tokens, {dt:.2f} s)"
            )
            if chat and label == "greedy":
                greedy_chat = res
        print()

    print("Per-token transition scores of the greedy chat answer:")
    table = greedy_chat.transition_scores(row=0)
    with pd.option_context("display.width", 100, "display.max_rows", 100):
        print(table[["token", "logprob", "prob"]].round(4).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
