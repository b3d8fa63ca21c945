"""Widgets without a browser: build each one, set control values, check configs, results,
tables and error messages. Models are hand-written TableLMs (instant, exact numbers)."""

from __future__ import annotations

import html
import math
import re
import threading
import time

import ipywidgets as widgets
import pytest
import torch
from ipywidgets.widgets import widget as widget_registry

import genlab
from genlab import config as config_module
from genlab.config import FIELDS, FieldSpec, GenerationConfig, WatermarkingConfig
from genlab.config.sampler_fields import SAMPLER_FIELDS
from genlab.models.table import TableLM
from genlab.widgets.compare import CompareView
from genlab.widgets.config_panel import GROUP_TITLES, PRESETS, ConfigPanel, field_value
from genlab.widgets.debugger import StepDebugger
from genlab.widgets.explorers import BeamExplorer, WatermarkExplorer, generated_colours
from genlab.widgets.fields import (
    NumberControl,
    TextControl,
    WatermarkControl,
    parse_sequence_bias,
    parse_token_id_lists,
    parse_token_ids,
)
from genlab.widgets.playground import Playground
from genlab.widgets.render import prob_colour, token_spans
from genlab.widgets.worker import Worker

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(image: widgets.Image) -> bool:
    return bytes(image.value).startswith(PNG)


WORDS = "a b c d e f g h i j k l m n o p q r s t".split()


@pytest.fixture(scope="module")
def classic():
    """The textbook tree: greedy gives 'nice woman' (0.5 * 0.4), 'dog has' is likelier."""
    return genlab.LM(TableLM.classic())


@pytest.fixture(scope="module")
def uniform():
    """Every word equally likely after any prefix, EOS never: long random texts."""
    row = {w: 1 / len(WORDS) for w in WORDS}
    return genlab.LM(TableLM({"": row}, fallback=row))


class SlowModel:
    """A TableLM whose forward takes ``delay`` seconds and counts concurrent calls."""

    def __init__(self, table: TableLM, delay: float = 0.02) -> None:
        self.table, self.delay = table, delay
        self.info, self.tokenizer = table.info, table.tokenizer
        self.active = self.max_active = self.calls = 0
        self.lock = threading.Lock()

    def new_cache(self, batch_size):
        return self.table.new_cache(batch_size)

    def forward(self, *args, **kwargs):
        with self.lock:
            self.active += 1
            self.calls += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay)
            return self.table.forward(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


# ----------------------------------------------------------------------------------------
# ConfigPanel
# ----------------------------------------------------------------------------------------
def test_every_field_has_a_control_in_its_group():
    panel = ConfigPanel()
    assert set(panel.controls) == set(FIELDS) | set(SAMPLER_FIELDS)
    groups = [g for g in config_module.GROUPS if panel.groups.get(g)]
    groups.insert(groups.index("logits") + 1, "samplers")  # genlab's extras, after logits
    assert list(panel.groups) == groups
    for group, names in panel.groups.items():
        assert all((FIELDS[n].group if n in FIELDS else "samplers") == group for n in names)
    assert list(panel.accordion.titles) == [GROUP_TITLES[g] for g in panel.groups]
    page = panel.accordion.pages[list(panel.groups).index("logits")]
    assert panel.controls["top_p"].box in page.children


def _models() -> int:
    return len(widget_registry._instances)


def test_closed_groups_send_no_widgets_until_opened():
    """A thousand widget models at once overran the kernel's IOPub queue and the browser
    lost some ("widget model not found"): a group's controls exist once it is opened."""
    before = _models()
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    assert _models() - before < 300  # every group built: about 1,000
    assert set(panel.controls.built) == set(panel.groups["length"])
    logits = list(panel.groups).index("logits")
    assert panel.accordion.pages[logits].children == ()
    panel.accordion.headers[logits].click()
    assert set(panel.groups["logits"]) <= set(panel.controls.built)
    assert len(panel.accordion.pages[logits].children) == len(panel.groups["logits"])
    panel.accordion.headers[logits].click()  # closing keeps what was built
    assert len(panel.accordion.pages[logits].children) == len(panel.groups["logits"])


def test_a_group_built_late_shows_the_current_values_and_errors():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    panel.replace(GenerationConfig(max_new_tokens=8, do_sample=True, top_k=7))
    assert "top_k" not in panel.controls.built
    assert panel.values()["top_k"] == 7  # an unbuilt field reads the config
    assert panel.controls["top_k"].input.value == 7  # built now, with the new value
    assert panel.controls["do_sample"].input.value is True
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8, do_sample=True))
    assert "temperature" not in panel.controls.built
    assert not panel.set("temperature", 0.0)  # a field of a closed group, refused
    assert "genlab-error" in panel.controls["temperature"].status.value
    assert panel.config.temperature == 1.0 and "temperature" in panel.errors


def test_every_live_panel_stays_under_a_few_hundred_widget_models(classic):
    for make in (
        lambda: Playground(classic, "The", max_new_tokens=3),
        lambda: StepDebugger(classic, "The", max_new_tokens=3),
        lambda: CompareView(classic, "The", {"a": {}, "b": {"do_sample": True}}),
    ):
        before = _models()
        view = make()
        getattr(view, "wait", lambda: None)()
        assert _models() - before < 600, type(view).__name__


