"""Structured output (json_schema=, regex=, grammar=; genlab/text/grammar.py and
genlab/processors/grammar.py) against transformers 4.56.2 running the same llguidance
engine through a transformers LogitsProcessor, and on the steppable run.

llguidance ships no transformers processor of its own, so the reference here is the one
its documentation describes, written on transformers' side only: the engine's tokenizer
built from the transformers tokenizer (its bytes read through transformers'
``bytes_to_unicode``, not genlab's), a fresh matcher per row and step fed the row's tokens,
and the engine's own numpy kernels to fill and apply the mask.
"""

from __future__ import annotations

import json

import jsonschema
import llguidance
import llguidance.numpy as llg_numpy
import pytest
import torch
import transformers
from helpers import assert_same, tiny_llama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genlab
import genlab.plots
from genlab.processors.grammar import GrammarLogitsProcessor
from genlab.text.grammar import compile_grammar

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)


class ReferenceGrammarProcessor(transformers.LogitsProcessor):
    """transformers' side: llguidance's matcher, rebuilt per row and step from the row's
    tokens; the mask filled and applied by llguidance's numpy kernels."""

    def __init__(self, engine_tokenizer, grammar: str) -> None:
        self.engine_tokenizer, self.grammar, self.prompt_length = engine_tokenizer, grammar, None

    def __call__(self, input_ids, scores):
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        bitmask = llg_numpy.allocate_token_bitmask(len(input_ids), self.engine_tokenizer.vocab_size)
        for r, row in enumerate(input_ids[:, self.prompt_length :].tolist()):
            matcher = llguidance.LLMatcher(self.engine_tokenizer, self.grammar)
            assert matcher.consume_tokens(row), matcher.get_error()
            llg_numpy.fill_next_token_bitmask(matcher, bitmask, r)
        out = scores.detach().clone().numpy()
        llg_numpy.apply_token_bitmask_inplace(out, bitmask)
        return torch.from_numpy(out)


class _HFVocabulary:
    """llguidance's TokenizerWrapper input, from a transformers fast tokenizer alone."""

    def __init__(self, tok) -> None:
        from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        self.eos_token_id, self.bos_token_id = tok.eos_token_id, tok.bos_token_id
        special = {i for i, t in tok.added_tokens_decoder.items() if t.special}
        self.special_token_ids = sorted(special | set(tok.all_special_ids))
        self.tokens = [
            p.encode() if i in self.special_token_ids else bytes(to_byte[c] for c in p)
            for i, p in enumerate(tok.convert_ids_to_tokens(list(range(len(tok)))))
        ]
        self._tok = tok

    def __call__(self, text):
        return self._tok.encode(text.decode() if isinstance(text, bytes) else text)


@pytest.fixture(scope="module")
def hf_tokenizer(demo):
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=demo.tokenizer.backend_tokenizer,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
    )


@pytest.fixture(scope="module")
def reference_tokenizer(hf_tokenizer):
    vocab = _HFVocabulary(hf_tokenizer)
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocab), eos_token=vocab.eos_token_id)


def _reference(reference_tokenizer, json_schema=None, regex=None):
    if json_schema is not None:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json_schema)
    else:
        grammar = llguidance.LLMatcher.grammar_from_regex(regex)
    return ReferenceGrammarProcessor(reference_tokenizer, grammar)


@pytest.fixture(scope="module")
def tiny():
    """A tiny random Llama on the demo's vocabulary: genlab and transformers run the very
    same model object, so any difference is the grammar's."""
    return tiny_llama(seed=4, vocab=49152, initializer_range=0.4, pad_token_id=2)


@pytest.fixture(scope="module")
def prompt(demo):
    return demo.encode("Answer in JSON:")


CASES = [
    ("greedy", {}),
    ("sample", {"do_sample": True, "top_k": 40, "temperature": 1.3}),
    ("beams", {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.5}),
]
CONSTRAINTS = [("json_schema", PERSON), ("regex", DATE)]


