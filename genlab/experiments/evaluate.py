"""Evaluating sets of generated texts, with uncertainty.

Three measures of a list of generated texts, each with a percentile bootstrap interval
over the texts (Efron 1979), and the sample size a difference between two settings needs:

* ``distinct-n`` (Li, Galley, Brockett, Gao, Dolan 2016): distinct n-grams over all
  n-grams of the texts pooled, over genlab's tokens or over words (higher: more diverse);
* ``self-BLEU`` (Zhu et al. 2018, Texygen): each text's BLEU against all the others as
  references, averaged (higher: the texts repeat each other); nltk's ``sentence_bleu``
  with uniform weights up to 3-grams and smoothing method 1, as Texygen computes it;
* ``MAUVE`` (Pillutla et al. 2021): how close two sets of texts are as distributions, from
  the final-layer hidden states of the demo model (:func:`features`), quantised with
  k-means and scored by the ``mauve-text`` package's divergence frontier (1: the same
  distribution; near 0: far apart).

``evaluate(texts, lm=lm, reference=other_texts)`` returns a tidy table (metric, value,
low, high, se, n); ``compare(a, b)`` the difference of two such tables with its interval
and the samples per setting that difference needs. nltk and mauve-text are the
``genlab[eval]`` extra (``pip install 'genlab[eval]'``).

How the bootstrap resamples: every figure is a function of the texts, and each bootstrap
draw resamples the texts with replacement. For the pooled measures, a text drawn twice
would look like a copy of itself (its n-grams repeat, its BLEU against its copy is 1), so
each text's share is computed once on the whole set and the draws resample the shares:
distinct-n is the sum of per-text shares (an n-gram seen k times gives 1/k to each
occurrence) over the n-grams counted; self-BLEU is the mean of the per-text BLEU scores;
MAUVE keeps the k-means clusters of the whole set and resamples which cluster each text
fell into. The intervals therefore cover the choice of texts, not the clustering.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import pandas as pd
import torch

__all__ = [
    "words",
    "distinct_n",
    "self_bleu",
    "features",
    "mauve",
    "bootstrap",
    "evaluate",
    "compare",
    "needed_n",
]

_WORD = re.compile(r"\w+|[^\w\s]")
_EXTRA = "pip install 'genlab[eval]'"


def _need(module: str, what: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as err:
        raise ImportError(
            f"{what} needs the package {module!r}, in genlab's eval extra: {_EXTRA}"
        ) from err


def words(text: str) -> list[str]:
    """A text as words and punctuation marks (``\\w+`` runs and single other characters).

    >>> words("The sea, calm.")
    ['The', 'sea', ',', 'calm', '.']
    """
    return _WORD.findall(text)


def _check_texts(texts, name: str = "texts") -> list:
    if isinstance(texts, str) or not isinstance(texts, Sequence | pd.Series):
        raise ValueError(f"{name} must be a list of texts, not {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise ValueError(f"{name} is empty: give at least one text")
    return texts


def _check_n(n, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name}={n!r} must be an integer >= 1")
    return n


def _units(texts: list, tokenizer) -> list[list]:
    """Each text as a list of units: token ids (a text given as ids, or a string encoded by
    ``tokenizer``) or words (a string, no tokenizer)."""
    out = []
    for text in texts:
        if isinstance(text, str):
            out.append(
                words(text)
                if tokenizer is None
                else list(tokenizer.encode(text, add_special_tokens=False))
            )
        else:
            out.append([int(t) for t in text])
    return out


def _grams(units: list, n: int) -> list[tuple]:
    return [tuple(units[i : i + n]) for i in range(len(units) - n + 1)]


def _distinct_shares(units: list[list], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per text: its share of the distinct n-grams (each occurrence of an n-gram seen k
    times in all texts counts 1/k) and its number of n-grams. The shares add up to the
    number of distinct n-grams."""
    grams = [_grams(u, n) for u in units]
    counts = Counter(g for gs in grams for g in gs)
    shares = np.array([sum(1 / counts[g] for g in gs) for gs in grams], dtype=float)
    totals = np.array([len(gs) for gs in grams], dtype=float)
    return shares, totals