def test_every_dropdown_shows_its_value_none_included():
    """An ipywidgets Dropdown reads the value None as "nothing selected": low_memory,
    cache_implementation and the watermark scheme showed a blank box instead of "None" /
    "off", and choosing "None" in the browser blanked the box again."""
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    dropdowns = {
        name: c.input for name, c in panel.controls.items() if isinstance(c.input, widgets.Dropdown)
    }
    assert {"low_memory", "watermarking_config", "early_stopping"} <= set(dropdowns)
    for name, box in dropdowns.items():
        assert box.index is not None and box.label, name  # something is selected
        want = None if name == "watermarking_config" else field_value(panel.config, name)
        assert box.choice is want or box.choice == want, name
    assert dropdowns["low_memory"].label == "not set"  # never the word None
    assert dropdowns["watermarking_config"].label == "off"
    assert dropdowns["early_stopping"].label == "False"
    low = dropdowns["low_memory"]
    low.value = low.options[2][1]  # what choosing "True" in the browser sends
    assert panel.config.low_memory is True and low.label == "True"
    low.value = low.options[0][1]  # and "None"
    assert panel.config.low_memory is None and low.label == "not set" and low.index == 0
    panel.set("early_stopping", "never")
    assert dropdowns["early_stopping"].label == "never"
    panel.set("early_stopping", True)  # True, not the option 1 == True
    assert dropdowns["early_stopping"].label == "True"
    panel.set("watermarking_config", WatermarkingConfig())
    assert dropdowns["watermarking_config"].label.startswith("green list")
    panel.set("watermarking_config", None)
    assert dropdowns["watermarking_config"].label == "off"


def test_a_new_field_appears_by_itself(monkeypatch):
    spec = FieldSpec(
        "brand_new_knob",
        "logits",
        "float",
        0.5,
        min=0,
        max=1,
        step=0.1,
        help="added after the panel was written",
    )
    monkeypatch.setitem(config_module.FIELDS, "brand_new_knob", spec)
    panel = ConfigPanel()
    control = panel.controls["brand_new_knob"]
    assert isinstance(control.input, widgets.FloatSlider)
    assert (control.input.min, control.input.max, control.input.value) == (0, 1, 0.5)
    control.input.value = 0.7
    assert panel.config.brand_new_knob == 0.7


def test_control_types_follow_the_field_kinds():
    c = ConfigPanel().controls
    top_p = c["top_p"].input
    assert isinstance(top_p, widgets.FloatSlider)
    # [0, 1], as the reference takes it (0 keeps only the top token)
    assert (top_p.min, top_p.max) == (0.0, 1.0)
    assert isinstance(c["temperature"].input, widgets.FloatSlider)
    assert c["temperature"].input.min == 0
    assert isinstance(c["num_beams"].input, widgets.IntSlider)
    assert isinstance(c["do_sample"].input, widgets.Checkbox)
    assert isinstance(c["length_penalty"].input, widgets.FloatSlider)  # bounded to [-50, 50]
    assert isinstance(c["pad_token_id"].input, widgets.Text)  # token ids: typed
    box = c["early_stopping"].input
    assert [label for label, _ in box.options] == ["False", "True", "never"]
    assert box.choices == [False, True, "never"]
    assert isinstance(c["output_logits"].input, widgets.Dropdown)  # nullable bool
    for name in ("bad_words_ids", "sequence_bias", "stop_strings"):
        assert isinstance(c[name].input, widgets.Textarea), name
    assert isinstance(c["suppress_tokens"], TextControl)
    assert isinstance(c["watermarking_config"], WatermarkControl)
    assert isinstance(c["max_new_tokens"], NumberControl) and c["max_new_tokens"].enabled


def test_valid_changes_edit_the_config_in_place_and_the_mode_follows():
    cfg = GenerationConfig(max_new_tokens=8)
    panel = ConfigPanel(cfg)
    assert panel.mode == "greedy_search"
    panel.controls["do_sample"].input.value = True
    assert cfg.do_sample is True and panel.mode == "sample"
    panel.controls["num_beams"].input.value = 3
    assert cfg.num_beams == 3 and panel.mode == "beam_sample"
    assert "beam_sample" in panel.mode_label.value
    panel.controls["top_k"].enabled.value = False  # unchecked: None
    assert cfg.top_k is None
    seen = []
    panel.on_change(lambda p, names: seen.append(names))
    panel.set("max_new_tokens", 300)  # beyond the slider's end: taken, the range stays
    slider = panel.controls["max_new_tokens"].input
    assert cfg.max_new_tokens == 300 and (slider.max, slider.value) == (256, 256)
    assert seen == [["max_new_tokens"]]


def test_an_invalid_value_is_shown_next_to_its_field_and_not_applied():
    panel = ConfigPanel(GenerationConfig(num_beams=4))
    panel.controls["num_beam_groups"].input.value = 3
    assert panel.config.num_beam_groups == 1  # the last valid value
    error = panel.errors["num_beam_groups"]
    assert "num_beam_groups" in error and "divide" in error
    assert "genlab-error" in panel.controls["num_beam_groups"].status.value
    panel.controls["num_beam_groups"].input.value = 2
    assert panel.config.num_beam_groups == 1  # 2 groups also need diversity_penalty > 0
    assert "diversity_penalty" in panel.errors["num_beam_groups"]
    panel.set("diversity_penalty", 1.0)
    panel.controls["num_beam_groups"].input.value = 4
    assert panel.config.num_beam_groups == 4 and "num_beam_groups" not in panel.errors
    assert panel.mode == "group_beam_search"
    panel.controls["bad_words_ids"].input.value = "5 x"
    assert "'x' is neither a token id" in panel.errors["bad_words_ids"]
    assert panel.config.bad_words_ids is None


def test_token_editors_take_ids_and_quoted_text(classic):
    tok = classic.tokenizer
    dog, nice = tok.convert_tokens_to_ids("dog"), tok.convert_tokens_to_ids("nice")
    panel = ConfigPanel(tokenizer=tok, vocab_size=classic.info.vocab_size)
    panel.controls["bad_words_ids"].input.value = "'dog'\n5, 6"
    assert panel.config.bad_words_ids == [[dog], [5, 6]]
    hint = html.unescape(panel.controls["bad_words_ids"].status.value)
    assert "= 'dog', 'nice dog'" in hint  # the sequences, decoded
    panel.controls["sequence_bias"].input.value = "'nice': -3\n5 6: 1.5"
    assert panel.config.sequence_bias == {(nice,): -3.0, (5, 6): 1.5}
    panel.controls["suppress_tokens"].input.value = "7, 'car'"
    assert panel.config.suppress_tokens == [7, tok.convert_tokens_to_ids("car")]
    panel.controls["suppress_tokens"].input.value = "999"
    assert "outside the vocabulary [0, 17)" in panel.errors["suppress_tokens"]
    assert panel.config.suppress_tokens == [7, tok.convert_tokens_to_ids("car")]
    panel.controls["eos_token_id"].input.value = "2, 3"
    assert panel.config.eos_token_id == [2, 3]
    panel.controls["stop_strings"].input.value = "END\\n\nstop"
    assert panel.config.stop_strings == ["END\n", "stop"]


