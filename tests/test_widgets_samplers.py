"""The samplers beyond the reference (DRY, XTC, mirostat ...) as named fields of the
ConfigPanel and the Playground: off by default, set like every other field, and bad input
refused next to its field, naming it, while the panel keeps its last good value and the
Playground its last good result."""

from __future__ import annotations

import re

import pytest

from genlab.config import GenerationConfig
from genlab.config.sampler_fields import SAMPLER_FIELDS
from genlab.widgets.config_panel import ConfigPanel
from genlab.widgets.playground import Playground

LOOP = "one two three four. one two three four. one two three four. one two"


def _type(panel: ConfigPanel, name: str, text: str) -> None:
    """Type ``text`` into the field's box, as a person would (ticking it on first)."""
    control = panel.controls[name]
    enabled = getattr(control, "enabled", None)
    if enabled is not None and not enabled.value:
        enabled.value = True
    getattr(control, "text", control.input).value = text


def test_the_panel_shows_every_sampler_field_off_by_default():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    assert panel.groups["samplers"] == list(SAMPLER_FIELDS)
    assert list(panel.groups).index("samplers") == list(panel.groups).index("logits") + 1
    panel.open_group("samplers")
    for name, spec in SAMPLER_FIELDS.items():
        assert panel.controls[name].read() == spec.default, name
    assert not set(SAMPLER_FIELDS) & set(vars(panel.config))  # nothing set: all off
    assert "dry_multiplier" not in panel.static_html()


TYPED = {
    "dry_multiplier": ("0.8", 0.8),
    "dry_allowed_length": ("3", 3),
    "dry_sequence_breakers": ("\\n\n.", ["\n", "."]),
    "xtc_probability": ("0.5", 0.5),
    "xtc_threshold": ("0.2", 0.2),
    "mirostat_tau": ("3", 3.0),
    "top_n_sigma": ("1.5", 1.5),
    "dynatemp_low": ("0.5", 0.5),
    "smoothing_factor": ("0.3", 0.3),
    "sampler_order": (
        '["dry", "top_n_sigma", "dynatemp", "smoothing", "top_k", "xtc"]',
        ["dry", "top_n_sigma", "dynatemp", "smoothing", "top_k", "xtc"],
    ),
}


def test_sampler_fields_are_set_from_their_controls_as_typed():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8, do_sample=True))
    for name, (text, _) in TYPED.items():
        _type(panel, name, text)
    assert panel.errors == {}
    assert {name: getattr(panel.config, name) for name in TYPED} == {
        name: value for name, (_, value) in TYPED.items()
    }
    assert "dry_multiplier" in panel.static_html()
    # a preset turns the samplers off again, like the other logits settings
    panel.apply_preset("nucleus")
    assert not set(SAMPLER_FIELDS) & set(vars(panel.config))
    assert panel.controls["xtc_probability"].read() == 0.0


BAD = [
    ("xtc_probability", "1.5", "`xtc_probability` must be a number in \\[0, 1\\]"),
    ("mirostat_tau", "0", "`mirostat_tau` must be a number > 0"),
    ("mirostat_tau", "-2", "`mirostat_tau` must be a number > 0"),
    ("sampler_order", '["top_k", "warmth"]', "`sampler_order`.*'warmth' is not one of them"),
    ("sampler_order", '["top_k", "top_k"]', "`sampler_order`.*Twice"),
    ("dry_base", "0.5", "`dry_base`"),
    ("xtc_threshold", "0.7", "`xtc_threshold`"),
]


@pytest.mark.parametrize(("name", "text", "match"), BAD, ids=[f"{n}={t}" for n, t, _ in BAD])
def test_bad_sampler_input_is_refused_naming_the_field_and_the_last_good_value_stays(
    name, text, match
):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8, do_sample=True))
    good = {"xtc_probability": "0.5", "mirostat_tau": "3", "sampler_order": '["top_k", "xtc"]'}
    _type(panel, "xtc_probability", "0.5")
    if name in good:
        _type(panel, name, good[name])
    before = dict(vars(panel.config))
    _type(panel, name, text)
    assert re.search(match, panel.errors[name]), panel.errors[name]
    assert dict(vars(panel.config)) == before  # the config keeps its last good value


def test_an_order_that_cannot_work_is_refused_next_to_the_field():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8, do_sample=True))
    assert panel.set("mirostat_mode", 2)
    assert not panel.set("sampler_order", ["mirostat", "top_k"])
    assert "mirostat" in panel.errors["sampler_order"] and "last" in panel.errors["sampler_order"]
    assert not panel.set("sampler_order", ["top_k"])  # leaves out mirostat, which is on
    assert "leaves out ['mirostat']" in panel.errors["sampler_order"]
    assert not hasattr(panel.config, "sampler_order")
    assert panel.set("sampler_order", ["top_k", "mirostat"]) and panel.errors == {}


@pytest.mark.slow
def test_the_playground_runs_the_samplers_and_keeps_its_result_on_bad_input(demo):
    pg = Playground(demo, LOOP, max_new_tokens=6, do_sample=True, seed=0, debounce=0.01)
    plain, first = pg.result.text, pg.version
    assert pg.panel.set("dry_multiplier", 2.0) and pg.panel.set("xtc_probability", 1.0)
    pg.wait()
    assert pg.error is None and pg.version > first
    stages = pg.result.trace.stages()
    assert {"dry", "xtc"} <= set(stages)
    assert pg.result.text != plain
    good, version = pg.result, pg.version
    for name, text in [
        ("dry_sequence_breakers", "\u2603"),  # the demo's tokens hold no snowman
        ("xtc_probability", "1.5"),
        ("mirostat_tau", "0"),
        ("sampler_order", '["dry", "heat"]'),
    ]:
        _type(pg.panel, name, text)
        pg.wait()
        assert f"`{name}`" in pg.panel.errors[name]
        assert pg.result is good and pg.version == version  # the last good result stays
    assert "tokenizes to nothing" in pg.panel.errors["dry_sequence_breakers"]
