"""LiveView: the shared skeleton of widgets whose results follow their inputs.

A subclass implements ``compute(job)`` (returns what to show, or None when the job was
replaced) and ``render(data)``; LiveView brings the rest: a debounced
:class:`~genlab.widgets.worker.Worker`, Generate / Stop buttons, a progress bar, a status
line, auto-update, error display that keeps the last good result, and the methods tests
use (``update(sync=True)``, ``wait()``, ``error``, ``version``).

A ``compute`` that generates is a generator: ``yield from self.drive(run, job)`` steps
the run and yields after every token, so that in a Jupyter kernel the generation runs on
the kernel's own thread, one token per event-loop callback, and a newer change or Stop
is read between two tokens (see :mod:`genlab.widgets.worker`). A plain ``compute`` runs
in a thread.
"""

from __future__ import annotations

import inspect
import time
import warnings
from typing import Any

import ipywidgets as widgets

from ..config import GenerationConfig
from ..config.limits import Limits, model_limits
from ..config.resolve import default_config
from ..run.engine import Run
from .base import MAX_SEED, Panel, button, controls_row, parse_int
from .render import WARNINGS_LOCK, message
from .worker import Job, Worker, drain


def limits_of(lm) -> Limits:
    """The upper bounds ``lm`` and this machine set on the fields (see
    :func:`genlab.config.limits.model_limits`)."""
    return model_limits(lm.info)


def initial_config(lm, config: GenerationConfig | None = None, **overrides) -> GenerationConfig:
    """The model's generation defaults (or ``config``) with ``overrides``; 20 new tokens
    unless a length is given (:func:`genlab.config.resolve.default_config` gives the
    defaults, as a run's set-up does). A value over
    the bound the model and machine set (:func:`limits_of`) is refused here, before a
    panel allocates anything: ``BeamExplorer(lm, "Hi", num_beams=10**9)`` raises."""
    config = default_config(lm.info) if config is None else config.copy()
    if (
        "max_new_tokens" not in overrides
        and "max_length" not in overrides
        and config.max_new_tokens is None
    ):
        overrides["max_new_tokens"] = 20
    with WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unused = config.update(**overrides)
    if unused:
        raise ValueError(
            f"unknown generation settings: {', '.join(sorted(unused))}; see "
            "genlab.config.FIELDS for the field names"
        )
    limits_of(lm).check(config)
    return config


def start_run(
    lm,
    prompt,
    *,
    chat: bool,
    seed: int | None,
    config: GenerationConfig,
    trace_depth: int = 10,
    tracer_class=None,
    keep_history: bool = False,
    constraint: dict | None = None,
) -> Run:
    """The one way a panel starts a run: a traced Run of ``lm`` on ``prompt`` with a
    private copy of ``config``, through :meth:`genlab.LM.start`; ``keep_history``
    for a run that rewinds and forks (the StepDebugger). Warnings of the set-up are kept
    in ``run.views.warnings``; ``trace_depth``: candidates the trace keeps per stage;
    ``tracer_class`` replaces the Tracer; ``constraint``: ``json_schema=``, ``regex=`` or
    ``grammar=`` of ``lm.start`` (a grammar stage in the run's waterfall)."""
    if isinstance(prompt, str) and not prompt.strip() and not chat:
        raise ValueError("prompt is empty: type some text to continue (or tick chat)")
    limits_of(lm).check(config)  # before anything is allocated
    with WARNINGS_LOCK, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        run = lm.start(
            prompt,
            chat=chat,
            trace={"depth": trace_depth},
            seed=seed,
            keep_history=keep_history,
            generation_config=config.copy(),
            **(constraint or {}),
        )
    if tracer_class is not None:
        run.attach_tracer(tracer_class(run, depth=trace_depth))
    return run


def run_total(run) -> int:
    """How many tokens ``run`` generates at most under its config now (so that a raised
    ``max_new_tokens`` raises the total), never fewer than it has generated."""
    try:
        limit = int(run.views.gen_config.max_length) - int(run.prompt_length)
    except (AttributeError, TypeError):
        limit = 0
    return max(1, limit, int(run.step_index))


def ended_text(run) -> str:
    """Why ``run`` stopped, in words (from ``run.finished_by``): the model's end-of-text
    token, the length limit, a stop string or criterion, or Stop; "" while it runs."""
    n = int(run.step_index)
    by = getattr(run, "finished_by", None)
    if by == "eos":
        return f"the model ended the text (end-of-text token) after {n} tokens"
    if by == "length":
        limit = getattr(run.config, "max_new_tokens", None)
        name = "max_new_tokens" if limit is not None else "max_length"
        return f"it reached {name} ({n} tokens)"
    if by == "criteria":
        stops = getattr(run.config, "stop_strings", None)
        what = "a stop string" if stops else "a stopping criterion (max_time or your own)"
        return f"{what} ended the text after {n} tokens"
    if by == "interrupted":
        return f"stopped by Stop after {n} tokens"
    return ""