def test_parsers_report_what_is_wrong():
    assert parse_token_ids("1, 2 3") == [1, 2, 3]
    assert parse_token_id_lists("1 2\n\n3") == [[1, 2], [3]]
    assert parse_sequence_bias("1 2: -1.5\n4: 2") == {(1, 2): -1.5, (4,): 2.0}
    with pytest.raises(ValueError, match="quoted text needs a tokenizer"):
        parse_token_ids("'word'")
    with pytest.raises(ValueError, match="must read 'token ids: bias'"):
        parse_sequence_bias("1 2")
    with pytest.raises(ValueError, match="bias 'x' is not a number"):
        parse_sequence_bias("1: x")


@pytest.mark.parametrize(
    "preset, mode",
    [
        ("greedy", "greedy_search"),
        ("sampling", "sample"),
        ("nucleus", "sample"),
        ("beam", "beam_search"),
        ("diverse beam", "group_beam_search"),
        ("contrastive", "contrastive_search"),
        ("watermarked", "sample"),
    ],
)
def test_presets_set_their_mode_and_keep_the_length(preset, mode):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=7, do_sample=True, top_k=3))
    panel.preset.value = preset
    assert panel.mode == mode and panel.config.max_new_tokens == 7
    assert panel.preset.value == "(preset)"
    for key, value in PRESETS[preset].items():
        assert getattr(panel.config, key) == value
    if "top_k" not in PRESETS[preset]:
        assert panel.config.top_k == 50  # strategy settings start from the defaults
    assert panel.controls["num_beams"].input.value == panel.config.num_beams
    if preset == "watermarked":
        assert isinstance(panel.config.watermarking_config, WatermarkingConfig)
        assert panel.controls["watermarking_config"].input.choice == "greenlist"


def test_reset_restores_the_starting_config_and_controls():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=5))
    panel.set("do_sample", True)
    panel.set("temperature", 0.7)
    panel.reset()
    assert panel.config == GenerationConfig(max_new_tokens=5)
    assert panel.controls["do_sample"].input.value is False
    assert panel.controls["temperature"].input.value == 1.0


def test_watermark_editor_builds_the_config_from_its_fields():
    panel = ConfigPanel(GenerationConfig(do_sample=True))
    control = panel.controls["watermarking_config"]
    control.input.choose("greenlist")  # picked in the browser: its position is sent
    assert panel.config.watermarking_config == WatermarkingConfig()
    control.sub["greenlist"]["bias"].input.value = "4.0"  # a text box: typed
    assert panel.config.watermarking_config.bias == 4.0
    control.sub["greenlist"]["greenlist_ratio"].input.value = 0.5
    assert panel.config.watermarking_config.greenlist_ratio == 0.5
    control.input.value = 0  # "off", as the browser sends it
    assert panel.config.watermarking_config is None and control.input.label == "off"


def test_save_and_load_generation_config_json(tmp_path):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=9))
    panel.set("do_sample", True)
    panel.set("top_p", 0.8)
    folder = panel.save(tmp_path / "model")
    assert folder.name == "generation_config.json"
    panel.save(tmp_path / "cfg.json")
    for source in (tmp_path / "model", tmp_path / "cfg.json"):
        other = ConfigPanel()
        other.load(source)
        assert other.config.top_p == 0.8 and other.config.max_new_tokens == 9
        assert other.controls["top_p"].input.value == 0.8
        assert "loaded" in other.file_status.value
    (tmp_path / "bad.json").write_text("{not json")
    other.path.value = str(tmp_path / "bad.json")
    other.load_button.click()
    assert (
        "genlab-error" in other.file_status.value and "not a valid JSON" in other.file_status.value
    )
    assert other.config.top_p == 0.8  # unchanged


# ----------------------------------------------------------------------------------------
# small pieces
# ----------------------------------------------------------------------------------------
def test_token_spans_colour_by_probability():
    spans = token_spans(["a", "<b>"], [1.0, 0.0], marks=[1])
    assert spans.count('class="genlab-token"') == 2
    assert prob_colour(1.0) in spans and prob_colour(0.0) in spans
    assert "&lt;b&gt;" in spans and "outline" in spans
    assert prob_colour(1.0) != prob_colour(0.0)


def test_worker_runs_one_job_at_a_time_and_drops_replaced_ones():
    active, peak, done = [0], [0], []
    lock = threading.Lock()

    def fn(job):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        for _ in range(20):
            if job.cancelled.is_set():
                break
            time.sleep(0.005)
        with lock:
            active[0] -= 1
        done.append((job.number, job.cancelled.is_set()))

    worker = Worker(fn, debounce=0.05)
    for _ in range(4):
        worker.submit()
    worker.wait()
    assert peak[0] == 1
    assert done[-1] == (4, False)  # the last request finished
    assert all(cancelled for _, cancelled in done[:-1])
    done.clear()
    for _ in range(5):
        worker.schedule()  # debounced: one job
    time.sleep(0.1)
    worker.wait()
    assert len(done) == 1


# ----------------------------------------------------------------------------------------
# Playground
# ----------------------------------------------------------------------------------------
def test_playground_shows_text_table_and_colours(classic):
    pg = Playground(classic, "The")
    assert pg.error is None and pg.version == 1
    assert pg.result.text == "nice woman"
    assert pg.table.token.tolist() == ["nice", "woman", "<eos>"]
    assert pg.table.prob.round(6).tolist() == [0.5, 0.4, 1.0]
    assert pg.table["rank"].tolist() == [0, 0, 0]
    assert "dog 0.400" in pg.table.top[0]  # decoded text, no repr quotes
    assert pg.config.eos_token_id == 2 and pg.config.max_new_tokens == 20
    view = pg.text_view.value
    assert view.count('class="genlab-token"') == 3 and prob_colour(0.4) in view
    assert "<table" in pg.table_view.value and "woman" in pg.table_view.value
    assert repr(pg) == "Playground(lm='table', mode='greedy_search')"


