"""LensView and SweepView run on the panels' one scheduler: Stop ends a run early and the
panel keeps a good result; clicks during a run are applied in order with a visible busy
state."""

from __future__ import annotations

import time

import pandas as pd
import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.widgets.lens import LensView
from genlab.widgets.sweep import SweepView

PROMPT = torch.tensor([[1, 5, 17, 33]])


@pytest.fixture(scope="module")
def lm():
    hf = tiny_llama(0, num_hidden_layers=2)
    out = genlab.LM(hf)
    out.hf = hf
    return out


@pytest.fixture
def slow(lm):
    """Every forward of ``lm`` takes 15 ms more (a hook on the embedding) while in use."""
    handle = lm.hf.model.embed_tokens.register_forward_pre_hook(lambda *_: time.sleep(0.015))
    yield lm
    handle.remove()


def _until(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _busy(view) -> bool:
    return "genlab-busy" in view._dom_classes and not view.stop_button.disabled


def test_lens_view_stop_ends_the_generation_early_and_shows_what_it_made(lm, slow):
    view = LensView(lm, PROMPT, max_new_tokens=4, eos_token_id=None)
    first = view.lens
    assert view.error is None and len(first.steps) == 4 and not _busy(view)
    view.config["max_new_tokens"] = 240  # (the model reads 256 positions)
    view.update()
    _until(lambda: view.progress.max == 240 and view.progress.value >= 3)
    assert _busy(view) and view.progress.max == 240
    assert view.lens is first  # the last good result stays on screen while it runs
    view.stop_button.click()
    view.wait(20)
    assert not _busy(view) and view.error is None
    assert view.lens is not first and 3 <= len(view.lens.steps) < 240
    assert "stopped" in view.status.value
    assert view.step_slider.max == len(view.lens.steps) - 1


def test_lens_view_a_click_during_a_run_replaces_it_in_order(lm, slow):
    view = LensView(lm, PROMPT, max_new_tokens=3, eos_token_id=None)
    view.config["max_new_tokens"] = 240  # (the model reads 256 positions)
    view.update()
    _until(lambda: view.progress.max == 240 and view.progress.value >= 2)
    view.config["max_new_tokens"] = 5
    view.generate_button.click()  # replaces the running generation, never after it
    view.wait(20)
    assert len(view.lens.steps) == 5 and view.error is None and not _busy(view)
    assert "stopped" not in view.status.value


def test_sweep_view_stop_keeps_the_last_finished_sweep(lm, slow):
    view = SweepView(lm, PROMPT, {"temperature": [0.7]}, n=2, max_new_tokens=3)
    first, png = view.result, view.plot_png
    assert view.error is None and len(first.metrics) == 1
    view.grid_boxes["temperature"].value = "0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2"
    view.length_box.value = "20"
    view.update()
    _until(lambda: view.progress.max == 8 and view.progress.value >= 1)
    assert _busy(view) and view.progress.max == 8
    view.stop_button.click()
    view.wait(30)
    assert not _busy(view) and view.error is None
    assert 1 <= view.progress.value < 8 and "stopped after" in view.status.value
    assert view.result is first and view.plot_png == png  # the last finished sweep stays


def test_sweep_view_samples_each_setting_as_one_sweep_does(lm):
    grid = {"temperature": [0.6, 1.4], "top_p": [0.5, 1.0]}
    view = SweepView(lm, PROMPT, grid, n=3, max_new_tokens=5, seed=4)
    ref = genlab.sweep(lm, PROMPT, grid, n=3, max_new_tokens=5, seed=4)
    pd.testing.assert_frame_equal(view.result.metrics, ref.metrics)
    pd.testing.assert_frame_equal(view.result.samples, ref.samples)
    assert view.progress.value == 4 and view.result.grid == grid


def test_a_committed_change_generates_without_the_typing_pause():
    """A released slider (any control but the prompt) waits COMMIT_DELAY, not the
    debounce that lets the typing of a prompt pause."""
    from genlab.models.table import TableLM
    from genlab.widgets.playground import Playground

    pg = Playground(genlab.LM(TableLM.classic()), "The", debounce=1.5)
    assert pg.version == 1
    pg.panel.set("max_new_tokens", 1)
    _until(lambda: pg.version == 2, timeout=1.0)  # well before the 1.5 s debounce
    assert len(pg.table) == 1
    pg.prompt_box.value = "The dog"  # typing: waits for the pause
    time.sleep(0.5)
    assert pg.version == 2 and pg.busy
    pg.wait()
    assert pg.version == 3 and pg.result.text == "has"
