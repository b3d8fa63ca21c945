"""Steps are transactions, and the generation mode can change between steps.

Fault matrix: a failure injected at every hook point, in a processor, in the model's
forward, in the strategy, in a stopping criterion, and as KeyboardInterrupt, for every
strategy family, on genlab's built-in decoder and on the transformers adapter. After the
failure the run equals a fork taken before the step, and the next steps give the same
tokens and scores as that undisturbed fork.

Switch matrix: every ordered pair of generation modes, on both model paths: the switch
works (and then goes on exactly like the new mode continuing the same tokens) or is
refused with a ValueError before anything changes.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.models.architectures import build_decoder

PROMPT = torch.tensor([[1, 5, 17, 33, 8, 5, 17]])

BASE = dict(
    do_sample=False,
    num_beams=1,
    num_beam_groups=1,
    diversity_penalty=0.0,
    penalty_alpha=None,
    top_k=50,
    dola_layers=None,
    prompt_lookup_num_tokens=None,
    assistant_early_exit=None,
    guidance_scale=None,
    force_words_ids=None,
    repetition_penalty=1.0,
)
MODES = {
    "greedy": {},
    "sample": {"do_sample": True, "top_k": 20},
    "beam": {"num_beams": 2},
    "beam_sample": {"num_beams": 2, "do_sample": True},
    "group_beam": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5},
    "constrained": {"num_beams": 2, "force_words_ids": [[40]]},
    "contrastive": {"penalty_alpha": 0.6, "top_k": 4},
    "dola": {"dola_layers": "low", "repetition_penalty": 1.2},
    "prompt_lookup": {"prompt_lookup_num_tokens": 3},
    "early_exit": {"assistant_early_exit": 1},
    "cfg": {"guidance_scale": 1.5},
}
#: modes whose next tokens are a function of the tokens so far (no randomness)
DETERMINISTIC = {"greedy", "contrastive", "dola", "prompt_lookup", "early_exit", "cfg"}
BEAMS = {"beam", "beam_sample", "group_beam", "constrained"}


@pytest.fixture(scope="module", params=["builtin", "adapter"])
def model(request):
    hf = tiny_llama(0)
    if request.param == "adapter":
        return hf
    return build_decoder(hf.config.to_dict(), hf.state_dict())


class Armed:
    """A switch the injected failures read; ``error`` is what they raise."""

    def __init__(self):
        self.on = False
        self.error: BaseException = RuntimeError("injected")

    def fire(self):
        if self.on:
            self.on = False
            raise self.error


class FaultProcessor:
    """A user logits processor that raises when armed (and is otherwise the identity)."""

    def __init__(self, armed: Armed):
        self.armed = armed

    def __call__(self, input_ids, scores):
        self.armed.fire()
        return scores


class FaultCriterion:
    def __init__(self, armed: Armed):
        self.armed = armed

    def __call__(self, input_ids, scores, **kwargs):
        self.armed.fire()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def _start(model, mode, **extra):
    armed_proc, armed_crit = Armed(), Armed()
    cfg = dict(BASE, **MODES[mode])
    run = genlab.start(
        model,
        PROMPT,
        max_new_tokens=10,
        keep_history=True,
        seed=0,
        return_dict_in_generate=True,
        output_scores=True,
        logits_processor=[FaultProcessor(armed_proc)],
        stopping_criteria=[FaultCriterion(armed_crit)],
        **cfg,
        **extra,
    )
    return run, armed_proc, armed_crit


def _state(run):
    scores = run.recorded_scores() or ()
    return (
        run.sequences.clone(),
        run.views.attention_mask.clone(),
        run.views.kv_cache.length(),
        run.step_index,
        run.pending_forced,
        [s.clone() for s in scores],
        run.finished,
    )


def _assert_same_state(a, b):
    sa, sb = _state(a), _state(b)
    assert torch.equal(sa[0], sb[0]) and torch.equal(sa[1], sb[1])
    assert sa[2:5] == sb[2:5] and sa[6] == sb[6]
    assert len(sa[5]) == len(sb[5])
    for x, y in zip(sa[5], sb[5], strict=True):
        assert torch.equal(x, y)


def _steps(run, n):
    out = []
    for _ in range(n):
        if run.finished:
            break
        s = run.step()
        out.append((s.tokens.clone(), s.logprobs.clone()))
    return out


def _assert_same_future(a, b, n=3):
    for (ta, la), (tb, lb) in zip(_steps(a, n), _steps(b, n), strict=True):
        assert torch.equal(ta, tb)
        torch.testing.assert_close(la, lb, atol=1e-5, rtol=0)
    _assert_same_state(a, b)


POINTS = [
    "hook:logits",
    "hook:processor.FaultProcessor",
    "hook:scores",
    "hook:select",
    "processor",
    "forward",
    "strategy",
    "criterion",
    "interrupt:logits",
    "interrupt:forward",
]


def _inject(run, point, armed_proc, armed_crit, monkeypatch):
    """Arm the failure at ``point`` for the next step."""
    kind, _, where = point.partition(":")
    if kind == "hook" or (kind == "interrupt" and where == "logits"):
        err = KeyboardInterrupt() if kind == "interrupt" else RuntimeError("injected")

        def hook(value, step):
            raise err

        return run.hooks(**{where: hook})
    if kind == "processor":
        armed_proc.on = True
    elif kind == "criterion":
        armed_crit.on = True
    elif kind in ("forward", "interrupt"):
        real = run.views.model.forward
        armed = Armed()
        armed.on = True
        if kind == "interrupt":
            armed.error = KeyboardInterrupt()

        def forward(*args, **kwargs):
            out = real(*args, **kwargs)  # the cache has taken the new positions ...
            armed.fire()  # ... and then the step fails
            return out

        monkeypatch.setattr(run.views.model, "forward", forward)
    elif kind == "strategy":
        real_select = run.views.strategy.select

        def select(ctx, scores):
            real_select(ctx, scores)  # its state moved on; then it fails
            raise RuntimeError("injected")

        monkeypatch.setattr(run.views.strategy, "select", select)
        monkeypatch.setattr(run.views.strategy, "force", select)
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("mode", list(MODES))
def test_a_failed_step_leaves_the_run_as_it_was(model, mode, point, monkeypatch):
    run, armed_proc, armed_crit = _start(model, mode)
    _steps(run, 2)
    reference = run.fork()
    expected = KeyboardInterrupt if point.startswith("interrupt") else RuntimeError
    with pytest.raises(expected):
        with _inject(run, point, armed_proc, armed_crit, monkeypatch):
            run.step()
    monkeypatch.undo()
    _assert_same_state(run, reference)
    _assert_same_future(run, reference)


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam", "contrastive"])
def test_a_raising_step_end_hook_keeps_the_step(model, mode):
    run, _, _ = _start(model, mode)
    _steps(run, 2)
    reference = run.fork()
    _steps(reference, 1)

    def fail(record, step):
        raise RuntimeError("after the commit")

    with pytest.raises(RuntimeError, match="after the commit"), run.hooks(step_end=fail):
        run.step()
    _assert_same_state(run, reference)
    _assert_same_future(run, reference)


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam", "group_beam", "prompt_lookup"])
def test_run_interrupted_anywhere_keeps_scores_matching_tokens(model, mode):
    run, armed_proc, _ = _start(model, mode)
    armed_proc.error = KeyboardInterrupt()
    calls = {"n": 0}

    def count(value, step):
        calls["n"] += 1
        if calls["n"] == 3:
            armed_proc.on = True

    run.add_hook("scores", count)
    with pytest.warns(UserWarning, match="interrupted"):
        out = run.run()
    generated = out.sequences.shape[1] - PROMPT.shape[1]
    assert run.finished_by == "interrupted" and generated >= 1
    assert len(out.scores) == generated
    table = genlab.compute_transition_scores(
        out.sequences, out.scores, getattr(out, "beam_indices", None)
    )
    assert table.shape[1] == generated


# ----------------------------------------------------------------------------------------
# forced queue and rewind
# ----------------------------------------------------------------------------------------
def test_rewind_zero_is_a_no_op(model):
    run, _, _ = _start(model, "greedy")
    _steps(run, 2)
    before = _state(run)
    assert run.rewind(0) is run
    assert torch.equal(_state(run)[0], before[0]) and run.step_index == 2


def test_rewind_restores_the_forced_queue_and_fork_copies_it(model):
    run, _, _ = _start(model, "greedy")
    run.force([40, 41, 42])
    step = run.step()
    assert step.forced and int(step.tokens[0]) == 40 and run.pending_forced == (41, 42)
    other = run.fork()
    run.rewind(1)
    assert run.pending_forced == (40, 41, 42)
    assert other.pending_forced == (41, 42)
    assert [int(other.step().tokens[0]) for _ in range(2)] == [41, 42]
    # forcing after the step, then rewinding past it, drops the later force
    run2, _, _ = _start(model, "greedy")
    run2.step()
    run2.force(40)
    run2.rewind(1)
    assert run2.pending_forced == ()


@pytest.mark.parametrize("bad", [5.7, True, [], [1.5], "x" * 0])
def test_force_refuses_what_is_not_a_token(model, bad):
    run, _, _ = _start(model, "greedy")
    with pytest.raises(ValueError):
        run.force(bad)
    assert run.pending_forced == ()


def test_hook_return_values_are_checked_and_the_run_is_unchanged(model):
    run, _, _ = _start(model, "sample")
    _steps(run, 1)
    reference = run.fork()
    bad = {
        "scores": lambda x, step: torch.cat([x, x[:, :3]], dim=1),  # extra columns
        "logits": lambda x, step: x * float("nan"),
        "select": lambda x, step: torch.full_like(x, 500),  # outside the vocabulary
    }
    for point, fn in bad.items():
        with pytest.raises(ValueError, match=point), run.hooks(**{point: fn}):
            run.step()
        _assert_same_state(run, reference)
    with pytest.raises(ValueError, match="list"), run.hooks(scores=lambda x, step: [1, 2]):
        run.step()
    _assert_same_future(run, reference)


def test_a_seeded_run_leaves_the_global_random_stream_alone(model):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    run, _, _ = _start(model, "sample")
    _steps(run, 3)
    assert torch.equal(torch.rand(3), expected)


# ----------------------------------------------------------------------------------------
# live mode switches
# ----------------------------------------------------------------------------------------
def _fields(mode):
    return dict(BASE, **MODES[mode])


@pytest.mark.parametrize("target", list(MODES))
@pytest.mark.parametrize("source", list(MODES))
def test_switching_mode_between_steps(model, source, target):
    run, _, _ = _start(model, source)
    _steps(run, 2)
    before = run.fork()
    try:
        run.set(**_fields(target))
    except ValueError as e:
        # refused before anything changed: same config, same state, same future
        assert (source in BEAMS) or (target in BEAMS), f"refused {source} -> {target}: {e}"
        assert str(e)
        assert run.config.to_dict() == before.config.to_dict()
        _assert_same_state(run, before)
        _assert_same_future(run, before)
        return
    assert run.mode == run.views.strategy.mode
    steps = _steps(run, 3)
    assert steps, "the switched run took no step"
    for tokens, _ in steps:
        assert int(tokens.min()) >= 0 and int(tokens.max()) < 96
    if target in DETERMINISTIC and source not in BEAMS and source != target:
        # going on in the new mode = the new mode started on the tokens so far (CFG's
        # unconditional branch starts at the switch, from the last token, as it would)
        fresh = genlab.start(model, before.sequences, max_new_tokens=10, **_fields(target))
        n = run.sequences.shape[1] - before.sequences.shape[1]
        while fresh.sequences.shape[1] < run.sequences.shape[1] and not fresh.finished:
            fresh.step()
        m = min(fresh.sequences.shape[1], run.sequences.shape[1])
        assert n > 0 and torch.equal(fresh.sequences[:, :m], run.sequences[:, :m])


def test_editing_the_config_then_stepping_refuses_a_switch_without_change(model):
    run, _, _ = _start(model, "greedy")
    _steps(run, 2)
    before = run.fork()
    run.config.num_beams = 2
    with pytest.raises(ValueError, match="num_beams"):
        run.step()
    _assert_same_state(run, before)
    run.config.num_beams = 1
    _assert_same_future(run, before)


def test_clear_forced_drops_the_queue(model):
    run, _, _ = _start(model, "greedy")
    run.force([40, 41])
    run.step()
    run.rewind(1)
    assert run.clear_forced() == (40, 41) and run.pending_forced == ()