def test_playground_follows_its_controls(classic):
    pg = Playground(classic, "The", debounce=0.05)
    pg.panel.controls["bad_words_ids"].input.value = "'nice'"
    pg.wait()
    assert pg.version == 2 and pg.result.text == "dog has"
    pg.prompt_box.value = "The car"
    pg.wait()
    assert pg.result.text == "drives" and pg.version == 3
    pg.auto_box.value = False
    pg.prompt_box.value = "The nice"
    time.sleep(0.15)
    pg.wait()
    assert pg.version == 3  # auto-update off: nothing ran
    assert pg.update(sync=True).text == "woman"


def test_playground_debounces_quick_changes(uniform):
    pg = Playground(uniform, "a", debounce=0.4, do_sample=True, max_new_tokens=5)
    for seed in (1, 2, 3):
        pg.seed_box.value = str(seed)
    pg.panel.set("max_new_tokens", 6)
    time.sleep(0.6)
    pg.wait()
    assert pg.version == 2  # one generation for four quick changes
    assert len(pg.table) == 6 and "seed 3" in pg.status.value


def test_playground_error_keeps_the_last_result(classic):
    pg = Playground(classic, "The")
    pg.prompt_box.value = ""
    pg.update(sync=True)
    assert pg.error.startswith("prompt is empty")
    assert "live.py" not in pg.status.value and "(in " not in pg.status.value
    assert "genlab-error" in pg.status.value and "last good result" in pg.status.value
    assert pg.result.text == "nice woman" and "woman" in pg.text_view.value
    pg.prompt_box.value = "The dog"
    pg.update(sync=True)
    assert pg.error is None and pg.result.text == "has"


def test_playground_never_runs_two_generations_at_once(uniform):
    slow = SlowModel(uniform.model)
    lm = genlab.LM(slow, uniform.tokenizer)
    pg = Playground(lm, "a", do_sample=True, max_new_tokens=15, run=False, auto_update=False)
    pg.update()
    time.sleep(0.05)
    pg.seed_box.value = "5"
    pg.update()  # cancels the running job at its next step, starts when it has ended
    pg.wait()
    assert slow.max_active == 1 and pg.version == 1
    assert pg.error is None and len(pg.table) == 15 and "seed 5" in pg.status.value
    assert slow.calls < 3 * 15  # the replaced jobs stopped early


def test_playground_stop_keeps_the_partial_result(uniform):
    slow = SlowModel(uniform.model, delay=0.03)
    lm = genlab.LM(slow, uniform.tokenizer)
    pg = Playground(lm, "a", do_sample=True, max_new_tokens=60, run=False)
    pg.update()
    time.sleep(0.25)
    assert pg.progress.value > 0 and pg.progress.max == 60
    pg.stop_button.click()
    pg.wait()
    assert 0 < len(pg.table) < 60
    assert "stopped" in pg.status.value and pg.error is None


def test_playground_plots_are_pngs_drawn_on_demand(classic):
    pg = Playground(classic, "The")
    assert pg.probs_image.value == b""  # the Plots tab is closed: nothing drawn yet
    pg.show_plots()
    assert is_png(pg.probs_image) and is_png(pg.topk_image)
    first = pg.topk_image.value
    pg.position.value = 1
    assert is_png(pg.topk_image) and pg.topk_image.value != first


# ----------------------------------------------------------------------------------------
# StepDebugger
# ----------------------------------------------------------------------------------------
def test_debugger_waterfall_reports_the_mass_each_stage_removed(classic):
    dbg = StepDebugger(classic, "The", do_sample=True, top_k=2)
    assert dbg.current_step is None and "Press Step" in dbg.waterfall_view.value
    dbg.step()
    table = dbg.waterfall_table()
    assert table.stage.tolist() == ["raw", "top_k", "final"]
    topk = table.set_index("stage").loc["top_k"]
    assert topk.removed_mass == pytest.approx(0.1, abs=1e-4)  # 'car' (0.1) is cut
    assert topk.raw_mass_kept == pytest.approx(0.9, abs=1e-4)
    assert topk.tokens_kept == 2 and topk.removed_tokens == classic.info.vocab_size - 2
    assert table.top[0].startswith("nice 0.500, dog 0.400, car 0.100")
    assert [v for _, v in dbg.candidates.options] == [5, 6]  # p > 0 only
    assert "genlab-waterfall" in dbg.waterfall_view.value  # the table, drawn at each step
    assert dbg.waterfall_image.value == b""  # the figure: only while its tab is open
    dbg.tabs.selected_index = 1
    assert is_png(dbg.waterfall_image)


def test_debugger_force_rewind_fork_and_live_config(classic):
    dbg = StepDebugger(classic, "The")
    dbg.step()
    assert dbg.text() == "nice"
    dbg.candidates.value = classic.tokenizer.convert_tokens_to_ids("dog")
    dbg.take_button.click()
    assert dbg.error is None and dbg.text() == "dog"
    assert dbg.history().forced.tolist() == [True]
    dbg.step()
    assert dbg.text() == "dog has"
    fork = dbg.fork()
    assert dbg.run is fork and len(dbg.runs) == 2
    dbg.rewind(1)
    assert dbg.text() == "dog" and dbg.panel.config is fork.config
    dbg.step()
    dbg.token_box.value = "runs"  # taken at the current step instead of "has"
    dbg.take_button.click()
    assert dbg.text() == "dog runs"
    dbg.select_run(0)
    assert dbg.text() == "dog has"
    dbg.panel.set("suppress_tokens", [2])  # no EOS from the next step on
    dbg.step()
    assert dbg.run.sequences[0, -1].item() != 2
    assert len(dbg.history()) == 3 and "<table" in dbg.history_view.value
    dbg.rewind_count.value = "5"
    dbg.rewind_button.click()
    assert dbg.error == "rewind count: 5 is out of range; type a whole number from 0 to 3."
    assert len(dbg.history()) == 3  # refused: nothing was undone
    assert "genlab-error" in dbg.status.value
    dbg.render(None)  # a draw deferred from an earlier Run, firing late, keeps the error
    assert "genlab-error" in dbg.status.value and "5 is out of range" in dbg.status.value
    dbg.rewind_count.value = "1"
    dbg.rewind_button.click()  # the next good action clears it
    dbg.wait()
    assert dbg.error is None and "genlab-error" not in dbg.status.value


