"""One editor per config field, chosen from the field's metadata (a :class:`FieldSpec`).

:func:`make_control` turns a spec into a :class:`FieldControl`: a slider for a bounded
number, a text box for an unbounded one, a checkbox for a flag, a dropdown for a choice,
token-list and mapping editors for token-id fields, a JSON box for structured values, and
a small sub-panel for the watermark settings. Every control has the same three methods:
``read()`` (the Python value, or ValueError), ``show(value)`` and ``set_status(text)``.

Token editors accept ids and quoted text, which the tokenizer turns into ids::

    >>> parse_token_ids("5, 6 7")
    [5, 6, 7]
    >>> parse_sequence_bias("5 6: -2.5")
    {(5, 6): -2.5}
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_bool import CheckboxStyle
from ipywidgets.widgets.widget_description import DescriptionStyle
from ipywidgets.widgets.widget_int import SliderStyle
from ipywidgets.widgets.widget_string import HTMLStyle, LabelStyle, TextStyle

from ..config import (
    FIELDS,
    SYNTHID_FIELDS,
    WATERMARK_FIELDS,
    FieldSpec,
    SynthIDTextWatermarkingConfig,
    WatermarkingConfig,
)
from .base import parse_number
from .render import message

#: Upper ends for sliders of numbers that have only a lower bound (a UI hint, not a
#: validation rule: larger values can still be set from code). A field missing here
#: gets a text box instead of a slider.
SOFT_MAX: dict[str, float] = {
    "max_length": 512,
    "max_new_tokens": 256,
    "min_length": 256,
    "min_new_tokens": 256,
    "max_time": 60.0,
    "num_beams": 16,
    "num_beam_groups": 8,
    "temperature": 3.0,
    "top_k": 200,
    "diversity_penalty": 5.0,
    "repetition_penalty": 3.0,
    "encoder_repetition_penalty": 3.0,
    "no_repeat_ngram_size": 10,
    "encoder_no_repeat_ngram_size": 10,
    "num_return_sequences": 16,
    "num_assistant_tokens": 64,
    "assistant_lookbehind": 64,
    "target_lookbehind": 64,
    "penalty_alpha": 2.0,
    "context_width": 8,
    # the samplers beyond the reference (genlab.config.sampler_fields)
    "dry_multiplier": 3.0,
    "dry_base": 4.0,
    "dry_allowed_length": 10,
    "dry_penalty_last_n": 1024,
    "mirostat_tau": 10.0,
    "dynatemp_low": 3.0,
    "dynatemp_high": 3.0,
    "dynatemp_exponent": 4.0,
    "smoothing_factor": 5.0,
    "smoothing_curve": 4.0,
    "top_n_sigma": 5.0,
}

#: values shown for SynthID fields that have no default (the reference's docs example)
SYNTHID_EXAMPLE = {"ngram_len": 5, "keys": [654, 400, 836, 123, 340, 443, 597, 160, 57, 29]}

LABEL_WIDTH = "232px"  # the longest name, exponential_decay_length_penalty, in full
INPUT_WIDTH = "300px"
#: left margin of an input with no "None" checkbox before it: the inputs of a group
#: start in one column (a checkbox is 24 px wide, plus its 2 px margins)
INPUT_INDENT = "2px 2px 2px 30px"

_SHARED: dict = {}


def shared_layout(**css) -> widgets.Layout:
    """One Layout per set of CSS values, shared by every control that uses it: a panel
    of ~90 fields would otherwise send (and a saved notebook keep) a Layout model per
    widget. Never change a shared layout in place (assign another one instead)."""
    key = ("layout", *sorted(css.items()))
    if key not in _SHARED:
        _SHARED[key] = widgets.Layout(**css)
    return _SHARED[key]


def shared_style(cls) -> widgets.Widget:
    """One style model per style class (LabelStyle, TextStyle ...), shared likewise."""
    key = ("style", cls)
    if key not in _SHARED:
        _SHARED[key] = cls()
    return _SHARED[key]


def _row(children: list) -> widgets.HBox:
    """A field's row: label, inputs and status, wrapping onto a second line when narrow."""
    return widgets.HBox(children, layout=shared_layout(flex_flow="row wrap", align_items="center"))


#: the narrowest a field's message is laid out beside its inputs (else under them)
STATUS_MIN_WIDTH = "16em"


