"""Runs that tell the truth: forks stay apart, rewind restores everything, lengths mean
what they say, one thread at a time, seeds are the run's own, Ctrl-C, re-entrant calls.

Each test names the item of the issue it pins (numbers as in "Runs that tell the truth").
"""

from __future__ import annotations

import sys
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genlab
from conftest import tiny_llama
from genlab.models.architectures import build_decoder
from genlab.run.randomness import CHECKPOINT_EVERY

PROMPT = torch.tensor([[1, 5, 17, 33, 8]])
EOS = 2


@pytest.fixture(scope="module")
def model():
    hf = tiny_llama(0, max_position_embeddings=2048)
    return build_decoder(hf.config.to_dict(), hf.state_dict())


def _start(model, **cfg):
    cfg = {"max_new_tokens": 30, "keep_history": True, **cfg}
    return genlab.start(model, PROMPT, **cfg)


def _sampled(model, **cfg):
    return _start(model, do_sample=True, seed=1, **cfg)


def _steps(run, n):
    return [run.step() for _ in range(n)]


# -- 1, 2: forks that rewind never change their parent ---------------------------------------
def test_1_a_fork_that_rewinds_leaves_its_parent_and_siblings_alone(model):
    a = _sampled(model)
    _steps(a, 3)
    ref, b = a.fork(), a.fork()
    b.rewind(2)
    b.force(EOS)
    b.step()
    assert b.finished  # the fork ended on EOS ...
    got, want = a.step(), ref.step()
    assert not a.finished  # ... its parent did not
    assert torch.equal(got.tokens, want.tokens)
    # a fork of a fork: both ancestors keep going as before
    c = b.fork()
    c.rewind(2)
    c.force([EOS])
    c.step()
    assert torch.equal(a.step().tokens, ref.step().tokens)
    assert b.finished and b.step_index == 2


def test_1_forks_share_no_mutable_object(model):
    a = _sampled(model, repetition_penalty=1.3)
    _steps(a, 4)
    f = a.fork()
    pairs = [
        (a.state.strategy, f.state.strategy),
        (a.state.plan, f.state.plan),
        (a.state.plan.config, f.state.plan.config),
        (a.config, f.config),
        (a.state.kv_cache, f.state.kv_cache),
        (a.state.forced, f.state.forced),
        (a.random, f.random),
        (a.random.generator, f.random.generator),
        (a.timeline, f.timeline),
        (a.timeline.entries, f.timeline.entries),
    ]
    for x, y in pairs:
        assert x is not y
    for px, py in zip(a.state.plan.processors, f.state.plan.processors, strict=True):
        assert px is not py
    mine = {id(e.strategy) for e in a.timeline.entries} | {id(e.plan) for e in a.timeline.entries}
    theirs = {id(e.strategy) for e in f.timeline.entries} | {id(e.plan) for e in f.timeline.entries}
    assert not mine & theirs


def test_2_beam_fork_rewound_and_stepped_leaves_the_parent_steppable(model):
    a = _start(model, num_beams=3, max_new_tokens=12)
    _steps(a, 3)
    ref, b = a.fork(), a.fork()
    b.rewind(2)
    _steps(b, 3)
    for _ in range(3):
        got, want = a.step(), ref.step()
        assert torch.equal(got.tokens, want.tokens)
    assert torch.equal(a.sequences, ref.sequences)


# -- 3: rewinding restores the config in force, in every mode --------------------------------
@pytest.mark.parametrize("mode", [{}, {"num_beams": 3}, {"guidance_scale": 1.5}])
def test_3_rewind_restores_the_config_in_force_at_that_step(model, mode):
    kwargs = dict(mode)
    if "guidance_scale" in kwargs:
        kwargs["negative_prompt_ids"] = torch.tensor([[1, 9]])
    r = _start(model, max_new_tokens=10, **kwargs)
    _steps(r, 2)
    r.set(length_penalty=2.0, repetition_penalty=1.2)
    _steps(r, 2)
    r.rewind(2)
    assert r.config.length_penalty == 2.0 and r.config.repetition_penalty == 1.2
    r.rewind(1)
    assert r.config.length_penalty == 1.0 and r.config.repetition_penalty == 1.0
    r.set(top_k=7)
    r.step()
    r.rewind(r.step_index)  # to the start: the initial config, not the current one
    assert r.config.top_k == 50 and r.config.length_penalty == 1.0


