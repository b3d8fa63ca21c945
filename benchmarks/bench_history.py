"""What a steppable run keeps for rewinding, at 1k, 2k and 8k generated tokens.

Counts the bytes of the run's history (its rewind entries, tensors by storage) apart from
the KV cache, and apart from the Step records ``run.history`` returns to the user. The
figure does not depend on the model's size (entries hold lengths, not activations), so a
tiny Llama with 9,000 positions stands in for the demo model, which would take minutes
per 8k-token run here. Run it from any checkout: ``python benchmarks/bench_history.py``
(``PYTHONPATH=<old checkout>`` measures an older genlab the same way).
"""

from __future__ import annotations

import sys
import time

import torch

import genlab
from genlab.models.architectures import build_decoder


def deep_size(obj, seen: set) -> int:
    """Bytes held by ``obj`` and what it refers to (each tensor storage counted once)."""
    if id(obj) in seen or isinstance(obj, (type, torch.nn.Module)) or callable(obj):
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        key = ("storage", obj.untyped_storage().data_ptr())
        extra = 0 if key in seen else obj.untyped_storage().nbytes()
        seen.add(key)
        return sys.getsizeof(obj) + extra
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return size + sum(deep_size(v, seen) for v in obj)
    names = getattr(obj, "__dataclass_fields__", None) or getattr(obj, "__slots__", ())
    if names:
        return size + sum(deep_size(getattr(obj, n, None), seen) for n in names)
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("genlab.config"):
        return size + deep_size(vars(obj), seen)
    return size


def rewind_bytes(run) -> int:
    """Bytes kept for rewinding: the history object (new) or the snapshots (before)."""
    seen = {id(run.state.strategy), id(run.state.plan), id(run.state.kv_cache)}
    seen |= {id(run.given.model)}
    if getattr(run, "timeline", None) is not None:
        return deep_size(run.timeline.entries, seen)
    return deep_size(getattr(run, "_snapshots", []), seen)


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=9000,
        eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    hf = LlamaForCausalLM(cfg).eval()
    model = build_decoder(hf.config.to_dict(), hf.state_dict())
    prompt = torch.tensor([[1, 5, 17, 33, 8]])
    print(f"genlab from {genlab.__file__}")
    print("| mode | tokens | rewind history | per token | Step records | time |")
    print("|---|---|---|---|---|---|")
    for name, extra in (("greedy", {}), ("sampling, seed", {"do_sample": True, "seed": 1})):
        run = genlab.start(
            model, prompt, max_new_tokens=8000, keep_history=True, eos_token_id=None, **extra
        )
        t0 = time.perf_counter()
        for n in (1000, 2000, 8000):
            while run.step_index < n:
                run.step()
            kept = rewind_bytes(run)
            steps = deep_size(run.history, set())
            print(
                f"| {name} | {n} | {kept / 2**20:.2f} MiB | {kept / n:.0f} B | "
                f"{steps / 2**20:.2f} MiB | {time.perf_counter() - t0:.0f} s |"
            )


if __name__ == "__main__":
    main()