def status_layout(shown: bool) -> widgets.Layout:
    """The layout of a field's status line: hidden while empty, else at least
    :data:`STATUS_MIN_WIDTH` wide (on the next line of the row when less is left)."""
    if not shown:
        return shared_layout(display="none")
    return shared_layout(margin="0 0 0 6px", flex=f"1 1 {STATUS_MIN_WIDTH}", min_width="0")


_ITEM_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,\s]+")


# ----------------------------------------------------------------------------------------
# parsing and formatting of token-id text
# ----------------------------------------------------------------------------------------
def parse_token_ids(text: str, tokenizer=None, field: str = "token ids") -> list[int]:
    """Ids from text such as ``"5, 6 7"`` or ``"12, ' Paris'"`` (quoted text is encoded).

    Returns a list of ints; raises ValueError naming ``field`` for anything else.
    """
    ids: list[int] = []
    for item in _ITEM_RE.findall(text):
        if item[0] in "'\"":
            try:
                text = ast.literal_eval(item)
            except (SyntaxError, ValueError):
                raise ValueError(
                    f"`{field}`: {item} is not closed: write quoted text as 'text' or \"text\""
                ) from None
            ids.extend(_encode_text(text, tokenizer, field))
            continue
        try:
            ids.append(int(item))
        except ValueError:
            raise ValueError(
                f"`{field}`: {item!r} is neither a token id (int) nor quoted text such as '{item}'"
            ) from None
    return ids


def _encode_text(text: str, tokenizer, field: str) -> list[int]:
    if tokenizer is None:
        raise ValueError(f"`{field}`: quoted text needs a tokenizer; enter token ids instead")
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise ValueError(f"`{field}`: {text!r} encodes to no tokens")
    return ids


def format_token_ids(ids) -> str:
    """``[5, 6]`` -> ``"5, 6"``."""
    return ", ".join(str(int(i)) for i in ids)


def parse_token_id_lists(text: str, tokenizer=None, field: str = "token ids") -> list[list[int]]:
    """One token sequence per non-empty line: ``"5 6\\n'bad word'"`` -> ``[[5, 6], [...]]``."""
    return [parse_token_ids(line, tokenizer, field) for line in text.splitlines() if line.strip()]


def parse_sequence_bias(text: str, tokenizer=None, field: str = "sequence_bias") -> dict:
    """One ``ids: bias`` pair per line: ``"5 6: -2.5"`` -> ``{(5, 6): -2.5}``."""
    out: dict[tuple[int, ...], float] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if ":" not in line:
            raise ValueError(
                f"`{field}`: line {line!r} must read 'token ids: bias', e.g. '5 6: -2'"
            )
        keys, bias = line.rsplit(":", 1)
        try:
            value = float(bias)
        except ValueError:
            raise ValueError(f"`{field}`: bias {bias.strip()!r} is not a number") from None
        ids = parse_token_ids(keys, tokenizer, field)
        if not ids:
            raise ValueError(f"`{field}`: line {line!r} names no token")
        out[tuple(ids)] = value
    return out


def format_sequence_bias(mapping) -> str:
    from ..config import normalize_sequence_bias

    return "\n".join(
        f"{format_token_ids(k)}: {v:g}" for k, v in normalize_sequence_bias(mapping).items()
    )


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def _json_text(value) -> tuple[str, bool]:
    """(text, editable) for a structured value."""
    if value is None:
        return "", True
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value)
    try:
        return json.dumps(value), True
    except TypeError:
        return repr(value), False


def _parse_json(text: str, field: str):
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if re.fullmatch(r"[A-Za-z_]\w*", text):  # a bare word such as low
            return text
        raise ValueError(f"`{field}`: {text!r} is not valid JSON ({err.msg})") from None


