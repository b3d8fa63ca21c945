"""The samplers beyond the reference (genlab/processors/samplers.py) against llama.cpp.

tests/fixtures/samplers_llama_cpp.json holds llama.cpp's own samplers run on fixed logits
and histories (recorded by tests/record_sampler_fixtures.py with llama-cpp-python 0.3.36):
for each case the kept tokens must be the same, their probabilities equal within 1e-6, and
for mirostat μ before and after every step equal within 1e-5 (μ is a float32 in llama.cpp).
Smoothing, which llama.cpp lacks, is checked against text-generation-webui's formula.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from genlab.processors.samplers import (
    DRYLogitsProcessor,
    DynamicTemperatureLogitsWarper,
    MirostatLogitsWarper,
    MirostatV2LogitsWarper,
    QuadraticSmoothingLogitsWarper,
    TopNSigmaLogitsWarper,
    XTCLogitsWarper,
    drawing_from,
    dry_breakers,
)

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "samplers_llama_cpp.json").read_text())
PROB_TOL = 1e-6
MU_TOL = 1e-5


def _probs(scores: torch.Tensor) -> dict[int, float]:
    """{token: probability} of the finite entries of one row of scores (float64 softmax)."""
    row = scores.reshape(-1).double()
    keep = torch.isfinite(row)
    probs = torch.softmax(row[keep], dim=-1)
    return dict(zip(torch.nonzero(keep).squeeze(1).tolist(), probs.tolist(), strict=True))


def _compare(out: torch.Tensor, case: dict) -> float:
    """Assert the kept set and the probabilities; return the largest difference."""
    ours = _probs(out)
    assert sorted(ours) == case["kept"]
    diffs = [abs(ours[t] - p) for t, p in zip(case["kept"], case["probs"], strict=True)]
    worst = max(diffs, default=0.0)
    assert worst < PROB_TOL, worst
    return worst


def _scores(values) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float32)


# ------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("case", FIXTURE["top_n_sigma"], ids=lambda c: f"n{c['n']}")
def test_top_n_sigma_equals_llama_cpp(case):
    scores = _scores(case["input"])
    out = TopNSigmaLogitsWarper(case["n"])(None, scores)
    _compare(out, case)
    assert torch.equal(scores, _scores(case["input"]))  # the input is not modified


@pytest.mark.parametrize("case", FIXTURE["temp_ext"], ids=lambda c: f"{c['low']}-{c['high']}")
def test_dynamic_temperature_equals_llama_cpp(case):
    warper = DynamicTemperatureLogitsWarper(case["low"], case["high"], case["exponent"])
    _compare(warper(None, _scores(case["input"])), case)
    assert case["low"] <= warper.last_report[0] <= case["high"]


@pytest.mark.parametrize(
    "case", FIXTURE["xtc"], ids=lambda c: f"t{c['threshold']}p{c['probability']}"
)
def test_xtc_equals_llama_cpp(case):
    warper = XTCLogitsWarper(case["threshold"], case["probability"], case["min_keep"])
    out = warper(None, _scores(case["input"]))
    _compare(out, case)
    report = warper.last_report[0]
    assert report.fired == (len(case["kept"]) < len(case["input"]))
    assert len(report.removed) == len(case["input"]) - len(case["kept"])


def _mirostat_steps(cls, case):
    warper = (
        cls(case["tau"], case["eta"], case["m"])
        if cls is MirostatLogitsWarper
        else cls(case["tau"], case["eta"])
    )
    ids = [0]  # a one-token prompt; each step appends the token llama.cpp drew
    worst_p = worst_mu = 0.0
    for step in case["steps"]:
        out = warper(torch.tensor([ids]), _scores(step["input"]))
        assert abs(warper.last_report[0].mu - step["mu_before"]) < MU_TOL
        worst_mu = max(worst_mu, abs(warper.last_report[0].mu - step["mu_before"]))
        worst_p = max(worst_p, _compare(out, step))
        ids.append(step["selected"])
    # the last step's μ update happens when the next step sees the chosen token
    warper(torch.tensor([ids]), _scores(case["steps"][-1]["input"]))
    assert abs(warper.last_report[0].mu - case["steps"][-1]["mu_after"]) < MU_TOL
    history = warper.history(ids)
    assert [round(h.mu, 4) for h in history[:-1]] == [
        round(s["mu_before"], 4) for s in case["steps"]
    ]
    assert all(h.surprise is not None for h in history[:-1])
    return worst_p, worst_mu


@pytest.mark.parametrize("case", FIXTURE["mirostat"], ids=lambda c: f"tau{c['tau']}")
def test_mirostat_v1_equals_llama_cpp_step_by_step(case):
    _mirostat_steps(MirostatLogitsWarper, case)


@pytest.mark.parametrize("case", FIXTURE["mirostat_v2"], ids=lambda c: f"tau{c['tau']}")
def test_mirostat_v2_equals_llama_cpp_step_by_step(case):
    _mirostat_steps(MirostatV2LogitsWarper, case)


@pytest.fixture(scope="module")
def demo_tokenizer(demo):
    return demo.tokenizer


def test_dry_equals_llama_cpp_on_the_demo_vocabulary(demo_tokenizer):
    size = FIXTURE["dry_vocab_size"]
    logits = torch.tensor([[((i * 37) % 101) / 25.0 for i in range(size)]], dtype=torch.float32)
    tables = {}
    penalised = 0
    for case in FIXTURE["dry"]:
        key = tuple(case["breakers"])
        if key not in tables:
            tables[key] = dry_breakers(demo_tokenizer, case["breakers"]) if key else {}
        dry = DRYLogitsProcessor(
            case["multiplier"],
            case["base"],
            case["allowed_length"],
            tables[key],
            case["penalty_last_n"],
        )
        out = dry(torch.tensor([case["history"]]), logits)
        changed = torch.nonzero(out[0] != logits[0]).squeeze(1).tolist()
        label = (case["text"], case["breakers"], case["allowed_length"])
        assert sorted(changed) == sorted(int(k) for k in case["changed"]), label
        for token, value in case["changed"].items():
            got = float(out[0, int(token)])
            assert got == pytest.approx(value, rel=1e-6, abs=1e-5), label
        assert {p.token_id for p in dry.last_report[0]} == set(map(int, case["changed"]))
        penalised += bool(changed)
    assert penalised >= 25  # most cases penalise something: the comparison is not vacuous


# ---------------------------------------------------------------- smoothing (tgw formula)


def test_quadratic_smoothing_equals_text_generation_webui_formula():
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(3, 50, generator=gen) * 3
    scores[1, :5] = -math.inf
    for factor, curve in [(0.3, 1.0), (1.5, 1.0), (0.7, 2.5)]:
        out = QuadraticSmoothingLogitsWarper(factor, curve)(None, scores)
        for row in range(3):
            x = scores[row].double()
            top = x[torch.isfinite(x)].max()
            d = x - top
            k, s = (3 - curve) / 2, (curve - 1) / 2
            want = -(k * factor * d**2) + (s * factor * d**3) + top
            finite = torch.isfinite(x)
            assert torch.allclose(out[row][finite].double(), want[finite], atol=1e-4)
            assert torch.isinf(out[row][~finite]).all()
        assert torch.equal(out.argmax(-1), scores.argmax(-1))  # the top token stays on top


# ---------------------------------------------------------------- the run's generator


def test_xtc_draws_from_the_bound_random_source_and_logs_its_draws():
    class Source:
        def __init__(self, values):
            self.values, self.calls = values, 0

        def rand_like(self, x):
            self.calls += 1
            return torch.tensor(self.values, dtype=x.dtype)[: x.numel()]

    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.15, 0.05]]))
    xtc = XTCLogitsWarper(threshold=0.2, probability=0.5)
    source = Source([0.4, 0.6])  # row 0: 0.4 <= 0.5 fires; row 1: 0.6 does not
    with drawing_from(source):
        out = xtc(None, scores)
    assert source.calls == 1
    assert out.isinf().tolist() == [[True, False, False, False], [False] * 4]
    assert [r.fired for r in xtc.last_report] == [True, False]
    assert xtc.last_report[0].removed == (0,)


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: XTCLogitsWarper(0.1, 1.5), "xtc_probability"),
        (lambda: XTCLogitsWarper(0.7, 0.5), "xtc_threshold"),
        (lambda: MirostatV2LogitsWarper(tau=0.0), "mirostat_tau"),
        (lambda: MirostatLogitsWarper(tau=-1.0), "mirostat_tau"),
        (lambda: MirostatV2LogitsWarper(tau=5.0, eta=0.0), "mirostat_eta"),
        (lambda: DRYLogitsProcessor(-1.0), "dry_multiplier"),
        (lambda: DRYLogitsProcessor(0.8, base=0.5), "dry_base"),
        (lambda: DRYLogitsProcessor(0.8, allowed_length=0), "dry_allowed_length"),
        (lambda: DynamicTemperatureLogitsWarper(1.5, 0.5), "dynatemp_high"),
        (lambda: QuadraticSmoothingLogitsWarper(0.0), "smoothing_factor"),
        (lambda: TopNSigmaLogitsWarper(0.0), "top_n_sigma"),
    ],
)
def test_bad_settings_name_the_field(make, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        make()


def test_breakers_that_tokenize_to_nothing_are_refused(demo_tokenizer):
    with pytest.raises(ValueError, match="dry_sequence_breakers.*tokenizes to nothing|non-empty"):
        dry_breakers(demo_tokenizer, [""])
    with pytest.raises(ValueError, match="`dry_sequence_breakers`"):
        dry_breakers(demo_tokenizer, [3])


# ------------------------------------------------------------- config fields and order


def _built(**fields):
    from genlab.config import GenerationConfig
    from genlab.processors import build_processors

    cfg = GenerationConfig(**fields)
    return build_processors(cfg, input_ids_seq_length=2).stage_names()


def test_sampler_fields_are_off_by_default_and_leave_the_reference_config_alone():
    from genlab.config import GenerationConfig
    from genlab.config.sampler_fields import SAMPLER_FIELDS

    assert not set(SAMPLER_FIELDS) & set(vars(GenerationConfig()))
    assert _built(do_sample=True, top_k=0) == []
    assert _built(do_sample=True) == ["top_k"]  # the reference's default, unchanged


def test_samplers_take_their_default_places():
    names = _built(
        do_sample=True,
        temperature=0.7,
        top_p=0.9,
        top_n_sigma=1.0,
        dynatemp_low=0.5,
        smoothing_factor=0.3,
        xtc_probability=0.5,
        mirostat_mode=2,
        repetition_penalty=1.2,
        dry_multiplier=0.8,
        dry_sequence_breakers=None,
    )
    assert names == [
        "repetition_penalty",
        "dry",
        "top_n_sigma",
        "temperature",
        "dynatemp",
        "smoothing",
        "top_k",
        "top_p",
        "xtc",
        "mirostat_v2",
    ]


def test_sampler_order_runs_them_in_the_order_given():
    order = ["xtc", "dry", "top_k", "temperature", "mirostat"]
    names = _built(
        do_sample=True,
        temperature=0.7,
        xtc_probability=0.5,
        mirostat_mode=1,
        dry_multiplier=0.8,
        dry_sequence_breakers=None,
        sampler_order=order,
    )
    assert names == ["xtc", "dry", "top_k", "temperature", "mirostat"]


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(sampler_order=["top_k", "bogus"]), "`sampler_order`.*'bogus' is not one of them"),
        (dict(sampler_order=["top_k", "top_k"]), "`sampler_order`.*Twice"),
        (dict(xtc_probability=1.5), "`xtc_probability`"),
        (dict(mirostat_tau=0.0), "`mirostat_tau`"),
        (dict(mirostat_mode=3), "`mirostat_mode`"),
        (dict(dynatemp_low=1.0, dynatemp_high=0.5), "`dynatemp_high`"),
        (dict(dry_sequence_breakers=[""]), "`dry_sequence_breakers`"),
    ],
)
def test_bad_sampler_fields_name_the_field(fields, match):
    from genlab.config import GenerationConfig

    with pytest.raises(ValueError, match=match):
        GenerationConfig(**fields)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(mirostat_mode=2, sampler_order=["mirostat", "top_k"]), "must run last"),
        (dict(xtc_probability=0.5, sampler_order=["top_k"]), "leaves out \\['xtc'\\]"),
    ],
)
def test_an_order_that_cannot_work_is_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        _built(do_sample=True, **fields)


# ------------------------------------------------------------------- in a run (demo)


def test_mirostat_state_follows_rewind_and_fork(demo):
    run = demo.start(
        "Once upon a time",
        max_new_tokens=10,
        do_sample=True,
        seed=3,
        mirostat_mode=2,
        mirostat_tau=3.0,
        top_k=0,
    )
    run.run()
    text = run.text
    (miro,) = run.views.processors
    mus = [s.mu for s in miro.history(run.sequences[0], start=run.given.prompt_length)]
    assert len(mus) == 10 and mus[0] == pytest.approx(6.0) and len(set(mus)) > 5
    run.rewind(5)
    run.run()
    assert run.text == text
    fork = run.fork()
    fork.rewind(4)
    fork.run()
    assert fork.text == text
    (fork_miro,) = fork.views.processors
    assert fork_miro is not miro


def _mirostat_run(demo):
    return demo.start(
        "Once upon a time",
        max_new_tokens=10,
        do_sample=True,
        seed=5,
        mirostat_mode=2,
        mirostat_tau=3.0,
        top_k=0,
    )


def _mus(run) -> list[float]:
    (miro,) = [p for p in run.views.processors if isinstance(p, MirostatV2LogitsWarper)]
    return [s.mu for s in miro.history(run.sequences[0], start=run.given.prompt_length)]


def test_mirostat_mu_survives_an_unrelated_config_change_rewind_and_fork(demo):
    whole = _mirostat_run(demo)
    whole.run()
    expected = _mus(whole)
    assert len(expected) == 10 and len(set(expected)) > 5

    run = _mirostat_run(demo)
    run.run(max_steps=4)
    run.set(output_scores=True)  # a change that rebuilds the processors, nothing else
    run.run()
    assert run.text == whole.text
    assert _mus(run) == expected  # μ went on from step 4, not from 2τ again

    run.rewind(8)  # back across the change, and on again
    run.run()
    assert run.text == whole.text and _mus(run) == expected
    fork = run.fork()
    fork.rewind(3)
    fork.set(output_scores=False)
    fork.run()
    assert fork.text == whole.text and _mus(fork) == expected


def _xtc_beam_run(demo, perturb: bool):
    run = demo.start(
        "Once upon a time",
        max_new_tokens=6,
        do_sample=True,
        num_beams=2,
        seed=7,
        xtc_probability=0.5,
        xtc_threshold=0.05,
    )
    for _ in range(6):
        if perturb:
            torch.rand(17)  # the global generator moves between the steps
        run.step()
    (xtc,) = [p for p in run.views.processors if isinstance(p, XTCLogitsWarper)]
    draws = [[r.drawn for r in xtc.reports[n]] for n in sorted(xtc.reports)]
    return run, draws


def test_xtc_in_beam_sampling_draws_from_the_runs_generator(demo):
    torch.manual_seed(0)
    first, draws = _xtc_beam_run(demo, perturb=False)
    torch.manual_seed(1)
    again, draws_again = _xtc_beam_run(demo, perturb=True)
    assert len(draws) == 6 and all(d is not None for row in draws for d in row)
    assert draws_again == draws and again.text == first.text
    again.rewind(4)
    torch.rand(5)
    again.run()
    assert again.text == first.text  # the rewind draws the same numbers again


def test_xtc_draws_from_the_runs_seed(demo):
    def text(seed):
        run = demo.start(
            "Once upon a time", max_new_tokens=8, do_sample=True, seed=seed, xtc_probability=0.5
        )
        run.run()
        first = run.text
        run.rewind(5)
        run.run()
        assert run.text == first  # the rewind draws the same numbers again
        return first

    assert text(11) == text(11)


# ---------------------------------------------------------------- seen: tables, plots


def test_tables_and_plot_show_what_each_sampler_did(demo):
    from genlab.plots.samplers import dry_table, mirostat_plot, mirostat_table, xtc_table

    prompt = "one two three four. one two three four. one two three four. one two"
    run = demo.start(
        prompt,
        max_new_tokens=6,
        do_sample=True,
        seed=0,
        top_k=0,
        dry_multiplier=0.8,
        xtc_probability=1.0,
        xtc_threshold=0.05,
        mirostat_mode=2,
        trace=True,
    )
    run.run()
    dry = dry_table(run)
    assert len(dry) and (dry["repeat_length"] >= 2).all() and (dry["penalty"] > 0).all()
    first = dry[dry["step"] == 0].sort_values("repeat_length").iloc[-1]
    assert prompt.endswith(first["sequence"].strip())  # the repeat it matched ends the text
    xtc = xtc_table(run)
    assert len(xtc) == 6 and xtc["fired"].any()
    assert all(len(r) > 0 for r in xtc.loc[xtc["fired"], "removed"])
    miro = mirostat_table(run)
    assert len(miro) == 6 and miro["mu"].iloc[0] == pytest.approx(10.0)
    assert miro["surprise"].iloc[:5].notna().all()
    fig = mirostat_plot(run)
    assert len(fig.axes[0].lines) == 3
    stages = run.tracer.trace.stages()
    assert {"dry", "xtc", "mirostat_v2"} <= set(stages)


def test_samplers_passed_as_logits_processor_like_a_custom_processor(demo):
    xtc = XTCLogitsWarper(threshold=0.05, probability=1.0)
    res = demo.generate(
        "Once upon a time", max_new_tokens=4, do_sample=True, seed=0, logits_processor=[xtc]
    )
    assert len(xtc.reports) == 4  # it ran at every step
    assert any(r[0].fired for r in xtc.reports.values())
    plain = demo.generate("Once upon a time", max_new_tokens=4, do_sample=True, seed=0)
    assert res.text != plain.text  # removing the top choices changed the text


def test_mirostat_learns_nothing_from_a_forced_token_it_had_removed():
    miro = MirostatV2LogitsWarper(tau=1.0, eta=0.5)  # μ = 2 bits: keeps p >= 1/4
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    miro(torch.tensor([[9]]), scores)
    miro(torch.tensor([[9, 3]]), scores)  # token 3 was removed (forced, say)
    assert miro.last_report[0].mu == 2.0 and math.isinf(miro.history([9, 3])[1].surprise)
    miro(torch.tensor([[9, 3, 0]]), scores)  # token 0 kept: p 0.5 / 0.8 -> 0.68 bits
    assert miro.last_report[0].mu == pytest.approx(2.0 - 0.5 * (math.log2(0.8 / 0.5) - 1.0))
