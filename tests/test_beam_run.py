"""The steppable Run with beam strategies: step, rewind, fork, force, live config changes,
interrupted runs, the beam streamer, and TableLM (where beam search beats greedy)."""

from __future__ import annotations

import pytest
import torch

import genlab
from genlab.models.table import TableLM
from genlab.streamers import BeamStreamer

OUT = dict(return_dict_in_generate=True, output_scores=True)
MODES = {
    "beam": dict(num_beams=4, eos_token_id=[14, 76]),
    "beam_sample": dict(num_beams=3, do_sample=True, eos_token_id=[14, 76]),
    "group": dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.5, eos_token_id=[14, 76]),
    "constrained": dict(num_beams=3, force_words_ids=[[20, 21]], eos_token_id=[14, 76]),
}
pytestmark = pytest.mark.filterwarnings("ignore:.*(Group|Constrained) Beam Search")


def _start(model, batch, mode, **extra):
    ids, mask = batch
    cfg = dict(MODES[mode], max_new_tokens=8, seed=5, keep_history=True, **OUT)
    cfg.update(extra)
    return genlab.start(model, input_ids=ids, attention_mask=mask, **cfg)


def _same(a, b):
    assert torch.equal(a.sequences, b.sequences)
    if a.beam_indices is None:
        assert b.beam_indices is None
    else:
        assert torch.equal(a.beam_indices, b.beam_indices)
    torch.testing.assert_close(a.sequences_scores, b.sequences_scores, atol=1e-6, rtol=0)


# -- TableLM: the textbook example -----------------------------------------------------------
def test_table_lm_beam_search_finds_what_greedy_misses():
    lm = TableLM.classic()
    tok = lm.tokenizer
    ids = tok("The", return_tensors="pt").input_ids
    greedy = genlab.generate(lm, ids, max_new_tokens=5)
    beams = genlab.generate(lm, ids, max_new_tokens=5, num_beams=2, **OUT)
    assert tok.decode(greedy[0], skip_special_tokens=True) == "The nice woman"
    assert tok.decode(beams.sequences[0], skip_special_tokens=True) == "The dog has"
    assert lm.sequence_probability("The nice woman <eos>") == pytest.approx(0.2)
    assert lm.sequence_probability("The dog has <eos>") == pytest.approx(0.36)
    # sequences_scores = log p / generated length (dog, has, <eos>)
    assert float(beams.sequences_scores[0]) == pytest.approx(torch.tensor(0.36).log() / 3)


# -- stepping, rewinding, forking ----------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
def test_stepping_equals_generate(hf_llama, padded_batch, mode):
    ids, mask = padded_batch
    torch.manual_seed(5)
    whole = genlab.generate(
        hf_llama, ids, attention_mask=mask, max_new_tokens=8, **OUT, **MODES[mode]
    )
    run = _start(hf_llama, padded_batch, mode)
    records = []
    while not run.finished:
        records.append(run.step())
    _same(run.output, whole)
    n = MODES[mode]["num_beams"]
    assert all(r.parents is not None and r.parents.shape == (2 * n,) for r in records)
    # parents stay within an input (input b's rows are b*n .. b*n+n-1) unless it is done
    assert all(int(r.parents[:n].max()) < n for r in records)


@pytest.mark.parametrize("mode", list(MODES))
def test_rewind_replays_to_the_same_result(hf_llama, padded_batch, mode):
    reference = _start(hf_llama, padded_batch, mode).run()
    run = _start(hf_llama, padded_batch, mode)
    for _ in range(5):
        run.step()
    before = run.sequences.clone()
    run.rewind(3)
    assert run.step_index == 2 and run.sequences.shape[1] == before.shape[1] - 3
    run.step()
    run.step()
    run.step()
    assert torch.equal(run.sequences, before)
    _same(run.run(), reference)
    run.rewind(run.step_index)  # all the way back, after the end
    _same(run.run(), reference)


@pytest.mark.parametrize("mode", list(MODES))
def test_fork_is_independent(hf_llama, padded_batch, mode):
    reference = _start(hf_llama, padded_batch, mode).run()
    run = _start(hf_llama, padded_batch, mode)
    for _ in range(3):
        run.step()
    other = run.fork()
    other.force(50)
    other.step()
    assert (other.sequences[:, -1] == 50).all()
    _same(run.run(), reference)
    assert not torch.equal(other.run().sequences, reference.sequences)


# -- force --------------------------------------------------------------------------------------
def test_force_extends_every_beam_and_adds_its_logprob(hf_llama, padded_batch):
    run = _start(hf_llama, padded_batch, "beam")
    run.step()
    before = run.views.strategy.running_scores.clone()  # (2, 4)
    seqs = run.sequences.clone()
    scores = []
    with run.hooks(scores=lambda s, step: scores.append(s.clone())):
        run.force(50).step()
    assert (run.sequences[:, -1] == 50).all()
    expected = before + scores[0][:, 50].view(2, 4)
    expected, order = expected.sort(dim=1, descending=True)
    torch.testing.assert_close(run.views.strategy.running_scores, expected)
    # the beams were re-sorted by score; each row is its old self plus the token
    parents = (order + torch.arange(2)[:, None] * 4).reshape(-1)
    assert torch.equal(run.sequences[:, :-1], seqs[parents])


@pytest.mark.parametrize("mode", list(MODES))
def test_forcing_eos_ends_the_search(hf_llama, padded_batch, mode):
    run = (
        _start(hf_llama, padded_batch, mode, force_words_ids=None)
        if mode == "constrained"
        else _start(hf_llama, padded_batch, mode)
    )
    run.step()
    run.force(14).step()
    assert run.finished
    out = run.output
    assert (out.sequences[:, -1] == 14).all()
    assert out.sequences.shape[1] == padded_batch[0].shape[1] + 2