# ----------------------------------------------------------------------------------------
# controls
# ----------------------------------------------------------------------------------------
class FieldControl:
    """The editor of one field: ``input`` (the widget people change), a status line and a
    row ``box`` holding both. Subclasses implement ``_build``, ``read`` and ``show``."""

    def __init__(self, spec: FieldSpec, value: Any, tokenizer=None) -> None:
        self.spec = spec
        self.name = spec.name
        self.tokenizer = tokenizer
        # the status line is hidden while empty; a message takes the room left beside
        # the inputs, or the line under them when less than STATUS_MIN_WIDTH is left (the
        # row wraps): never a column a few letters wide. The label and inputs keep widths.
        self.status = widgets.HTML(layout=status_layout(False), style=shared_style(HTMLStyle))
        self.status.add_class("genlab-field-status")
        self.label = widgets.Label(
            spec.name,
            tooltip=self._tooltip(),
            layout=shared_layout(width=LABEL_WIDTH, flex="0 0 auto"),
            style=shared_style(LabelStyle),
        )
        self._build(value)
        parts = self.parts()
        for i, part in enumerate(parts):  # shared layouts: flex, and the first input's margin
            css = {"flex": "0 0 auto"}
            if part.layout.width:
                css["width"] = part.layout.width
            if i == 0 and not isinstance(part, widgets.Checkbox):
                css["margin"] = INPUT_INDENT
            own, part.layout = part.layout, shared_layout(**css)
            if own not in _SHARED.values():
                own.close()
        self.box = self._layout_box()
        self.box.add_class("genlab-field")
        self.box.add_class(f"genlab-field-{spec.name}")

    def _tooltip(self) -> str:
        rng = self.spec.describe()
        return f"{self.spec.help} ({rng}; default {self.spec.default!r})"

    # -- to implement ------------------------------------------------------------------
    def _build(self, value: Any) -> None:
        raise NotImplementedError

    def parts(self) -> list[widgets.Widget]:
        """Widgets shown between the label and the status line."""
        return [self.input]

    def _layout_box(self) -> widgets.Box:
        return _row([self.label, *self.parts(), self.status])

    def watched(self) -> list[widgets.Widget]:
        """Widgets whose ``value`` changes mean the user edited the field."""
        return [self.input]

    def read(self) -> Any:
        raise NotImplementedError

    def show(self, value: Any) -> None:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------
    def set_status(self, text: str = "", kind: str = "info") -> None:
        # a field's name in code style (`top_k`) reads as stray marks in a panel
        self.status.value = message(text.replace("`", ""), kind) if text else ""
        self.status.layout = status_layout(bool(text))

    def hint(self, value: Any) -> str:
        """Extra information shown after a valid value (e.g. the decoded tokens)."""
        return ""

    def accepted(self, value: Any) -> None:
        """Called by the panel once ``value`` is taken (validated and applied)."""


def _decimals(step: float) -> int:
    return max(0, -math.floor(math.log10(step))) if step < 1 else 0


#: magnitudes past which a field's value overflows the scores (float32) and gives NaN
#: probabilities: refused with that reason
OVERFLOW_LIMITS: dict[str, float] = {"guidance_scale": 1e4}


