"""ConfigPanel: every GenerationConfig field as a control, generated from the field specs.

The panel walks :data:`genlab.config.FIELDS` and the samplers' fields
(:data:`genlab.config.sampler_fields.SAMPLER_FIELDS`, never a list written here), puts each field
into its group (length, strategy, cache, logits manipulation, ...) and gives it the editor
its kind calls for (see :mod:`genlab.widgets.fields`). A change is validated on a copy of
the config first: a valid value is written into the config *in place* (a Run holding that
config sees it at its next step); an invalid one is shown in red next to its field and the
config keeps its last valid value.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> panel = ConfigPanel(GenerationConfig(max_new_tokens=8))           # doctest: +SKIP
>>> panel.set("do_sample", True); panel.mode                          # doctest: +SKIP
'sample'
>>> panel.set("num_beam_groups", 3); panel.errors["num_beam_groups"]  # doctest: +SKIP
'`num_beam_groups`=3 must divide `num_beams`=1; ...'
"""

from __future__ import annotations

import copy
import html
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from ..config import FIELDS, GROUPS, GenerationConfig, WatermarkingConfig
from ..config.limits import Limits
from ..config.sampler_fields import SAMPLER_FIELDS
from .base import FOCUS_CSS, Panel, error_text
from .fields import FieldControl, make_control
from .render import TABLE_CSS, WARNINGS_LOCK, message

#: Titles of the groups, as the reference's documentation names them.
GROUP_TITLES = {
    "length": "Output length",
    "strategy": "Generation strategy",
    "cache": "Cache",
    "logits": "Logits manipulation",
    "samplers": "Samplers beyond the reference (DRY, XTC, mirostat ...; off by default)",
    "outputs": "Output variables",
    "special_tokens": "Special tokens",
    "encoder_decoder": "Encoder-decoder only",
    "assisted": "Assisted generation",
    "performance": "Performance and compilation",
    "watermark": "Watermarking",
}

#: Presets: the settings a strategy needs on top of the defaults of the strategy, logits
#: and watermark groups (other groups keep their current values).
PRESETS: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sampling": {"do_sample": True},
    "nucleus": {"do_sample": True, "top_p": 0.9, "top_k": 0},
    "beam": {"num_beams": 4},
    "diverse beam": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0},
    "contrastive": {"penalty_alpha": 0.6, "top_k": 4},
    "watermarked": {"do_sample": True, "watermarking_config": WatermarkingConfig()},
}
PRESET_RESETS_GROUPS = ("strategy", "logits", "watermark")


def panel_fields() -> dict[str, Any]:
    """Every field the panel edits, by name: the reference's (:data:`FIELDS`, read now, so
    that a field added later appears), then genlab's samplers'
    (:data:`~genlab.config.sampler_fields.SAMPLER_FIELDS`, in their own group after
    "logits")."""
    return {**FIELDS, **SAMPLER_FIELDS}


def field_value(config: Any, name: str) -> Any:
    """The value the panel shows for ``name``: a sampler field that was never set reads
    its default (off)."""
    spec = SAMPLER_FIELDS.get(name)
    return getattr(config, name, None if spec is None else spec.default)


def validate_quietly(
    config: GenerationConfig,
    vocab_size: int | None = None,
    limits: Limits | None = None,
    tokenizer=None,
):
    """Validate ``config`` (and, with ``limits``, the upper bounds the model and the
    machine set: checked before anything is allocated; the samplers' order, and with
    ``tokenizer`` DRY's sequence breakers, as a run would build them); return (mode,
    warning texts). Raises ValueError if invalid."""
    from ..processors.build import check_samplers

    with WARNINGS_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config.validate()
        if vocab_size is not None:
            config.check_token_ids(vocab_size)
        if limits is not None:
            limits.check(config)
        check_samplers(config, tokenizer)
        mode = config.get_generation_mode()
    return getattr(mode, "value", str(mode)), [str(w.message) for w in caught]


_FIELD_NOTE = re.compile(r"^- `(\w+)`: (.*)$", re.MULTILINE)


