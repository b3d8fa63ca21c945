"""The steppable Run: step, live config changes, force, rewind, fork, hooks, trace."""

from __future__ import annotations

import pytest
import torch

import genlab
from genlab.run.engine import Run

PROMPT = torch.tensor([[1, 5, 17, 33, 8]])


def _run(model, **cfg):
    cfg.setdefault("max_new_tokens", 12)
    return Run(
        model,
        input_ids=PROMPT,
        keep_history=True,
        return_dict_in_generate=True,
        output_scores=True,
        **cfg,
    )


def test_generate_is_the_run_to_the_end(hf_llama):
    a = genlab.generate(hf_llama, PROMPT, max_new_tokens=8)
    run = _run(hf_llama, max_new_tokens=8)
    steps = []
    while not run.finished:
        steps.append(run.step())
    assert torch.equal(run.output.sequences, a)
    assert [int(s.tokens[0]) for s in steps] == a[0, PROMPT.shape[1] :].tolist()
    assert run.step() is None


def test_step_record(hf_llama):
    run = _run(hf_llama)
    s = run.step()
    assert s.index == 0 and s.tokens.shape == (1,) and s.logprobs.shape == (1,)
    assert float(s.logprobs[0]) <= 0


def test_config_change_takes_effect_next_step(hf_llama):
    base = _run(hf_llama, do_sample=True, seed=0)
    base.run()
    run = _run(hf_llama, do_sample=True, seed=0)
    for _ in range(3):
        run.step()
    run.config.top_k = 1  # sampling from top-1 == greedy from here on
    while not run.finished:
        run.step()
    seq = run.output.sequences
    assert torch.equal(seq[:, :8], base.output.sequences[:, :8])
    # after the change every token is the argmax of the (unprocessed) scores
    for i in range(3, 12):
        assert int(seq[0, 5 + i]) == int(run.output.scores[i][0].argmax())


def test_invalid_config_change_errors_before_forward(hf_llama):
    run = _run(hf_llama, do_sample=True, seed=1)  # unseeded, an early EOS made this flaky
    run.step()
    assert not run.finished
    run.config.top_p = 1.5
    with pytest.raises(ValueError, match="top_p"):
        run.step()
    assert run.step_index == 1
    run.config.top_p = 0.9
    run.step()
    assert run.step_index == 2


def test_force_token_and_text(hf_llama):
    run = _run(hf_llama)
    run.force(42)
    s = run.step()
    assert int(s.tokens[0]) == 42 and s.forced
    run.force([7, 8])
    run.step()
    run.step()
    assert run.sequences[0, -2:].tolist() == [7, 8]
    with pytest.raises(ValueError, match="outside"):
        run.force(10_000)


@pytest.mark.parametrize("do_sample", [False, True])
def test_rewind_reproduces(hf_llama, do_sample):
    run = _run(hf_llama, do_sample=do_sample, seed=3)
    for _ in range(6):
        run.step()
    before = run.sequences.clone()
    scores_before = [s.clone() for s in run.recorded_scores()]
    run.rewind(3)
    assert run.step_index == 3 and run.sequences.shape[1] == PROMPT.shape[1] + 3
    assert run.views.kv_cache.length() == PROMPT.shape[1] + 2
    for _ in range(3):
        run.step()
    assert torch.equal(run.sequences, before)
    for a, b in zip(scores_before, run.recorded_scores(), strict=True):
        torch.testing.assert_close(a, b)


def test_rewind_then_force_branches(hf_llama):
    run = _run(hf_llama)
    for _ in range(4):
        run.step()
    run.rewind(2)
    run.force(11)
    run.step()
    assert int(run.sequences[0, -1]) == 11 and run.step_index == 3


def test_fork_is_independent(hf_llama):
    run = _run(hf_llama, do_sample=True, seed=1)
    for _ in range(3):
        run.step()
    other = run.fork()
    run.force(9)
    run.step()
    other.step()
    assert int(run.sequences[0, -1]) == 9
    assert other.sequences.shape == run.sequences.shape
    # the fork continues exactly as an untouched run would have
    ref = _run(hf_llama, do_sample=True, seed=1)
    for _ in range(4):
        ref.step()
    assert torch.equal(other.sequences, ref.sequences)


def test_hooks_intervene_and_are_removed(hf_llama):
    plain = genlab.generate(hf_llama, PROMPT, max_new_tokens=5)
    run = _run(hf_llama, max_new_tokens=5)
    seen = []

    def ban_argmax(logits, step):
        seen.append(step)
        out = logits.clone()
        out[:, plain[0, 5 + step]] = -float("inf")
        return out

    with run.hooks(logits=ban_argmax):
        run.step()
    assert seen == [0] and int(run.sequences[0, -1]) != int(plain[0, 5])
    run.rewind(1)
    run.step()  # hook gone: back to the plain continuation
    assert int(run.sequences[0, -1]) == int(plain[0, 5])


