"""genlab.experiments.compute: best-of-N, self-consistency and coverage curves. The unbiased pass@k
against counting subsets; seeded tables reproducible; the executor path gives the
in-process table; verifiers that raise are reported per sample; the rules choose what
they say; bad input is refused by name; the task set's checker; the plot and the panel."""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
import torch
from helpers import tiny_llama
from test_lens import assert_legible

import genlab
from genlab.experiments import compute, tasks

PROMPT = torch.tensor([[1, 5, 17, 33]])  # the tiny model has no tokenizer: texts are id lists


@pytest.fixture(scope="module")
def lm():
    return genlab.LM(tiny_llama(0, eos_token_id=3))


def first_id(text: str) -> str | None:
    """The answer of a tiny-model sample: its first token id (texts are "[a, b, ...]")."""
    inside = text.strip("[]")
    return inside.split(",")[0].strip() or None


def test_pass_at_k_equals_counting_the_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            correct = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(correct, k))
                direct = sum(any(s) for s in subsets) / len(subsets)
                assert compute.pass_at_k(n, c, k) == pytest.approx(direct, abs=1e-12)
    # Chen et al.'s numerically stable product form, on a case too large to enumerate
    n, c, k = 256, 7, 64
    stable = 1 - math.prod(1 - k / i for i in range(n - c + 1, n + 1))
    assert compute.pass_at_k(n, c, k) == pytest.approx(stable, rel=1e-12)


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError, match=r"k=5: give 1 <= k <= n \(n=4"):
        compute.pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c=6: at most n=4"):
        compute.pass_at_k(4, 6, 2)


def test_best_of_n_table_and_choice(lm):
    res = genlab.best_of_n(lm, PROMPT, 10, seed=1, max_new_tokens=5, batch_size=4,
                           extract=first_id)  # fmt: skip
    s = res.samples
    assert list(s.columns[:11]) == list(compute.SAMPLE_COLUMNS)
    assert list(s["sample"]) == list(range(10))
    assert res.rule == "score" and res.chosen == int(s.score.idxmax())
    assert s.chosen.sum() == 1 and bool(s.chosen.iloc[res.chosen])
    assert res.text == s.text.iloc[res.chosen]
    # the scores are the raw model's log-probs of the tokens, as genlab.score gives them
    rows = [r for r in s.token_ids]
    want = genlab.score(lm, rows, context=PROMPT[0], alternatives=0).summary.mean_logprob
    assert s.mean_logprob.tolist() == pytest.approx(want.tolist(), abs=1e-5)
    assert (s.sum_logprob / s.length).tolist() == pytest.approx(s.mean_logprob.tolist())
    # the vote shares add up to one
    assert res.votes.sum() == pytest.approx(1.0)


def test_seeded_tables_are_reproducible_and_seed_dependent(lm):
    def draw(seed):
        return genlab.best_of_n(lm, PROMPT, 9, seed=seed, max_new_tokens=6, batch_size=4).samples

    a, b = draw(5), draw(5)
    pd.testing.assert_frame_equal(a, b)
    assert draw(6).text.tolist() != a.text.tolist()


def test_batches_are_seeded_seed_plus_b(lm):
    res = genlab.best_of_n(lm, PROMPT, 6, seed=2, max_new_tokens=5, batch_size=4)
    second = lm.generate(PROMPT, seed=3, num_return_sequences=2, do_sample=True,
                         max_new_tokens=5)  # fmt: skip
    got = [list(t) for t in res.samples.token_ids.iloc[4:]]
    assert got == [row[: len(g)] for row, g in zip(second.generated_ids.tolist(), got,
                                                    strict=True)]  # fmt: skip


def test_a_verifier_that_raises_is_reported_per_sample(lm):
    def verifier(text):
        if first_id(text) in ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"):
            raise RuntimeError("no digits today")
        return len(text) > 20

    res = genlab.best_of_n(lm, PROMPT, 12, verifier=verifier, seed=0, max_new_tokens=5,
                           extract=first_id)  # fmt: skip
    s = res.samples
    bad = s.answer.str.len() == 1
    assert bad.any() and (~bad).any(), "the seed should give both kinds of sample"
    assert (s.error[bad] == "verifier raised RuntimeError: no digits today").all()
    assert s.verified[bad].isna().all()
    assert (s.error[~bad] == "").all() and s.verified[~bad].map(type).eq(bool).all()
    assert res.rule == "verifier" and res.chosen in set(s.index[~bad])


