"""genlab.experiments.evaluate: distinct-n, self-BLEU and MAUVE against hand computations, the
bootstrap's intervals and seeds, the sample size a difference needs, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from genlab.experiments import evaluate as ev

# the eval extra (genlab[eval]: mauve-text, nltk); the runtime-only venv of make wheel-check
# has neither
mauve = pytest.importorskip("mauve")
pytest.importorskip("nltk")

CATS = ["the cat sat", "the cat ran", "a dog ran"]


def test_distinct_n_over_words_is_distinct_ngrams_over_all_ngrams():
    texts = ["a b a b", "a b c"]
    # bigrams: ab ba ab | ab bc -> {ab, ba, bc}: 3 of 5; unigrams: {a, b, c}: 3 of 7
    assert ev.distinct_n(texts, 2) == pytest.approx(3 / 5)
    assert ev.distinct_n(texts, 1) == pytest.approx(3 / 7)
    # trigrams: aba bab | abc -> 3 of 3
    assert ev.distinct_n(texts, 3) == pytest.approx(1.0)
    assert ev.distinct_n(["a"], 2) == 0.0  # no bigram at all
    # punctuation is a word of its own
    assert ev.words("sea, sky.") == ["sea", ",", "sky", "."]
    assert ev.distinct_n(["sea, sea, sea"], 1) == pytest.approx(2 / 5)


def test_distinct_n_over_token_ids_and_over_a_tokenizer():
    assert ev.distinct_n([[1, 2, 1, 2], [1, 2, 3]], 2) == pytest.approx(3 / 5)

    class Letters:
        def encode(self, text, add_special_tokens=False):
            assert add_special_tokens is False
            return [ord(c) for c in text]

    # "abab" "abc" as letters: bigrams ab ba ab | ab bc -> 3 of 5
    assert ev.distinct_n(["abab", "abc"], 2, tokenizer=Letters()) == pytest.approx(3 / 5)


def test_self_bleu_matches_the_hand_computation():
    # each text against the two others, unigram and bigram precision, brevity penalty 1
    # "the cat sat": p1 = 2/3, p2 = 1/2            -> sqrt(1/3)
    # "the cat ran": p1 = 3/3, p2 = 1/2            -> sqrt(1/2)
    # "a dog ran":   p1 = 1/3, p2 = 0 -> 0.1 / 2   -> sqrt(1/60)  (smoothing method 1)
    hand = (math.sqrt(1 / 3) + math.sqrt(1 / 2) + math.sqrt(1 / 60)) / 3
    assert ev.self_bleu(CATS, max_n=2) == pytest.approx(hand, abs=1e-12)
    assert ev.self_bleu(["a b c d", "a b c d"], max_n=3) == pytest.approx(1.0)


def test_mauve_is_what_mauve_text_computes_and_orders_near_and_far_sets():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(40, 16))
    near = rng.normal(size=(50, 16))
    far = rng.normal(size=(50, 16)) + 1.5
    ours = ev.mauve(p, near)
    assert ours == pytest.approx(mauve.compute_mauve(p_features=p, q_features=near).mauve)
    assert ev.mauve(p, far, num_buckets=4) == pytest.approx(
        mauve.compute_mauve(p_features=p, q_features=far, num_buckets=4).mauve
    )
    assert ev.mauve(p, far) < 0.2 < 0.6 < ours


def test_bootstrap_is_reproducible_with_a_seed_and_changes_with_another():
    values = np.arange(10.0)
    a = ev.bootstrap(lambda i: values[i].mean(), [10], n_boot=50, seed=3)
    b = ev.bootstrap(lambda i: values[i].mean(), [10], n_boot=50, seed=3)
    c = ev.bootstrap(lambda i: values[i].mean(), [10], n_boot=50, seed=4)
    assert a.shape == (50,) and np.array_equal(a, b) and not np.array_equal(a, c)
    # two sets: one index array per size
    sizes = []
    ev.bootstrap(lambda i, j: sizes.append((len(i), len(j))) or 0.0, [3, 5], n_boot=2, seed=0)
    assert sizes == [(3, 5), (3, 5)]


TEXTS = [
    "the sea is calm and blue",
    "the sea is wide and grey",
    "waves break on the rocks",
    "the sea is calm tonight",
    "a storm rolls over the water",
    "the tide goes out slowly",
    "blue water under a blue sky",
    "the sea is deep and cold",
]


def test_evaluate_gives_a_tidy_table_whose_intervals_hold_the_value():
    table = ev.evaluate(TEXTS, n_boot=200, seed=1)
    assert list(table.columns) == ["metric", "value", "low", "high", "se", "n"]
    assert list(table.metric) == ["distinct-1 words", "distinct-2 words", "self-BLEU"]
    assert (table.n == len(TEXTS)).all()
    assert ((table.low <= table.value) & (table.value <= table.high)).all(), table
    assert (table.se > 0).all() and (table.low < table.high).all()
    row = table.set_index("metric")
    assert row.loc["distinct-2 words", "value"] == pytest.approx(ev.distinct_n(TEXTS, 2))
    assert row.loc["self-BLEU", "value"] == pytest.approx(ev.self_bleu(TEXTS))
    again = ev.evaluate(TEXTS, n_boot=200, seed=1)
    pd.testing.assert_frame_equal(table, again)
    other = ev.evaluate(TEXTS, n_boot=200, seed=2)
    assert not np.array_equal(other.low, table.low) or not np.array_equal(other.high, table.high)


def test_the_distinct_bootstrap_does_not_count_a_redrawn_text_as_a_repeat():
    # eight texts with no shared word: distinct-1 is 1, and every resample's too (a naive
    # resample of whole texts would see a text drawn twice as repeated words)
    texts = [f"w{i}a w{i}b w{i}c" for i in range(8)]
    table = ev.evaluate(texts, n_boot=100, seed=0).set_index("metric")
    assert table.loc["distinct-1 words", ["value", "low", "high"]].tolist() == [1.0, 1.0, 1.0]


def test_evaluate_counts_distinct_tokens_from_the_given_token_ids():
    tokens = [[1, 2, 1, 2], [1, 2, 3]]
    table = ev.evaluate(["x y", "z w"], tokens=tokens, n_boot=20).set_index("metric")
    assert table.loc["distinct-2 tokens", "value"] == pytest.approx(3 / 5)
    assert table.loc["distinct-1 tokens", "value"] == pytest.approx(3 / 7)


def test_needed_n_is_the_normal_sample_size_formula():
    # (1.95996 + 0.84162)**2 * 0.05**2 * 20 / 0.1**2 = 39.24 -> 40
    assert ev.needed_n(0.1, 0.05, 20) == 40
    assert ev.needed_n(-0.1, 0.05, 20) == 40
    assert ev.needed_n(0.2, 0.05, 20) == 10  # half the difference: a quarter of the texts
    assert ev.needed_n(0.0, 0.05, 20) == math.inf


def test_compare_tells_a_real_difference_from_noise():
    rng = np.random.default_rng(0)
    same = [" ".join(rng.choice(list("abcdefgh"), 6)) for _ in range(30)]
    loops = ["a b a b a b"] * 15 + [" ".join(rng.choice(list("abcdefgh"), 6)) for _ in range(15)]
    a = ev.evaluate(same, n_boot=300, seed=0)
    b = ev.evaluate(loops, n_boot=300, seed=0)
    c = ev.evaluate(same[::-1], n_boot=300, seed=0)
    real = ev.compare(a, b).set_index("metric")
    assert not real.loc["distinct-2 words", "noise"]
    assert real.loc["distinct-2 words", "difference"] > 0
    # needed_n: the sample-size formula at the standard deviation of the paired draws
    draws = a.attrs["draws"]["distinct-2 words"] - b.attrs["draws"]["distinct-2 words"]
    se = float(draws.std(ddof=1))
    assert real.loc["distinct-2 words", "needed_n"] == ev.needed_n(
        real.loc["distinct-2 words", "difference"], se, 30
    )
    # the interval excludes 0 at 30 texts; 80 % power asks for more, but not ten times more
    assert 30 < real.loc["distinct-2 words", "needed_n"] < 300
    noise = ev.compare(a, c).set_index("metric")  # the same texts in another order
    assert noise.loc["distinct-2 words", "difference"] == pytest.approx(0.0, abs=1e-12)
    assert noise.loc["distinct-2 words", "noise"]
    assert list(ev.compare(a, b).columns) == [
        "metric", "a", "b", "difference", "low", "high", "noise", "needed_n", "n"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: ev.distinct_n([], 2), "texts is empty"),
        (lambda: ev.distinct_n("a text", 2), "texts must be a list"),
        (lambda: ev.distinct_n(["a b"], 0), "n=0 must be an integer >= 1"),
        (lambda: ev.self_bleu(["one text"]), "self-BLEU needs at least 2"),
        (lambda: ev.self_bleu(CATS, max_n=0), "max_n=0"),
        (lambda: ev.evaluate(CATS, n_boot=0), "n_boot=0"),
        (lambda: ev.evaluate(CATS, level=95), "level=95"),
        (lambda: ev.evaluate(CATS, tokens=[[1]]), "tokens has 1 rows for 3 texts"),
        (lambda: ev.evaluate(CATS, reference=CATS), "reference needs lm="),
        (lambda: ev.mauve(np.zeros((3, 4)), np.zeros((3, 5))), "p_features has 4 columns"),
        (lambda: ev.mauve(np.zeros(4), np.zeros((3, 4))), "p_features must be an array"),
        (lambda: ev.needed_n(0.1, -1.0, 10), "se=-1.0"),
        (lambda: ev.needed_n(0.1, 0.1, 10, power=1.5), "power=1.5"),
        (lambda: ev.compare(pd.DataFrame(), ev.evaluate(CATS, n_boot=5)), "a must be a table"),
        (
            lambda: ev.compare(ev.evaluate(CATS, n_boot=5), ev.evaluate(CATS, n_boot=6)),
            "use one n_boot",
        ),
    ],
)
def test_bad_input_gets_an_error_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_features_are_the_final_hidden_states_of_each_text(demo):
    from genlab.inside.lens import teacher_forced

    got = ev.features(demo, ["The sea is calm.", "Waves."], context="Describe the sea.")
    assert got.shape == (2, 576)  # SmolLM2-135M's hidden size
    prefix = demo.encode("Describe the sea.", chat=False)[0][0].tolist()
    ids = demo.tokenizer.encode("Waves.", add_special_tokens=False)
    out = teacher_forced(demo.model, torch.tensor(prefix + ids), hidden_states=True)
    hand = out.hidden_states[-1][0, len(prefix) :].float().mean(0).numpy()
    np.testing.assert_allclose(got[1], hand, rtol=1e-4, atol=1e-4)
    last = ev.features(demo, ["Waves."], context="Describe the sea.", pool="last")
    np.testing.assert_allclose(last[0], out.hidden_states[-1][0, -1].float().numpy(), atol=1e-4)
    with pytest.raises(ValueError, match=r"texts\[0\] is empty"):
        ev.features(demo, [""])
    with pytest.raises(ValueError, match="pool='max'"):
        ev.features(demo, ["a"], pool="max")