def test_processor_hook_and_select_hook(hf_llama):
    run = _run(hf_llama, do_sample=True, top_k=5, seed=0)
    got = {}
    with run.hooks({"processor.top_k": lambda s, step: got.setdefault("k", s)}):
        run.step()
    assert torch.isfinite(got["k"]).sum() == 5
    with run.hooks(select=lambda t, step: torch.full_like(t, 3)):
        run.step()
    assert int(run.sequences[0, -1]) == 3
    with pytest.raises(ValueError, match="unknown hook point"):
        run.add_hook("logitz", lambda v, step: None)


def test_trace_tables(hf_llama):
    run = Run(
        hf_llama,
        input_ids=PROMPT,
        max_new_tokens=6,
        do_sample=True,
        top_k=5,
        temperature=0.7,
        trace=True,
        seed=0,
        return_dict_in_generate=True,
        output_scores=True,
    )
    out = run.run()
    tr = run.tracer.trace
    assert tr.stages() == ["raw", "temperature", "top_k", "final"]
    table = tr.table()
    assert {"step", "row", "stage", "token_id", "logprob", "prob", "rank", "chosen"} <= set(table)
    chosen = table[(table.stage == "final") & table.chosen]
    assert chosen.token_id.tolist() == out.sequences[0, 5:].tolist()
    ts = genlab.compute_transition_scores(out.sequences, out.scores)
    torch.testing.assert_close(torch.tensor(tr.transition_scores().score.tolist()), ts[0])
    summary = tr.stage_summary(0)
    assert summary.tokens_kept.tolist()[-1] == 5
    assert len(tr.steps()) == 6


def test_run_started_in_inference_mode_steps_anywhere(hf_llama):
    """A run begun under torch.inference_mode() (its built-in KV cache then holds inference
    tensors, written in place each step) can be stepped, rewound and forked outside it."""
    from genlab.models.architectures import build_decoder

    lm = build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict())
    expected = genlab.generate(lm, PROMPT, max_new_tokens=10)
    with torch.inference_mode():
        run = _run(lm, max_new_tokens=10)
        run.step()
    for _ in range(4):
        run.step()  # outside inference mode
    branch = run.fork()
    run.rewind(2)
    run.run()
    branch.run()
    assert torch.equal(run.output.sequences, expected)
    assert torch.equal(branch.output.sequences, expected)
    # and the other way round: begun normally, stepped inside inference mode
    other = _run(lm, max_new_tokens=10)
    other.step()
    with torch.inference_mode():
        other.run()
    assert torch.equal(other.output.sequences, expected)


def test_start_takes_the_prompt_like_generate(hf_llama):
    """genlab.start takes the prompt positionally or as input_ids, as generate does; giving
    it both ways is a ValueError (the reference refuses that too)."""
    expected = genlab.generate(hf_llama, PROMPT, max_new_tokens=4)
    for run in (
        genlab.start(hf_llama, PROMPT, max_new_tokens=4),
        genlab.start(hf_llama, input_ids=PROMPT, max_new_tokens=4),
    ):
        assert torch.equal(run.run(), expected)
    for fn in (genlab.start, genlab.generate):
        with pytest.raises(ValueError, match="given twice, as inputs and as input_ids"):
            fn(hf_llama, PROMPT, input_ids=PROMPT)
    with pytest.raises(ValueError, match="input_ids"):
        hf_llama.generate(PROMPT, input_ids=PROMPT)


def test_the_hook_verbs_are_add_observe_has_fire_notify(hf_llama):
    from genlab.inside.hooks import HookRegistry

    registry = HookRegistry()
    assert not registry.has("processor.*")
    registry.add("processor.top_k", lambda x, step: None)
    assert registry.has("processor.*") and not registry.has("processor.dola")
    # beam.candidates hooks observe only: what they return does not flow on
    registry.add("beam.candidates", lambda payload, step: "replaced")
    assert registry.fire("beam.candidates", "payload", 0) == "payload"

    run = _run(hf_llama, max_new_tokens=2)
    reg, seen = run.registry, []
    with run.hooks(**{"processor.dola": lambda x, step: x + 1}):
        remove = reg.observe("processor.*", lambda p, value, step: seen.append(p))
        assert reg.has("processor.dola") and reg.has("processor.*")
        scores = torch.zeros(1, 4)
        assert reg.fire("processor.dola", scores, 0).eq(1).all() and seen == ["processor.dola"]
    remove()
    assert not reg.has("processor.dola") and not reg.has("processor.*")