def test_3_a_replayed_rewind_gives_the_tokens_of_the_first_pass(model):
    r = _start(model, num_beams=3, max_new_tokens=10)
    _steps(r, 2)
    r.set(repetition_penalty=1.5)
    _steps(r, 3)
    first = r.sequences.clone()
    r.rewind(3)
    _steps(r, 3)
    assert torch.equal(r.sequences, first)


# -- 4, 5: length edits mean what they say --------------------------------------------------
def test_4_lowering_max_new_tokens_below_what_is_generated_is_refused(model):
    r = _start(model)
    _steps(r, 10)
    with pytest.raises(ValueError, match=r"max_new_tokens=5 .*10 generated"):
        r.set(max_new_tokens=5)
    assert r.config.max_new_tokens == 30 and r.step().index == 10
    r.config.max_new_tokens = 4  # a direct edit is refused at the next step
    with pytest.raises(ValueError, match="max_new_tokens=4"):
        r.step()
    assert r.step_index == 11
    r.config.max_new_tokens = 11  # exactly what it holds: the run ends by length
    assert r.step() is None and r.finished_by == "length"


def test_5_raising_max_new_tokens_resumes_a_run_that_ended_by_length(model):
    r = _start(model, max_new_tokens=6)
    r.run()
    assert r.finished_by == "length"
    r.set(max_new_tokens=9)
    assert not r.finished and r.step_index == 6
    r.run()
    assert r.step_index == 9 and r.finished_by == "length"
    plain = genlab.generate(model, PROMPT, max_new_tokens=9)
    assert torch.equal(r.sequences, plain)
    # a direct edit works too: step() resumes
    r.config.max_new_tokens = 10
    assert r.step() is not None and r.step_index == 10


def test_5_a_run_that_ended_by_eos_stays_ended_until_rewound(model):
    r = _start(model, max_new_tokens=8)
    r.step()
    r.force(EOS)
    r.step()
    assert r.finished_by == "eos"
    r.set(max_new_tokens=20)
    assert r.finished and r.step() is None
    r.rewind(1)
    assert not r.finished and r.step() is not None


