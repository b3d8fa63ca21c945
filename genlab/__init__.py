"""genlab: see and steer how language models generate text.

A generation engine that behaves like Hugging Face transformers' ``generate()`` (v4.56.2),
written as one explicit step loop with hook points, plus tables, plots and widgets.

Start here (the embedded demo model runs offline, on a CPU):

>>> import genlab
>>> lm = genlab.load("demo")                  # SmolLM2-135M-Instruct; or a folder, a Hub id
>>> lm.generate("What is the capital of France?", chat=True, max_new_tokens=10).text
'The capital of France is Paris.'
>>> run = lm.start("Once upon a time")        # step, force, rewind, fork, hooks
>>> run.step()
Step(0, text=[','], logprobs=[-0.075], finished=False)

What to import:

* ``genlab.load``, ``genlab.LM``: a model and its tokenizer, driven by text
  (``lm.generate``, ``lm.start``, ``lm.score``, ``run.result().text``);
* ``genlab.generate``, ``genlab.Run``: transformers' ``generate()`` on ids, and its step loop;
* ``genlab.GenerationConfig``: every setting, with the reference's defaults;
* ``genlab.plots`` (matplotlib figures), ``genlab.widgets`` (Jupyter panels);
* ``genlab.Trace``, ``genlab.logit_lens``, ``genlab.attention``, ``genlab.sweep``;
* ``genlab.best_of_n``, ``genlab.self_consistency``, ``genlab.coverage_curve``: N samples
  and a rule to keep one, and coverage against N (tasks in ``genlab.experiments.tasks``).

Where to look next: ``help(genlab.load)``, ``help(genlab.Run)``; ``dir(genlab)`` lists
every public name; the lessons in ``notebooks/`` (notebooks/README.md has the course map);
``make docs`` builds the API reference.
"""

from __future__ import annotations

from genlab.lazy import lazy_exports as _lazy_exports

__version__ = "0.1.0"

_LAZY = {
    "generate": ("run.engine", "generate"),
    "start": ("run.engine", "start"),
    "Run": ("run.engine", "Run"),
    "Step": ("run.engine", "Step"),
    "load": ("lm", "load"),
    "LM": ("lm", "LM"),
    "GenerationResult": ("lm", "GenerationResult"),
    "GenerationConfig": ("config", "GenerationConfig"),
    "CompileConfig": ("config", "CompileConfig"),
    "WatermarkingConfig": ("config", "WatermarkingConfig"),
    "SynthIDTextWatermarkingConfig": ("config", "SynthIDTextWatermarkingConfig"),
    "GenerationMode": ("config", "GenerationMode"),
    "compute_transition_scores": ("outputs", "compute_transition_scores"),
    "TextStreamer": ("streamers", "TextStreamer"),
    "TextIteratorStreamer": ("streamers", "TextIteratorStreamer"),
    "NotebookStreamer": ("streamers", "NotebookStreamer"),
    "BeamStreamer": ("streamers", "BeamStreamer"),
    "WatermarkDetector": ("watermark", "WatermarkDetector"),
    "greenlist": ("watermark", "greenlist"),
    "LogitsProcessorList": ("processors", "LogitsProcessorList"),
    "StoppingCriteriaList": ("stopping", "StoppingCriteriaList"),
    "PhrasalConstraint": ("strategies.constraints", "PhrasalConstraint"),
    "DisjunctiveConstraint": ("strategies.constraints", "DisjunctiveConstraint"),
    "TableLM": ("models.table", "TableLM"),
    "Trace": ("run.trace", "Trace"),
    "logit_lens": ("inside.lens", "logit_lens"),
    "attention": ("inside.lens", "attention"),
    "score": ("lm", "score"),
    "sweep": ("experiments.sweeps", "sweep"),
    "best_of_n": ("experiments.compute", "best_of_n"),
    "self_consistency": ("experiments.compute", "self_consistency"),
    "coverage_curve": ("experiments.compute", "coverage_curve"),
    "pass_at_k": ("experiments.compute", "pass_at_k"),
    "activations": ("inside.steering", "activations"),
    "steering_vector": ("inside.steering", "steering_vector"),
    "steer": ("inside.steering", "steer"),
    "ablate_head": ("inside.steering", "ablate_head"),
    "patch": ("inside.steering", "patch"),
    "steering_sweep": ("inside.steering", "steering_sweep"),
    "patching_table": ("inside.steering", "patching_table"),
    "attribute": ("inside.attribution", "attribute"),
}


# the subpackages a user reaches as attributes (`genlab.plots.token_probs`)
_SUBPACKAGES = (
    "plots",
    "widgets",
    "models",
    "processors",
    "strategies",
    "config",
    "watermark",
    "run",
    "runtime",
    "inside",
    "text",
    "experiments",
)

# `import genlab` stays fast and light: torch is imported when a name that needs it is
# first read. `__all__` is withheld from pydoc only, so that help(genlab) is the guide
# above, not every class in full; dir() shows the public names and the subpackages.
__getattr__, __dir__ = _lazy_exports(
    __name__, _LAZY, subpackages=_SUBPACKAGES, extra=("__version__",), all_for_pydoc=False
)
