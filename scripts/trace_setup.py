"""Which genlab modules a run's set-up enters, in order, on its way to the first forward.

Run it to print the sequence for a tiny random GPT-2 (transformers' adapter)::

    .venv/bin/python scripts/trace_setup.py            # the stages and every module
    .venv/bin/python scripts/trace_setup.py --full     # also each function entered

:func:`trace_modules` records, with ``sys.setprofile``, every Python function entered in a
``genlab`` module while ``fn()`` runs, until the first model forward. tests/test_setup_pipeline.py
uses it to check that the set-up is a pipeline (config -> inputs -> plan -> state), each
stage entered once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

#: the set-up's stages in pipeline order, and the module each lives in
STAGES = (
    ("config", "genlab.config"),
    ("inputs", "genlab.run.inputs"),
    ("plan", "genlab.run.plan"),
    ("state", "genlab.run.state"),
)
#: where the set-up is driven from: the Run (its methods are in engine and branches) and
#: the functions that make one
DRIVERS = ("genlab.run.engine", "genlab.run.branches", "genlab.lm")


class FirstForward(Exception):
    """Raised by the tracer at the first model forward, to end the traced call."""


def _module(frame) -> str:
    return frame.f_globals.get("__name__", "") or ""


def trace_modules(fn: Callable[[], object]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(module, function, path)`` of every genlab function entered while ``fn()`` runs,
    up to the first model forward (which ends ``fn``).

    ``path`` is the chain of genlab modules on the stack below the driver (the Run and the
    functions that make one), outermost first, one entry per module hop: ``path[0]`` is the
    set-up stage the call belongs to (a helper that a stage calls counts as that stage), and
    a nested run (token healing generates) counts as part of the stage that started it."""
    calls: list[tuple[str, str, tuple[str, ...]]] = []

    def path_of(frame) -> tuple[str, ...]:
        mods = []
        while frame is not None:
            mod = _module(frame)
            if mod.startswith("genlab") and not mod.startswith(DRIVERS):
                mods.append(mod)
            frame = frame.f_back
        return tuple(collapse(reversed(mods)))

    def profile(frame, event, arg):
        if event != "call":
            return
        mod = _module(frame)
        if not mod.startswith("genlab") or frame.f_code.co_name == "<module>":
            return
        name = frame.f_code.co_name
        if name == "forward" and mod.startswith(("genlab.models", "genlab.strategies")):
            raise FirstForward
        calls.append((mod, name, path_of(frame)))

    sys.setprofile(profile)
    try:
        fn()
    except FirstForward:
        pass
    finally:
        sys.setprofile(None)
    return calls


def set_up(calls):
    """The calls before the run's first step (the set-up), and those of the step up to its
    forward."""
    for i, (mod, name, _) in enumerate(calls):
        if mod == "genlab.run.engine" and name == "_step":
            return calls[:i], calls[i:]
    return calls, []


def stage_of(path: tuple[str, ...]) -> str:
    """The stage name of a call's path (its outermost module), or that module's name."""
    for name, prefix in STAGES:
        if path[0] == prefix or path[0].startswith(prefix + "."):
            return name
    return short_name(path[0])


#: folders that group a layer's modules: their modules keep their own names (run.context ->
#: context); the other packages are one concept each (config.fields -> config)
ROOMS = ("run", "runtime", "inside", "text", "experiments")


def short_name(module: str) -> str:
    """``genlab.run.context`` -> ``context``, ``genlab.config.fields`` -> ``config``."""
    parts = module.split(".")[1:]
    return parts[1] if len(parts) > 1 and parts[0] in ROOMS else parts[0]


def stages(calls) -> list[str]:
    """The stages the calls went through, in order (consecutive repeats dropped; calls in
    the driver itself left out)."""
    return collapse(stage_of(path) for _, _, path in calls if path)


def modules(calls, depth: int = 2) -> list[str]:
    """The modules entered within ``depth`` module hops of the driver, in order, named as
    :func:`short_name` names them."""
    short = [short_name(path[-1]) for _, _, path in calls if path and len(path) <= depth]
    return collapse(short)


def collapse(items) -> list[str]:
    """Consecutive repeats dropped: ``[a, a, b, a] -> [a, b, a]``."""
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def setup_calls():
    """The calls of ``genlab.generate`` on a tiny random GPT-2 up to its first forward."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import tiny_gpt2

    import genlab

    model = tiny_gpt2()
    ids = torch.tensor([[5, 6, 7]])

    def go():
        return genlab.generate(model, ids, max_new_tokens=3, do_sample=False)

    go()  # imports and first-call caches out of the way
    return trace_modules(go)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    calls = setup_calls()
    setup, step = set_up(calls)
    print("set-up stages: ", " -> ".join(stages(setup)))
    print("set-up modules:", " -> ".join(modules(setup)))
    print("first step, to its forward:", " -> ".join(modules(step)))
    if "--full" in argv:
        for mod, name, path in calls:
            print(f"  {stage_of(path):>10}  {'  ' * len(path)}{mod}.{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