def distinct_n(texts, n: int = 2, *, tokenizer=None) -> float:
    """Distinct n-grams over all n-grams of ``texts`` pooled (Li et al. 2016).

    texts: strings (split into :func:`words`, or into tokens by ``tokenizer``, e.g.
    ``lm.tokenizer``) or lists of token ids. 0 when the texts hold no n-gram.

    >>> distinct_n(["a b a b", "a b c"], 2)  # bigrams ab ba ab | ab bc: 3 distinct of 5
    0.6
    """
    texts = _check_texts(texts)
    n = _check_n(n)
    shares, totals = _distinct_shares(_units(texts, tokenizer), n)
    return float(shares.sum() / totals.sum()) if totals.sum() else 0.0


def _bleu_each(texts: list, max_n: int) -> np.ndarray:
    """Each text's BLEU against all the other texts as references (Texygen's self-BLEU)."""
    bleu = _need("nltk.translate.bleu_score", "self-BLEU")
    if len(texts) < 2:
        raise ValueError(f"texts has {len(texts)} text: self-BLEU needs at least 2")
    tokens = [words(t) if isinstance(t, str) else [str(x) for x in t] for t in texts]
    weights = tuple(1 / max_n for _ in range(max_n))
    smooth = bleu.SmoothingFunction().method1
    return np.array(
        [
            bleu.sentence_bleu(
                tokens[:i] + tokens[i + 1 :], hyp, weights, smoothing_function=smooth
            )
            for i, hyp in enumerate(tokens)
        ],
        dtype=float,
    )


def self_bleu(texts, max_n: int = 3) -> float:
    """Self-BLEU (Zhu et al. 2018): the mean over texts of each text's BLEU (uniform
    weights up to ``max_n``-grams, nltk's smoothing method 1) against all the others.

    Higher: the texts share more phrases (less diverse). texts: strings (split into
    :func:`words`) or lists of tokens; at least 2.

    >>> round(self_bleu(["the cat sat", "the cat ran", "a dog ran"], max_n=2), 4)
    0.4712
    """
    texts = _check_texts(texts)
    max_n = _check_n(max_n, "max_n")
    return float(_bleu_each(texts, max_n).mean())


def features(
    lm, texts, *, context=None, chat: bool = False, pool: str = "mean", batch: int = 16
) -> np.ndarray:
    """The demo model's final-layer hidden states of each text: an array (texts, hidden).

    Each text is run after ``context`` (a prompt, encoded as ``lm.encode(context,
    chat=chat)`` does; None: the text alone), and its positions' hidden states after the
    final norm are averaged (``pool="mean"``) or the last one kept (``pool="last"``, the
    choice of Pillutla et al. 2021 with GPT-2). An empty text after a context gets the
    context's last state; an empty text without one is an error. ``batch`` texts run in
    one forward pass.
    """
    from ..inside.lens import teacher_forced

    texts = _check_texts(texts)
    if pool not in ("mean", "last"):
        raise ValueError(f"pool={pool!r} must be 'mean' or 'last'")
    batch = _check_n(batch, "batch")
    prefix = [] if context is None else lm.encode(context, chat=chat)[0][0].tolist()
    seqs = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"texts[{i}] is a {type(text).__name__}, not a string")
        seqs.append(list(lm.tokenizer.encode(text, add_special_tokens=False)))
        if not seqs[-1] and not prefix:
            raise ValueError(f"texts[{i}] is empty and there is no context to stand for it")
    rows = []
    for start in range(0, len(seqs), batch):
        chunk = seqs[start : start + batch]
        width = len(prefix) + max(len(s) for s in chunk)
        # padded on the right: a causal model's states at a position never see what follows
        ids = torch.tensor([prefix + s + [0] * (width - len(prefix) - len(s)) for s in chunk])
        states = teacher_forced(lm.model, ids, hidden_states=True).hidden_states[-1].float()
        for row, s in zip(states, chunk, strict=True):
            end = len(prefix) + len(s)
            own = row[len(prefix) : end] if s else row[end - 1 : end]
            rows.append((own.mean(0) if pool == "mean" else own[-1]).numpy())
    return np.stack(rows)