class NumberControl(FieldControl):
    """A text box (``text``) that takes the number as typed (read by the one parser of
    every number box, :func:`~genlab.widgets.base.parse_number`; refused with the reason
    otherwise, never clamped or rounded), after a slider (``input``) when both ends are
    known (spec range or :data:`SOFT_MAX`); without them the text box is ``input`` too.
    The slider's range is part of the field: it never changes; a typed value the field
    allows beyond it is taken, the slider then rests at its nearest end, and a refused
    value leaves the slider where it was. A leading checkbox for fields that may be None
    (unchecked = None)."""

    def _build(self, value) -> None:
        spec = self.spec
        self.is_int = spec.kind == "int"
        self.step = spec.step or (1 if self.is_int else 0.01)
        bounds = self.slider_bounds(value)
        start = value if value is not None else self._start_value(bounds)
        self.slider = None
        if bounds is not None:
            lo, hi = bounds
            cls = widgets.IntSlider if self.is_int else widgets.FloatSlider
            kind = int if self.is_int else float
            self.slider = cls(
                value=kind(min(max(start, lo), hi)),  # beyond the range: at its end
                min=kind(lo),
                max=kind(hi),
                step=kind(self.step),
                readout=False,  # the text box is the readout: it takes any typed value
                continuous_update=False,
                layout=shared_layout(width="200px"),
                style=shared_style(SliderStyle),
            )
            self.slider.observe(self._slid, names="value")
        self.text = widgets.Text(
            value=self._format(start),
            continuous_update=False,
            layout=shared_layout(width="90px" if self.slider is not None else INPUT_WIDTH),
            style=shared_style(TextStyle),
        )
        self.text.add_class("genlab-number")
        self.input = self.slider if self.slider is not None else self.text
        self.enabled = None
        if spec.nullable:
            self.enabled = widgets.Checkbox(
                value=value is not None,
                indent=False,
                tooltip="unchecked: None",
                layout=shared_layout(width="24px"),
                style=shared_style(CheckboxStyle),
            )
            self._disable(value is None)
            self.enabled.observe(self._toggle, names="value")

    def _format(self, value) -> str:
        if value is None:
            return ""
        if self.is_int:
            return str(int(value))
        return f"{float(value):.{_decimals(self.step) + 2}g}" if value else "0.0"

    def _disable(self, off: bool) -> None:
        self.text.disabled = off
        if self.slider is not None:
            self.slider.disabled = off

    def _slid(self, change) -> None:
        """The slider moved: its value goes into the text box (which the panel watches)."""
        if not getattr(self, "_showing", False):
            self.text.value = self._format(change["new"])

    def _toggle(self, change) -> None:
        """Ticking the box enables the input (and sets its value); unticking: None."""
        self._disable(not change["new"])

    def slider_bounds(self, value) -> tuple[float, float] | None:
        spec = self.spec
        if spec.token_ids:
            return None
        hi = spec.max if spec.max is not None else SOFT_MAX.get(spec.name)
        if spec.min is None or hi is None:
            return None
        # an exclusive end stays on the slider: choosing it shows the reason it is refused
        # (e.g. temperature 0) instead of silently becoming the next step
        return spec.min, hi

    def _start_value(self, bounds):
        default = self.spec.default
        if default is not None:
            return default
        if bounds is not None:  # the smallest value allowed (an exclusive end is not)
            return bounds[0] + (self.step if self.spec.min_exclusive else 0)
        return 0 if self.is_int else 0.0

    def parts(self):
        inputs = [self.text] if self.slider is None else [self.slider, self.text]
        return [self.enabled, *inputs] if self.enabled is not None else inputs

    def watched(self):
        # the slider writes its value into the text box, which is watched
        return [self.enabled, self.text] if self.enabled is not None else [self.text]

    def _number(self, value):
        """``value`` as this field's number type, or ValueError naming the field; an
        integer may be typed as ``1e8`` or ``1_000`` (a whole number), never as ``2.5``."""
        value = parse_number(value, f"`{self.name}`", whole=self.is_int)
        limit = OVERFLOW_LIMITS.get(self.name)
        if limit is not None and abs(value) > limit:
            raise ValueError(
                f"`{self.name}` = {value!r} is too large: beyond {limit:g} the scores "
                "overflow and the probabilities become NaN"
            )
        return value

    def read(self):
        if self.enabled is not None and not self.enabled.value:
            return None
        return self._number(self.text.value)  # the slider follows once it is accepted

    def accepted(self, value) -> None:
        """The panel took ``value``: the slider rests there (a refused value, over a bound
        or out of range, leaves it where it was)."""
        if value is not None:
            self._rest_slider(value)

    def _rest_slider(self, value) -> None:
        """Put the slider at ``value``, or at its nearest end when ``value`` is beyond its
        range (the range itself never changes)."""
        if self.slider is None:
            return
        self._showing = True
        try:
            self.slider.value = min(max(value, self.slider.min), self.slider.max)
        finally:
            self._showing = False

    def show(self, value) -> None:
        if value is not None:
            value = self._number(value)
        if self.enabled is not None:
            self.enabled.value = value is not None
            self._disable(value is None)
        if value is None:
            return
        self._rest_slider(value)
        self._showing = True
        try:
            self.text.value = self._format(value)
        finally:
            self._showing = False


class BoolControl(FieldControl):
    """A checkbox; a None/False/True dropdown when None is allowed."""

    def _build(self, value) -> None:
        if self.spec.nullable:
            self.input = ChoiceDropdown([None, False, True], value, "100px")
        else:
            self.input = widgets.Checkbox(
                value=bool(value),
                indent=False,
                layout=shared_layout(width="40px"),
                style=shared_style(CheckboxStyle),
            )

    def read(self):
        return self.input.choice if self.spec.nullable else self.input.value

    def show(self, value) -> None:
        if self.spec.nullable:
            self.input.choose(value if value is None else bool(value))
        else:
            self.input.value = bool(value)