# ----------------------------------------------------------------------------------------
# CompareView and WatermarkExplorer
# ----------------------------------------------------------------------------------------
def test_compare_marks_the_first_divergence(classic):
    view = CompareView(classic, "The", {"greedy": {}, "no nice": {"bad_words_ids": [[5]]}})
    assert view.texts() == {"greedy": "nice woman", "no nice": "dog has"}
    assert view.divergence == 0
    assert "outline" in view.text_views["no nice"].value
    assert "first different token at position 0" in view.summary_view.value
    assert is_png(view.plot_image)
    view.panels["no nice"].set("bad_words_ids", None)
    view.update(sync=True)
    assert view.divergence is None and "identical" in view.summary_view.value
    with pytest.raises(ValueError, match="at least 2"):
        CompareView(classic, "The", [{}])


def test_watermark_explorer_detects_its_watermark(uniform):
    wm = WatermarkExplorer(
        uniform, "a b", {"bias": 6.0, "greenlist_ratio": 0.25}, max_new_tokens=30
    )
    assert wm.error is None
    det = wm.detection.set_index("text")
    assert det.loc["watermarked", "z_score"] > 4 > det.loc["not watermarked", "z_score"]
    assert len(wm.colours) == 30 and wm.colours.green.mean() > 0.7
    g = wm.greenlist
    assert g.chosen.sum() == 1 and bool(g[g.chosen].green.iloc[0]) == bool(wm.colours.green[0])
    assert (g[g.green].prob_after > g[g.green].prob_before).all()
    assert (g[~g.green].prob_after < g[~g.green].prob_before).all()
    assert is_png(wm.z_image) and is_png(wm.greenlist_image)
    assert "wm-green" in wm.text_view.value
    wm.position.value = 3
    assert wm.greenlist.chosen.sum() == 1
    wm.panel.controls["watermarking_config"].input.choose(None)
    wm.update(sync=True)
    assert "shows the green-list watermark" in wm.error and wm.result is not None


def test_generated_colours_score_only_generated_tokens():
    seq = torch.tensor([1, 5, 6, 7, 8, 9])
    table = generated_colours(seq, 3, WatermarkingConfig(), None, 20)
    assert table.position.tolist() == [0, 1, 2] and table.scored.all()
    assert table.id.tolist() == [7, 8, 9]


# ----------------------------------------------------------------------------------------
# BeamExplorer
# ----------------------------------------------------------------------------------------
def test_beam_explorer_shows_tree_pool_and_early_stop(classic):
    bx = BeamExplorer(classic, "The", num_beams=2)
    assert bx.error is None and bx.result.texts == ["dog has"]
    assert "dog has" in bx.outcome_view.value and "-0.341" in bx.outcome_view.value
    assert bx.step_slider.max == 2 and bx.step_slider.value == 2
    assert bx.pool.text.tolist() == ["dog has <eos>", "nice woman <eos>"]
    # for people: no beam / slot -1, no -1e9, no True/False, the rule in words
    for view in (bx.candidates_view, bx.early_view, bx.pool_view):
        assert not re.search(r">-1<|e\+09|>True<|>False<|>nan<", view.value), view.value
    assert "stop" in bx.early_view.value and "rule False" not in bx.early_view.value
    expected = [math.log(0.4 * 0.9) / 3, math.log(0.5 * 0.4) / 3]  # sum of log-probs / length
    assert bx.pool.score.tolist() == pytest.approx(expected, abs=1e-5)
    assert bx.early.done.tolist() == [True] and bx.early.improvable.tolist() == [False]
    first = bx.show_step(0)
    assert first.text.tolist()[:3] == ["nice", "dog", "car"]
    assert first.fate.tolist()[:3] == ["kept", "kept", "pruned"]
    assert bx.pool.empty and bx.early.done.tolist() == [False]
    assert is_png(bx.tree_image) and "candidates at step 0" in bx.candidates_view.value
    bx.step_slider.value = 1
    assert bx.candidates.text.tolist()[:2] == ["dog has", "nice woman"]
    bx.panel.set("num_beams", 1)
    bx.update(sync=True)
    assert bx.error.startswith("num_beams is 1: a beam tree needs 2 or more")
    assert bx.result.texts == ["dog has"]  # the last good result stays


def test_playground_beam_mode_uses_the_returned_sequence(classic):
    pg = Playground(classic, "The", num_beams=2)
    assert pg.result.text == "dog has" and pg.error is None
    assert pg.table.token.tolist() == ["dog", "has", "<eos>"]
    assert pg.table.prob.round(4).tolist() == [0.4, 0.9, 1.0]
    pg.show_plots()
    assert pg.probs_image.value == b""  # per-token plots are for token-by-token modes


# ----------------------------------------------------------------------------------------
# issue 15 / 16: the bugs a student met, each with the behaviour it must have now
# ----------------------------------------------------------------------------------------
def test_debugger_takes_a_multi_token_text_whole(classic):
    dbg = StepDebugger(classic, "The", max_new_tokens=6)
    dbg.step()
    dbg.token_box.value = "dog has"  # two tokens: both taken, both shown
    dbg.take_button.click()
    dbg.wait()
    assert dbg.error is None and dbg.text() == "dog has"
    assert dbg.run.pending_forced == ()  # nothing left queued for later steps or forks
    assert dbg.history().forced.tolist() == [True, True]
    assert dbg.history().token.tolist() == ["dog", "has"]
    view = dbg.text_view.value
    assert view.count("genlab-token") == 2 and "dog" in view and "has" in view
    dbg.rewind(1)
    dbg.step()
    assert dbg.text() == "dog has"  # no leftover forced token after a rewind
    other = dbg.fork()
    assert other.pending_forced == ()