def _clusters(p: np.ndarray, q: np.ndarray, buckets: int, seed: int):
    """Cluster labels of p's and q's rows, as mauve-text's ``compute_mauve`` quantises them
    (l2-normalised, PCA to 90 % of the variance, faiss k-means, its seeds)."""
    cm = _need("mauve.compute_mauve", "MAUVE")
    faiss = _need("faiss", "MAUVE")
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import normalize

    data = normalize(np.vstack([q, p]), norm="l2", axis=1)
    pca = PCA(n_components=None, whiten=False, random_state=seed + 1).fit(data)
    keep = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= 0.9)) + 1
    data = pca.transform(data)[:, :keep].astype(np.float32)
    # min_points_per_centroid=1: faiss prints a warning to the process's stderr below 39
    # points per cluster (a notebook shows it); the clustering itself is the same
    kmeans = faiss.Kmeans(
        data.shape[1], buckets, niter=500, verbose=False, nredo=5, update_index=True,
        seed=seed + 2, min_points_per_centroid=1,
    )  # fmt: skip
    kmeans.train(data)
    labels = kmeans.index.search(data, 1)[1].reshape(-1)
    return labels[len(q) :], labels[: len(q)], cm


def _mauve_of_labels(p_labels, q_labels, buckets: int, cm) -> float:
    p = np.bincount(p_labels, minlength=buckets) / len(p_labels)
    q = np.bincount(q_labels, minlength=buckets) / len(q_labels)
    weights = np.linspace(1e-6, 1 - 1e-6, 25)
    x, y = cm.get_divergence_curve_for_multinomials(p, q, weights, 5).T
    i, j = np.argsort(x), np.argsort(y)
    return float(
        0.5 * (cm.compute_area_under_curve(x[i], y[i]) + cm.compute_area_under_curve(y[j], x[j]))
    )


def _buckets(p, q, num_buckets) -> int:
    if num_buckets == "auto":  # mauve-text's rule: a tenth of the smaller set
        return max(2, int(round(min(len(p), len(q)) / 10)))
    return _check_n(num_buckets, "num_buckets")


def _check_features(p, q):
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    for name, x in (("p_features", p), ("q_features", q)):
        if x.ndim != 2 or len(x) < 2:
            raise ValueError(f"{name} must be an array (texts, hidden) of 2 texts or more")
    if p.shape[1] != q.shape[1]:
        raise ValueError(
            f"p_features has {p.shape[1]} columns and q_features {q.shape[1]}: the features "
            "of both sets must come from the same model"
        )
    return p, q


def mauve(p_features, q_features, *, num_buckets="auto", seed: int = 25) -> float:
    """MAUVE (Pillutla et al. 2021) between two sets of texts given as feature rows (e.g.
    :func:`features`): the value ``mauve.compute_mauve(p_features=..., q_features=...)``
    returns with the same ``num_buckets`` and ``seed`` (k-means clusters: a tenth of the
    smaller set by default)."""
    p, q = _check_features(p_features, q_features)
    buckets = _buckets(p, q, num_buckets)
    p_labels, q_labels, cm = _clusters(p, q, buckets, seed)
    return _mauve_of_labels(p_labels, q_labels, buckets, cm)


def _check_boot(n_boot, level) -> None:
    _check_n(n_boot, "n_boot")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must be between 0 and 1 (0.95: a 95 % interval)")