@pytest.mark.parametrize("name,cfg", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind,value", CONSTRAINTS, ids=[c[0] for c in CONSTRAINTS])
def test_named_argument_equals_transformers_with_the_engines_processor(
    tiny, demo, reference_tokenizer, prompt, name, cfg, kind, value
):
    ids, mask = prompt
    common = dict(attention_mask=mask, max_new_tokens=24, eos_token_id=2, pad_token_id=2, **OUT)
    for seed in (0, 1):
        ref_proc = _reference(reference_tokenizer, **{kind: value})
        torch.manual_seed(seed)
        ref = tiny.generate(ids, logits_processor=[ref_proc], **common, **cfg)
        torch.manual_seed(seed)
        ours = genlab.generate(
            tiny, ids, tokenizer=demo.tokenizer, **{kind: value}, **common, **cfg
        )
        assert_same(ref, ours, exact=True)
        # the constraint did something: the first step allows only a few tokens
        assert int(torch.isfinite(ref.scores[0][0]).sum()) < 50


def test_the_engines_processor_passed_in_logits_processor_works_too(
    tiny, demo, reference_tokenizer, prompt
):
    ids, mask = prompt
    common = dict(attention_mask=mask, max_new_tokens=16, eos_token_id=2, pad_token_id=2, **OUT)
    ref = tiny.generate(
        ids, logits_processor=[_reference(reference_tokenizer, regex=DATE)], **common
    )
    theirs = genlab.generate(
        tiny, ids, logits_processor=[_reference(reference_tokenizer, regex=DATE)], **common
    )
    named = genlab.generate(tiny, ids, tokenizer=demo.tokenizer, regex=DATE, **common)
    assert_same(ref, theirs, exact=True)
    assert_same(ref, named, exact=True)
    text = demo.tokenizer.decode(named.sequences[0, ids.shape[1] :], skip_special_tokens=True)
    assert len(text) == 10 and text[4] == "-" and text[7] == "-"


def test_demo_weights_greedy_equals_transformers(demo, reference_tokenizer):
    """The demo's own decoder (not the transformers model) under a schema, against
    transformers' Llama on the same weights."""
    from genlab.models.gguf import find_demo_gguf, read_gguf

    ckpt = read_gguf(find_demo_gguf())
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**ckpt.config)).eval()
    hf.load_state_dict(ckpt.state_dict, strict=False)
    hf.tie_weights()
    ids, mask = demo.encode("Give a person as JSON.", chat=True)
    common = dict(attention_mask=mask, max_new_tokens=30, eos_token_id=2, pad_token_id=2, **OUT)
    ref = hf.generate(ids, logits_processor=[_reference(reference_tokenizer, PERSON)], **common)
    ours = genlab.generate(demo, ids, json_schema=PERSON, **common)
    assert_same(ref, ours, atol=1e-3)
    text = demo.tokenizer.decode(ours.sequences[0, ids.shape[1] :], skip_special_tokens=True)
    jsonschema.validate(json.loads(text), PERSON)


def test_twenty_seeded_samples_of_the_demo_validate_against_the_schema(demo):
    """Every sample parses and validates, drawn hot (temperature 1.5) as one batch of 20
    rows: the rows that end first take padding while the others go on."""
    res = demo.generate(
        "Describe a person in JSON.",
        chat=True,
        json_schema=PERSON,
        do_sample=True,
        temperature=1.5,
        seed=0,
        num_return_sequences=20,
        max_new_tokens=64,
    )
    assert res.run.finished_by == "eos" and len(res.texts) == 20
    for text in res.texts:
        jsonschema.validate(json.loads(text), PERSON)
    assert len(set(res.texts)) > 10  # sampled, not one answer twenty times


# ------------------------------------------------------------------ the steppable run


def _start(tiny, demo, prompt, seed, **cfg):
    ids, mask = prompt
    fields = dict(do_sample=True, max_new_tokens=14, eos_token_id=2, pad_token_id=2)
    constraint = {"json_schema": PERSON} if "regex" not in cfg else {}
    return genlab.start(
        tiny,
        ids,
        attention_mask=mask,
        tokenizer=demo.tokenizer,
        **constraint,
        seed=seed,
        return_dict_in_generate=True,
        output_scores=True,
        **{**fields, **cfg},
    )


def _grammar_of(run) -> GrammarLogitsProcessor:
    (proc,) = [p for p in run.views.processors if isinstance(p, GrammarLogitsProcessor)]
    return proc


def _same_run(a, b) -> None:
    assert torch.equal(a.sequences, b.sequences)
    sa, sb = a.recorded_scores(), b.recorded_scores()
    assert len(sa) == len(sb) and all(torch.equal(x, y) for x, y in zip(sa, sb, strict=True))


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**16), at=st.integers(3, 10), back=st.integers(1, 3))
def test_rewind_and_fork_of_a_constrained_run_equal_a_fresh_run(tiny, demo, prompt, seed, at, back):
    fresh = _start(tiny, demo, prompt, seed)
    fresh.run()
    run = _start(tiny, demo, prompt, seed)
    for _ in range(at):
        run.step()
    run.rewind(back)
    fork = run.fork()
    run.run()
    _same_run(run, fresh)
    fork.run()
    _same_run(fork, fresh)