def test_extract_none_is_no_answer_and_the_vote_keeps_the_most_frequent(lm):
    def extract(text):
        answer = first_id(text)
        return None if answer is not None and int(answer) % 3 == 0 else answer

    res = genlab.self_consistency(lm, PROMPT, 16, extract=extract, seed=4, max_new_tokens=4)
    s = res.samples
    assert s.answer.isna().any()
    assert compute.NO_ANSWER in res.votes.index
    counts = s.answer.dropna().value_counts()
    assert counts[res.answer] == counts.max()
    members = s[s.answer == res.answer]
    assert res.chosen == int(members.score.idxmax()) and res.rule == "vote"


def test_the_executor_path_gives_the_in_process_table(tmp_path, monkeypatch):
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "packed")
    tiny_llama(seed=4, eos_token_id=3).save_pretrained(tmp_path / "tiny")
    model = genlab.load(tmp_path / "tiny")
    checks = [(PROMPT, lambda t: first_id(t) in ("7", "8")),
              (torch.tensor([[1, 9, 9]]), lambda t: len(t) > 12)]  # fmt: skip
    args = dict(ns=(1, 2, 4), seed=3, max_new_tokens=5, batch_size=3, greedy=False)
    want = genlab.coverage_curve(model, checks, **args)
    best = genlab.best_of_n(model, PROMPT, 7, seed=1, max_new_tokens=5, batch_size=3)
    with ThreadPoolExecutor(2) as pool:
        got = genlab.coverage_curve(model, checks, executor=pool, **args)
        got_best = genlab.best_of_n(model, PROMPT, 7, seed=1, max_new_tokens=5, batch_size=3,
                                    executor=pool)  # fmt: skip
    pd.testing.assert_frame_equal(got.samples, want.samples)
    pd.testing.assert_frame_equal(got.table, want.table)
    pd.testing.assert_frame_equal(got_best.samples, best.samples)


def test_coverage_curve_figures_follow_from_the_samples(lm):
    checks = [(PROMPT, lambda t: first_id(t) in ("7", "20", "50", "81")),
              (torch.tensor([[1, 9, 9]]), lambda t: len(t) > 14),
              (torch.tensor([[1, 4]]), lambda t: False)]  # fmt: skip
    cov = genlab.coverage_curve(lm, checks, ns=(1, 2, 8), seed=0, max_new_tokens=5,
                                extract=first_id, votes=50, bootstrap=200)  # fmt: skip
    t = cov.table
    assert cov.n == 8 and set(t.curve) == set(compute.CURVES) and len(t) == 9
    per = cov.samples.groupby("task").correct
    shares = per.mean()
    assert cov.value("pass@N", 1) == pytest.approx(shares.mean())
    assert cov.value("best-of-N", 1) == pytest.approx(shares.mean())
    assert cov.value("pass@N", 8) == pytest.approx(per.any().mean())
    # at N = n, best-of-N is the best-scored sample, the vote the full majority
    best = cov.samples.loc[cov.samples.groupby("task").score.idxmax()]
    assert cov.value("best-of-N", 8) == pytest.approx(best.correct.mean())
    values = t[t.curve == "pass@N"].value.tolist()
    assert values == sorted(values)
    assert ((t.low <= t.value + 1e-12) & (t.value <= t.high + 1e-12)).all()
    assert list(cov.tasks.correct) == per.sum().tolist()
    assert cov.tasks.correct.iloc[2] == 0 and cov.value("pass@N", 8) < 1
    assert "greedy_correct" in cov.tasks
    means = cov.per_task.groupby(["N", "curve"]).value.mean()
    for row in t.itertuples():
        assert means[(row.N, row.curve)] == pytest.approx(row.value)