def field_notes(notes: list[str]) -> dict[str, str]:
    """The warnings of ``validate()`` about single fields, by field, in words (no
    backticks): ``{"xtc_probability": "0.5 is only used when sampling; ..."}``.

    >>> field_notes(["These ... ignored: ['top_k'].\\n- `top_k`: 5 is only used when "
    ...              "sampling; set do_sample=True or reset it to 50."])
    {'top_k': '5 is only used when sampling; set do_sample=True or reset it to 50.'}
    """
    return {
        m.group(1): m.group(2).replace("`", "")
        for note in notes
        for m in _FIELD_NOTE.finditer(note)
    }


def plain_note(note: str) -> str:
    """A warning of ``validate()`` as a person reads it: no backticks, no Python list.

    >>> plain_note("Inconsistent and may be ignored: ['top_k', 'min_p'].\\n- `top_k`: x")
    'Inconsistent and may be ignored: top_k, min_p.\\n- top_k: x'
    """
    note = re.sub(r"\[((?:'\w+'(?:, )?)+)\]", lambda m: m.group(1).replace("'", ""), note, count=1)
    return note.replace("`", "")


def _reason(name: str, value: Any, err: Exception) -> str:
    """The text shown for a refused value: the error's message, naming the field."""
    text = str(err) or type(err).__name__
    if f"`{name}`" not in text and name not in text:
        text = f"`{name}` = {value!r} is not accepted: {text}"
    return text


class Sections(widgets.VBox):
    """Foldable groups whose headers are buttons: reachable with Tab, opened and closed
    with Enter or Space, with a visible focus ring (an Accordion's headers are not
    keyboard-reachable in JupyterLab). ``titles``, ``pages`` and ``selected_index`` (the
    open group, None for none) as an Accordion has them; ``on_open(i)`` is called before
    page ``i`` is shown (the ConfigPanel fills a page then)."""

    def __init__(
        self,
        pages: list[widgets.Widget],
        titles: list[str],
        on_open: Callable[[int], None] | None = None,
    ) -> None:
        self.titles = tuple(titles)
        self.pages = list(pages)
        self.headers = []
        self.on_open = on_open
        self._open: int | None = None
        rows = []
        for i, (title, page) in enumerate(zip(self.titles, self.pages, strict=True)):
            header = widgets.Button(
                description=f"\u25b8 {title}",
                tooltip=f"show or hide {title}",
                layout=widgets.Layout(width="auto", min_width="260px"),
            )
            header.add_class("genlab-section-header")
            header.on_click(lambda _, i=i: self.toggle(i))
            page.layout.display = "none"
            self.headers.append(header)
            rows += [header, page]
        super().__init__(rows)

    @property
    def selected_index(self) -> int | None:
        return self._open

    @selected_index.setter
    def selected_index(self, index: int | None) -> None:
        if index is not None and self.on_open is not None:
            self.on_open(index)
        self._open = index
        for i, (title, header, page) in enumerate(
            zip(self.titles, self.headers, self.pages, strict=True)
        ):
            shown = i == index
            page.layout.display = None if shown else "none"
            header.description = ("\u25be " if shown else "\u25b8 ") + title

    def toggle(self, index: int) -> None:
        self.selected_index = None if self._open == index else index


class Controls(Mapping):
    """The panel's controls by field name, every field of :data:`FIELDS` listed, each
    built the first time it is needed: when its group is opened, or when code reads
    ``controls[name]`` (which builds the whole group). A panel of ~90 fields would
    otherwise send about a thousand widget models to the browser at once, most of them
    inside closed groups; ``built`` holds the ones that exist."""

    def __init__(self, names: list[str], build: Callable[[str], None]) -> None:
        self._names = list(names)
        self._known = set(names)
        self._build = build
        self.built: dict[str, FieldControl] = {}

    def __getitem__(self, name: str) -> FieldControl:
        if name not in self.built:
            if name not in self._known:
                raise KeyError(name)
            self._build(name)
        return self.built[name]

    def __contains__(self, name: object) -> bool:
        return name in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def group_fields(groups=GROUPS) -> dict[str, list[str]]:
    """Field names by group, groups in the reference's order (unknown groups last)."""
    out: dict[str, list[str]] = {}
    for g in groups:
        out[g] = []
        if g == "logits":
            out["samplers"] = list(SAMPLER_FIELDS)
    for name, spec in FIELDS.items():
        out.setdefault(spec.group, []).append(name)
    return {g: names for g, names in out.items() if names}


