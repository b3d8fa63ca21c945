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
import traceback
import warnings
from typing import Any

import ipywidgets as widgets

from ..config import GenerationConfig
from ..engine import Run
from .config_panel import WARNINGS_LOCK
from .render import message
from .worker import Job, Worker, drain

SPECIAL_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def initial_config(lm, config: GenerationConfig | None = None, **overrides) -> GenerationConfig:
    """The model's generation defaults (or ``config``) with ``overrides``; 20 new tokens
    unless a length is given. Special tokens the defaults leave unset come from the model
    (as transformers derives a generation config from the model config)."""
    if config is None:
        defaults = dict(lm.info.generation_defaults or {})
        for name in SPECIAL_TOKEN_FIELDS:
            if defaults.get(name) is None and getattr(lm.info, name, None) is not None:
                defaults[name] = getattr(lm.info, name)
        config = GenerationConfig.from_dict(defaults) if defaults else GenerationConfig()
    else:
        config = config.copy()
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
    return config


def start_run(
    lm,
    prompt,
    *,
    chat: bool,
    seed: int | None,
    config: GenerationConfig,
    trace_top_k: int = 10,
    tracer_class=None,
) -> Run:
    """A traced Run of ``lm`` on ``prompt`` with a private copy of ``config``. Warnings of
    the set-up are kept in ``run.warnings``; ``tracer_class`` replaces the Tracer."""
    if isinstance(prompt, str) and not prompt.strip() and not chat:
        raise ValueError("prompt is empty: type some text to continue (or tick chat)")
    ids, mask = lm.encode(prompt, chat=chat)
    with WARNINGS_LOCK, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        run = Run(
            lm.model,
            input_ids=ids,
            attention_mask=mask,
            tokenizer=lm.tokenizer,
            generation_config=config.copy(),
            trace={"top_k": trace_top_k},
            seed=seed,
            return_dict_in_generate=True,
            output_scores=True,
            prefix_cache=getattr(lm, "prefix_cache", None),  # a re-run reuses the prompt
        )
    if tracer_class is not None:
        run.attach_tracer(tracer_class(run, top_k=trace_top_k))
    return run


class Cancelled(Exception):
    """Raised inside ``compute`` when a newer request replaced the job."""


