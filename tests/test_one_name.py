"""One name per meaning: the glossary, the transition-score tables, the strategies' verbs,
one token's id, and the generate() arguments that are accepted but do nothing."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

import genlab
from genlab.run.context import StepContext
from genlab.run.trace import TRANSITION_COLUMNS, Trace
from genlab.strategies import STRATEGIES
from genlab.strategies.sampling import TokenByToken


def test_the_glossary_names_what_the_code_uses():
    import genlab.glossary as glossary

    text = glossary.__doc__
    names = {  # each name the glossary gives, and where the code has it
        "run.step_index": genlab.Run,
        "run.views.gen_config": genlab.run.context.RunView,
        "finished_by": genlab.Run,
        "ctx.criteria_met": StepContext,
        "ctx.gen_config": StepContext,
        "transition_scores": Trace,
        "token_id": genlab.LM,
        "encode": genlab.LM,
        "is_beam": genlab.GenerationMode,
        "run.views.kv_cache": genlab.run.context.RunView,
        "ctx.kv_cache": StepContext,
        "result.token_texts": genlab.GenerationResult.__dataclass_fields__,
        "Step.text": genlab.Step.__dataclass_fields__,
    }
    for name, owner in names.items():
        assert name in text, name
        attr = name.rsplit(".", 1)[-1]
        assert (attr in owner) if isinstance(owner, dict) else hasattr(owner, attr), name
    for name in ("eos_token_ids", "Timeline", "depth", "stepdata", "RunRandom", "rule"):
        assert name in text, name
    assert "ctx.stop" not in text and "ctx.config" not in text  # run.config is another
    # the KV cache is never plain "cache" on a run (lm.cache is the forward cache)
    assert not hasattr(genlab.run.context.RunView, "cache")
    assert "tokens" not in genlab.GenerationResult.__dataclass_fields__  # ids elsewhere


def test_strategies_have_one_verb_with_one_argument_order():
    for cls in set(STRATEGIES.values()):
        params = list(inspect.signature(cls.select).parameters)
        assert params[:3] == ["self", "ctx", "scores"], cls
        if issubclass(cls, TokenByToken) and "rule" in vars(cls):
            assert list(inspect.signature(cls.rule).parameters)[:3] == ["self", "ctx", "scores"]


def _traced_run(model, ids, mask, **cfg):
    lm = genlab.LM(model)
    run = lm.start(
        {"input_ids": ids, "attention_mask": mask}, max_new_tokens=5, seed=0, trace=True, **cfg
    )
    run.run()
    return run.result(), run.tracer.trace


def test_transition_tables_have_the_reference_default_and_the_same_columns(hf_llama, padded_batch):
    ids, mask = padded_batch
    res, trace = _traced_run(hf_llama, ids, mask, do_sample=True, top_k=10, eos_token_id=None)
    reference = inspect.signature(hf_llama.compute_transition_scores).parameters
    for method in (res.transition_scores, trace.transition_scores):
        default = inspect.signature(method).parameters["normalize_logits"].default
        assert default is reference["normalize_logits"].default is False
    out = res.output
    for norm in (False, True):
        want = hf_llama.compute_transition_scores(out.sequences, out.scores, normalize_logits=norm)
        tables = {"result": res.transition_scores(norm), "trace": trace.transition_scores(norm)}
        for name, table in tables.items():
            assert list(table.columns) == TRANSITION_COLUMNS, name
            for r in range(ids.shape[0]):
                got = torch.tensor(table[table.row == r].score.tolist())
                assert len(got) == 5, name
                torch.testing.assert_close(got, want[r], msg=name)
        a, b = (t.sort_values(["row", "step"]) for t in tables.values())
        assert a.token_id.tolist() == b.token_id.tolist()
        assert a.logprob.to_numpy() == pytest.approx(b.logprob.to_numpy(), abs=1e-3)
    plain = res.transition_scores()
    assert plain.score.tolist() == res.transition_scores(False).score.tolist()
    assert plain.logprob.tolist() == res.transition_scores(True).score.tolist()
    assert res.transition_scores(row=1).row.unique().tolist() == [1]


def test_beam_transition_table_follows_the_beams_as_the_reference(hf_llama, padded_batch):
    ids, mask = padded_batch
    res, _ = _traced_run(hf_llama, ids, mask, num_beams=3, num_return_sequences=2)
    out = res.output
    want = hf_llama.compute_transition_scores(out.sequences, out.scores, out.beam_indices)
    table = res.transition_scores()
    assert sorted(set(table.row)) == [0, 1, 2, 3]
    for r in range(4):
        got = torch.tensor(table[table.row == r].score.tolist())
        torch.testing.assert_close(got, want[r, : len(got)])


def test_token_id_is_one_token_or_a_clear_error(demo):
    far = demo.token_id(" far")
    ids, mask = demo.encode(" far")
    assert far == int(ids[0, 0]) and ids.shape == mask.shape == (1, 1)
    assert demo.tokenizer.decode([far]) == " far"
    with pytest.raises(ValueError, match=r"' far away' is 2 tokens .*lm\.encode"):
        demo.token_id(" far away")
    for bad in ("", 5, None):
        with pytest.raises(ValueError, match="token_id takes the text of one token"):
            demo.token_id(bad)


def _warnings_of(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"synced_gpus": True}, "synced_gpus=True is ignored: genlab generates in one process"),
        ({"prefill_chunk_size": 4}, "prefill_chunk_size=4 is ignored"),
        ({"cache_config": {"max_cache_len": 9}}, "cache_config="),
        ({"return_legacy_cache": True}, "return_legacy_cache=True is ignored"),
    ],
)
def test_an_argument_that_does_nothing_is_warned_about_once(hf_llama, kwargs, named):
    ids = torch.tensor([[1, 5, 17]])
    for call in (
        lambda: genlab.generate(hf_llama, ids, max_new_tokens=2, **kwargs),
        lambda: genlab.LM(hf_llama).generate(ids, max_new_tokens=2, **kwargs),
    ):
        said = [m for m in _warnings_of(call) if "ignored" in m]
        assert len(said) == 1 and said[0].startswith(named), said


def test_arguments_left_at_what_they_do_anyway_are_not_warned_about(hf_llama):
    ids = torch.tensor([[1, 5, 17]])
    said = _warnings_of(lambda: genlab.generate(hf_llama, ids, max_new_tokens=2, synced_gpus=False))
    assert not [m for m in said if "ignored" in m], said


def test_a_stage_has_one_label_in_hooks_traces_plots_and_sampler_order(hf_llama):
    from genlab.plots.tokens import waterfall

    ids = torch.tensor([[1, 5, 17, 5]])
    cfg = dict(do_sample=True, temperature=0.8, top_k=5, top_p=0.9, max_new_tokens=2, seed=0)
    order = ["temperature", "top_k", "top_p"]
    run = genlab.start(hf_llama, ids, trace=True, sampler_order=order, **cfg)
    assert run.views.processors.stage_names() == order
    seen = []
    with run.hooks({"processor.top_k": lambda s, step: seen.append(step)}):
        run.run()
    assert seen == [0, 1]
    trace = run.tracer.trace
    assert trace.stages() == ["raw", *order, "final"]
    assert trace.stage_summary(0).stage.tolist() == trace.stages()
    titles = " ".join(ax.get_title(loc="left") for ax in waterfall(trace, 0).axes)
    assert all(f". {name}\n" in titles for name in order), titles
    assert "TopK" not in titles


def test_a_processor_without_a_label_is_named_by_its_class(hf_llama):
    from transformers import TopKLogitsWarper as Theirs

    class NoDigits:
        def __call__(self, input_ids, scores):
            return scores

    run = genlab.start(
        hf_llama, torch.tensor([[1, 5]]), max_new_tokens=1, trace=True,
        logits_processor=[NoDigits(), Theirs(4)],
    )  # fmt: skip
    run.run()
    assert run.tracer.trace.stages() == ["raw", "NoDigits", "TopKLogitsWarper", "final"]