def test_debugger_typed_quoted_text_keeps_its_space_and_bad_quotes_are_shown(classic):
    dbg = StepDebugger(classic, "The")
    dbg.step()
    dbg.token_box.value = "'cat"  # an unclosed quote: shown, never raised
    dbg.take_button.click()
    dbg.wait()
    assert dbg.error.startswith("token: 'cat is not closed")
    assert "genlab-error" in dbg.status.value and dbg.text() == "nice"
    dbg.token_box.value = "'dog'"
    dbg.take_button.click()
    dbg.wait()
    assert dbg.error is None and dbg.text() == "dog"


def test_debugger_candidates_are_never_blank_and_never_impossible(classic):
    dbg = StepDebugger(classic, "The", do_sample=True, top_k=2, seed=0)
    dbg.step()
    taken = int(dbg.run.sequences[0, -1])
    assert dbg.candidates.value == taken  # preselected: the token taken at this step
    assert len(dbg.candidates.options) == 2  # 'car' (p = 0 after top-k) is not offered
    dbg.take(classic.tokenizer.convert_tokens_to_ids("car"))  # forced although p = 0
    labels = [label for label, _ in dbg.candidates.options]
    assert any(label.startswith("car") and "(taken)" in label for label in labels)
    assert len(labels) == 3 and dbg.candidates.value == 7
    dbg.take_button.click()  # "Take this token" with the preselected candidate
    dbg.wait()
    assert dbg.error is None and dbg.text() == "car"


def test_debugger_step_on_a_finished_run_says_so(classic):
    dbg = StepDebugger(classic, "The")
    dbg.run_button.click()
    dbg.wait()
    assert dbg.run.finished and dbg.text() == "nice woman"
    version = dbg.version
    dbg.step_button.click()
    dbg.wait()
    assert "ended the text" in dbg.notice and "Rewind" in dbg.status.value
    assert dbg.version == version and dbg.error is None


def test_debugger_quick_clicks_are_drawn_once_they_pause(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=40)
    start = dbg.version
    for _ in range(20):
        dbg.step_button.click()
    for _ in range(5):
        dbg.rewind_button.click()
    dbg.wait()
    time.sleep(0.1)
    assert dbg.run.step_index == 15
    assert dbg.version - start < 25  # coalesced: not one drawing per click
    assert dbg.text_view.value.count("genlab-token") == 15  # the view shows the last state
    assert "step 14 (15 tokens)" in dbg.status.value  # as the waterfall counts


def test_debugger_run_shows_progress(uniform):
    slow = SlowModel(uniform.model, delay=0.03)
    lm = genlab.LM(slow, uniform.tokenizer)
    dbg = StepDebugger(lm, "a", max_new_tokens=12)
    seen = []
    dbg.status.observe(lambda c: seen.append(c["new"]), names="value")
    dbg.run_to_end()
    assert any("tokens/s" in s for s in seen) and dbg.run.finished


def test_optional_number_checkbox_enables_its_slider():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    for name in ("min_new_tokens", "max_time", "min_p"):
        control = panel.controls[name]
        assert control.enabled.value is False and control.input.disabled
        control.enabled.value = True
        assert not control.input.disabled, name  # the slider can be moved now
        assert getattr(panel.config, name) is not None
        control.enabled.value = False
        assert control.input.disabled and getattr(panel.config, name) is None


def test_zero_temperature_is_refused_with_the_reason_and_zero_top_p_taken():
    panel = ConfigPanel(GenerationConfig(do_sample=True, max_new_tokens=8))
    before = panel.config.temperature
    panel.controls["temperature"].input.value = 0.0  # what dragging the slider to 0 does
    assert panel.config.temperature == before  # not silently changed to 0.05
    assert "`temperature`" in panel.errors["temperature"] and "0.0" in panel.errors["temperature"]
    assert "genlab-error" in panel.controls["temperature"].status.value
    panel.controls["top_p"].input.value = 0.0  # the reference samples the top token
    assert panel.config.top_p == 0.0 and "top_p" not in panel.errors


@pytest.mark.parametrize(
    "name,value",
    [("top_k", "x"), ("temperature", "hot"), ("max_new_tokens", 2.5), ("do_sample", "x"),
     ("bad_words_ids", 5), ("num_beams", None), ("top_p", float("nan"))],
)  # fmt: skip
def test_bad_values_set_from_code_are_shown_never_raised(name, value):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    before = getattr(panel.config, name)
    assert panel.set(name, value) is False
    assert name in panel.errors and getattr(panel.config, name) == before


def test_bad_text_typed_in_a_token_field_is_shown(classic):
    panel = ConfigPanel(tokenizer=classic.tokenizer)
    panel.controls["bad_words_ids"].input.value = "'cat"  # SyntaxError before
    assert "not closed" in panel.errors["bad_words_ids"]
    assert panel.config.bad_words_ids is None


def test_playground_beam_mode_has_no_none_cells(classic):
    pg = Playground(classic, "The", num_beams=2)
    assert "None" not in pg.table_view.value and "None" not in pg.text_view.value
    assert not pg.table.isna().any().any()


def test_playground_top_column_lists_only_possible_tokens(classic):
    pg = Playground(classic, "The", do_sample=True, top_k=2)
    assert "car" not in pg.table.top[0] and not any(" 0.000" in t for t in pg.table.top)


def test_playground_sync_update_while_a_change_is_pending_runs_one_at_a_time(uniform):
    slow = SlowModel(uniform.model, delay=0.02)
    lm = genlab.LM(slow, uniform.tokenizer)
    pg = Playground(lm, "a", do_sample=True, max_new_tokens=10, run=False, debounce=0.05)
    pg.seed_box.value = "3"  # schedules a generation in 0.05 s ...
    pg.update(sync=True)  # ... while this one runs for 0.2 s
    time.sleep(0.1)
    pg.wait()
    assert slow.max_active == 1
    assert "seed 3" in pg.status.value