class LiveView(widgets.VBox):
    """Base of the live widgets (see the module docstring)."""

    def _init_live(self, debounce: float, auto_update: bool) -> None:
        self.result: Any = None
        self.error: str | None = None
        self.version = 0
        self.timings: dict[str, float] = {}
        stepwise = inspect.isgeneratorfunction(self.compute)
        self.worker = Worker(self._job if stepwise else self._job_to_end, debounce=debounce)
        self.generate_button = widgets.Button(description="Generate", button_style="primary")
        self.stop_button = widgets.Button(description="Stop", button_style="warning")
        self.auto_box = widgets.Checkbox(value=auto_update, description="auto-update", indent=False)
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, layout=widgets.Layout(width="160px")
        )
        self.status = widgets.HTML()
        self.generate_button.on_click(lambda _: self.update())
        self.stop_button.on_click(lambda _: self.stop())

    def _init_prompt_inputs(self, prompt: str, chat: bool, seed: int | None) -> None:
        """The prompt box, chat switch and seed box every live view has; any change
        schedules a new generation."""
        self.prompt_box = widgets.Textarea(
            value=prompt, rows=2, continuous_update=False, layout=widgets.Layout(width="100%")
        )
        self.chat_box = widgets.Checkbox(value=chat, description="chat", indent=False)
        self.seed_box = widgets.IntText(
            value=0 if seed is None else seed,
            description="seed",
            layout=widgets.Layout(width="150px"),
        )
        for box in (self.prompt_box, self.chat_box, self.seed_box):
            box.observe(self.on_input, names="value")

    def controls_row(self) -> widgets.HBox:
        return widgets.HBox(
            [self.generate_button, self.stop_button, self.auto_box, self.progress, self.status]
        )

    # -- to implement ----------------------------------------------------------------------
    def compute(self, job: Job) -> Any:
        raise NotImplementedError

    def render(self, data: Any) -> None:
        raise NotImplementedError

    # -- public ----------------------------------------------------------------------------
    def update(self, sync: bool = False):
        """Recompute with the current inputs, cancelling a running computation; with
        ``sync`` wait for it and return ``result``."""
        self.worker.submit(sync=sync)
        return self.result if sync else None

    def stop(self) -> None:
        """Stop the running generation at its next step (what it made so far is shown)."""
        self.worker.stop()

    def wait(self, timeout: float | None = None):
        """Wait for a scheduled or running update; returns ``result``."""
        self.worker.wait(timeout)
        return self.result

    # -- helpers for subclasses -------------------------------------------------------------
    def on_input(self, change=None) -> None:
        """Observer for inputs: schedule a debounced update when auto-update is on."""
        if self.auto_box.value:
            self.worker.schedule()

    #: seconds between two paints of a generation in progress
    STREAM_EVERY = 0.03

    def stream(self, run: Run, job: Job) -> None:
        """Show a generation in progress (called every :data:`STREAM_EVERY` seconds from
        :meth:`drive`); subclasses draw the tokens so far."""

    def drive(self, run: Run, job: Job, label: str = ""):
        """Generator: step ``run`` to its end, yielding after every step and streaming it
        into the view (:meth:`stream`: the first token at once, then every
        :data:`STREAM_EVERY` seconds) with its progress (tokens so far, tokens/s); stops
        early on Stop, and raises :class:`Cancelled` when a newer request replaced the job
        (checked before every step, so a newer change cancels this generation at its next
        step). Returns ``run``: ``run = yield from self.drive(run, job)``."""
        total = max(1, int(run.gen_config.max_length) - int(run.prompt_length))
        self.progress.max, self.progress.value = total, 0
        t0 = time.perf_counter()
        last = t0 - self.STREAM_EVERY  # the first token is shown as soon as it exists
        while not run.finished:
            if job.cancelled.is_set():
                if not job.stopped:
                    raise Cancelled
                run.stop()
                break
            run.step()
            now = time.perf_counter()
            if now - last >= self.STREAM_EVERY and self.worker.is_current(job):
                last = now
                self.progress.value = min(run.step_index, total)
                rate = run.step_index / (now - t0) if now > t0 else 0.0
                self.status.value = message(
                    f"generating{(' ' + label) if label else ''}… {run.step_index} of "
                    f"{total} tokens · {rate:.1f} tokens/s",
                    "info",
                )
                self.stream(run, job)
            yield
        self.progress.value = min(run.step_index, total)
        return run

    def generate(self, job: Job, config: GenerationConfig, **start_kwargs):
        """Generator: a run of the view's prompt, chat and seed inputs with ``config``
        (``start_kwargs`` go to :func:`start_run`), driven to its end (:meth:`drive`);
        returns its result: ``result = yield from self.generate(job, config)``."""
        run = start_run(
            self.lm,
            self.prompt_box.value,
            chat=self.chat_box.value,
            seed=self.seed_box.value,
            config=config,
            **start_kwargs,
        )
        return self.lm.result((yield from self.drive(run, job)))

    # -- internals -------------------------------------------------------------------------
    def _job_to_end(self, job: Job):
        """``_job`` for a plain ``compute``: the worker runs it in a thread."""
        return drain(self._job(job))

    def _job(self, job: Job):
        """Generator: compute (stepwise when ``compute`` is a generator) and render one
        request; errors are shown in the widget, a replaced request shows nothing."""
        t0 = time.perf_counter()
        self.status.value = message("generating…")
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
        t2 = time.perf_counter()
        self.error = None
        self.timings = {"compute": t1 - t0, "render": t2 - t1, "total": t2 - t0}
        self.version += 1
        return self.result

    def _fail(self, err: Exception) -> None:
        self.error = f"{type(err).__name__}: {err}"
        last = traceback.extract_tb(err.__traceback__)[-1:]
        where = f" (in {last[0].name}, {last[0].filename.split('/')[-1]})" if last else ""
        kept = " The last good result is still shown." if self.result is not None else ""
        self.status.value = message(self.error + where + kept, "error")