class Cancelled(Exception):
    """Raised inside ``compute`` when a newer request replaced the job."""


class LiveView(Panel):
    """Base of the live panels (see the module docstring).

    A subclass's ``__init__`` calls ``super().__init__(debounce=..., auto_update=...,
    prompt=..., chat=..., seed=...)`` before it builds its own controls, then lays the
    panel out (``self.children = [...]``): the controls made here (Generate / Stop,
    auto-update, progress, status; the prompt, chat and seed inputs unless ``prompt`` is
    None) are in its layout."""

    def __init__(
        self,
        *,
        debounce: float,
        auto_update: bool,
        prompt: str | None = None,
        chat: bool = False,
        seed: int | None = 0,
        **kwargs: Any,
    ) -> None:
        self.result: Any = None
        self.error: str | None = None
        self.version = 0
        self.timings: dict[str, float] = {}
        stepwise = inspect.isgeneratorfunction(self.compute)
        self.worker = Worker(self._job if stepwise else self._job_to_end, debounce=debounce)
        self.generate_button = button("Generate", button_style="primary")
        self.stop_button = button("Stop", button_style="warning", disabled=True)
        self.stop_button.tooltip = "stop the generation at its next token"
        self.auto_box = widgets.Checkbox(value=auto_update, description="auto-update", indent=False)
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, layout=widgets.Layout(width="160px")
        )
        self.status = widgets.HTML()
        self.status.add_class("genlab-status")
        self.generate_button.on_click(lambda _: self.update())
        self.stop_button.on_click(lambda _: self.stop())
        if prompt is not None:
            # any change of the prompt inputs schedules a new generation (the prompt as it
            # is typed, after the debounce)
            self.prompt_box = widgets.Textarea(
                value=prompt, rows=2, continuous_update=True, layout=widgets.Layout(width="auto")
            )
            self.chat_box = widgets.Checkbox(value=chat, description="chat", indent=False)
            self.seed_box = widgets.Text(
                value="0" if seed is None else str(seed),
                description="seed",
                continuous_update=False,
                layout=widgets.Layout(width="200px"),
            )
            for box in (self.prompt_box, self.chat_box, self.seed_box):
                box.observe(self.on_input, names="value")
        super().__init__(**kwargs)

    @property
    def seed(self) -> int:
        """The seed typed in the seed box, taken as typed (ValueError with the reason for
        "2.5", "1e5" or a number torch cannot take)."""
        return parse_int(self.seed_box.value, "seed", 0, MAX_SEED)

    def controls_row(self, *extra: widgets.Widget) -> widgets.VBox:
        """Generate / Stop / auto-update / progress (and ``extra``) in a row that wraps,
        with the status line below it (a long message never squeezes the buttons)."""
        row = controls_row(
            self.generate_button, self.stop_button, *extra, self.auto_box, self.progress
        )
        return widgets.VBox([row, self.status])

    # -- to implement ----------------------------------------------------------------------
    def compute(self, job: Job) -> Any:
        raise NotImplementedError

    def render(self, data: Any) -> None:
        raise NotImplementedError

    # -- public ----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """True while a generation is scheduled or running."""
        return self.worker.busy or self.worker.pending

    def update(self, sync: bool = False):
        """Recompute with the current inputs, cancelling a running computation; with
        ``sync`` wait for it and return ``result``."""
        self._busy(True)
        self.worker.submit(sync=sync)
        return self.result if sync else None

    def close(self) -> None:
        """Close the panel: the scheduled or running generation is cancelled (it stops at its
        next step), then the widget is closed. A panel whose construction was refused (bad
        settings) has no worker yet: it only closes the widget."""
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.close()
            self._busy(False)
        super().close()

    def stop(self) -> None:
        """Stop the running generation at its next step (what it made so far is shown)."""
        self.worker.stop()
        if not self.worker.busy:
            self._busy(False)

    def wait(self, timeout: float | None = None):
        """Wait for a scheduled or running update; returns ``result``."""
        self.worker.wait(timeout)
        return self.result

    # -- helpers for subclasses -------------------------------------------------------------
    #: seconds of quiet after a committed change (a slider released, a box left with
    #: Enter, a checkbox) before generating: enough to take a burst of arrow-key steps as
    #: one change, without the typing pause (``debounce``) that only the prompt needs
    COMMIT_DELAY = 0.05

    def on_input(self, change=None) -> None:
        """Observer for inputs: schedule an update when auto-update is on, after the
        debounce while the prompt is being typed, after :data:`COMMIT_DELAY` for a
        committed change (every other control)."""
        if self.auto_box.value:
            typing = isinstance(change, dict) and change.get("owner") is getattr(
                self, "prompt_box", None
            )
            if typing:
                self._busy(True, "waiting for the typing to pause…")
                self.worker.schedule()
            else:
                self._busy(True)
                self.worker.schedule(min(self.COMMIT_DELAY, self.worker.debounce))

    def _busy(self, on: bool, note: str = "working…") -> None:
        """The busy state, visible at once: a class on the panel, Stop enabled, a note."""
        if on:
            self.add_class("genlab-busy")
            self.stop_button.disabled = False
            if not self.status.value or "genlab-error" not in self.status.value:
                self.status.value = message(note)
        else:
            self.remove_class("genlab-busy")
            self.stop_button.disabled = True

    #: seconds between two paints of a generation in progress: ten a second reads as
    #: smooth, and each paint is work for the browser, which may share the kernel's cores
    #: (what painting every step cost: benchmarks/README.md)
    STREAM_EVERY = 0.1

    def stream(self, run: Run, job: Job) -> None:
        """Show a generation in progress (called every :data:`STREAM_EVERY` seconds from
        :meth:`drive`); subclasses draw the tokens so far."""

    def progress_text(self, run: Run, total: int, rate: float, label: str = "") -> str:
        """The status line (HTML) while :meth:`drive` steps ``run``: its ``total`` tokens
        now, the ``rate`` in tokens/s, ``label`` naming the run; subclasses may say more."""
        return message(
            f"generating{(' ' + label) if label else ''}… {run.step_index} of "
            f"{total} tokens · {rate:.1f} tokens/s (Stop keeps them)",
            "info",
        )

    def drive(self, run: Run, job: Job, label: str = "", end_on_stop: bool = True):
        """Generator: step ``run`` to its end, yielding after every step and streaming it
        into the view (:meth:`stream`: the first token at once, then every
        :data:`STREAM_EVERY` seconds) with its progress (:meth:`progress_text`: tokens so
        far of the run's total now, tokens/s); stops early on Stop (which ends the run,
        ``run.stop()``, unless ``end_on_stop`` is False: it then stays steppable), and
        raises :class:`Cancelled` when a newer request replaced the job (checked before
        every step). Returns ``run``: ``run = yield from self.drive(run, job)``."""
        self.progress.max, self.progress.value = run_total(run), run.step_index
        t0 = time.perf_counter()
        start = run.step_index
        last = t0 - self.STREAM_EVERY  # the first token is shown as soon as it exists
        while not run.finished:
            if job.cancelled.is_set():
                if not job.stopped:
                    raise Cancelled
                if end_on_stop:
                    run.stop()
                break
            run.step()
            now = time.perf_counter()
            if now - last >= self.STREAM_EVERY and self.worker.is_current(job):
                last = now
                total = run_total(run)
                self.progress.max, self.progress.value = total, run.step_index
                rate = (run.step_index - start) / (now - t0) if now > t0 else 0.0
                self.status.value = self.progress_text(run, total, rate, label)
                self.stream(run, job)
            yield
        self.progress.max, self.progress.value = run_total(run), run.step_index
        return run

    def generate(self, job: Job, config: GenerationConfig, **start_kwargs):
        """Generator: a run of the view's prompt, chat and seed inputs with ``config``
        (``start_kwargs`` go to :func:`start_run`), driven to its end (:meth:`drive`);
        returns its result: ``result = yield from self.generate(job, config)``."""
        run = start_run(
            self.lm,
            self.prompt_box.value,
            chat=self.chat_box.value,
            seed=self.seed,
            config=config,
            **start_kwargs,
        )
        return (yield from self.drive(run, job)).result()

    # -- internals -------------------------------------------------------------------------
    def _job_to_end(self, job: Job):
        """``_job`` for a plain ``compute``: the worker runs it in a thread."""
        return drain(self._job(job))

    def _job(self, job: Job):
        """Generator: compute (stepwise when ``compute`` is a generator) and render one
        request; errors are shown in the widget, a replaced request shows nothing."""
        t0 = time.perf_counter()
        self._busy(True, "generating…")
        try:
            data = self.compute(job)
            if inspect.isgenerator(data):
                data = yield from data
            t1 = time.perf_counter()
            if not self.worker.is_current(job):
                return None  # a newer request replaced it: show only the newest
            self.render(data)
        except Cancelled:
            return None
        except Exception as err:  # shown in the widget; the last good result stays
            if self.worker.is_current(job):
                self._fail(err)
            return None
        finally:
            if self.worker.is_current(job) and not self.worker.pending:
                self._busy(False)
        t2 = time.perf_counter()
        self.error = None
        self.timings = {"compute": t1 - t0, "render": t2 - t1, "total": t2 - t0}
        self.version += 1
        return self.result

    def _fail(self, err: Exception) -> None:
        self.show_error(err, kept=self.result is not None)