def test_playground_streams_tokens_and_shows_progress(uniform):
    slow = SlowModel(uniform.model, delay=0.03)
    lm = genlab.LM(slow, uniform.tokenizer)
    pg = Playground(lm, "a", do_sample=True, max_new_tokens=30, run=False)
    views, statuses = [], []
    pg.text_view.observe(lambda c: views.append(c["new"]), names="value")
    pg.status.observe(lambda c: statuses.append(c["new"]), names="value")
    pg.update(sync=True)
    streamed = [v for v in views if "genlab-streaming" in v]
    assert len(streamed) >= 3  # the text grew on screen while it was generated
    assert any("tokens/s" in s for s in statuses)
    assert len(pg.table) == 30 and "genlab-token" in pg.text_view.value


def test_watermark_explorer_gives_one_z_score_over_the_generated_tokens(uniform):
    wm = WatermarkExplorer(uniform, "a b c d", {"bias": 6.0}, max_new_tokens=20)
    det = wm.detection.set_index("text")
    z = det.loc["watermarked", "z_score"]
    assert det.loc["watermarked", "num_tokens_scored"] == wm.colours.scored.sum()
    assert z == pytest.approx(wm.colours.running_z[wm.colours.scored].iloc[-1])
    shown_z = f"z = {z:.2f}"
    assert shown_z in wm.status.value and shown_z in wm.text_view.value
    import re

    texts = wm.status.value + wm.text_view.value + wm.detection_view.value
    zs = {m for m in re.findall(r"z = (-?\d+\.\d\d)", texts)}
    base = f"{det.loc['not watermarked', 'z_score']:.2f}"
    assert zs <= {f"{z:.2f}", base}  # one number per text, everywhere
    assert bool(det.loc["watermarked", "prediction"]) == (z > 4.0)  # notebook 05's threshold


def test_detector_can_score_only_the_generated_tokens():
    from genlab.watermark import WatermarkDetector

    det = WatermarkDetector({"vocab_size": 50, "bos_token_id": 0}, "cpu", {})
    ids = torch.tensor([[0, 5, 6, 7, 8, 9, 10, 11]])
    full = det(ids, return_dict=True)
    part = det(ids, return_dict=True, score_from=5)
    assert part.num_tokens_scored[0] == 3 < full.num_tokens_scored[0]
    assert not part.scored_mask[0, :5].any()
    with pytest.raises(ValueError, match="score_from"):
        det(ids, score_from=-1)


def test_panels_show_their_last_state_as_html_without_a_kernel(classic):
    pg = Playground(classic, "The")
    bundle = pg._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "application/vnd.jupyter.widget-view+json" in data  # live with a kernel
    assert "woman" in data["text/html"] and "<table" in data["text/html"]
    dbg = StepDebugger(classic, "The")
    dbg.step()
    html_text = dbg._repr_mimebundle_()["text/html"]
    assert "nice" in html_text and "genlab-waterfall" in html_text
    bx = BeamExplorer(classic, "The", num_beams=2)
    assert "data:image/png;base64" in bx._repr_mimebundle_()["text/html"]
    wm = WatermarkExplorer(classic, "The", max_new_tokens=3)
    assert "z = " in wm._repr_mimebundle_()["text/html"]
    cv = CompareView(classic, "The", {"greedy": {}, "no nice": {"bad_words_ids": [[5]]}})
    assert ">has</span>" in cv._repr_mimebundle_()["text/html"]
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8, do_sample=True))
    assert "do_sample" in panel._repr_mimebundle_()["text/html"]


def test_settings_group_headers_are_keyboard_buttons():
    panel = ConfigPanel()
    headers = panel.accordion.headers
    assert len(headers) == len(panel.groups)
    assert all(isinstance(h, widgets.Button) for h in headers)  # Tab reaches buttons
    headers[1].click()
    assert panel.accordion.selected_index == 1
    assert panel.accordion.pages[1].layout.display is None
    assert panel.accordion.pages[0].layout.display == "none"
    headers[1].click()
    assert panel.accordion.selected_index is None


def test_figures_in_widgets_are_native_size_at_most_the_panel_width(classic):
    from genlab.widgets.render import png_size

    bx = BeamExplorer(classic, "The", num_beams=2)
    width, _ = png_size(bytes(bx.tree_image.value))
    layout = bx.tree_image.layout
    assert layout.width == f"{width}px"  # never stretched
    # narrower panel: scaled down whole (aspect kept), never cut at the right edge
    assert (layout.max_width, layout.height, layout.object_fit) == ("100%", "auto", "contain")


def test_tables_print_large_and_infinite_numbers_readably():
    import numpy as np
    import pandas as pd

    from genlab.widgets.render import frame_html

    f32 = np.array([-1.0370433, 2.0, 3.5], dtype=np.float32)
    text = frame_html(pd.DataFrame({"a": [-1e9, float("-inf"), 0.5], "b": [None, 1, 2], "c": f32}))
    assert "-1.037" in text and "-1.0370433" not in text
    assert "none yet" in text and "-inf" in text and "0.500" in text  # -1e9: no hypothesis yet
    assert "e+09" not in text and "None" not in text and "nan" not in text
    # an HTML widget gets none of JupyterLab's table styles: the cells bring their spacing
    assert re.search(r"\.genlab-table th, \.genlab-table td \{ padding: 2px 5px;", text)


def test_debugger_settings_are_built_when_their_tab_is_first_shown(classic):
    dbg = StepDebugger(classic, "The", max_new_tokens=3)
    assert dbg.panel.controls.built == {}  # the Settings tab is hidden: nothing built yet
    dbg.tabs.selected_index = dbg.SETTINGS_TAB
    assert dbg.panel.accordion.titles[dbg.panel.accordion.selected_index] == "Logits manipulation"
    assert set(dbg.panel.groups["logits"]) <= set(dbg.panel.controls.built)
    dbg.panel.accordion.selected_index = None  # folded by the user: stays folded
    dbg.tabs.selected_index = 0
    dbg.tabs.selected_index = dbg.SETTINGS_TAB
    assert dbg.panel.accordion.selected_index is None
    with pytest.raises(ValueError, match="group must be one of"):
        dbg.panel.open_group("nope")


