"""Assisted decoding (assistant model, prompt lookup, early exit): parity with transformers
4.56.2 on the same model objects, down to the shapes of every forward call, and the trace."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import assert_same, tiny_llama

import genlab
from genlab.models.architectures import build_decoder
from genlab.models.early_exit import EarlyExitModel
from genlab.run.engine import start
from genlab.run.trace import acceptance_rate, assisted_table
from genlab.strategies.assisted import greedy_matches, prompt_lookup_candidates

IDS = torch.tensor([[5, 17, 33, 8, 5, 17, 40, 5, 17]])
COMMON = dict(
    max_new_tokens=20,
    eos_token_id=95,
    pad_token_id=0,
    return_dict_in_generate=True,
    output_scores=True,
    output_logits=True,
)


class Calls:
    """Records the input shape of every forward call of the models it watches."""

    def __init__(self, **models):
        self.log = []
        for name, model in models.items():
            model.register_forward_pre_hook(self._hook(name), with_kwargs=True)

    def _hook(self, name):
        def record(module, args, kwargs):
            self.log.append((name, tuple(kwargs["input_ids"].shape)))

        return record

    def take(self):
        log, self.log = self.log, []
        return log


@pytest.fixture(scope="module")
def models():
    main = tiny_llama(0)
    small = tiny_llama(0, num_hidden_layers=1)
    twin = tiny_llama(0)  # same weights as main: every greedy draft is accepted
    deep = tiny_llama(0, num_hidden_layers=3)
    calls = Calls(main=main, small=small, twin=twin, deep=deep)
    return {"main": main, "small": small, "twin": twin, "deep": deep, "calls": calls}


def set_assistant(model, tokens, schedule="constant", threshold=0.4):
    gc = model.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = tokens, schedule
    gc.assistant_confidence_threshold = threshold


def both(models, main="main", setup=None, seed=7, **kwargs):
    """Run the reference and genlab on the same inputs; return outputs and forward calls."""
    kwargs = {**COMMON, **kwargs}
    results = []
    for fn in (
        lambda: models[main].generate(input_ids=IDS, **kwargs),
        lambda: genlab.generate(models[main], input_ids=IDS, **kwargs),
    ):
        if setup:
            setup()
        models["calls"].take()
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
        results.append((out, models["calls"].take()))
    return results


def assert_same_run(ref, mine):
    """(output, calls) pairs: the same outputs and the same draft and verify calls."""
    (r, r_calls), (m, m_calls) = ref, mine
    assert m_calls == r_calls  # same number of iterations, same draft and verify lengths
    assert_same(r, m)


@pytest.mark.parametrize(
    "settings",
    [
        dict(prompt_lookup_num_tokens=3),
        dict(prompt_lookup_num_tokens=5, max_matching_ngram_size=1),
        dict(prompt_lookup_num_tokens=4, repetition_penalty=1.3),
        dict(prompt_lookup_num_tokens=3, do_sample=True, top_k=10),
    ],
    ids=["n3", "ngram1", "repetition_penalty", "sampling"],
)
def test_prompt_lookup_matches_reference(models, settings):
    assert_same_run(*both(models, **settings))


@pytest.mark.parametrize(
    "tokens,schedule,threshold",
    [
        (20, "constant", 0.4),
        (3, "heuristic", 0.4),
        (5, "heuristic_transient", 0.0),
        (6, "constant", 0.05),
    ],
)
def test_assistant_greedy_matches_reference(models, tokens, schedule, threshold):
    for name in ("small", "twin"):
        ref, mine = both(
            models,
            assistant_model=models[name],
            setup=lambda n=name: set_assistant(models[n], tokens, schedule, threshold),
        )
        assert_same_run(ref, mine)


def test_heuristic_schedule_writes_back_like_the_reference(models):
    finals = []
    for fn in (models["main"].generate, lambda **kw: genlab.generate(models["main"], **kw)):
        set_assistant(models["twin"], 3, "heuristic", 0.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(input_ids=IDS, assistant_model=models["twin"], **COMMON)
        finals.append(models["twin"].generation_config.num_assistant_tokens)
    assert finals[0] == finals[1] > 3  # accepted drafts grew the budget, kept for next call
    set_assistant(models["twin"], 3, "heuristic_transient", 0.0)
    genlab.generate(models["main"], input_ids=IDS, assistant_model=models["twin"], **COMMON)
    assert models["twin"].generation_config.num_assistant_tokens == 3


@pytest.mark.parametrize("name", ["small", "twin"])
def test_assistant_sampling_matches_reference(models, name):
    ref, mine = both(
        models,
        assistant_model=models[name],
        do_sample=True,
        temperature=0.7,
        setup=lambda: set_assistant(models[name], 4, "heuristic", 0.0),
    )
    assert_same_run(ref, mine)


@pytest.mark.parametrize("layers,sample", [(1, False), (2, False), (1, True)])
def test_early_exit_matches_reference(models, layers, sample):
    assert_same_run(*both(models, main="deep", assistant_early_exit=layers, do_sample=sample))


def test_early_exit_on_builtin_decoder(models):
    deep = models["deep"]
    builtin = build_decoder(deep.config.to_dict(), deep.state_dict())
    ids = IDS
    # the view computes what the transformers model computes with fewer layers
    view = EarlyExitModel(builtin, 2)
    cache = view.new_cache(1)
    pos = torch.arange(ids.shape[1])[None]
    mine = view.forward(
        ids, attention_mask=torch.ones_like(ids), position_ids=pos, cache=cache, logits_to_keep=0
    ).logits
    deep.model.config.num_hidden_layers = 2
    try:
        ref = deep(input_ids=ids).logits
    finally:
        deep.model.config.num_hidden_layers = 3
    torch.testing.assert_close(mine, ref, atol=1e-4, rtol=0)
    assert len(builtin.layers) == 3  # the view shares weights and leaves the model whole
    kwargs = dict(max_new_tokens=12, eos_token_id=95, pad_token_id=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = deep.generate(input_ids=ids, assistant_early_exit=2, **kwargs)
    assert torch.equal(
        genlab.generate(builtin, input_ids=ids, assistant_early_exit=2, **kwargs), expected
    )


def test_trace_table_accounts_for_every_token(models):
    set_assistant(models["small"], 4, "heuristic", 0.0)
    run = start(
        models["main"],
        input_ids=IDS,
        assistant_model=models["small"],
        keep_history=True,
        max_new_tokens=20,
        eos_token_id=95,
        pad_token_id=0,
    )
    out = run.run()
    table = assisted_table(run.history)
    assert table.n_added.sum() == out.shape[1] - IDS.shape[1] == 20
    assert (table.n_added == table.n_accepted + 1).all()
    assert (table.n_accepted <= table.n_drafted).all()
    added = [t for row in table.added for t in row]
    assert added == out[0, IDS.shape[1] :].tolist()
    for row in table.itertuples():
        assert row.rejected == row.drafted[row.n_accepted :]
    # heuristic schedule: +2 after a fully accepted draft, -1 (not below 1) otherwise
    budgets = table.num_assistant_tokens.tolist()
    for prev, nxt, full in zip(
        budgets, budgets[1:], table.n_accepted == table.n_drafted, strict=False
    ):
        assert nxt == (prev + 2 if full else max(1, prev - 1))


def test_twin_assistant_is_always_accepted_and_faster_in_forwards(models):
    set_assistant(models["twin"], 5, "constant", 0.0)
    run = start(
        models["main"],
        input_ids=IDS,
        assistant_model=models["twin"],
        keep_history=True,
        max_new_tokens=20,
        eos_token_id=95,
        pad_token_id=0,
    )
    models["calls"].take()
    run.run()
    table = assisted_table(run.history)
    assert acceptance_rate(table) == 1.0
    main_calls = [c for c in models["calls"].take() if c[0] == "main"]
    assert len(main_calls) == len(table) < 20  # fewer model passes than tokens
    step = run.history[0]
    assert step.tokens.shape == (1, 6) and step.logprobs.shape == (1, 6)


def test_prompt_lookup_candidates_examples():
    ids = torch.tensor([[1, 2, 3, 9, 1, 2]])
    assert prompt_lookup_candidates(ids, 2, 2, 50, []).tolist() == [3, 9]
    assert prompt_lookup_candidates(ids, 5, 2, 50, [9]).tolist() == [3]  # stops before EOS
    assert prompt_lookup_candidates(ids, 5, 2, 7, []).tolist() == []  # max_length = len + 1
    assert prompt_lookup_candidates(torch.tensor([[4, 5, 6]]), 3, 2, 50, []).tolist() == []
    assert greedy_matches(torch.tensor([[1, 2]]), torch.tensor([[1, 2, 3]])) == 2
    assert greedy_matches(torch.tensor([[7, 2]]), torch.tensor([[1, 2, 3]])) == 0


def test_bad_inputs_raise_clear_errors(models):
    main = models["main"]
    with pytest.raises(ValueError, match="one prompt at a time"):
        genlab.generate(main, input_ids=torch.tensor([[1, 2], [3, 4]]), prompt_lookup_num_tokens=2)
    with pytest.raises(ValueError, match="use_cache=True"):
        genlab.generate(main, input_ids=IDS, prompt_lookup_num_tokens=2, use_cache=False)
    with pytest.raises(ValueError, match="assistant_early_exit=5"):
        genlab.generate(main, input_ids=IDS, assistant_early_exit=5)
    with pytest.raises(ValueError, match="vocabulary"):
        genlab.generate(main, input_ids=IDS, assistant_model=tiny_llama(0, vocab=64))


def test_acceptance_plot_draws_the_table(models):
    from genlab.plots import acceptance_plot

    set_assistant(models["small"], 3, "heuristic", 0.0)
    run = start(models["main"], input_ids=IDS, assistant_model=models["small"], keep_history=True,
                max_new_tokens=8, eos_token_id=95, pad_token_id=0)  # fmt: skip
    run.run()
    table = assisted_table(run.history)
    ax = acceptance_plot(table).axes[0]
    heights = [p.get_height() for p in ax.patches]
    n = len(table)
    assert heights[:n] == table.n_accepted.tolist()
    assert heights[n : 2 * n] == (table.n_drafted - table.n_accepted).tolist()
    assert "acceptance rate" in ax.get_title()
    with pytest.raises(ValueError, match="assisted_table"):
        acceptance_plot(table.drop(columns=["n_drafted"]))


@pytest.mark.parametrize(
    "settings", [dict(prompt_lookup_num_tokens=3), dict(assistant_early_exit=1)]
)
def test_rewind_and_fork_reproduce_the_run(models, settings):
    kwargs = dict(input_ids=IDS, max_new_tokens=12, eos_token_id=95, pad_token_id=0, **settings)
    full = genlab.generate(models["main"], **kwargs)
    run = start(models["main"], keep_history=True, **kwargs)
    for _ in range(3):
        run.step()
    twin = run.fork()
    run.rewind(2)
    assert torch.equal(run.run(), full)
    assert torch.equal(twin.run(), full)
