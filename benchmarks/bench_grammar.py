"""What a grammar costs (issue 46): ``json_schema=`` on the demo model, against the same
run unconstrained, in the same process.

1. The grammar stage alone on the ids of a real step (a JSON answer 32 tokens in, one
   row): µs per call, the fastest of 50 and the median; and the engine's mask alone.
2. A greedy run of 64 tokens under a schema whose answer is longer than 64 tokens (an
   array of at least eight records), against the same run unconstrained: ms per step and
   the ratio (target: at most 1.15x). The two runs are stepped in turn, one step each,
   which of them goes first alternating, so that a load that comes and goes on a shared
   machine falls on both alike; the median of 3 x 64 steps each, every forward pass
   computed (``genlab.start`` keeps no forward cache). How many of the constrained
   run's steps the grammar forced (one token allowed) is printed too.
3. The first call for a 20-field schema: the engine's tokenizer (once per tokenizer),
   then compiling the schema (every new schema), then a fresh matcher.

With ``--rivals``, the engine's mask beside xgrammar's and outlines-core's on the same
answer, when those are installed (they are not genlab's dependencies). Run from the
repository root: ``python benchmarks/bench_grammar.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import genlab
import genlab.text.grammar as G
from genlab.processors.grammar import GrammarLogitsProcessor

PROMPT = "List eight people as JSON records with a name and an age."
RECORD = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
LONG = {"type": "array", "items": RECORD, "minItems": 8}
STEPS = 64
REPEATS = 3


def twenty_fields(tag: str) -> dict:
    kinds = ["string", "integer", "number", "boolean"]
    props = {f"{tag}_{i}": {"type": kinds[i % 4]} for i in range(20)}
    return {"type": "object", "properties": props, "required": sorted(props)}


def _run(lm, **fields):
    ids, mask = lm.encode(PROMPT, chat=True)
    return genlab.start(
        lm.model,
        input_ids=ids,
        attention_mask=mask,
        tokenizer=lm.tokenizer,
        max_new_tokens=STEPS + 1,
        eos_token_id=None,  # the same 64 steps in both runs
        **fields,
    )


def step_times(lm) -> tuple[dict[str, list[float]], list[int]]:
    times: dict[str, list[float]] = {"plain": [], "json_schema": []}
    allowed: list[int] = []
    for _ in range(REPEATS):
        runs = {"plain": _run(lm), "json_schema": _run(lm, json_schema=LONG)}
        for run in runs.values():
            run.step()  # the prompt's forward pass is not a decoding step
        grammar = next(p for p in runs["json_schema"].views.processors if p.stage_name == "grammar")
        allowed = [grammar.allowed_counts[0]]
        for i in range(STEPS - 1):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                start = time.perf_counter()
                runs[name].step()
                times[name].append((time.perf_counter() - start) * 1e3)
            allowed.append(grammar.allowed_counts[0])
    return times, allowed


def stage_alone(lm) -> None:
    run = lm.start(PROMPT, chat=True, json_schema=LONG, max_new_tokens=40)
    for _ in range(32):
        run.step()
    ids = run.sequences
    logits = torch.zeros(1, lm.info.vocab_size)
    proc = GrammarLogitsProcessor(G.compile_grammar(lm.tokenizer, json_schema=LONG))
    proc.prompt_length = run.prompt_length
    times = []
    for _ in range(50):
        fresh = GrammarLogitsProcessor(proc.grammar)  # a new row state: feeds 32 tokens
        fresh.prompt_length = run.prompt_length
        fresh(ids[:, :-1], logits)  # the step before: only the last token is new below
        start = time.perf_counter()
        fresh(ids, logits)
        times.append((time.perf_counter() - start) * 1e6)
    print(
        f"grammar stage, one step 32 tokens into the answer: {min(times):.0f} µs fastest of 50, "
        f"{statistics.median(times):.0f} µs median"
    )
    answer = ids[0, run.prompt_length :].tolist()
    print(f"engine mask alone over that answer: {_llguidance_mask(proc.grammar, answer)}")
    return answer


def _llguidance_mask(grammar, answer) -> str:
    import llguidance.torch as lt

    m = grammar.matcher()
    bitmask = torch.full((1, (grammar.vocab_size + 31) // 32), -1, dtype=torch.int32)
    times = []
    for t in answer:
        start = time.perf_counter()
        lt.fill_next_token_bitmask(m, bitmask, 0)
        times.append((time.perf_counter() - start) * 1e6)
        m.consume_token(t)
    return f"llguidance {statistics.median(times):.0f} µs median, {max(times):.0f} µs max per step"


def rivals(lm, answer) -> None:
    """xgrammar and outlines-core on the same answer (when installed)."""
    tok = lm.tokenizer
    try:
        import xgrammar as xgr
    except ImportError:
        print("xgrammar: not installed")
    else:
        vocab = [tok.convert_ids_to_tokens(i) for i in range(len(tok))]
        info = xgr.TokenizerInfo(
            vocab, vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=len(tok), stop_token_ids=[2]
        )
        start = time.perf_counter()
        matcher = xgr.GrammarMatcher(
            xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(json.dumps(LONG))
        )
        compile_ms = (time.perf_counter() - start) * 1e3
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        times = []
        for t in answer:
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            times.append((time.perf_counter() - start) * 1e6)
            matcher.accept_token(t)
        print(
            f"xgrammar: compile {compile_ms:.1f} ms, mask {statistics.median(times):.0f} µs "
            f"median, {max(times):.0f} µs max per step"
        )
    try:
        import outlines_core as oc
        from outlines_core.kernels.torch import allocate_token_bitmask, fill_next_token_bitmask
    except ImportError:
        print("outlines-core: not installed")
        return
    from genlab.text.tokens import piece_bytes

    table: dict[bytes, list[int]] = {}
    for i in range(len(tok)):
        data = piece_bytes(tok.convert_ids_to_tokens(i)) if i not in tok.all_special_ids else None
        if data is not None:
            table.setdefault(data, []).append(i)
    start = time.perf_counter()
    regex = oc.json_schema.build_regex_from_schema(json.dumps(LONG))
    guide = oc.Guide(oc.Index(regex, oc.Vocabulary(2, table)))
    compile_ms = (time.perf_counter() - start) * 1e3
    bitmask = allocate_token_bitmask(len(tok))
    times = []
    for t in answer:
        start = time.perf_counter()
        fill_next_token_bitmask(guide, bitmask)
        times.append((time.perf_counter() - start) * 1e6)
        if not guide.accepts_tokens([t]):
            break  # its JSON whitespace is fixed: the answer leaves it here
        guide.advance(t)
    print(
        f"outlines-core: index {compile_ms:.0f} ms, mask {statistics.median(times):.0f} µs "
        f"median over {len(times)} steps"
    )


def first_call() -> None:
    lm = genlab.load("demo")  # a tokenizer object the engine has not seen
    start = time.perf_counter()
    G.engine_tokenizer(lm.tokenizer)
    tokenizer_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    grammar = G.compile_grammar(lm.tokenizer, json_schema=twenty_fields("first"))
    compile_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    grammar.matcher()
    matcher_ms = (time.perf_counter() - start) * 1e3
    again = []
    for i in range(10):
        start = time.perf_counter()
        G.compile_grammar(lm.tokenizer, json_schema=twenty_fields(f"again{i}"))
        again.append((time.perf_counter() - start) * 1e3)
    print(
        f"20-field schema, first call: engine tokenizer {tokenizer_ms:.0f} ms (once per "
        f"tokenizer), compile {compile_ms:.1f} ms, a fresh matcher {matcher_ms:.2f} ms; "
        f"another new 20-field schema {statistics.median(again):.1f} ms (median of 10)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rivals", action="store_true", help="also xgrammar, outlines-core")
    args = parser.parse_args()
    torch.set_num_threads(2)
    first_call()
    lm = genlab.load("demo")
    answer = stage_alone(lm)
    if args.rivals:
        rivals(lm, answer)
    step_times(lm)  # warm-up
    times, allowed = step_times(lm)
    plain, constrained = (statistics.median(times[k]) for k in ("plain", "json_schema"))
    n = len(times["plain"])
    print(f"greedy {STEPS} tokens, median of {n} steps each, the two runs stepped in turn:")
    print(
        f"plain {plain:.1f} ms/step, json_schema {constrained:.1f} ms/step: ratio "
        f"{constrained / plain:.3f} (+{constrained - plain:.2f} ms)"
    )
    forced = sum(1 for a in allowed if a == 1)
    print(f"steps the grammar forced (one token allowed): {forced} of {len(allowed)}")


if __name__ == "__main__":
    main()