def _step_checking_the_mask(run, start: int) -> None:
    """One step; each row's mask allowed exactly the tokens a new matcher allows after the
    row's text (its count in ``allowed_counts``, -1 for a row that has ended)."""
    rows, proc = run.sequences.tolist(), _grammar_of(run)
    run.step()
    want = []
    for row in rows:
        generated = row[start:]
        ended = 2 in generated  # eos_token_id=2: the row has ended
        want.append(-1 if ended else len(proc.grammar.allowed(generated)))
    assert proc.allowed_counts == want


def test_a_fork_has_its_own_matchers_and_stepping_it_leaves_the_parent_alone(tiny, demo, prompt):
    # one fixed text: a matcher a few tokens off allows other tokens, or refuses the next
    rigid = dict(seed=3, regex="The quick brown fox jumps over the lazy dog, twice: the quick")
    fresh = _start(tiny, demo, prompt, **rigid)
    fresh.run()
    run = _start(tiny, demo, prompt, **rigid)
    for _ in range(4):
        run.step()
    fork = run.fork()
    start = prompt[0].shape[1]
    for _ in range(3):  # the fork moves first: a matcher it shared would be 3 tokens ahead
        _step_checking_the_mask(fork, start)
    while not run.finished:
        _step_checking_the_mask(run, start)
    _same_run(run, fresh)
    fork.run()
    _same_run(fork, fresh)


def test_each_beam_has_its_own_matcher(tiny, demo, prompt):
    run = _start(tiny, demo, prompt, seed=0, do_sample=False, num_beams=3)
    start = prompt[0].shape[1]
    for _ in range(8):
        _step_checking_the_mask(run, start)
    beams = {tuple(row[start:]) for row in run.sequences.tolist()}
    assert len(beams) == 3  # the beams hold different texts


def test_set_of_another_field_keeps_the_grammar(tiny, demo, prompt):
    run = _start(tiny, demo, prompt, seed=5)
    run.step()
    run.step()
    run.set(top_k=3, temperature=0.7)
    run.run()
    fork_source = _start(tiny, demo, prompt, seed=5)
    fork_source.step()
    fork_source.step()
    other = fork_source.fork().set(top_k=3, temperature=0.7)
    other.run()
    _same_run(run, other)
    assert _grammar_of(run) is not None
    first = run.recorded_scores()[2][0]
    assert int(torch.isfinite(first).sum()) <= 3


def test_forcing_a_token_the_grammar_forbids_is_refused_by_name(demo):
    run = demo.start("Give a person as JSON.", chat=True, json_schema=PERSON, max_new_tokens=20)
    with pytest.raises(ValueError, match=r"forbids token '␣Hello' \(id \d+\).*allows 2 tokens"):
        run.force(" Hello")
    assert run.pending_forced == ()
    run.force('{"')
    assert run.step().tokens.tolist() == [demo.token_id('{"')]
    with pytest.raises(ValueError, match=r"forbids token 'x'.*allows 1 token \('name'\)"):
        run.force("x")


def test_complete_text_allows_only_eos_and_the_run_ends_by_eos(tiny, demo, prompt):
    ids, mask = prompt
    run = genlab.start(
        tiny,
        ids,
        attention_mask=mask,
        tokenizer=demo.tokenizer,
        regex=DATE,
        max_new_tokens=30,
        eos_token_id=2,
        pad_token_id=2,
        trace=True,
    )
    run.run()
    assert run.finished_by == "eos"
    steps = run.tracer.trace.steps()
    last = steps.iloc[-1]
    assert last.token_id == 2 and last.allowed == 1 and last.grammar_forced
    assert (steps.allowed >= 1).all() and steps.allowed.iloc[0] == 10  # a digit: 0-9


def test_the_trace_counts_allowed_tokens_and_marks_the_steps_the_grammar_forced(demo):
    res = demo.generate(
        "Give a person as JSON.", chat=True, json_schema=PERSON, max_new_tokens=40, trace=True
    )
    jsonschema.validate(json.loads(res.text), PERSON)
    steps = res.trace.steps()
    forced = steps[steps.grammar_forced]
    assert 0 < len(forced) < len(steps)
    assert (forced.allowed == 1).all() and (forced.prob.round(6) == 1.0).all()
    assert "allowed" not in demo.generate("Hi", max_new_tokens=2, trace=True).trace.steps()


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"json_schema": {"type": "objectx"}}, r"json_schema= cannot be compiled: .*objectx"),
        ({"json_schema": "{bad"}, r"json_schema= is a string but not JSON"),
        ({"json_schema": 3}, r"json_schema= must be a dict, a JSON string or a pydantic"),
        ({"regex": r"(\d"}, r"regex= cannot be compiled: .*unclosed group"),
        ({"regex": ""}, r"regex= must be a non-empty string"),
        ({"grammar": "start: 'a' |"}, r"grammar= cannot be compiled: .*lexer error"),
        ({"grammar": "start: x"}, r"grammar= cannot be compiled: .*unknown name"),
        (
            {"json_schema": {"type": "string", "minLength": 5, "maxLength": 2}},
            r"json_schema= cannot be compiled: Unsatisfiable schema",
        ),
        ({"json_schema": False}, r"json_schema= cannot be compiled: Unsatisfiable schema"),
        ({"json_schema": PERSON, "regex": DATE}, r"exactly one of .*\['json_schema', 'regex'\]"),
    ],
)
def test_bad_constraints_are_refused_before_any_step(demo, kwargs, match):
    with pytest.raises(ValueError, match=match):
        demo.start("Hi", **kwargs)


