"""Deliberately broken panels, to show that every check of ui_check.py can fail.

``GENLAB_BROKEN=all bash tests/browser/run.sh`` (or a comma-separated list of the names
below) makes panels.ipynb apply these patches before it builds the panels; the check must
then fail every check listed in ``FAILS`` (run.sh's ``--broken`` mode asserts it).
Test-only: nothing in genlab imports this file.
"""

from __future__ import annotations

import os

#: break -> the checks of ui_check.py it must make fail
FAILS = {
    "wrap": ["text wraps (real spaces, no overflow)"],
    "raw": ["no raw values in tables", "no None cells"],
    "overflow": ["nothing overflows at 768 px", "nothing overflows at 1020 px"],
    "images": ["no broken images"],
    "contrast": ["token text contrast >= 4.5"],
    "busy": ["busy within 0.2 s of a click", "a click during Run is refused in words"],
    "stop": ["Stop ends the Run"],
    "force": ["a second forced word replaces the first whole"],
    "queue": ["queued forced tokens shown and clearable"],
    "seed": ["seed '2.5' refused in words"],
    "messages": ["messages without file names, once"],
    "zscore": ["one z-score per text"],
    "keyboard": ["Tab reaches a group header", "Enter opens it", "focus visible"],
    "live": ["slider changes the text", "typed prompt changes the text"],
    "fork": ["fork adds a run"],
    "zero": ["no probability-0 candidates"],
    "console": ["no console errors"],
    "tables": ["wide tables fit at 768 px", "table headers aligned with their cells"],
    "caption": ["beam tree caption not cut at steps 0-1"],
    "branch_all": ["click an alternative continues (every panel)"],
    "widen": ["typed 1e9 refused with its bound, slider range kept"],
    "branch": [
        "click an alternative forks (debugger)",
        "click an alternative continues (playground)",
    ],
    "tree": ["the Branches tab draws the tree"],
    "stepnum": ["the debugger's status names the waterfall's step"],
    "refused": ["a refused click's message goes when the Run stops"],
    "stale": ["a refused max_new_tokens goes once a valid one is taken"],
    "snap": ["the lens layer slider stays where it is moved"],
    "sentence": ["sentences end before 'The last good result'"],
    "suggest": ["SweepView suggests an n inside 1-256"],
    "none_label": ["low_memory shows no 'None'"],
    "eos": ["the model's end shown as a mark, with why the run stopped"],
    "beams": ["num_beams=1e9 refused with its bound, no RuntimeError"],
    # issue 50, at a 768 px window
    "column": ["768 px window: a refused value's message wraps under its controls"],
    "pandas_css": [
        "768 px window: table headers aligned beside a DataFrame",
        "table headers aligned with their cells",
    ],
    "figures": ["768 px window: no figure cut at the panel's edge"],
    "glyph": ["every symbol the panels show has a glyph"],
    "quiet": ["XTC in a greedy panel says it is only used when sampling"],
    "codes": ["mirostat modes named"],
    # issue 50 item 7 (a 321 px notebook), item 2; issue 46 item 5
    "tabs_cut": ["321 px notebook: every tab title whole"],
    "key_columns": ["321 px notebook: the waterfall's stage and first token in view"],
    "early_order": ["the Early stop decision reads first in its box"],
    "grammar_grey": ["candidates the grammar forbids shown greyed, with why"],
    "schema_box": ["a bad JSON schema refused under its box, last result kept"],
}


def requested() -> list[str]:
    names = [n.strip() for n in os.environ.get("GENLAB_BROKEN", "").split(",") if n.strip()]
    return list(FAILS) if names == ["all"] else names


