"""One name per concept: the normal forms and the deprecated aliases that still work."""

from __future__ import annotations

import pytest
import torch

import genlab
from conftest import tiny_llama
from genlab.ids import eos_token_ids
from genlab.models.architectures import build_decoder
from genlab.trace import Tracer


@pytest.fixture(scope="module")
def model():
    hf = tiny_llama(0)
    return build_decoder(hf.config.to_dict(), hf.state_dict())


def test_eos_token_ids_takes_every_form():
    cfg = genlab.GenerationConfig(eos_token_id=[4, 9])
    assert eos_token_ids(cfg) == [4, 9]
    assert eos_token_ids(3) == [3] and eos_token_ids(None) == []
    assert eos_token_ids(torch.tensor([[5, 6]])) == [5, 6] and eos_token_ids((7,)) == [7]


def test_trace_depth_and_its_deprecated_alias(model):
    run = genlab.start(model, torch.tensor([[1, 5, 17]]), max_new_tokens=2, trace={"depth": 3})
    run.run()
    assert run.tracer.depth == 3
    assert run.tracer.steps[0].stages[-1].top_ids.shape[1] == 3
    with pytest.warns(DeprecationWarning, match="depth"):
        old = Tracer(run, top_k=4)
    assert old.depth == 4
    with pytest.raises(ValueError, match="depth"):
        Tracer(run, depth=0)


def test_the_glossary_names_what_the_code_uses():
    import genlab.glossary as glossary

    text = glossary.__doc__
    for name in ("run.step_index", "run.gen_config", "eos_token_ids", "RunHistory", "depth",
                 "stepdata", "finished_by", "RunRandom"):  # fmt: skip
        assert name in text, name


def test_the_tokenizer_moved_out_of_models_and_the_old_path_warns():
    from genlab.tokenizer import Tokenizer

    with pytest.warns(DeprecationWarning, match="genlab.tokenizer"):
        from genlab.models.tokenizer import Tokenizer as Old
    assert Old is Tokenizer


def test_strategy_plots_are_exported_and_the_old_module_warns():
    import genlab.plots as plots
    from genlab.plots.strategies import acceptance_plot, contrastive_plot

    assert plots.acceptance_plot is acceptance_plot and plots.contrastive_plot is contrastive_plot
    with pytest.warns(DeprecationWarning, match="genlab.plots.contrastive_plot"):
        from genlab.plots.assisted import contrastive_plot as old
    assert old is contrastive_plot


@pytest.mark.parametrize(
    "old,name,new",
    [
        ("genlab.strategies.assisted", "assisted_table", "genlab.trace"),
        ("genlab.strategies.assisted", "acceptance_rate", "genlab.trace"),
        ("genlab.strategies.contrastive", "contrastive_table", "genlab.trace"),
        ("genlab.strategies.dola", "dola_table", "genlab.trace"),
        ("genlab.strategies.assisted", "EarlyExitModel", "genlab.models.early_exit"),
    ],
)
def test_tables_and_the_early_exit_model_left_strategies_and_the_old_path_warns(old, name, new):
    import importlib

    moved = getattr(importlib.import_module(new), name)
    assert moved.__module__ == new
    with pytest.warns(DeprecationWarning, match=f"{new}.{name}"):
        assert getattr(importlib.import_module(old), name) is moved
    with pytest.raises(AttributeError):  # only the moved names answer there
        getattr(importlib.import_module(old), "Trace")  # noqa: B009


def test_the_hook_verbs_are_add_observe_has_fire_notify_and_the_old_ones_warn(model):
    from genlab.hooks import HookRegistry

    registry = HookRegistry()
    assert not registry.has("processor.*")
    registry.add("processor.TopKLogitsWarper", lambda x, step: None)
    assert registry.has("processor.*") and not registry.has("processor.DoLa")
    with pytest.warns(DeprecationWarning, match='has\\("processor.\\*"\\)'):
        assert registry.wants_processors()
    # beam.candidates hooks observe only: what they return does not flow on
    registry.add("beam.candidates", lambda payload, step: "replaced")
    assert registry.fire("beam.candidates", "payload", 0) == "payload"

    run = genlab.start(model, torch.tensor([[1, 5, 17]]), max_new_tokens=2)
    ctx, seen = run._ctx, []
    with run.hooks(**{"processor.DoLa": lambda x, step: x + 1}):
        remove = run.registry.observe("processor.*", lambda p, value, step: seen.append(p))
        assert ctx.has("processor.DoLa") and ctx.has("processor.*")
        scores = torch.zeros(1, 4)
        assert ctx.fire("processor.DoLa", scores).eq(1).all() and seen == ["processor.DoLa"]
        for old, args, new in [
            ("stage", ("DoLa", scores), "fire"),
            ("wants_stages", (), "has"),
            ("listening", ("processor.DoLa",), "has"),
            ("emit", ("beam.candidates", "payload"), "fire"),
        ]:
            with pytest.warns(DeprecationWarning, match=f"StepContext.{new}"):
                getattr(ctx, old)(*args)
    remove()
    assert not ctx.has("processor.DoLa") and not ctx.has("processor.*")


def test_panels_take_trace_depth_and_their_old_trace_top_k_warns():
    from genlab.models.table import TableLM
    from genlab.widgets import Playground, StepDebugger

    lm = genlab.LM(TableLM.classic())
    pg = Playground(lm, "the", trace_depth=3, max_new_tokens=2)
    assert pg.trace_depth == 3 and pg.result.run.tracer.depth == 3
    dbg = StepDebugger(lm, "the", trace_depth=2, max_new_tokens=2)
    assert dbg.run.tracer.depth == 2
    with pytest.warns(DeprecationWarning, match="trace_depth"):
        old = StepDebugger(lm, "the", trace_top_k=4, max_new_tokens=2)
    assert old.trace_depth == 4 and old.run.tracer.depth == 4
