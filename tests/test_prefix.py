"""Prompt reuse: a re-run computes only the prompt tokens it does not share with an
earlier run, and gives what a run from scratch gives."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.models.architectures import build_decoder
from genlab.prefix import PrefixCache

PROMPT = torch.tensor([[1, 5, 17, 33, 8, 21, 40, 11, 7, 9]])


@pytest.fixture(scope="module", params=["builtin", "adapter"])
def model(request):
    hf = tiny_llama(0)
    if request.param == "adapter":
        return genlab.load(hf).model
    return build_decoder(hf.config.to_dict(), hf.state_dict())


class Counting:
    """Counts the tokens each forward call of ``model`` receives."""

    def __init__(self, model, monkeypatch):
        self.calls: list[int] = []
        real = model.forward

        def forward(input_ids, **kwargs):
            self.calls.append(int(input_ids.shape[1]))
            return real(input_ids, **kwargs)

        monkeypatch.setattr(model, "forward", forward)


def _generate(model, ids, pc=None, **cfg):
    cfg.setdefault("max_new_tokens", 6)
    run = genlab.start(
        model, ids, prefix_cache=pc, return_dict_in_generate=True, output_scores=True, **cfg
    )
    return run.run()


def _assert_same(a, b):
    assert torch.equal(a.sequences, b.sequences)
    for x, y in zip(a.scores, b.scores, strict=True):
        finite = torch.isfinite(x)
        assert torch.equal(finite, torch.isfinite(y))
        torch.testing.assert_close(x[finite], y[finite], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"do_sample": True, "temperature": 0.7, "seed": 3},
        {"num_beams": 3},
        {"do_sample": True, "num_return_sequences": 4, "seed": 1},
        {"penalty_alpha": 0.6, "top_k": 4},
    ],
)
def test_same_prompt_other_settings_reuses_the_prompt(model, settings, monkeypatch):
    pc = PrefixCache()
    _generate(model, PROMPT, pc)  # fills the cache (greedy)
    counting = Counting(model, monkeypatch)
    again = _generate(model, PROMPT, pc, **settings)
    monkeypatch.undo()
    scratch = _generate(model, PROMPT, **settings)
    _assert_same(again, scratch)
    assert pc.hits == 1 and pc.reused_tokens == PROMPT.shape[1] - 1
    if "penalty_alpha" not in settings:  # contrastive search re-reads the whole prompt
        assert counting.calls[0] == 1, "the re-run's first forward ran more than 1 token"


def test_an_edited_prompt_recomputes_from_its_first_change(model, monkeypatch):
    pc = PrefixCache()
    _generate(model, PROMPT, pc)
    edited = PROMPT.clone()
    edited[0, 6:] = torch.tensor([50, 60, 70, 80])
    counting = Counting(model, monkeypatch)
    out = _generate(model, edited, pc)
    monkeypatch.undo()
    assert counting.calls[0] == edited.shape[1] - 6
    assert pc.reused_tokens == 6
    _assert_same(out, _generate(model, edited))


def test_runs_never_share_their_caches(model):
    pc = PrefixCache()
    first = _generate(model, PROMPT, pc, max_new_tokens=8)
    for _ in range(3):  # later runs extend their own copies, never the stored prompt
        _assert_same(_generate(model, PROMPT, pc, max_new_tokens=8), first)
    assert pc.hits == 3 and len(pc) == 1


def test_runs_that_cannot_share_start_cold(model):
    pc = PrefixCache()
    _generate(model, PROMPT, pc)
    batch = PROMPT.repeat(2, 1)
    _generate(model, batch, pc)  # two prompts
    _generate(model, PROMPT, pc, use_cache=False)
    padded_mask = torch.ones_like(PROMPT)
    padded_mask[0, 0] = 0
    run = genlab.start(model, PROMPT, attention_mask=padded_mask, prefix_cache=pc)
    run.run()
    assert pc.hits == 0


def test_lm_reuses_its_prompts():
    lm = genlab.load(tiny_llama(0))
    a = lm.generate(PROMPT, max_new_tokens=5)
    b = lm.generate(PROMPT, max_new_tokens=5)
    assert torch.equal(a.sequences, b.sequences) and lm.prefix_cache.hits == 1


def test_progress_bar_counts_tokens(capsys):
    lm = genlab.load(tiny_llama(0))
    res = lm.generate(PROMPT, max_new_tokens=5, min_new_tokens=5, progress=True)
    err = capsys.readouterr().err
    assert res.sequences.shape[1] == PROMPT.shape[1] + 5
    assert "5/5" in err and "tok" in err


def test_a_beam_runs_prompt_is_kept_as_one_row():
    from genlab.models.table import TableLM

    lm = genlab.LM(TableLM.classic())
    lm.generate("The", num_beams=2, max_new_tokens=3)
    out = lm.generate("The", max_new_tokens=3)  # one row again, from the kept prompt
    assert out.sequences.shape[0] == 1 and lm.prefix_cache.hits == 1