def test_a_constraint_without_a_tokenizer_says_what_to_pass(tiny, prompt):
    with pytest.raises(ValueError, match=r"regex= needs the model's tokenizer.*tokenizer="):
        genlab.generate(tiny, prompt[0], regex=DATE, max_new_tokens=3)


def test_a_missing_engine_names_the_extra(demo, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "llguidance", None)
    with pytest.raises(ImportError, match=r"pip install 'genlab\[grammar\]'"):
        demo.generate("Hi", regex=DATE, max_new_tokens=3)


def test_a_schema_may_be_a_json_string_and_a_grammar_is_lark(demo):
    res = demo.generate("Yes or no?", chat=True, json_schema=json.dumps(PERSON), max_new_tokens=40)
    jsonschema.validate(json.loads(res.text), PERSON)
    res = demo.generate("Yes or no?", chat=True, grammar='start: "yes" | "no"', max_new_tokens=5)
    assert res.text in ("yes", "no") and res.run.finished_by == "eos"
    g = compile_grammar(demo.tokenizer, regex="yes|no")
    assert g.allowed(demo.tokenizer.encode("yes", add_special_tokens=False)) == [2]


# ------------------------------------------------------------------ tables and figures


def test_grammar_table_equals_the_mass_and_top_token_computed_from_the_raw_logits(demo):
    res = demo.generate(
        "Give a person as JSON.",
        chat=True,
        json_schema=PERSON,
        max_new_tokens=40,
        trace=True,
        output_logits=True,
    )
    table = genlab.plots.grammar_table(res.trace)
    grammar = compile_grammar(demo.tokenizer, json_schema=PERSON)
    generated = res.generated_ids[0].tolist()
    assert len(table) == len(generated)
    for step in range(len(generated)):
        probs = torch.softmax(res.output.logits[step][0], -1)
        allowed = torch.zeros_like(probs, dtype=torch.bool)
        allowed[grammar.allowed(generated[:step])] = True
        row = table.iloc[step]
        assert row.allowed == int(allowed.sum())
        assert abs(row.allowed_mass - float(probs[allowed].sum())) < 1e-4  # float32 sums
        removed = probs.masked_fill(allowed, 0)
        top = int(removed.argmax())
        if row.top_removed_prob > 0:  # the trace saw it (its top 10)
            assert row.top_removed == res.trace.token_text(top)
            assert abs(row.top_removed_prob - float(removed[top])) < 1e-4
    assert table.grammar_forced.sum() >= 3  # "name", "age" and the closing EOS at least


def test_allowed_mass_draws_a_bar_per_token_and_hatches_the_forced_ones(demo):
    res = demo.generate("Yes or no?", chat=True, regex="yes|no", trace=True)
    table = genlab.plots.grammar_table(res.trace)
    fig = genlab.plots.allowed_mass(res.trace)
    bars = fig.axes[0].patches
    assert len(bars) == len(table) == 2
    assert [bool(b.get_hatch()) for b in bars] == sorted(table.grammar_forced.tolist())
    with pytest.raises(ValueError, match="no 'grammar' stage: generate with json_schema="):
        genlab.plots.grammar_table(demo.generate("Hi", max_new_tokens=2, trace=True).trace)


def test_the_waterfalls_grammar_panel_names_the_most_probable_token_it_removed(demo):
    res = demo.generate("Yes or no?", chat=True, regex="yes|no", trace=True)
    table = genlab.plots.grammar_table(res.trace)
    fig = genlab.plots.waterfall(res.trace, step=0)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    (grammar,) = [t for t in titles if t.startswith("1. grammar")]
    removed = table.iloc[0]
    assert grammar.endswith(f"; removed {removed.top_removed} p={removed.top_removed_prob:.2g}")
    assert "removed" not in titles[0] and "5 tokens possible" in grammar
