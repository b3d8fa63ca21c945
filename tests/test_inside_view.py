"""InsideView (genlab/widgets/inside.py): steering at a layer with a strength slider and
the attribution heatmap of the generated text; Stop, the static view, bad input."""

from __future__ import annotations

import time

import pytest
from helpers import tiny_llama
from test_steering import word_tokenizer

import genlab
from genlab.models.architectures import build_decoder
from genlab.widgets import InsideView


@pytest.fixture(scope="module")
def lm():
    hf = tiny_llama(num_hidden_layers=3)
    return genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict()), word_tokenizer())


def _view(lm, **kw):
    kw.setdefault("max_new_tokens", 6)
    kw.setdefault("layer", 1)
    return InsideView(
        lm, "the cat", positive="good day | happy dog", negative="bad day | sad dog",
        debounce=0.0, **kw,
    )  # fmt: skip


def test_strength_slider_steers_and_the_heatmap_follows(lm):
    view = _view(lm)
    assert view.error is None, view.error
    plain = view.text
    assert (
        view.vector.shape == (32,) and view.heatmap_png and "strongest source" in view.sources.value
    )
    want = genlab.steering_vector(lm, ["good day", "happy dog"], ["bad day", "sad dog"], layer=1)
    assert float((view.vector - want).abs().max()) == 0.0
    view.auto_box.value = False
    view.strength_slider.value = 1.0
    view.update(sync=True)
    assert view.error is None and view.text != plain  # the vector changed the text
    run = lm.start("the cat", max_new_tokens=6)
    with run.hooks({"blocks.1.hook_resid_post": genlab.steer(want, 1.0)}):
        run.run()
    assert view.text == run.result().text  # the same as the hook by hand
    assert set(view.attribution.table.step) == set(range(6))
    html = view.static_html()
    assert 'class="genlab-static"' in html and "data:image/png" in html
    assert not lm.model.has_active_hooks()  # the hook left with the generation


def test_stop_keeps_what_was_made():
    hf = tiny_llama(num_hidden_layers=3)
    model = build_decoder(hf.config.to_dict(), hf.state_dict())
    fast = model.forward

    def slow(*args, **kwargs):  # a step of a real model's length
        time.sleep(0.02)
        return fast(*args, **kwargs)

    model.forward = slow
    lm = genlab.LM(model, word_tokenizer())
    view = _view(lm, eos_token_id=None)
    view.auto_box.value = False
    view.config["max_new_tokens"] = 200
    view.update()
    end = time.monotonic() + 20
    while not (view.progress.max == 200 and view.progress.value >= 3) and time.monotonic() < end:
        time.sleep(0.01)
    view.stop_button.click()
    view.wait(30)
    assert view.error is None and "stopped" in view.status.value
    assert 3 <= len(set(view.attribution.table.step)) < 200


def test_bad_input_is_refused_or_shown(lm):
    with pytest.raises(ValueError, match="3 layers"):
        _view(lm, layer=7)
    with pytest.raises(ValueError, match="point="):
        InsideView(lm, "the cat", point="hook_embed")
    view = _view(lm)
    view.auto_box.value = False
    view.negative_box.value = "bad day"  # one negative for two positives
    before = view.result
    view.update(sync=True)
    assert view.error and "in pairs" in view.error
    assert view.result is before and view.attribution is not None  # the last result stays