def test_a_second_lm_as_the_score(lm):
    other = genlab.LM(tiny_llama(1, eos_token_id=3))
    calls = []

    def reward(text):
        calls.append(text)
        return -len(text)

    res = genlab.best_of_n(lm, PROMPT, 6, score=reward, seed=0, max_new_tokens=4)
    assert len(calls) == 6 and res.chosen == int(res.samples.text.str.len().idxmin())
    with pytest.raises(ValueError, match="template: give the context"):
        compute.lm_reward(other, "")


def test_bad_input_names_the_argument(lm):
    cases = [
        (dict(n=0), "n=0: give how many samples to draw"),
        (dict(n=10**6), "n=1,000,000: at most 65,536 samples"),
        (dict(n=4, batch_size=10**6), "batch_size=1000000 .rows drawn at once.: .*over 64"),
        (dict(n=4, batch_size=0), "batch_size=0: give the rows of one generation"),
        (dict(n=4, score="logits"), "score='logits': give one of 'mean_logprob'"),
        (dict(n=4, verifier="yes"), "verifier='yes': give a function"),
        (dict(n=4, num_return_sequences=3), "num_return_sequences: the samples are drawn"),
        (dict(n=4, executor=object()), "executor=<object object at .*>: give a concurrent"),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            genlab.best_of_n(lm, PROMPT, max_new_tokens=3, **kwargs)
    with pytest.raises(ValueError, match="extract=None: give a function"):
        genlab.self_consistency(lm, PROMPT, 4, extract=None)
    with pytest.raises(ValueError, match="ns: N=8 is more than the n=4 samples"):
        genlab.coverage_curve(lm, [(PROMPT, bool)], ns=(1, 8), n=4)
    with pytest.raises(ValueError, match=r"tasks\[1\]='oops': give \(prompt, checker\) pairs"):
        genlab.coverage_curve(lm, [(PROMPT, bool), "oops"], ns=(1,))
    with pytest.raises(ValueError, match="ns=.0.: give positive integers"):
        genlab.coverage_curve(lm, [(PROMPT, bool)], ns=(0,))
    with pytest.raises(ValueError, match="executor=: the model must be loaded by name"):
        genlab.best_of_n(lm, PROMPT, 2, executor=ThreadPoolExecutor(1))


def test_capitals_checker():
    ts = tasks.capitals()
    assert 40 <= len(ts) <= 60 and len({t.prompt for t in ts}) == len(ts)
    by = {t.name: t for t in ts}
    assert by["Australia"].check(" Canberra.\n") and not by["Australia"].check(" Sydney.")
    assert by["Ukraine"].check(" Kiev.") and by["Ukraine"].check(" Kyiv")
    assert by["Ukraine"].extract(" Kiev.") == by["Ukraine"].extract(" Kyiv") == "kyiv"
    assert by["Colombia"].check(" Bogota, the") and by["Paraguay"].check(" Asuncion.")
    assert by["Argentina"].check(" Buenos Aires.") and not by["Argentina"].check(" La Paz.")
    assert by["Ghana"].extract(" the capital of Ghana") is None
    assert by["Ghana"].extract("") is None


def test_the_plot_is_legible(lm):
    cov = genlab.coverage_curve(lm, [(PROMPT, lambda t: "7" in t)], ns=(1, 2, 4), seed=0,
                                max_new_tokens=4, greedy=False)  # fmt: skip
    fig = genlab.plots.coverage_plot(cov)
    assert_legible(fig)
    assert len(fig.axes[0].lines) == 3 and fig.axes[0].get_xscale() == "log"


def test_sample_view_groups_marks_branches_and_saves(demo, tmp_path):
    from genlab.widgets import SampleView

    task = {t.name: t for t in tasks.capitals()}["Australia"]
    view = SampleView(demo, task.prompt, n=12, extract=task.extract, verifier=task.check,
                      max_new_tokens=4)  # fmt: skip
    res = view.result
    assert view.error is None and res.n == 12
    groups = view.groups_html()
    for answer, share in res.votes.items():
        count = round(share * 12)
        assert f"<b>{answer}</b> &middot; {count} of 12 votes" in groups
    assert groups.count("★") == 1 and groups.count("◆") == 1 and groups.count("✔") == 1
    assert ("✓ pass" in groups) and ("✗ fail" in groups)
    # click to branch on a sample that is not the chosen one
    view.sample_pick.value = 0
    alts = view.alternatives(0)
    assert alts and alts[0][0] != view.result.samples.token_ids.iloc[0][0]
    branch = view.branch(0, alts[0][0])
    assert branch.generated_ids[0, 0].item() == alts[0][0] and view.branches == [branch]
    page = view.save_html(tmp_path / "samples.html").read_text()
    assert "branch 1: from sample 0, token 0" in page and "<script" not in page
    # the buttons do the same: the first shown one continues with the best alternative
    shown = [b for b in view.picker.buttons if b.layout.display is None]
    shown[0].click()
    assert view.error is None and len(view.branches) == 2
    assert view.branches[1].generated_ids[0, 0].item() == alts[0][0]
    # more samples than the rows the machine holds at once: refused with the bound
    view.n_box.value = str(view.max_samples(4) + 1)
    assert not view.guard(view.draw)
    assert f"type a whole number from 1 to {view.max_samples(4)}" in view.error
    assert view.result is res


def test_lm_reward_is_the_mean_log_prob_after_the_template(demo):
    judge = compute.lm_reward(demo, "A correct answer: the capital of Australia is")
    want = demo.score(" Canberra.", context="A correct answer: the capital of Australia is")
    assert judge(" Canberra.") == pytest.approx(want.mean_logprob)
    # the template is the context: another one rates the same text otherwise (the demo
    # still prefers Sydney after "A correct answer": a reward stand-in shares its mode)
    other = compute.lm_reward(demo, "Q: Which city is the capital of Australia? A:")
    assert other(" Canberra.") != pytest.approx(judge(" Canberra."))
    assert judge("") == float("-inf")


@pytest.fixture(scope="module")
def native():
    """The tiny model as genlab's own decoder (a KVCache: what a prefill can fill)."""
    from genlab.models.architectures import build_decoder

    hf = tiny_llama(0, eos_token_id=3)
    return genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict()))


