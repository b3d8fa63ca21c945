"""Honest on every input, fourth round (issue 45): the new features' edges.

Each case works as transformers 4.56.2 does, or is refused (or warned about) with a
message that names the problem and the fix: sampling-only sampler fields while greedy,
NaN returned by a hook inside a layer, hooks on processor labels the run does not have,
a refused ``GENLAB_THREADS`` corrected, and the errors of compare, stop strings with an
assistant, steering positions, infinite sampler settings, sweeps over sampler fields and
beams, save_html of a view that quotes a URL, a branch tree without traces, a prompt
that is no prompt, a misspelt "demo" and ``sequence_bias`` read back from JSON.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import genlab
from genlab import threads
from genlab.agreement import summary
from genlab.config import GenerationConfig
from genlab.steering import steering_vector

# ---- 1. silent results ------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("mirostat_mode", 2),
        ("xtc_probability", 0.5),
        ("dynatemp_low", 0.5),
        ("top_n_sigma", 1.0),
        ("smoothing_factor", 0.3),
        ("sampler_order", ["top_k", "temperature"]),
    ],
)
def test_sampling_only_sampler_fields_warn_when_greedy_as_temperature_does(field, value):
    with pytest.warns(UserWarning, match=f"`{field}`: .* is only used when sampling; set "):
        cfg = GenerationConfig(**{field: value})
    with pytest.raises(ValueError, match=f"`{field}`: .* set do_sample=True or reset it"):
        cfg.validate(strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GenerationConfig(do_sample=True, **{field: value})  # sampling: no warning
        GenerationConfig(dry_multiplier=0.8)  # DRY is a penalty: it runs while greedy


def test_a_greedy_run_with_a_sampler_field_warns_and_keeps_greedy_tokens(demo):
    plain = demo.generate("Once upon a time", max_new_tokens=4)
    with pytest.warns(UserWarning, match="`xtc_probability`: 0.5 is only used when sampling"):
        res = demo.generate("Once upon a time", max_new_tokens=4, xtc_probability=0.5)
    assert res.generated_ids.tolist() == plain.generated_ids.tolist()


def test_a_hook_inside_a_layer_that_returns_nan_is_refused(demo):
    run = demo.start("Once upon a time", max_new_tokens=3)
    with run.hooks({"blocks.0.hook_resid_post": lambda x, step: x * float("nan")}):
        with pytest.raises(ValueError, match="'blocks.0.hook_resid_post' hook .* NaN or inf"):
            run.step()
    assert run.step_index == 0  # the step was undone
    with run.hooks({"blocks.0.hook_resid_post": lambda x, step: x + float("inf")}):
        with pytest.raises(ValueError, match="must stay finite.*torch.nan_to_num"):
            run.step()
    run.run()  # the run goes on once the hook is gone
    assert run.finished and torch.isfinite(run.output.scores[0]).any()


def test_a_hook_on_a_processor_label_the_run_lacks_warns_naming_the_stages(demo):
    run = demo.start("Once upon a time", max_new_tokens=3, do_sample=True, seed=0, top_k=20)
    calls = []
    with run.hooks({"processor.topk": lambda x, step: calls.append(step)}):
        with pytest.warns(UserWarning, match=r"'processor.topk' is never called.*\['top_k'\]"):
            run.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per label and stages, not every step
            run.step()
    assert calls == []


def test_a_label_that_appears_after_a_config_edit_is_then_called(demo):
    run = demo.start("Once upon a time", max_new_tokens=3, do_sample=True, seed=0)
    seen = []
    run.add_hook("processor.top_p", lambda x, step: seen.append(step))
    with pytest.warns(UserWarning, match="'processor.top_p' is never called.*turn that"):
        run.step()
    run.set(top_p=0.9)
    run.step()
    assert seen == [1]


def test_mirostat_v2_hook_label_differs_from_its_sampler_order_name_and_says_so(demo):
    run = demo.start("Hi", max_new_tokens=2, do_sample=True, top_k=0, mirostat_mode=2, seed=0)
    with run.hooks({"processor.mirostat": lambda x, step: None}):
        with pytest.warns(UserWarning, match="Did you mean 'processor.mirostat_v2'.*sampler_order"):
            run.step()
    seen = []
    with run.hooks({"processor.mirostat_v2": lambda x, step: seen.append(step)}):
        run.step()
    assert seen == [1]


def test_a_refused_genlab_threads_does_not_count_as_the_configuration(monkeypatch):
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    monkeypatch.setattr(threads, "_configured", False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("GENLAB_THREADS", "0")
    try:
        with pytest.raises(ValueError, match="GENLAB_THREADS='0'.*positive number"):
            threads.configure()
        monkeypatch.setenv("GENLAB_THREADS", str(want))
        assert threads.configure() == want
    finally:
        torch.set_num_threads(before)


# ---- 2. errors that say what to do --------------------------------------------------------


def test_compare_refuses_no_prompts_and_its_table_keeps_its_columns(demo):
    with pytest.raises(ValueError, match="prompts is empty: give at least one prompt"):
        demo.compare(demo, [])
    table = demo.compare(demo, ["Hello"], max_new_tokens=1)
    assert {"top1_agree", "kl"} <= set(table.columns)
    assert summary(table)["top1_agreement"] == 1.0


def test_stop_strings_with_an_assistant_accept_tokenizer_and_stop_as_without(demo):
    prompt = dict(prompt="Tell me a story", chat=True, max_new_tokens=30, stop_strings=["."])
    plain = demo.generate(**prompt)
    assisted = demo.generate(**prompt, tokenizer=demo.tokenizer, assistant_model=demo.model)
    assert plain.run.finished_by == "criteria" and plain.text.endswith(".")
    assert assisted.text == plain.text
    assert assisted.run.finished_by == "criteria"


def test_a_steering_position_past_the_prompt_names_position_and_length(demo):
    with pytest.raises(ValueError, match=r"position=40 is outside the prompt 'Hi', which is "):
        steering_vector(demo, ["Hi"], ["Bye"], layer=1, position=40)
    with pytest.raises(ValueError, match="position='last': give a token index"):
        steering_vector(demo, ["Hi"], ["Bye"], layer=1, position="last")
    assert steering_vector(demo, ["Hi"], ["Bye"], layer=1, position=0).dim() == 1


@pytest.mark.parametrize("field", ["smoothing_factor", "dry_multiplier", "dynatemp_low"])
def test_infinite_sampler_settings_are_refused_like_nan(field):
    with pytest.raises(ValueError, match=f"`{field}` must be a finite number"):
        GenerationConfig(do_sample=True, **{field: float("inf")})


def test_sweeps_take_sampler_fields_and_refuse_beams_below_n_before_generating(demo):
    for grid in ({"xtc_probability": [0.0, 0.5]}, {"mirostat_mode": [0, 2]}):
        sw = genlab.sweep(demo, "Hi", grid, n=2, max_new_tokens=2)
        assert len(sw.metrics) == 2
    with pytest.raises(ValueError, match="num_beams=2, .* n=4 .* lower n to 2, or give num_beams"):
        genlab.sweep(demo, "Hi", {"num_beams": [1, 2]}, n=4, max_new_tokens=2)
    with pytest.raises(ValueError, match="'top_q' is not a GenerationConfig field"):
        genlab.sweep(demo, "Hi", {"top_q": [1]}, n=2)


def test_save_html_keeps_a_url_in_the_text_and_refuses_active_content(demo, tmp_path):
    from genlab.widgets import Playground

    pg = Playground(demo, "Read the docs at https://example.com/docs and then")
    page = pg.save_html(tmp_path / "pg.html").read_text(encoding="utf-8")
    assert "https://example.com/docs" in page
    from genlab.widgets.base import active_content

    assert active_content('<img src="data:image/png;base64,AAAA" title="http://x">') == []
    found = active_content(
        '<img src="https://example.com/x.png"><p onclick="f()">x</p><script>1</script>'
        '<div style="background: url(//example.com/y.png)">y</div>'
    )
    assert len(found) == 4
    pg.static_html = lambda: '<img src="https://example.com/x.png">'
    with pytest.raises(ValueError, match="active content .*https://example.com/x.png"):
        pg.save_html(tmp_path / "bad.html")


def test_a_branch_tree_of_runs_without_trace_says_to_start_them_with_trace(demo):
    from genlab.widgets.tree import BranchTree

    run = demo.start("Hi", max_new_tokens=2)
    run.run()
    with pytest.raises(ValueError, match=r"run 0 \(Run\) has none: start the runs with trace"):
        BranchTree([run, run.fork()], demo.tokenizer)


@pytest.mark.parametrize("prompt", [123, [], [1, 2], ["a", 3]])
def test_a_prompt_that_is_no_prompt_is_refused_naming_the_forms(demo, prompt):
    with pytest.raises(ValueError, match="prompt: got .*; give a text, a list of texts"):
        demo.generate(prompt, max_new_tokens=1)


def test_a_misspelt_demo_suggests_demo(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"Did you mean genlab.load\('demo'\)"):
        genlab.load("dmeo")
    with pytest.raises(ValueError) as err:
        genlab.load("not-a-model-here")
    assert "Did you mean" not in str(err.value)


def test_sequence_bias_read_back_from_json_has_tuple_keys_and_generates(demo, tmp_path):
    cfg = GenerationConfig(sequence_bias={(10454,): -100.0}, max_new_tokens=2)
    cfg.save_pretrained(tmp_path)
    back = GenerationConfig.from_pretrained(tmp_path)
    assert back.sequence_bias == {(10454,): -100.0}
    assert back == cfg
    assert GenerationConfig(sequence_bias={"(1, 2)": 0.5}).sequence_bias == {(1, 2): 0.5}
    res = demo.generate("Hi", generation_config=back)
    assert res.generated_ids.shape[1] == 2