def test_forced_eos_with_unmet_constraints_returns_best_beams(hf_llama, padded_batch):
    run = _start(hf_llama, padded_batch, "constrained")
    run.step()
    run.force(14).step()
    assert run.finished  # no beam completes [20, 21]: the best beams come back as they are
    out = run.output
    # as the reference writes them: the beam (ending in the forced EOS), then the first EOS
    # id appended because there is room before max_length
    assert out.sequences.shape == (2, padded_batch[0].shape[1] + 3)
    assert (out.sequences[:, -2:] == 14).all()


# -- live config changes ------------------------------------------------------------------------
def test_length_penalty_change_between_steps(hf_llama, padded_batch):
    ids, mask = padded_batch
    cfg = dict(num_beams=4, eos_token_id=[14, 76], max_new_tokens=10, early_stopping="never")
    torch.manual_seed(0)
    ref = hf_llama.generate(ids, attention_mask=mask, length_penalty=0.0, **cfg, **OUT)
    run = genlab.start(hf_llama, input_ids=ids, attention_mask=mask, **cfg, **OUT)
    run.config.length_penalty = 0.0  # before the first step: as if started with it
    _same(run.run(), ref)

    run = genlab.start(hf_llama, input_ids=ids, attention_mask=mask, **cfg, **OUT)
    for _ in range(3):
        run.step()
    run.config.length_penalty = 3.0
    out = run.run()
    ts = genlab.compute_transition_scores(out.sequences, out.scores, out.beam_indices)
    lengths = (out.beam_indices >= 0).sum(dim=1)
    for row in range(out.sequences.shape[0]):
        n = int(lengths[row])
        penalty = 1.0 if n <= 3 else 3.0  # the penalty in force when the hypothesis ended
        assert float(out.sequences_scores[row]) == pytest.approx(
            float(ts[row, :n].sum()) / n**penalty, abs=1e-4
        )
    assert int(lengths.max()) > 3


@pytest.mark.parametrize("field,value", [("num_beams", 5), ("num_return_sequences", 2)])
def test_row_layout_fields_cannot_change(hf_llama, padded_batch, field, value):
    run = _start(hf_llama, padded_batch, "beam")
    run.step()
    setattr(run.config, field, value)
    with pytest.raises(ValueError, match=field):
        run.step()


def test_interrupted_run_returns_the_running_beams(hf_llama, padded_batch):
    run = _start(hf_llama, padded_batch, "beam", eos_token_id=None, length_penalty=1.0)
    run.run(max_steps=3)
    assert not run.finished
    out = run.output
    assert out.sequences.shape == (2, padded_batch[0].shape[1] + 3)
    expected = run.views.strategy.running_scores[:, 0] / 3
    torch.testing.assert_close(out.sequences_scores, expected)


# -- the beam streamer ----------------------------------------------------------------------------
def test_beam_streamer_through_generate(capsys):
    lm = TableLM.classic()
    tok = lm.tokenizer
    ids = tok("The", return_tensors="pt").input_ids
    streamer = BeamStreamer(tok, min_interval=0)
    genlab.generate(lm, ids, num_beams=2, max_new_tokens=5, streamer=streamer)
    steps = [step for step, _ in streamer.snapshots]
    assert steps == [0, 1, 2]
    first = [text for _, _, text in streamer.snapshots[0][1]]
    assert first == ["nice", "dog"]  # best first
    score, done, text = streamer.snapshots[-1][1][0]
    assert (text, done) == ("dog has", True) and score == pytest.approx(-0.3406, abs=1e-4)
    assert "dog has" in capsys.readouterr().out  # outside a notebook: printed at the end


def test_beam_streamer_attached_to_a_run_and_throttled(hf_llama, padded_batch):
    run = _start(hf_llama, padded_batch, "group")
    streamer = BeamStreamer(None, batch=1, top=2, every=3, min_interval=0).attach(run)
    run.run()
    assert all(len(rows) <= 2 for _, rows in streamer.snapshots)
    steps = [s for s, _ in streamer.snapshots]
    assert steps[:2] == [2, 5] and steps[-1] == run.step_index - 1
    scores = [s for s, _, _ in streamer.snapshots[-1][1]]
    assert scores == sorted(scores, reverse=True)
    streamer.detach()
    assert not run.registry.has("step_end")


def test_plain_streamer_still_refused_with_beams(hf_llama, padded_batch):
    from genlab.streamers import TextStreamer

    ids, mask = padded_batch
    with pytest.raises(ValueError, match="BeamStreamer"):
        genlab.generate(
            hf_llama, ids, attention_mask=mask, num_beams=2, streamer=TextStreamer(None)
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(every=0), "every"), (dict(top=0), "top"), (dict(min_interval=-1), "min_interval")],
)
def test_beam_streamer_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BeamStreamer(None, **kwargs)


@pytest.mark.parametrize(
    "cfg,field",
    [
        (dict(num_beams=4, num_return_sequences=5), "num_return_sequences"),
        (dict(num_beams=4, num_beam_groups=3), "num_beam_groups"),
        (dict(num_beams=1, force_words_ids=[[5]]), "num_beams"),
        (dict(num_beams=2, early_stopping="sometimes"), "early_stopping"),
    ],
)
def test_bad_beam_settings_fail_before_any_forward(hf_llama, padded_batch, cfg, field):
    ids, mask = padded_batch
    calls = []
    handle = hf_llama.register_forward_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(ValueError, match=field):
            genlab.generate(hf_llama, ids, attention_mask=mask, max_new_tokens=3, **cfg)
    finally:
        handle.remove()
    assert calls == []
