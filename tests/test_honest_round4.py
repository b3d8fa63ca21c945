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

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import genlab
from genlab.config import GenerationConfig
from genlab.experiments.agreement import summary
from genlab.inside.steering import steering_vector
from genlab.runtime import threads

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


# ---- 3. a new user's first hour -----------------------------------------------------------

SUMMARY = Path(__file__).resolve().parents[1] / "scripts" / "make_test_summary.sh"


def _summary(tmp_path, steps, **env):
    """Run scripts/make_test_summary.sh with a make that fails the step named 'unit'."""
    fake = tmp_path / "make"
    fake.write_text('#!/bin/sh\nshift\necho "ran $1"\n[ "$1" = unit ] && exit 2\nexit 0\n')
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", str(SUMMARY), *steps],
        env={**os.environ, "MAKE": str(fake), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    table = done.stdout.split("make test: summary")[-1]
    rows = dict(line.split()[:2] for line in table.strip().splitlines()[1:-1])
    return done, rows


def test_make_test_runs_every_step_and_ends_with_a_table(tmp_path):
    done, rows = _summary(tmp_path, ["lint", "unit", "docs"])
    assert done.returncode == 1
    assert "ran docs" in done.stdout  # the step after the failure ran too
    assert rows == {"lint": "pass", "unit": "FAIL", "docs": "pass"}
    assert "2 passed, 1 failed, 0 skipped" in done.stdout
    done, rows = _summary(tmp_path, ["lint", "docs"])
    assert done.returncode == 0 and rows == {"lint": "pass", "docs": "pass"}


def test_make_test_summary_lists_skipped_steps(tmp_path):
    done, rows = _summary(tmp_path, ["lint", "unit", "docs"], STOP_ON_FAILURE="1")
    assert done.returncode == 1 and "ran docs" not in done.stdout
    assert rows == {"lint": "pass", "unit": "FAIL", "docs": "skipped"}
    assert "1 passed, 1 failed, 1 skipped" in done.stdout


def test_the_steering_strength_table_in_the_docs_is_what_the_demo_does(demo):
    import genlab.inside.steering as steering

    rows = re.findall(r'^\| ([\d.]+) \| "(.*)" \|$', steering.__doc__, flags=re.M)
    table = dict((float(k), v) for k, v in rows)
    assert sorted(table) == [0.0, 0.5, 1.0, 2.0, 4.0]
    vec = steering_vector(demo, ["I love it"], ["I hate it"], layer=10)
    sweep = genlab.steering_sweep(
        demo, "The movie was", vec, layer=10, strengths=[0.5, 1.0, 2.0], max_new_tokens=12
    )
    texts = dict(zip(sweep.strength, sweep.text, strict=True))
    for strength in (0.5, 1.0):  # unchanged, then steered; the broken rows may differ by CPU
        assert texts[strength] == table[strength]
    assert texts[2.0] not in (table[0.0], table[1.0])
    assert steering.steering_sweep.__kwdefaults__["strengths"] == (0.0, 0.5, 1.0, 2.0)


def test_help_of_generation_config_lists_every_field_with_range_and_default():
    import pydoc

    from genlab.config.fields import FIELDS
    from genlab.config.sampler_fields import SAMPLER_FIELDS

    text = pydoc.render_doc(GenerationConfig, renderer=pydoc.plaintext)
    for name in [*FIELDS, *SAMPLER_FIELDS]:
        assert f"| `{name}` |" in text, name
    assert "| `top_p` | logits | 1.0 | a number in [0, 1], or None |" in text
    assert "| `xtc_probability` | samplers | 0.0 | a number in [0, 1] |" in text


def test_run_set_warns_about_inconsistent_settings_once(demo):
    run = demo.start("Hi", do_sample=True, temperature=0.7, max_new_tokens=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.set(do_sample=False)
    shown = [w for w in caught if "inconsistent" in str(w.message)]
    assert len(shown) == 1, [str(w.message) for w in caught]
    assert "`temperature`: 0.7 is only used when sampling" in str(shown[0].message)


def test_attribution_repr_is_a_summary_not_the_table(demo):
    run = demo.start("The capital of France is", max_new_tokens=3)
    run.run()
    attr = genlab.attribute(run)
    text = repr(attr)
    assert text.startswith("Attribution(gradient_x_input: 3 generated tokens x ")
    assert f"{len(attr.table)} rows; .table, .matrix())" in text
    assert len(text.splitlines()) == 4 and "strongest source" in text  # one line per step
    assert "gradient_x_input\n" not in text  # no table rows


def test_newcomer_check_answers_help_and_names_a_missing_readme():
    script = Path(__file__).resolve().parents[1] / "scripts" / "newcomer_check.py"
    run = [sys.executable, str(script)]
    done = subprocess.run([*run, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "usage: newcomer_check.py [-h] [readme]" in done.stdout
    done = subprocess.run([*run, "no/README.md"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no/README.md: no such file" in done.stderr


def test_the_readme_warns_about_scripts_beside_the_clone_as_python_behaves(tmp_path):
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    set_up = readme.split("## Set up")[1].split("\n## ")[0]
    assert "the folder that holds the clone" in set_up
    quoted = re.search(r"`(module 'genlab' has no attribute 'load')`", set_up).group(1)
    (tmp_path / "genlab").symlink_to(root)  # the clone, as a folder named genlab
    (tmp_path / "mine.py").write_text("import genlab\ngenlab.load\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "mine.py"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    # make installs genlab editable (a finder after Python's own): the clone's folder wins
    # there; a wheel in site-packages (make wheel-check) is a regular package and wins
    editable = any("__editable__" in repr(finder) for finder in sys.meta_path)
    if editable:
        assert quoted in done.stderr
    else:
        assert done.returncode == 0, done.stderr


def test_beam_score_and_logprob_columns_are_explained_and_as_explained(demo):
    from genlab.run.result import GenerationResult

    doc = " ".join(GenerationResult.transition_scores.__doc__.split())
    assert "With beams the two columns hold almost the same number" in doc
    res = demo.generate("The capital of France is", num_beams=4, max_new_tokens=3)
    table = res.transition_scores()
    first = res.output.scores[0][0]  # step 0: every beam is the prompt's
    exact = float(first.double().log_softmax(-1)[table.token_id[0]])
    assert table.score[0] == pytest.approx(float(first[table.token_id[0]]), abs=0)
    assert abs(table.score[0] - exact) < abs(table.logprob[0] - exact) < 1e-3
