"""Glossary: one name for each concept, and where it lives.

This module holds no code; it is the vocabulary the rest of genlab uses.

**run** -- a generation in progress, :class:`genlab.run.engine.Run`. ``lm.start(...)`` makes
one that can step, force, rewind and fork; ``lm.generate(...)`` and ``genlab.generate``
drive one to the end.

**output** / **result** -- ``genlab.generate(model, input_ids, ...)`` returns what
transformers' ``generate`` returns for the same arguments: the sequences tensor, or with
``return_dict_in_generate=True`` an output object (``run.output`` is the same). A
**result**, :class:`~genlab.run.result.GenerationResult`, is that output with the text, the
tokens as shown, the run and its trace: ``lm.generate(text)`` returns one (the runs of an
``LM``, ``lm.start`` too, record the scores its tables need: ``return_dict_in_generate``
and ``output_scores`` are on unless given), and ``run.result()`` makes one from any run.

**step** -- one pass of the step loop: forward, processors, choice, commit. A step adds
one token per row (assisted decoding adds several). **step index**: how many steps a run
has taken, ``run.step_index``; the step being computed has that index (0 = the first
generated token). A :class:`~genlab.run.engine.Step` record's ``index``, a trace record's
``step``, a hook's ``step=`` argument and ``ctx.step_index`` are all this number.

**config** / **config in force** -- ``run.config`` is the user's editable
GenerationConfig (edits apply at the next step; ``run.set(...)`` checks them at once).
``run.views.gen_config`` is the config in force: the same values with the lengths resolved for
the prompt, what the processors, criteria and strategy were built from (``ctx.gen_config``
inside a step). Rewinding restores the config that was in force at the step rewound to.

**EOS ids** -- the end-of-sequence ids as a list of ints, ``run.views.eos_token_ids``;
:func:`genlab.ids.eos_token_ids` turns any form (an int, a list, a tensor, a config) into
it.

**history** -- two things with distinct names: ``run.history`` is the list of
:class:`~genlab.run.engine.Step` records of the steps taken by ``run.step()``, and by
``run.run()`` when the run keeps a timeline (what happened); ``run.timeline``,
the run's :class:`~genlab.run.timeline.Timeline` (``keep_history=True``, the default of every
``start``; ``generate`` keeps none), holds what :meth:`~genlab.run.engine.Run.rewind` needs,
in linear memory. A widget's ``history()`` is a table of the Step records.

**run.views** -- the run's parts read-only, in one place (``run.views.kv_cache``,
``run.views.gen_config``, ``run.views.tokenizer`` ...); ``run.sequences``,
``run.step_index``, ``run.prompt_length`` and ``run.mode`` stay on the run itself.

**caches** -- two, with distinct names: ``lm.cache`` is the model's forward cache (a pass
already computed for the same tokens and weights is served again,
:mod:`genlab.runtime.forward_cache`); ``run.views.kv_cache`` (``ctx.kv_cache`` inside a
step) is the run's KV cache, the keys and values of the tokens it has seen
(:mod:`genlab.runtime.kv_cache`).

**fork** -- an independent copy of a run: it shares only the model and tokenizer.

**stop** -- ``run.stop()`` ends a run. Inside a step, ``ctx.criteria_met(sequences)`` asks
the stopping criteria which rows they would end; it ends nothing itself.

**force / take** -- ``run.force(token)`` queues a token for the next step(s);
``StepDebugger.take(token)`` replaces the current step with it (a rewind, a force and a
step).

**select** -- a strategy's ``select(ctx, scores)`` returns the step's
:class:`~genlab.strategies.Selection` (tokens, parents); greedy search, sampling and DoLa
apply their bare ``rule(ctx, scores)`` (the argmax, the draw) inside it. Every strategy
method takes ``ctx`` first.

**mode** -- the decoding strategy a config selects, ``run.mode``: a
:class:`~genlab.config.GenerationMode` value (``"beam_search"``, ...);
``GenerationMode(run.mode).is_beam`` says whether the rows are beams.

**token id** -- ``lm.token_id(" far")`` is the id of a text that is one token (else a
ValueError); ``lm.encode(prompt)`` gives a prompt's ``(input_ids, attention_mask)``, what
``generate`` takes. A record's ``tokens`` are ids (``Step.tokens``, a trace record's,
a strategy's ``Selection.tokens``); their text is ``text`` (``Step.text``, one string per
token, which ``Step``'s repr shows as ``text=[...]``) and ``result.token_texts`` (each
row's generated tokens, decoded one by one).

**transition scores** -- one table for a result and a trace,
``res.transition_scores()`` and ``trace.transition_scores()``: ``step``, ``row``,
``token_id``, ``token``, ``score``, ``logprob``, ``prob``. ``score`` is what
:func:`genlab.compute_transition_scores` gives, ``normalize_logits=False`` by default as in
the reference (the processed score); ``logprob`` and ``prob`` are always the token's
log-probability and probability in the processed distribution. ``score`` is a stage's
value in every table (``trace.table()``, ``trace.topk``: the logit at ``raw``).

**random source** -- :class:`genlab.run.randomness.RunRandom`, the run's own
``torch.Generator`` (seeded runs and runs that keep history). torch's global generator is
used only by plain ``generate`` calls without a seed, as in the reference.

**hook point** -- a dotted name where hooks run: ``logits``, ``processor.<stage label>``,
``scores``, ``select``, ``beam.candidates``, ``step_end``, ``finish``
(:mod:`genlab.inside.hooks`). A **hook** may replace the value; an **observer** (the trace, the
widgets) only sees it. The verbs: ``add`` a hook, ``observe`` as an observer, ``has`` (is
anyone listening), ``fire`` (hooks, then observers), ``notify`` (observers only); a
strategy's ``ctx`` has the last three.

**hook point inside the model** -- a point inside a built-in decoder's forward pass, named
as TransformerLens names it (:mod:`genlab.inside.taps`): ``hook_embed``
(``hook_pos_embed`` on GPT-2), ``blocks.{i}.hook_resid_pre``,
``blocks.{i}.attn.hook_pattern``, ``blocks.{i}.attn.hook_z``, ``blocks.{i}.hook_attn_out``,
``blocks.{i}.hook_resid_mid``, ``blocks.{i}.hook_mlp_out``, ``blocks.{i}.hook_resid_post``,
``ln_final.hook_normalized``. Hooked from ``run.hooks`` like the loop's points; with the
KV cache they see the **positions a step computes** (the prompt at step 0, then one token).
An **intervention** is a hook there that changes the value: :func:`genlab.steer`,
:func:`genlab.ablate_head`, :func:`genlab.patch` (:mod:`genlab.inside.steering`). A
**steering vector** is a difference of mean activations (:func:`genlab.steering_vector`);
**attribution** scores earlier tokens for a generated one (:func:`genlab.attribute`).

**stage** -- the scores after one processor. It has one label everywhere: the hook point
``processor.top_k``, the trace tables' ``stage`` column, the waterfall's titles, the panels,
``sampler_order`` and the processor's repr all say ``top_k``, the config field a user types
(the processor's ``stage_name``; :func:`genlab.processors.stage_name_of`). DoLa's stage is
``dola``; a processor without a label of its own (a transformers class, your own) is named
by its class (``NoDigits``). Class names (``TopKLogitsWarper``) stay the classes' names.
The first stage is ``raw`` (the logits, what the ``logits`` hook point passes), the last
``final`` (the scores the strategy chooses from, the ``scores`` hook point's value).

**trace** -- a :class:`~genlab.run.trace.Tracer` observes a run and keeps, for every token,
the best ``depth`` tokens of every stage (``trace={"depth": 20}``; the panels'
``trace_depth=``; ``depth`` is not the sampling field ``top_k``). Its
:class:`~genlab.run.trace.Trace` gives the tables.

**step data** -- what a strategy family tells the trace about a step, typed
(:mod:`genlab.strategies.stepdata`): ``BeamStep``, ``AssistedStep``, ``ContrastiveStep``,
``DolaStep``,
with enums for candidate fates and draft sources.

**finished by** -- why a run ended, ``run.finished_by``: ``"length"`` (raising
``max_new_tokens`` resumes it), ``"eos"``, ``"criteria"`` or ``"interrupted"``
(:meth:`~genlab.run.engine.Run.stop`, Ctrl-C); the one field that says how a run ended.
"""