# -- 6: rewinding costs linear memory -------------------------------------------------------
def _deep_size(obj, seen=None) -> int:
    """Bytes held by ``obj`` and what it refers to (tensors by their storage, once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (type, torch.nn.Module)) or callable(obj):
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = ("storage", storage.data_ptr())
        extra = 0 if key in seen else storage.nbytes()
        seen.add(key)
        return sys.getsizeof(obj) + extra
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        return size + sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return size + sum(_deep_size(v, seen) for v in obj)
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields is not None:
        return size + sum(_deep_size(getattr(obj, f), seen) for f in fields)
    return size


def _history_bytes(run) -> int:
    """What the run keeps for rewinding: its history entries (the objects they share with
    the live run, such as its strategy and plan, are not counted)."""
    seen = {id(run.state.strategy), id(run.state.plan)}
    for e in run.timeline.entries:
        seen |= {id(e.strategy), id(e.plan)}
    return _deep_size(run.timeline.entries, seen)


@pytest.mark.parametrize("cfg", [{}, {"do_sample": True, "seed": 3}])
def test_6_history_grows_linearly_with_the_length(model, cfg):
    r = _start(model, max_new_tokens=300, eos_token_id=None, **cfg)
    sizes = []
    for n in (100, 200, 300):
        while r.step_index < n:
            r.step()
        sizes.append(_history_bytes(r))
    first, second = sizes[1] - sizes[0], sizes[2] - sizes[1]
    assert second < 1.25 * first  # quadratic growth would make the second span larger
    assert sizes[2] / 300 < 1024  # and it stays small: under 1 KiB a step


# -- 7: one thread at a time -----------------------------------------------------------------
def test_7_two_threads_stepping_one_run_never_corrupt_it(model):
    r = _start(model, max_new_tokens=40)
    errors = []

    def worker():
        try:
            for _ in range(25):
                r.step()
        except Exception as e:  # pragma: no cover - the test fails on any
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert r.step_index == 40 and r.finished_by == "length"
    assert r.views.kv_cache.length() == r.sequences.shape[1] - 1
    assert torch.equal(r.sequences, genlab.generate(model, PROMPT, max_new_tokens=40))


def test_7_stop_from_another_thread_ends_a_run_after_its_step(model):
    r = _start(model, max_new_tokens=200)
    started = threading.Event()

    def on_step(record, step):
        if step == 3:
            started.set()

    r.add_hook("step_end", on_step)
    t = threading.Thread(target=r.run)
    t.start()
    started.wait(10)
    r.stop()
    t.join(10)
    assert r.finished_by == "interrupted" and 3 <= r.step_index < 200
    assert r.sequences.shape[1] == PROMPT.shape[1] + r.step_index


def test_7_stop_from_a_hook_ends_the_run_after_that_step(model):
    r = _start(model, max_new_tokens=20)
    r.add_hook("step_end", lambda record, step: r.stop() if step == 4 else None)
    r.run()
    assert r.finished_by == "interrupted" and r.step_index == 5
    r.rewind(1)
    assert not r.finished and r.step() is not None


# -- 8: seeds are the run's own --------------------------------------------------------------
def test_8_seeded_runs_never_touch_the_global_generator(model):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    r = _sampled(model, max_new_tokens=8)
    r.run()
    r.rewind(5)
    r.run()
    assert torch.equal(torch.get_rng_state(), before)


def test_8_seeded_tokens_equal_the_reference_whatever_other_threads_draw(model):
    torch.manual_seed(5)
    want = genlab.generate(model, PROMPT, do_sample=True, max_new_tokens=20)
    results, stop = {}, threading.Event()

    def noise():
        while not stop.is_set():
            torch.rand(1000)

    def sample(name):
        run = _start(model, do_sample=True, seed=5, max_new_tokens=20)
        for _ in range(20):
            run.step()
        results[name] = run.sequences

    noisy = threading.Thread(target=noise)
    noisy.start()
    workers = [threading.Thread(target=sample, args=(i,)) for i in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    noisy.join()
    assert torch.equal(results[0], want) and torch.equal(results[1], want)


def test_8_rewinding_past_a_random_checkpoint_draws_the_same_tokens_again(model):
    r = _sampled(model, max_new_tokens=CHECKPOINT_EVERY * 2 + 10)
    r.run()
    first = r.sequences.clone()
    r.rewind(CHECKPOINT_EVERY + 17)  # back to a step between two full states
    r.run()
    assert torch.equal(r.sequences, first)


# -- 9: Ctrl-C --------------------------------------------------------------------------------
def test_9_generate_reraises_keyboard_interrupt(model):
    def interrupt(value, step):
        if step == 3:
            raise KeyboardInterrupt

    run = _start(model, max_new_tokens=10)
    run.add_hook("logits", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run.run(keep_on_interrupt=False)
    assert run.step_index == 3 and not run.finished  # the step in progress was undone
    with pytest.raises(KeyboardInterrupt):
        genlab.generate(model, PROMPT, max_new_tokens=10, logits_processor=[_Interrupt(3)])


class _Interrupt:
    """A logits processor that presses Ctrl-C at its ``at``-th call."""

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.calls > self.at:
            raise KeyboardInterrupt
        return scores


class _InterruptingStreamer:
    """Receives tokens like a streamer, and is interrupted while showing the third call."""

    def __init__(self) -> None:
        self.shown: list[int] = []
        self.calls = 0

    def put(self, value):
        self.calls += 1
        if self.calls > 1:  # the first call is the prompt
            self.shown.extend(value.reshape(-1).tolist())
        if self.calls == 4:
            raise KeyboardInterrupt

    def end(self):
        pass


def test_9_a_streamer_never_shows_a_token_the_output_does_not_hold(model):
    streamer = _InterruptingStreamer()
    run = genlab.start(model, PROMPT, max_new_tokens=10, streamer=streamer)
    run.run()  # keeps what it has on Ctrl-C
    held = run.sequences[0, PROMPT.shape[1] :].tolist()
    assert streamer.shown == held and len(held) == 3


# -- 10: calls from inside a hook ------------------------------------------------------------
@pytest.mark.parametrize("op", ["step", "run", "rewind", "fork", "set", "force"])
def test_10_calls_from_inside_a_hook_are_refused_by_name(model, op):
    r = _start(model, max_new_tokens=6)
    r.step()
    calls = {
        "step": lambda: r.step(),
        "run": lambda: r.run(),
        "rewind": lambda: r.rewind(1),
        "fork": lambda: r.fork(),
        "set": lambda: r.set(top_k=3),
        "force": lambda: r.force(5),
    }

    def hook(value, step):
        calls[op]()

    with r.hooks(scores=hook), pytest.raises(RuntimeError, match=rf"run\.{op}\(\).*'scores'"):
        r.step()
    assert r.step_index == 1 and not r.busy
    assert r.step().index == 1  # nothing broken


def test_10_fork_from_a_step_end_hook_gives_a_working_branch(model):
    r = _start(model, max_new_tokens=8)
    branches = []
    r.add_hook("step_end", lambda record, step: branches.append(r.fork()))
    r.run()
    assert len(branches) == 8
    b = branches[2]
    assert b.step_index == 3
    b.run()
    assert torch.equal(b.sequences, r.sequences)


# -- property: every run equals an independent replay of its own operations -----------------
OPS = st.one_of(
    st.tuples(st.just("step")),
    st.tuples(st.just("force"), st.integers(3, 95)),
    st.tuples(st.just("rewind"), st.integers(0, 3)),
    st.tuples(st.just("set"), st.sampled_from([("top_k", 5), ("top_k", 50), ("temperature", 0.7)])),
    st.tuples(st.just("fork"), st.integers(0, 3)),
    st.tuples(st.just("run")),
    st.tuples(st.just("on"), st.integers(0, 3)),  # switch which run the next ops go to
)
MODES = [
    {"do_sample": True, "seed": 11},
    {"num_beams": 2},
    {"do_sample": True, "num_beams": 2, "seed": 4},
]


def _op(run, op):
    kind = op[0]
    if kind == "step":
        run.step()
    elif kind == "force":
        run.force(op[1])
    elif kind == "rewind":
        run.rewind(min(op[1], run.step_index))
    elif kind == "set":
        run.set(**{op[1][0]: op[1][1]})
    elif kind == "run":
        run.run()


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mode=st.sampled_from(MODES), ops=st.lists(OPS, max_size=12))
def test_forks_equal_independent_replays_of_their_own_operations(model, mode, ops):
    def fresh():
        return _start(model, max_new_tokens=6, **mode)

    runs, logs, current = [fresh()], [[]], 0
    for op in ops:
        if op[0] == "on":
            current = op[1] % len(runs)
        elif op[0] == "fork":
            parent = runs[op[1] % len(runs)]
            runs.append(parent.fork())
            logs.append(list(logs[op[1] % len(runs[:-1])]))
        else:
            _op(runs[current], op)
            logs[current].append(op)
    for run, log in zip(runs, logs, strict=True):
        alone = fresh()
        for op in log:
            _op(alone, op)
        assert torch.equal(run.sequences, alone.sequences), log
        assert run.step_index == alone.step_index and run.finished == alone.finished
        assert run.pending_forced == alone.pending_forced
        assert run.config.to_dict() == alone.config.to_dict()
        # and they go on alike
        a, b = run.step(), alone.step()
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a.tokens, b.tokens)


# -- 11, 12: the trace records every generated token ------------------------------------------
@pytest.mark.parametrize(
    "cfg",
    [{"prompt_lookup_num_tokens": 3}, {"assistant": True}, {"assistant": True, "do_sample": True}],
    ids=["prompt_lookup", "assistant", "assistant_sampled"],
)
def test_11_assisted_traces_record_every_accepted_token_with_its_draft(model, cfg):
    from genlab.strategies.stepdata import AssistedStep, TokenOrigin

    cfg = dict(cfg)
    if cfg.pop("assistant", False):
        cfg["assistant_model"] = model  # drafts what the model would say: long acceptances
    prompt = torch.tensor([[1, 5, 17, 33, 8, 5, 17, 33, 8, 5, 17]])
    run = genlab.start(
        model, prompt, max_new_tokens=12, trace=True, seed=2, eos_token_id=None, **cfg
    )
    run.run()
    trace = run.tracer.trace
    generated = run.sequences[0, prompt.shape[1] :].tolist()
    records = trace.records
    assert len(records) == len(generated)  # one record per generated token
    assert [int(r.tokens[0]) for r in records] == generated
    assert all(isinstance(r.info, AssistedStep) for r in records)
    engine_steps = {r.step for r in records}
    if "assistant_model" in cfg and not cfg.get("do_sample"):  # the draft is the model's own
        assert len(engine_steps) < len(records)  # so steps added several tokens
    for r in records:
        origin = r.info.origin(r.position)
        assert origin in (TokenOrigin.DRAFT, TokenOrigin.MODEL)
        if origin is TokenOrigin.DRAFT:
            assert r.info.drafted[r.position] == int(r.tokens[0])
    assert trace.steps().token_id.tolist() == generated


def test_12_a_beam_rows_trace_names_the_token_its_returned_sequence_took(model):
    prompt = torch.tensor([[1, 5, 17, 33, 8]])
    run = genlab.start(
        model, prompt, num_beams=4, num_return_sequences=2, max_new_tokens=8, trace=True,
        return_dict_in_generate=True, output_scores=True, eos_token_id=None,
    )  # fmt: skip
    run.run()
    trace = run.tracer.trace
    for row in range(2):
        want = run.output.sequences[row, prompt.shape[1] :].tolist()
        table = trace.steps(row=row)
        assert table.token_id.tolist() == want
        # the log-probs are those of the tokens the returned sequence took
        assert (table.logprob <= 0).all()
    # a parent with several children records its best one (the first in score order)
    *going_on, last = trace.records
    for rec in going_on:
        if rec.parents is None:
            continue
        for parent in set(rec.parents.tolist()):
            first = rec.parents.tolist().index(parent)
            assert int(rec.chosen_for_row[parent]) == int(rec.tokens[first])
    # at the last step every candidate ends: a row records its best child in the pool (the
    # rows handed on are ties at -1e9, not what the search took; issue 33, item 3.8)
    cands = last.info.candidates
    pooled = {}
    for parent, token, fate, score in zip(
        cands.parent.tolist(), cands.token.tolist(), cands.fates(), cands.score.tolist(),
        strict=True,
    ):  # fmt: skip
        if fate.value == "finished" and score > pooled.get(parent, (float("-inf"),))[0]:
            pooled[parent] = (score, token)
    assert pooled
    for row, token in enumerate(last.chosen_for_row.tolist()):
        assert token == pooled.get(row, (None, -1))[1]