#: what a dropdown shows for a choice that is a bare number (the value stays the number)
CHOICE_LABELS: dict[str, dict[Any, str]] = {
    "mirostat_mode": {0: "0: off", 1: "1: Mirostat", 2: "2: Mirostat 2.0"},
}


class ChoiceControl(FieldControl):
    """A dropdown of the spec's choices (plus None when allowed), each named in words
    where the choice is a code (:data:`CHOICE_LABELS`)."""

    def _build(self, value) -> None:
        choices = list(self.spec.choices or ())
        if self.spec.nullable:
            choices.insert(0, None)
        names = CHOICE_LABELS.get(self.spec.name, {})
        labels = [NONE_LABEL if c is None else names.get(c, str(c)) for c in choices]
        self.input = ChoiceDropdown(choices, value, "180px", labels)

    def read(self):
        return self.input.choice

    def show(self, value) -> None:
        self.input.choose(value)


#: how a dropdown shows the choice None: the setting is left to the model or the strategy
NONE_LABEL = "not set"


class ChoiceDropdown(widgets.Dropdown):
    """A Dropdown whose options may include None: its values are the options' positions,
    and ``choice`` / ``choose()`` give and take the options themselves. (An ipywidgets
    Dropdown reads the value None as "nothing selected": an option None is shown as a
    blank box, and choosing it in the browser blanks the box.) ``labels`` default to the
    options' ``str`` (None: :data:`NONE_LABEL`)."""

    def __init__(self, choices: list, value: Any, width: str, labels=None) -> None:
        self.choices = list(choices)
        labels = labels or [NONE_LABEL if c is None else str(c) for c in self.choices]
        super().__init__(
            options=list(zip(labels, range(len(self.choices)), strict=True)),
            layout=shared_layout(width=width),
            style=shared_style(DescriptionStyle),
        )
        self.choose(value)

    @property
    def choice(self) -> Any:
        return self.choices[self.value]

    def choose(self, value: Any) -> None:
        """Select the option ``value`` (of the same type: True == 1 for a Dropdown); the
        first option when none matches."""
        for i, option in enumerate(self.choices):
            if option is value or (type(option) is type(value) and option == value):
                self.value = i
                return
        self.value = 0


class TextControl(FieldControl):
    """A text box (or text area) with a parser and a formatter for one kind of value."""

    MULTILINE = ("token_id_lists", "mapping", "str_list")
    PLACEHOLDERS = {
        "str": "text",
        "str_list": "one string per line (\\n for a newline)",
        "token_ids": "ids or quoted text: 5, 17, ' Paris'",
        "token_id_lists": "one sequence per line: 5 17  or  ' bad word'",
        "token_id_or_ids": "an id, or ids separated by commas",
        "mapping": "one per line: ids: bias   e.g.  ' Paris': -5",
        "json": "JSON",
    }

    def _build(self, value) -> None:
        kind = self.spec.kind
        cls = widgets.Textarea if kind in self.MULTILINE else widgets.Text
        rows = {"rows": 2} if cls is widgets.Textarea else {}
        self.input = cls(
            placeholder=self.PLACEHOLDERS.get(kind, ""),
            continuous_update=False,
            layout=shared_layout(width=INPUT_WIDTH),
            style=shared_style(TextStyle),
            **rows,
        )
        self.show(value)

    def read(self):
        text = self.input.value
        kind, name, tok = self.spec.kind, self.spec.name, self.tokenizer
        if not text.strip():
            return None if self.spec.nullable else ([] if kind == "token_ids" else "")
        if kind == "str":
            return text
        if kind == "str_list":
            items = [_unescape(line) for line in text.splitlines() if line]
            return items[0] if len(items) == 1 else items
        if kind == "token_ids":
            return parse_token_ids(text, tok, name)
        if kind == "token_id_lists":
            return parse_token_id_lists(text, tok, name)
        if kind == "token_id_or_ids":
            ids = parse_token_ids(text, tok, name)
            return ids[0] if len(ids) == 1 else ids
        if kind == "mapping":
            return parse_sequence_bias(text, tok, name)
        return _parse_json(text, name)

    def show(self, value) -> None:
        kind = self.spec.kind
        editable = True
        if value is None:
            text = ""
        elif kind == "str":
            text = value
        elif kind == "str_list":
            text = "\n".join(_escape(s) for s in ([value] if isinstance(value, str) else value))
        elif kind == "token_ids":
            text = format_token_ids(_as_list(value))
        elif kind == "token_id_lists":
            text = "\n".join(format_token_ids(seq) for seq in _as_list(value))
        elif kind == "token_id_or_ids":
            text = format_token_ids(_as_list(value) if not isinstance(value, int) else [value])
        elif kind == "mapping":
            text = format_sequence_bias(value)
        else:
            text, editable = _json_text(value)
        self.input.value = text
        self.input.disabled = not editable

    def hint(self, value) -> str:
        if value is None or self.tokenizer is None or not self.spec.token_ids:
            return ""
        if self.spec.kind not in ("token_ids", "token_id_lists", "token_id_or_ids", "mapping"):
            return ""
        if self.spec.kind == "mapping":
            seqs = [list(k) for k in value]
        elif self.spec.kind == "token_id_lists":
            seqs = value
        else:
            seqs = [value] if isinstance(value, list) else [[value]]
        try:
            return "= " + ", ".join(repr(self.tokenizer.decode(list(s))) for s in seqs)
        except Exception:  # an id outside the vocabulary: validation reports it
            return ""


