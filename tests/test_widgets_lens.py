"""Issue 37, LensView: moving the layer or head slider shows that head (it snapped back
while "most focused head" was ticked), and the head chosen automatically is the first
row of the table below it (they disagreed: layer 14 head 8 against layer 12 head 6)."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.plots.inside import focused_head
from genlab.widgets.lens import LensView, focused_heads

PROMPT = torch.tensor([[1, 5, 17, 33, 8, 40]])


@pytest.fixture(scope="module")
def lm():
    return genlab.LM(tiny_llama(num_hidden_layers=3))


def test_moving_the_layer_slider_shows_that_layer_and_unticks_auto(lm):
    view = LensView(lm, PROMPT, max_new_tokens=4, eos_token_id=None)
    view.tabs.selected_index = 1
    assert view.auto_head.value and view.error is None
    auto = (view.layer_slider.value, view.head_slider.value)
    other = 1 if auto[0] != 1 else 2
    before = bytes(view.attention_png)
    view.layer_slider.value = other  # what dragging the slider does
    assert view.layer_slider.value == other  # not snapped back
    assert not view.auto_head.value and bytes(view.attention_png) != before
    view.auto_head.value = True  # ticked again: back to the most focused head
    assert (view.layer_slider.value, view.head_slider.value) == auto


def test_the_automatic_head_is_the_tables_first_row(lm):
    view = LensView(lm, PROMPT, max_new_tokens=4, eos_token_id=None)
    for step in range(4):
        view.select(step)
        table = focused_heads(view.attention)
        first = (int(table.layer.iloc[0]), int(table["head"].iloc[0]))
        assert first == focused_head(view.attention)
        assert first == (view.layer_slider.value, view.head_slider.value)
        assert list(table.focus) == sorted(table.focus, reverse=True)