def test_each_prompt_is_prefilled_once_in_one_row(native, monkeypatch):
    """coverage_curve computes each task's prompt (but its last token) once, in one row; every
    pass of a batch of samples then takes one token a row."""
    passes = []
    model_class = type(native.model)
    forward = model_class.forward

    def counting(self, input_ids, **kwargs):
        passes.append(tuple(input_ids.shape))
        return forward(self, input_ids, **kwargs)

    monkeypatch.setattr(model_class, "forward", counting)  # the class: the model stays plain
    two = [(PROMPT, lambda text: True), (torch.tensor([[2, 9, 4, 7, 8]]), lambda text: True)]
    cov = genlab.coverage_curve(native, two, ns=(1, 4), n=12, batch_size=4, max_new_tokens=3,
                                seed=0, greedy=False, bootstrap=10, votes=5)  # fmt: skip
    assert len(cov.samples) == 24
    prefills = [shape for shape in passes if shape[0] == 1]
    assert prefills == [(1, 3), (1, 4)]  # one per task, the prompt less its last token
    batch_passes = [shape for shape in passes if shape[0] > 1]
    assert batch_passes and all(shape == (4, 1) for shape in batch_passes)
    assert len(batch_passes) <= 2 * 3 * 3  # 2 tasks x 3 batches x at most 3 new tokens


def test_a_batch_from_the_prefill_draws_what_a_whole_batch_draws(native):
    """The prefilled prompt changes the order of the prompt's sums, not the draws: the same
    seeded tokens as the plain run of the same rows (the tiny model's margins are wide)."""
    res = genlab.best_of_n(native, PROMPT, 8, seed=4, max_new_tokens=6, batch_size=8)
    plain = native.generate(PROMPT, seed=4, num_return_sequences=8, do_sample=True,
                        max_new_tokens=6)  # fmt: skip
    got = [list(t) for t in res.samples.token_ids]
    assert got == [row[: len(g)] for row, g in zip(plain.generated_ids.tolist(), got,
                                                   strict=True)]  # fmt: skip