def _as_list(value) -> list:
    return value.tolist() if hasattr(value, "tolist") else list(value)


class WatermarkControl(FieldControl):
    """Off / green list / SynthID, with the chosen scheme's own fields (from its specs)."""

    SCHEMES = (
        ("off", None),
        ("green list (Kirchenbauer)", "greenlist"),
        ("SynthID text", "synthid"),
    )

    def _build(self, value) -> None:
        labels, keys = zip(*self.SCHEMES, strict=True)
        self.input = ChoiceDropdown(keys, self._scheme(value), "220px", list(labels))
        wm = value.to_dict() if isinstance(value, WatermarkingConfig) else {}
        sid = value.to_dict() if isinstance(value, SynthIDTextWatermarkingConfig) else {}
        self.sub = {
            "greenlist": {
                n: make_control(s, wm.get(n, s.default), self.tokenizer)
                for n, s in WATERMARK_FIELDS.items()
            },
            "synthid": {
                n: make_control(s, sid.get(n, SYNTHID_EXAMPLE.get(n, s.default)), self.tokenizer)
                for n, s in SYNTHID_FIELDS.items()
            },
        }
        self.sub_boxes = {
            k: widgets.VBox([c.box for c in v.values()], layout=widgets.Layout(margin="0 0 0 24px"))
            for k, v in self.sub.items()
        }
        self._show_scheme(self.input.choice)

    def _scheme(self, value):
        if isinstance(value, SynthIDTextWatermarkingConfig):
            return "synthid"
        return "greenlist" if isinstance(value, WatermarkingConfig) else None

    def _show_scheme(self, scheme) -> None:
        for key, box in self.sub_boxes.items():
            box.layout.display = None if key == scheme else "none"

    def _layout_box(self) -> widgets.Box:
        row = _row([self.label, self.input, self.status])
        return widgets.VBox([row, *self.sub_boxes.values()])

    def watched(self):
        out = [self.input]
        for controls in self.sub.values():
            for c in controls.values():
                out.extend(c.watched())
        return out

    def read(self):
        scheme = self.input.choice
        self._show_scheme(scheme)
        if scheme is None:
            return None
        cls = WatermarkingConfig if scheme == "greenlist" else SynthIDTextWatermarkingConfig
        return cls(**{n: c.read() for n, c in self.sub[scheme].items()})

    def show(self, value) -> None:
        scheme = self._scheme(value)
        self.input.choose(scheme)
        self._show_scheme(scheme)
        if scheme is not None:
            for n, v in value.to_dict().items():
                if n in self.sub[scheme]:
                    self.sub[scheme][n].show(v)


def make_control(spec: FieldSpec, value: Any, tokenizer=None) -> FieldControl:
    """The editor that fits ``spec`` (see the module docstring)."""
    if spec.group == "watermark" and spec.kind == "json" and FIELDS.get(spec.name) is spec:
        return WatermarkControl(spec, value, tokenizer)
    if spec.kind in ("int", "float"):
        return NumberControl(spec, value, tokenizer)
    if spec.kind == "bool":
        return BoolControl(spec, value, tokenizer)
    if spec.kind == "choice":
        return ChoiceControl(spec, value, tokenizer)
    return TextControl(spec, value, tokenizer)