class ConfigPanel(Panel):
    """Controls for every field of a :class:`GenerationConfig`, grouped, validated live.

    config: the config to edit in place (default: a new ``GenerationConfig()``);
    tokenizer: lets token fields take quoted text and show decoded tokens;
    vocab_size: token ids outside ``[0, vocab_size)`` are rejected;
    limits: the upper bounds of the model and machine
    (:func:`genlab.config.limits.model_limits`): a value over its bound is refused with the
    reason;
    open_group: the group shown expanded first.

    Attributes for code and tests: ``config``, ``controls`` (name -> FieldControl; a
    group's controls are built when it is first opened or one of them is read, see
    :class:`Controls`),
    ``errors`` (name -> message of the rejected value), ``notes`` (warnings of the last
    valid change), ``mode`` (inferred generation mode).

    title: the heading above the controls.

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> from genlab.widgets import ConfigPanel
    >>> panel = ConfigPanel(genlab.GenerationConfig(max_new_tokens=20))  # doctest: +SKIP
    >>> panel.set("top_k", 5); panel.config.top_k                 # doctest: +SKIP
    5
    """

    def __init__(
        self,
        config: GenerationConfig | None = None,
        *,
        tokenizer=None,
        vocab_size: int | None = None,
        limits: Limits | None = None,
        open_group: str | None = "length",
        title: str = "Generation settings",
    ) -> None:
        self.config = config if config is not None else GenerationConfig()
        self.initial = copy.deepcopy(self.config)
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.limits = limits
        self.title = title
        self.errors: dict[str, str] = {}
        self.notes: list[str] = []
        self._listeners: list[Callable[[ConfigPanel, list[str]], None]] = []
        self._syncing = False
        self.mode, _ = validate_quietly(self.config)

        self.groups = group_fields()
        self._page_of = {n: i for i, names in enumerate(self.groups.values()) for n in names}
        self.controls = Controls(list(self._page_of), lambda n: self._build_page(self._page_of[n]))
        pages = [widgets.VBox() for _ in self.groups]
        titles = [GROUP_TITLES.get(g, g.replace("_", " ").capitalize()) for g in self.groups]
        self.accordion = Sections(pages, titles, on_open=self._build_page)
        if open_group is not None:
            self.open_group(open_group)

        self.mode_label = widgets.HTML()
        self.preset = widgets.Dropdown(
            options=["(preset)", *PRESETS], value="(preset)", layout=widgets.Layout(width="150px")
        )
        self.preset.observe(self._on_preset, names="value")
        self.reset_button = widgets.Button(
            description="Reset", tooltip="back to the start", layout=widgets.Layout(width="80px")
        )
        self.reset_button.on_click(lambda _: self.reset())
        self.path = widgets.Text(
            value="generation_config.json",
            layout=widgets.Layout(width="260px"),
            tooltip="a generation_config.json file or a folder",
        )
        self.load_button = widgets.Button(
            description="Load", layout=widgets.Layout(width="70px", flex="0 0 auto")
        )
        self.save_button = widgets.Button(
            description="Save", layout=widgets.Layout(width="70px", flex="0 0 auto")
        )
        self.load_button.on_click(lambda _: self._file_action(self.load))
        self.save_button.on_click(lambda _: self._file_action(self.save))
        self.file_status = widgets.HTML()
        self.notes_label = widgets.HTML()
        # a row that wraps (a 321 px notebook: the title, the preset and Reset whole, the
        # mode on the next line), each piece at its own width, never broken inside a word
        self.reset_button.layout.flex = "0 0 auto"
        self.preset.layout.flex = "0 0 auto"
        header = widgets.HBox(
            [
                widgets.HTML(
                    f"<b>{html.escape(title)}</b>", layout=widgets.Layout(flex="0 1 auto")
                ),
                self.preset,
                self.reset_button,
                self.mode_label,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.mode_label.layout = widgets.Layout(flex="0 1 auto")
        self.file_status.layout = widgets.Layout(flex="1 1 240px", min_width="0")
        files = widgets.HBox(  # a long message wraps below; the buttons keep their width
            [self.path, self.load_button, self.save_button, self.file_status],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        super().__init__([widgets.HTML(FOCUS_CSS), header, self.accordion, self.notes_label, files])
        self.add_class("genlab-config-panel")
        self.add_class("genlab-panel")
        self._show_mode()

    # -- public --------------------------------------------------------------------------
    def on_change(self, fn: Callable[[ConfigPanel, list[str]], None]) -> None:
        """Call ``fn(panel, changed_field_names)`` after every valid change."""
        self._listeners.append(fn)

    def open_group(self, group: str) -> None:
        """Show the settings group ``group`` (a key of ``groups``: "length", "logits" ...)
        expanded, the others folded; its controls are built now if they were not."""
        if group not in self.groups:
            raise ValueError(f"group must be one of {list(self.groups)}, got {group!r}")
        self.accordion.selected_index = list(self.groups).index(group)

    def set(self, name: str, value: Any) -> bool:
        """Set a field as a person would: shown in its control, validated, applied.
        Returns True if the value was accepted.

        name: a GenerationConfig field; value: its new value.
        """
        if name not in self.controls:
            raise ValueError(
                f"unknown config field {name!r}; fields are listed in genlab.config.FIELDS"
            )
        try:
            self._sync(lambda: self.controls[name].show(value))
        except Exception as err:  # a value of the wrong type: shown, never raised
            self.reject(name, _reason(name, value, err))
            return False
        return self._apply({name: value})

    def apply_preset(self, name: str) -> None:
        """Apply one of :data:`PRESETS` (strategy/logits/watermark back to defaults first).

        name: a key of :data:`PRESETS` (``"greedy"``, ``"nucleus"``, ``"beam"`` ...).
        """
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {list(PRESETS)}, got {name!r}")
        new = GenerationConfig()
        for field, spec in FIELDS.items():
            if spec.group not in PRESET_RESETS_GROUPS:
                setattr(new, field, copy.deepcopy(getattr(self.config, field, spec.default)))
        with WARNINGS_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            new.update(**copy.deepcopy(PRESETS[name]))
        self.replace(new)

    def reset(self) -> None:
        """Back to the config the panel started from (a "saved"/"loaded" message goes:
        it spoke of the settings before)."""
        self.replace(copy.deepcopy(self.initial))
        self.file_status.value = ""

    def replace(self, new: GenerationConfig) -> None:
        """Copy every field of ``new`` into the edited config (after validating it)."""
        mode, notes = validate_quietly(new, self.vocab_size, self.limits, self.tokenizer)
        for key, value in vars(new).items():
            setattr(self.config, key, copy.deepcopy(value))
        for key in SAMPLER_FIELDS:  # a sampler field ``new`` does not set is off there
            if key not in vars(new) and key in vars(self.config):
                delattr(self.config, key)
        self.errors.clear()
        self.refresh()
        self._accepted(list(panel_fields()), notes)

    def load(self, path: str | Path | None = None) -> None:
        """Load a generation_config.json file (or a folder holding one).

        path: a JSON file or a folder (default: the path typed in the panel).
        """
        path = Path(path if path is not None else self.path.value)
        if not path.exists():  # a local file only: never a name looked up elsewhere
            raise ValueError(
                f"no file {str(path)!r}: type the path of a generation_config.json file, "
                "or of a folder holding one."
            )
        self.replace(GenerationConfig.from_pretrained(path))
        self.file_status.value = message(f"loaded {path}", "ok")

    def save(self, path: str | Path | None = None) -> Path:
        """Save to ``path``: a .json file, or a folder (as generation_config.json)."""
        path = Path(path if path is not None else self.path.value)
        if path.suffix == ".json":
            path.parent.mkdir(parents=True, exist_ok=True)
            self.config.validate(strict=True)
            self.config.to_json_file(path)
        else:
            path = self.config.save_pretrained(path)
        self.file_status.value = message(f"saved {path}", "ok")
        return path

    def bind(self, config: GenerationConfig) -> None:
        """Edit another config object from now on (e.g. after a Run was rewound)."""
        self.config = config
        self.errors.clear()
        self.refresh()
        self.mode, _ = validate_quietly(config)
        self._show_mode()

    def refresh(self) -> None:
        """Show the config's current values in every control."""

        def show_all():
            for name, control in self.controls.built.items():
                control.show(field_value(self.config, name))
                control.set_status()

        self._sync(show_all)

    def values(self) -> dict[str, Any]:
        """What the controls read now, by field (a field that fails to parse is left out;
        a field whose group was never opened reads the config's value, as it would show)."""
        out = {}
        for name in self.controls:
            control = self.controls.built.get(name)
            if control is None:
                out[name] = copy.deepcopy(field_value(self.config, name))
                continue
            try:
                out[name] = control.read()
            except ValueError:
                pass
        return out

    def __repr__(self) -> str:
        return f"ConfigPanel(mode={self.mode!r}, {self.config!r})"

    def static_html(self) -> str:
        """The panel's state as plain HTML: the mode and every setting that differs from
        the defaults (what a notebook shows without a kernel)."""
        default = GenerationConfig()
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td>"
            f"<td>{html.escape(repr(field_value(self.config, name)))}</td></tr>"
            for name in panel_fields()
            if field_value(self.config, name) != field_value(default, name)
        )
        errors = "".join(message(f"{k}: {v}", "error") for k, v in self.errors.items())
        return (
            f'<div class="genlab-static"><b>{html.escape(self.title)}</b> &middot; mode '
            f"<b>{html.escape(self.mode)}</b>"
            f'{TABLE_CSS}<table class="genlab-table"><tr><th>setting</th><th>value</th></tr>'
            f"{rows}</table>"
            f"{errors}</div>"
        )

    # -- internals -------------------------------------------------------------------------
    def _build_page(self, index: int) -> None:
        """Build the controls of group ``index`` (once), showing the config's values."""
        page = self.accordion.pages[index]
        names = list(self.groups.values())[index]
        if names[0] in self.controls.built:
            return
        boxes = []
        for name in names:
            control = make_control(
                panel_fields()[name], field_value(self.config, name), self.tokenizer
            )
            self.controls.built[name] = control
            for w in control.watched():
                w.observe(self._changed_handler(name), names="value")
            if name in self.errors:
                control.set_status(self.errors[name], "error")
            boxes.append(control.box)
        page.children = boxes

    def _sync(self, fn) -> None:
        self._syncing = True
        try:
            fn()
        finally:
            self._syncing = False

    def _changed_handler(self, name: str):
        def handler(change) -> None:
            if self._syncing:
                return
            control = self.controls[name]
            try:
                value = control.read()
            except Exception as err:  # shown next to the field, never raised
                self.reject(name, _reason(name, None, err))
                return
            self._apply({name: value})

        return handler

    def _apply(self, changes: dict[str, Any]) -> bool:
        trial = copy.deepcopy(self.config)
        for key, value in changes.items():
            setattr(trial, key, copy.deepcopy(value))
        try:
            _, notes = validate_quietly(trial, self.vocab_size, self.limits, self.tokenizer)
        except Exception as err:  # ValueError, or TypeError of a value of the wrong type
            for key in changes:
                self.reject(key, _reason(key, changes[key], err))
            return False
        for key in changes:
            setattr(self.config, key, getattr(trial, key))
            self.errors.pop(key, None)
            control = self.controls[key]
            control.set_status(control.hint(getattr(trial, key)))
            control.accepted(getattr(trial, key))
        self._accepted(list(changes), notes)
        return True

    def reject(self, name: str, text: str) -> None:
        """Show ``text`` as the reason field ``name``'s value was refused (the field keeps
        its last good value; :attr:`errors` lists the refusals shown)."""
        self.errors[name] = text
        self.controls[name].set_status(text, "error")

    def _accepted(self, names: list[str], notes: list[str]) -> None:
        self.notes = notes
        self.notes_label.value = "".join(message(plain_note(n), "warn") for n in notes)
        by_field = field_notes(notes)
        for name, control in self.controls.built.items():  # beside the field it is about
            if name in self.errors:
                continue
            if name in by_field:
                control.set_status(by_field[name], "warn")
            else:
                control.set_status(control.hint(field_value(self.config, name)))
        self.mode, _ = validate_quietly(self.config)
        self._show_mode()
        for fn in list(self._listeners):
            fn(self, names)

    def _show_mode(self) -> None:
        self.mode_label.value = (
            f'<span class="genlab-mode" style="margin-left:8px">mode: '
            f"<b>{html.escape(self.mode)}</b></span>"
        )

    def _on_preset(self, change) -> None:
        if change["new"] in PRESETS:
            self.apply_preset(change["new"])
            self._sync(lambda: setattr(self.preset, "value", "(preset)"))

    def _file_action(self, fn) -> None:
        try:
            fn()
        except (OSError, ValueError) as err:
            self.file_status.value = message(error_text(err), "error")