def bootstrap(statistic, sizes, *, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """``n_boot`` values of ``statistic(*indices)``, each with one array of indices drawn
    with replacement per size in ``sizes`` (one set of texts: ``(n,)``; two: ``(n, m)``),
    from ``numpy.random.default_rng(seed)``: the same seed gives the same draws."""
    _check_boot(n_boot, 0.5)
    sizes = [_check_n(s, "sizes") for s in sizes]
    rng = np.random.default_rng(seed)
    return np.array(
        [statistic(*(rng.integers(0, s, s) for s in sizes)) for _ in range(n_boot)],
        dtype=float,
    )


def _row(metric, value, draws, level, n) -> dict:
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return {
        "metric": metric,
        "value": value,
        "low": float(low),
        "high": float(high),
        "se": float(draws.std(ddof=1)) if len(draws) > 1 else 0.0,
        "n": n,
    }


def evaluate(
    texts,
    *,
    lm=None,
    tokens=None,
    reference=None,
    context=None,
    chat: bool = False,
    ns: Sequence[int] = (1, 2),
    bleu_n: int = 3,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """Every measure of ``texts`` with its percentile bootstrap interval over the texts.

    Returns a DataFrame, one row per measure: metric, value (on all the texts), low and high
    (the ``level`` interval of ``n_boot`` draws seeded with ``seed``), se (the draws'
    standard deviation), n (texts). Rows: ``distinct-k words`` for k in ``ns``;
    ``distinct-k tokens`` when ``lm`` or ``tokens`` is given (``tokens``: each text's token
    ids, e.g. ``sweep.samples.tokens``; else ``lm.tokenizer`` encodes the texts);
    ``self-BLEU`` (up to ``bleu_n``-grams); ``MAUVE`` against ``reference`` when it is
    given: other texts (featured by ``lm`` after ``context``, see :func:`features`), or
    their features already computed (an array, texts x hidden). The
    draws are kept in ``table.attrs["draws"]`` for :func:`compare`.
    """
    texts = _check_texts(texts)
    ns = [_check_n(k, "ns") for k in ns]
    bleu_n = _check_n(bleu_n, "bleu_n")
    _check_boot(n_boot, level)
    if tokens is not None:
        tokens = _check_texts(tokens, "tokens")
        if len(tokens) != len(texts):
            raise ValueError(f"tokens has {len(tokens)} rows for {len(texts)} texts")
    if reference is not None and lm is None:
        raise ValueError("reference needs lm= to compute the MAUVE features")
    if isinstance(reference, np.ndarray):
        ref_features = reference
    elif reference is not None:
        ref_features = features(
            lm, _check_texts(reference, "reference"), context=context, chat=chat
        )
    n = len(texts)
    rows, draws = [], {}

    def add(metric, value, values):
        draws[metric] = values
        rows.append(_row(metric, value, values, level, n))

    def ratio(shares, totals):
        def stat(idx):
            total = totals[idx].sum()
            return shares[idx].sum() / total if total else 0.0

        return stat

    units = {"words": _units(texts, None)}
    if tokens is not None:
        units["tokens"] = _units(tokens, None)
    elif lm is not None:
        units["tokens"] = _units(texts, lm.tokenizer)
    for kind, unit in units.items():
        for k in ns:
            shares, totals = _distinct_shares(unit, k)
            value = shares.sum() / totals.sum() if totals.sum() else 0.0
            stat = ratio(shares, totals)
            add(
                f"distinct-{k} {kind}", float(value), bootstrap(stat, [n], n_boot=n_boot, seed=seed)
            )
    each = _bleu_each(texts, bleu_n)
    add(
        "self-BLEU",
        float(each.mean()),
        bootstrap(lambda i: each[i].mean(), [n], n_boot=n_boot, seed=seed),
    )
    if reference is not None:
        p = features(lm, texts, context=context, chat=chat)
        p, q = _check_features(p, ref_features)
        buckets = _buckets(p, q, "auto")
        p_labels, q_labels, cm = _clusters(p, q, buckets, 25)
        value = _mauve_of_labels(p_labels, q_labels, buckets, cm)
        values = bootstrap(
            lambda i, j: _mauve_of_labels(p_labels[i], q_labels[j], buckets, cm),
            [len(p_labels), len(q_labels)],
            n_boot=n_boot,
            seed=seed,
        )
        add("MAUVE", value, values)
    table = pd.DataFrame(rows, columns=["metric", "value", "low", "high", "se", "n"])
    table.attrs["draws"] = draws
    table.attrs["level"] = level
    return table


def needed_n(
    difference: float, se: float, n: int, *, level: float = 0.95, power: float = 0.8
) -> float:
    """Texts per setting for a two-sided test at ``level`` to find ``difference`` with
    probability ``power``, when the difference has standard error ``se`` with ``n`` texts
    per setting (errors shrink as 1/sqrt(n)): ``(z_level + z_power)**2 * se**2 * n /
    difference**2``, rounded up; infinite for a zero difference.

    >>> needed_n(0.1, 0.05, 20)  # 2.80**2 * 0.05**2 * 20 / 0.1**2 = 39.2
    40
    """
    _check_boot(1, level)
    if not 0 < power < 1:
        raise ValueError(f"power={power!r} must be between 0 and 1 (0.8: 80 %)")
    if not se >= 0:
        raise ValueError(f"se={se!r} must be a standard error >= 0")
    _check_n(n, "n")
    if difference == 0:
        return math.inf
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) + NormalDist().inv_cdf(power)
    return math.ceil(z**2 * se**2 * n / difference**2 - 1e-9)


def compare(a: pd.DataFrame, b: pd.DataFrame, *, power: float = 0.8) -> pd.DataFrame:
    """The difference ``a - b`` of two :func:`evaluate` tables, measure by measure.

    Returns a DataFrame: metric, a, b, difference, low and high (the percentile interval
    of the differences of the two tables' bootstrap draws, at their level), noise (True
    when that interval holds 0), needed_n (texts per setting to find this difference with
    probability ``power``: :func:`needed_n` of the draws' standard deviation) and n (texts
    in a, texts in b; their harmonic mean scales the error when they differ).

    Tables made with the same ``seed`` and ``n`` resample the same positions in both: a
    paired bootstrap, right for sets drawn with shared random numbers (a sweep's settings
    all use one seed) and harmless for independent sets.
    """
    for name, table in (("a", a), ("b", b)):
        if not isinstance(table, pd.DataFrame) or "draws" not in table.attrs:
            raise ValueError(
                f"{name} must be a table that genlab.experiments.evaluate.evaluate returned"
            )
    level = a.attrs["level"]
    if b.attrs["level"] != level:
        raise ValueError(f"a and b have different levels: {level} and {b.attrs['level']}")
    common = [m for m in a.metric if m in set(b.metric)]
    if not common:
        raise ValueError("a and b share no metric")
    tail = (1 - level) / 2
    rows = []
    for metric in common:
        ra, rb = a[a.metric == metric].iloc[0], b[b.metric == metric].iloc[0]
        da, db = a.attrs["draws"][metric], b.attrs["draws"][metric]
        if len(da) != len(db):
            raise ValueError(f"{metric}: a has {len(da)} draws and b {len(db)}: use one n_boot")
        low, high = np.quantile(da - db, [tail, 1 - tail])
        diff = float(ra.value - rb.value)
        rows.append(
            {
                "metric": metric,
                "a": float(ra.value),
                "b": float(rb.value),
                "difference": diff,
                "low": float(low),
                "high": float(high),
                "noise": bool(low <= 0 <= high),
                "needed_n": needed_n(
                    diff,
                    float((da - db).std(ddof=1)),
                    round(2 / (1 / ra.n + 1 / rb.n)),
                    level=level,
                    power=power,
                ),  # fmt: skip
                "n": f"{int(ra.n)}, {int(rb.n)}",
            }
        )
    return pd.DataFrame(rows)
