"""Facts the course notebooks teach, checked against the library (issue 20).

Each test pins one sentence of a lesson: if the library changes, the lesson must change
with it. The notebook-level checks (every lesson opens with what it teaches, has at least
two hidden-answer exercises and a summary; the README's course map lists every lesson)
read the committed files and execute nothing.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

import genlab
from genlab.processors.build import build_processors
from genlab.processors.warpers import EpsilonLogitsWarper, EtaLogitsWarper
from genlab.strategies.dola import relative_top_filter
from genlab.tokens import token_text

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
# the course's lessons held to the lesson format below (00, 10 and 11 are written
# separately and only listed in the course map)
COURSE = [
    "01_quickstart",
    "01b_why_decoding_matters",
    "02_decoding_strategies",
    "02b_temperature_and_truncation",
    "03_processor_waterfall",
    "03b_stopping_and_batching",
    "04_beam_search",
    "05_watermarking",
    "06_assisted_decoding",
    "07_contrastive_search",
    "07b_guidance",
    "07c_dola",
    "08_appendix_widget_tour",
    "09_hooks_and_interventions",
]
LESSONS = [ROOT / "notebooks" / f"{name}.ipynb" for name in COURSE]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _src(cell: dict) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


def _prose(path: Path) -> str:
    return "\n".join(_src(c) for c in _cells(path) if c["cell_type"] == "markdown")


def _notebook(prefix: str) -> Path:
    found = sorted((ROOT / "notebooks").glob(f"{prefix}*.ipynb"))
    assert found, f"no notebook notebooks/{prefix}*.ipynb"
    return found[0]


# -- 09: a custom logits_processor runs before the warpers and the watermark -------------


class _Mine:
    def __call__(self, input_ids, scores):
        return scores


def test_custom_processor_runs_before_temperature_topk_topp_and_watermark():
    config = genlab.GenerationConfig(
        do_sample=True,
        temperature=0.7,
        top_k=5,
        top_p=0.9,
        repetition_penalty=1.2,
        watermarking_config=genlab.WatermarkingConfig(),
        max_length=20,
    )
    procs = build_processors(
        config, input_ids_seq_length=3, logits_processor=[_Mine()], vocab_size=100
    )
    names = [type(p).__name__ for p in procs]
    mine = names.index("_Mine")
    assert names.index("RepetitionPenaltyLogitsProcessor") < mine
    for later in ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"):
        assert mine < names.index(later), names
    assert mine < names.index("WatermarkLogitsProcessor"), names
    prose = _prose(_notebook("09_"))
    flat = " ".join(prose.split())
    assert "runs after the built-in processors" not in flat
    assert "before temperature" in prose


# -- 02: eta equals epsilon unless the entropy is above ln(1 / sqrt(epsilon)) ------------


def _eta_kept(probs: torch.Tensor, eps: float) -> torch.Tensor:
    scores = probs.log()[None]
    return torch.isfinite(EtaLogitsWarper(eps)(None, scores))[0]


def _eps_kept(probs: torch.Tensor, eps: float) -> torch.Tensor:
    scores = probs.log()[None]
    return torch.isfinite(EpsilonLogitsWarper(eps)(None, scores))[0]


def test_eta_equals_epsilon_below_the_entropy_bound_and_is_laxer_above():
    eps = 3e-4
    bound = math.log(1 / math.sqrt(eps))  # 4.06 nats
    assert 4.0 < bound < 4.1
    # peaked distribution (entropy well below 4 nats): both keep the same tokens
    peaked = torch.softmax(torch.linspace(12, 0, 200), -1)
    assert float(-(peaked * peaked.log()).sum()) < bound
    assert torch.equal(_eta_kept(peaked, eps), _eps_kept(peaked, eps))
    # a flat tail (entropy above the bound): eta's cutoff is lower, it keeps more
    flat = torch.softmax(torch.cat([torch.tensor([3.0]), torch.zeros(4000)]), -1)
    assert float(-(flat * flat.log()).sum()) > bound
    assert int(_eta_kept(flat, eps).sum()) > int(_eps_kept(flat, eps).sum())


# -- 07: DoLa's relative_top keeps the tokens with p >= 0.1 * p_max ------------------------


def test_dola_relative_top_keeps_tokens_with_at_least_a_tenth_of_the_top_probability():
    probs = torch.tensor([[0.5, 0.06, 0.049, 0.3, 0.091]])
    probs = probs / probs.sum()
    final, _ = relative_top_filter(probs.log(), probs.log(), 0.1)
    kept = torch.isfinite(final)[0]
    assert kept.tolist() == (probs[0] >= 0.1 * probs[0].max()).tolist()
    prose = _prose(_notebook("07c_"))
    assert "0.1 · p_max" in prose or "0.1 × p_max" in prose
    assert "tokens within 10 % of the most likely" not in prose


def test_07_names_the_transformers_release_that_moved_contrastive_and_dola():
    prose = "\n".join(_prose(_notebook(p)) for p in ("07_", "07b_", "07c_"))
    assert "the last version that runs them locally" not in prose
    assert "4.56" in prose and "custom_generate" in prose
    assert "8,848.86" in _prose(_notebook("07c_"))
    assert "last prompt token" in _prose(_notebook("07b_"))
    assert "negative (or empty)" not in prose


def test_06_says_prompt_lookup_falls_back_to_shorter_ngrams():
    assert "shorter" in _prose(_notebook("06_"))


def test_08_does_not_claim_the_z_score_separates_unless_it_passes_4():
    prose = _prose(_notebook("08_"))
    assert "z-score separates them" not in prose


# -- 04: what the diverse-beam tree marks `diversity` -----------------------------------


def test_diversity_marks_only_candidates_pushed_out_of_the_candidate_list(demo):
    res = demo.generate(
        "What is the capital of France?",
        chat=True,
        num_beams=4,
        num_beam_groups=2,
        diversity_penalty=1.0,
        max_new_tokens=1,
        trace=True,
    )
    tree = res.trace.beam_tree()
    g1 = tree[(tree.step == 0) & (tree.group == 1)]
    # by decoded text, so that the test holds whatever the table's display of tokens
    texts = g1.token_id.map(lambda i: token_text(demo.tokenizer, i).strip())
    fates = dict(zip(texts, g1.fate, strict=True))
    # group 1 would have kept "The" and "L" without the penalty (the two best tokens);
    # with it, "L" falls out of the 4 candidates (marked `diversity`) while "The" stays
    # a candidate and is ranked out (`pruned`): the lesson states exactly this
    assert fates["L"] == "diversity"
    assert fates["The"] == "pruned"
    cands = g1[g1.fate != "diversity"]
    for token_id in g1[g1.fate == "diversity"].token_id:
        assert token_id not in set(cands.token_id)
    prose = _prose(_notebook("04_"))
    assert "would have kept without the penalty are\nmarked" not in prose
    assert "`rejected`" in prose


# -- every lesson: intro, exercises with hidden answers, summary; the course map ----------


def _hidden(cell: dict) -> bool:
    meta = cell.get("metadata", {})
    return bool(meta.get("jupyter", {}).get("source_hidden")) or bool(meta.get("collapsed"))


@pytest.mark.parametrize("path", LESSONS, ids=[p.name for p in LESSONS])
def test_lesson_has_goals_runtime_exercises_and_summary(path):
    cells = _cells(path)
    first = _src(cells[0])
    assert "You will learn" in first, f"{path.name}: the first cell must say what it teaches"
    assert re.search(r"[Rr]uns in\s+about\s+\d+\s+s", first), f"{path.name}: say how long it runs"
    exercises = [c for c in cells if c["cell_type"] == "markdown" and "Exercise" in _src(c)]
    exercises = [c for c in exercises if _src(c).lstrip().startswith("### Exercise")]
    answers = [c for c in cells if _hidden(c)]
    assert len(exercises) >= 2, f"{path.name}: {len(exercises)} exercises"
    assert len(answers) >= len(exercises), f"{path.name}: answers must be hidden"
    assert any(_src(c).lstrip().startswith("## Summary") for c in cells), path.name


@pytest.mark.parametrize("path", LESSONS, ids=[p.name for p in LESSONS])
def test_no_tokenizer_pieces_are_shown(path):
    for cell in _cells(path):
        texts = [_src(cell)] if cell["cell_type"] == "markdown" else []
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            texts.append("".join(out.get("data", {}).get("text/plain", "")))
        for text in texts:
            assert "Ġ" not in text, f"{path.name}: a raw tokenizer piece is shown: {text[:200]}"


def test_course_map_lists_every_lesson_in_order():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    course = readme[readme.index("## Course map") :]
    names = COURSE + ["10_inside_the_model", "11_sampling_sweeps"]
    for name in names:
        assert name in course, f"the course map does not list {name}"
    # lessons in file order, then the separately written 10 and 11, the appendix last
    in_order = [n for n in COURSE if not n.startswith("08_")] + names[-2:]
    in_order.append("08_appendix_widget_tour")
    where = [course.index(f"`{name}`") for name in in_order]
    assert where == sorted(where), "the course map lists the lessons out of order"
    assert "How to generate text" in course and "Text generation strategies" in course


def test_the_hook_lesson_is_in_09_not_03():
    assert "Steering with a hook" not in _prose(_notebook("03_"))
    assert "NoDigits" in "".join(_src(c) for c in _cells(_notebook("09_")))