def apply() -> list[str]:
    """Apply the requested breaks (before any panel module is imported); returns them."""
    names = requested()
    if not names:
        return []
    import genlab.widgets.base as base
    import genlab.widgets.render as render

    if "column" in names:  # as before issue 50: a field's row never wraps, and its
        # message takes what is left beside the inputs (a column a few letters wide)
        import genlab.widgets.fields as fields

        fields._row = lambda children: fields.widgets.HBox(children, layout=fields.shared_layout())
        fields.status_layout = lambda shown: fields.shared_layout(margin="0 0 0 6px", flex="1 1 0%")
    if "pandas_css" in names:  # genlab's table rules outranked by pandas' .dataframe rule
        base.FOCUS_CSS = "\n".join(
            line for line in base.FOCUS_CSS.splitlines() if "table.genlab-table" not in line
        )
    if "figures" in names:  # as before issue 50: figures at their native width, cut
        old_figure = render.show_figure

        def native(image, fig, dpi=100):
            png = old_figure(image, fig, dpi)
            if png:
                image.layout.height = f"{render.png_size(png)[1]}px"
                image.layout.max_width, image.layout.object_fit = "none", "none"
            return png

        render.show_figure = native
    if "glyph" in names:  # the end-of-text mark no Debian font has
        render.END_MARK = "\u23f9 end"
    if "codes" in names:  # mirostat's modes shown as bare 0 / 1 / 2
        import genlab.widgets.fields as fields

        fields.CHOICE_LABELS = {}
    if "wrap" in names:
        render.running_text = lambda tok: render.html.escape(tok.replace(" ", "\u2423"))
        old_block = render.text_block
        render.text_block = lambda *a, **k: old_block(*a, **k).replace(
            "white-space:pre-wrap;overflow-wrap:anywhere;", "white-space:pre;"
        )
    if "raw" in names:
        render.format_number = lambda value, digits=3: str(value)
    if "overflow" in names:  # a controls row wider than the notebook's output
        old_row = base.controls_row

        def wide_row(*children):
            row = old_row(*children)
            row.layout.min_width = "1100px"
            return row

        base.controls_row = wide_row
    if "images" in names:
        base.figure_image = lambda: base.widgets.Image(format="png")
        old_show = render.show_figure

        def show(image, fig, dpi=100):
            png = old_show(image, fig, dpi)
            image.layout.display = None
            return png

        render.show_figure = show
    if "contrast" in names:
        render.ink = lambda bg: "#000000"
    if "seed" in names:
        old_int = base.parse_int
        base.parse_int = lambda text, name, low=None, high=None: old_int(
            int(float(text)), name, low, high
        )
    if "messages" in names:
        old_error = base.error_text
        base.error_text = lambda err: old_error(err) + " (in start_run, live.py)"
    if "keyboard" in names:
        base.FOCUS_CSS = "<style></style>"
    if "tables" in names:  # as before issue 37: headers on one line, right-aligned
        old_frame = render.frame_html
        old_css = (
            "<style>.genlab-table th, .genlab-table td { padding: 2px 8px; white-space: nowrap; }"
            ".genlab-table td.genlab-wrap { white-space: normal; min-width: 12em; max-width: 28em;"
            " overflow-wrap: anywhere; }</style>"
        )

        def frame(*a, **k):
            out = old_frame(*a, **k).replace(render.TABLE_CSS, old_css).replace("_<wbr>", "_")
            return out.replace("<thead>\n    <tr>", '<thead>\n    <tr style="text-align: right;">')

        render.frame_html = frame
    if "caption" in names:  # the beam tree's caption on as many lines as it was written
        import types

        import genlab.plots.beam as beam

        beam.textwrap = types.SimpleNamespace(fill=lambda text, width: text)
    import genlab.widgets.branching as branching
    import genlab.widgets.debugger as debugger

    if "tables" in names:  # the waterfall as before: each token and its p on one line
        old_waterfall = debugger.waterfall_html
        debugger.waterfall_html = lambda *a, **k: (
            old_waterfall(*a, **k)
            .replace("white-space:normal;overflow-wrap:break-word;max-width:8em;", "")
            .replace("<br>", " ")
        )
    import genlab.widgets.config_panel as config_panel
    import genlab.widgets.explorers as explorers
    import genlab.widgets.live as live
    import genlab.widgets.playground as playground

    if "quiet" in names:  # a setting that changes nothing in a greedy panel: no word beside it
        config_panel.field_notes = lambda notes: {}
    if "keyboard" in names:
        config_panel.FOCUS_CSS = "<style></style>"
        old_init = config_panel.Sections.__init__

        def init(self, *a, **k):
            old_init(self, *a, **k)
            for header in self.headers:
                header.tabbable = False

        config_panel.Sections.__init__ = init
        config_panel.Sections.toggle = lambda self, index: None
    if "busy" in names:
        live.LiveView._busy = lambda self, on, note="": None
        SD = debugger.StepDebugger

        def click(self, fn, *args):  # no busy sign, no refusal: queued silently
            self.defer_render = True
            try:
                self.guard(fn, *args)
            finally:
                self.defer_render = False

        SD._click = click
        SD.compute_busy_free = True
    if "stop" in names:
        debugger.StepDebugger.stop = lambda self: None
    if "force" in names:
        old_take = debugger.StepDebugger.take

        def take(self, token):
            self._forced_spans.clear()
            return old_take(self, token)

        debugger.StepDebugger.take = take
    if "queue" in names:
        old_draw = debugger.StepDebugger._draw

        def draw(self):
            old_draw(self)
            self.forced_view.value = ""
            self.clear_button.layout.display = "none"

        debugger.StepDebugger._draw = draw
    if "zscore" in names:
        old_render = explorers.WatermarkExplorer.render

        def render_z(self, data):
            old_render(self, data)
            self.status.value = self.status.value.replace("z = ", "z = 1")

        explorers.WatermarkExplorer.render = render_z
    if "live" in names:
        live.LiveView.on_input = lambda self, change=None: None
    if "fork" in names:
        debugger.StepDebugger.fork = lambda self, source=None, keep=None: self.run
    if "widen" in names:  # the old slider: a typed value widens its range for good
        import genlab.widgets.fields as fields

        old_read = fields.NumberControl.read

        def read(self):  # as it was: the slider follows every typed value, refused or not
            value = old_read(self)
            if value is not None and self.slider is not None:
                self.slider.max = max(self.slider.max, value)
                self.slider.min = min(self.slider.min, value)
                self.slider.value = value
            return value

        fields.NumberControl.read = read
    if "branch" in names:  # an alternative clicked is forced in place, or nothing
        debugger.StepDebugger.branch = lambda self, token: self.take(token)
        playground.Playground.branch = lambda self, position, token: None
    if "branch_all" in names:  # the alternatives shown, a click does nothing
        branching.BranchPicker.pick = lambda self, key: None
    if "zero" in names:  # a candidate of probability 0 offered again
        old_current = debugger.StepDebugger._render_current

        def render_current(self, trace):
            old_current(self, trace)
            if self.candidates.options:
                self.candidates.options = [*self.candidates.options, ("gone  p=0.000", -1)]

        debugger.StepDebugger._render_current = render_current
    if "tree" in names:  # the Branches tab left empty
        import genlab.widgets.tree as tree

        tree.BranchTree.refresh = lambda self: None
    if "stepnum" in names:  # the status counts the tokens as the step ("step 4" / "step 3")
        old_status_draw = debugger.StepDebugger._draw

        def draw_step(self):
            old_status_draw(self)
            step = self.current_step
            if step is not None:
                self.status.value = self.status.value.replace(
                    f"step {step} (", f"step {step + 1} ("
                )

        debugger.StepDebugger._draw = draw_step
    if "refused" in names:  # "... Press Stop first." stays after the Run has stopped
        old_refused_draw = debugger.StepDebugger._draw

        def draw_refused(self):
            refused = self._refused
            old_refused_draw(self)
            if refused:
                self.status.value += render.message(refused, "warn")

        debugger.StepDebugger._draw = draw_refused
    if "stale" in names:  # a refused length stays in red after a valid one is taken
        old_settings = debugger.StepDebugger._settings_changed

        def settings_changed(self, panel, names):
            error = self.error
            old_settings(self, panel, names)
            if error and self.error is None:
                self.error = error
                self._render()

        debugger.StepDebugger._settings_changed = settings_changed
    if "snap" in names:  # a moved layer slider snaps back while "most focused head" is ticked
        import genlab.widgets.lens as lens

        lens.LensView._chose_head = lambda self: (
            None if self._quiet or self.lens is None else self._update_step()
        )
    if "sentence" in names:  # a message without its full stop: "...1e3 The last good result"
        base.sentence = lambda text: text.rstrip().rstrip(".")
    if "suggest" in names:  # an example outside the range: "such as 0, 1 or 42"
        import genlab.widgets.sweep as sweep

        old_sweep_int = sweep.parse_int

        def sweep_int(text, name, low=None, high=None):
            try:
                return old_sweep_int(text, name, low, high)
            except ValueError as err:
                raise ValueError(
                    str(err).replace(f"such as {low} or {high}", "such as 0, 1 or 42")
                ) from None

        sweep.parse_int = sweep_int
    if "none_label" in names:  # a dropdown's None shown as "None"
        import genlab.widgets.fields as fields

        fields.NONE_LABEL = "None"
    if "eos" in names:  # the end-of-text token shown as itself, no reason given
        old_result_html = playground.result_html
        playground.result_html = lambda *a, **k: old_result_html(*a, **{**k, "ended": False})
        playground.ended_text = lambda run: ""
    if "beams" in names:  # as before the bounds: num_beams=1e9 taken, the run's allocation
        # fails and its raw RuntimeError is shown (raised here, before anything is allocated)
        import dataclasses

        import genlab.config.limits as limits

        class Unbounded(limits.Limits):
            def bounds(self):
                return {k: v for k, v in super().bounds().items() if k != "num_beams"}

            def check(self, config, prompt_length=0):
                if (getattr(config, "num_beams", None) or 1) <= limits.MAX_ROWS:
                    super().check(config, prompt_length)

        class Allocating(Unbounded):
            def check(self, config, prompt_length=0):
                if (getattr(config, "num_beams", None) or 1) > limits.MAX_ROWS:
                    raise RuntimeError(
                        "[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: not "
                        "enough memory: you tried to allocate 48000000000 bytes."
                    )
                super().check(config, prompt_length)

        def fields_of(lm, cls=Unbounded):
            return cls(**dataclasses.asdict(limits.model_limits(lm.info)))

        explorers.limits_of = fields_of
        live.limits_of = lambda lm: fields_of(lm, Allocating)
        old_error_text = base.error_text

        def raw_error(err):
            if isinstance(err, RuntimeError):
                return f"{type(err).__name__}: {err}"
            return old_error_text(err)

        base.error_text = raw_error
    if "tabs_cut" in names:  # as before: tab titles squeezed into one row and cut
        import sys

        cut = "\n".join(
            line for line in base.FOCUS_CSS.splitlines()
            if "lm-TabBar" not in line and "flex-wrap" not in line
            and "min-width: fit-content" not in line and "overflow: visible; }" not in line
        )  # fmt: skip
        for name, module in list(sys.modules.items()):
            if name.startswith("genlab.widgets") and hasattr(module, "FOCUS_CSS"):
                module.FOCUS_CSS = cut
    if "key_columns" in names:  # a wide column of counts before the waterfall's tokens
        import genlab.widgets.debugger as debugger

        old_waterfall = debugger.waterfall_html
        debugger.waterfall_html = lambda *a, **k: old_waterfall(*a, **k).replace(
            "<tr><td><b>", "<tr><td style='min-width:420px'><b>"
        )
    if "early_order" in names:  # the table's columns in the trace's order, decision last
        import genlab.widgets.explorers as explorers

        explorers.EARLY_COLUMNS = ()
    if "grammar_grey" in names:  # what the grammar forbids: not shown at all
        import genlab.widgets.debugger as debugger

        old_masked = debugger.grammar_masked
        debugger.grammar_masked = lambda *a, **k: old_masked(*a, **k).iloc[:0]
    if "schema_box" in names:  # the schema goes unchecked to the run: no word under the box
        playground.Playground._check_schema = lambda self: True
    if "console" in names:
        from IPython.display import Javascript, display

        display(Javascript("console.error('genlab deliberately broken')"))
    playground.Playground  # noqa: B018  (imported after the patches)
    return names