# ----------------------------------------------------------------------------------------
# issue 26: honest inputs, whole forced words, the forced queue, resuming, readable values
# ----------------------------------------------------------------------------------------
def test_typed_numbers_are_taken_as_typed_or_refused_with_the_reason():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=20))
    box = panel.controls["max_new_tokens"].text
    box.value = "100000"  # beyond the slider: taken (no limits here), the range stays
    assert panel.config.max_new_tokens == 100000
    assert panel.controls["max_new_tokens"].input.max == 256
    box.value = "-3"
    assert panel.config.max_new_tokens == 100000 and ">= 1" in panel.errors["max_new_tokens"]
    box.value = "2.5"
    assert "whole number" in panel.errors["max_new_tokens"]
    panel.open_group("logits")
    panel.controls["top_k"].text.value = "1e8"  # a whole number typed so: taken as 10**8
    assert panel.config.top_k == 100_000_000
    panel.controls["temperature"].text.value = "nan"
    assert "finite" in panel.errors["temperature"] and panel.config.temperature == 1.0
    guidance = panel.controls["guidance_scale"]
    guidance.enabled.value = True
    guidance.text.value = "1e308"
    assert "NaN" in panel.errors["guidance_scale"] and panel.config.guidance_scale != 1e308


def test_seed_box_refuses_what_is_not_a_seed_in_words(classic):
    pg = Playground(classic, "The")
    for typed, reason in (("2.5", "whole number"), ("ten", "whole number"),
                          ("99999999999999999999", "out of range")):  # fmt: skip
        pg.seed_box.value = typed
        pg.update(sync=True)
        assert reason in pg.error and typed in pg.error
        assert ".py" not in pg.status.value and pg.status.value.count(typed) == 1
    pg.seed_box.value = "3"
    pg.update(sync=True)
    assert pg.error is None and "seed 3" in pg.status.value
    pg.seed_box.value = " 1e5 "  # a whole number, as every number box reads it
    pg.update(sync=True)
    assert pg.error is None and pg.seed == 100_000


def test_forcing_again_replaces_the_whole_forced_word_and_the_queue_is_shown(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=12)
    dbg.step(2)
    ids = uniform.tokenizer.encode(" b c d", add_special_tokens=False)
    assert len(ids) >= 2
    dbg.take(list(ids))  # a word of several tokens, taken at step 1
    assert dbg.run.sequences[0, -len(ids) :].tolist() == list(ids)
    dbg.take(list(ids[:1]))  # a text again: the whole word is replaced, not its last piece
    assert dbg.run.step_index == 2 and int(dbg.run.sequences[0, -1]) == int(ids[0])
    dbg.take(list(ids))
    dbg.rewind(1)  # the step's forced token is queued again: shown, and clearable
    assert dbg.run.pending_forced and "queued to be forced" in dbg.forced_view.value
    assert dbg.clear_button.layout.display is None
    dbg.clear_forced()
    assert not dbg.run.pending_forced and dbg.forced_view.value == ""


def test_raising_max_new_tokens_resumes_and_lowering_it_is_refused(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=3)
    dbg.step(3)
    dbg.step()
    assert dbg.run.finished and "max_new_tokens" in dbg.notice
    dbg.panel.set("max_new_tokens", 5)
    assert not dbg.run.finished  # it goes on, as the message said
    dbg.step(2)
    assert dbg.run.step_index == 5
    dbg.panel.set("max_new_tokens", 2)  # below what the run holds: refused, with the count
    assert dbg.run.config.max_new_tokens == 5
    assert "5 generated" in dbg.panel.errors["max_new_tokens"]


def test_run_is_stopped_and_clicks_during_it_are_refused_in_words(uniform):
    import asyncio

    dbg = StepDebugger(uniform, "a", max_new_tokens=200)

    async def main():
        dbg.run_button.click()  # on the loop: one token per callback
        await asyncio.sleep(0.05)
        assert dbg.worker.busy and not dbg.stop_button.disabled  # visibly busy
        at = dbg.run.step_index
        dbg.rewind_button.click()  # refused, in words, never applied later
        assert "not applied" in dbg.status.value and dbg.run.step_index >= at
        dbg.stop_button.click()
        await asyncio.sleep(0.05)
        assert not dbg.worker.busy

    asyncio.run(main())
    n = dbg.run.step_index
    assert 0 < n < 200 and "stopped after" in dbg.status.value
    dbg.step()
    assert dbg.run.step_index == n + 1  # Stop keeps the run steppable; no late Rewind


def test_running_text_keeps_spaces_and_shows_a_split_character_whole():
    from genlab.text.tokens import running_pieces
    from genlab.widgets.render import contrast, ink, prob_colour, prob_text, token_spans

    html_text = token_spans([" the", " end", "\n", "x"], [0.9, 0.0, 0.5, 1e-7])
    assert "\u2423" not in html_text and " the" in html_text and "genlab-nl" in html_text
    assert all(contrast(ink(prob_colour(p / 20)), prob_colour(p / 20)) >= 4.5 for p in range(21))
    assert prob_text(3e-7) == "3.0×10⁻⁷" and prob_text(0.5) == "0.500"

    class Bytes:  # a byte-level tokenizer of two tokens that hold halves of 'é'
        def decode(self, ids):
            return "\ufffd"

        def convert_ids_to_tokens(self, i):
            return ["Ã", "©"][i]  # bytes C3, A9

    pieces = running_pieces(Bytes(), [0, 1])
    assert [t for t, _ in pieces] == ["", "é"] and "C3 A9" in pieces[1][1]


def test_panels_take_trace_depth_and_refuse_an_unknown_setting(classic):
    pg = Playground(classic, "the", trace_depth=3, max_new_tokens=2)
    assert pg.trace_depth == 3 and pg.result.run.tracer.depth == 3
    dbg = StepDebugger(classic, "the", trace_depth=2, max_new_tokens=2)
    assert dbg.run.tracer.depth == 2
    with pytest.raises(ValueError, match="trace_top_k"):
        StepDebugger(classic, "the", trace_top_k=4, max_new_tokens=2)
