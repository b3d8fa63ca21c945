"""Issue 33, sections 3 and 4: results that were silently wrong and runs that hung or
crashed. Each test names its item and fails without its fix."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch
from helpers import tiny_llama
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.generation.stopping_criteria import StopStringCriteria as RefStopStrings

import genlab
from genlab.stopping import StopStringCriteria
from genlab.strategies.stepdata import CandidateFate
from genlab.streamers import TextIteratorStreamer

PROMPT = "Once upon a time"
# stop strings a byte-level tokenizer only has as byte pieces (item 3.1)
BYTE_PIECES = ["🎉", "テキ", "\u200d👧"]
TINY_PROMPT = torch.tensor([[5, 9, 2, 7, 11]])


def _python(script: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter (its own process group, killed whole when it
    runs past ``timeout``: a pool's workers stuck in a deadlock go with it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "GENLAB_WEIGHT_FORM": "packed"}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the script ran past {timeout} s (hung):\n{out[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


# ---- 3.1 stop strings made of byte pieces --------------------------------------------------


def test_stop_strings_of_byte_pieces_are_refused_as_the_reference_does(demo):
    reference_tok = PreTrainedTokenizerFast(tokenizer_object=demo.tokenizer.backend_tokenizer)
    for stop in BYTE_PIECES:
        with pytest.raises(ValueError, match="unable to identify tokens"):
            RefStopStrings(reference_tok, [stop])
        with pytest.raises(ValueError, match=re.escape(f"stop_strings: {stop!r} can never match")):
            StopStringCriteria(demo.tokenizer, [stop])
        with pytest.raises(ValueError, match="Stop on token ids instead"):
            demo.generate(f"Say {stop}", stop_strings=[stop], max_new_tokens=2)
    # beside a stop string that works, the reference ignores them silently: a warning names them
    with pytest.warns(UserWarning, match="'🎉' will never match"):
        crit = StopStringCriteria(demo.tokenizer, ["🎉", " now"])
    RefStopStrings(reference_tok, ["🎉", " now"])
    ids = demo.tokenizer.encode("Party now", add_special_tokens=False)
    assert crit(torch.tensor([ids]), None).tolist() == [True]


# ---- 3.2 to 3.4, 3.7: editing a run ---------------------------------------------------------


def test_a_refused_set_leaves_the_config_as_it_was(demo):
    run = demo.generate(PROMPT, max_new_tokens=3).run  # no history: it cannot go on
    assert run.finished_by == "length"
    with pytest.raises(ValueError, match="keeps no history"):
        run.set(max_new_tokens=8, repetition_penalty=1.5)
    assert run.config.max_new_tokens == 3 and run.config.repetition_penalty == 1.0


def test_num_return_sequences_cannot_change_while_sampling(demo):
    run = demo.start(PROMPT, do_sample=True, seed=0, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"num_return_sequences cannot change .*was 1, got 3"):
        run.set(num_return_sequences=3)
    assert run.config.num_return_sequences == 1
    run.run()
    assert run.sequences.shape[0] == 1


def test_eos_and_pad_edits_apply_everywhere(demo):
    prompts = [PROMPT, "The capital of France is"]
    fresh = demo.generate(prompts, max_new_tokens=8)
    row0, row1 = fresh.generated_ids.tolist()
    at, eos = next((i, t) for i, t in enumerate(row0) if i >= 2 and t not in row1)
    run = demo.start(prompts, max_new_tokens=8)
    run.step()
    run.set(eos_token_id=eos, pad_token_id=7)
    run.run()
    assert run.views.eos_token_ids == [eos] and run.views.pad_token_id == 7
    got = run.sequences[:, run.prompt_length :].tolist()
    assert got[0] == row0[: at + 1] + [7] * (8 - at - 1)  # finished row 0 is padded with 7
    assert got[1] == row1 and run.finished_by == "length"
    one = demo.start(PROMPT, max_new_tokens=8)
    one.step()
    one.set(eos_token_id=eos)
    one.run()
    assert one.finished_by == "eos" and one.views.eos_token_ids == [eos]
    assert one.sequences[0, -1].item() == eos


def test_prompt_lookup_resumed_after_raising_the_limit_equals_a_fresh_run(demo):
    prompt = "one two three four one two three four one two three"
    run = demo.start(prompt, prompt_lookup_num_tokens=3, max_new_tokens=8)
    run.run()
    run.set(max_new_tokens=9)
    run.run()
    fresh = demo.generate(prompt, prompt_lookup_num_tokens=3, max_new_tokens=9)
    assert run.sequences.tolist() == fresh.sequences.tolist()
    assert run.sequences.shape[1] - run.prompt_length == 9


# ---- 3.5 a checkpoint with more layers than its config.json ----------------------------------


def test_extra_checkpoint_layers_are_named(tmp_path):
    tiny_llama(seed=1, num_hidden_layers=3).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    _, info = LlamaForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    unused = sorted(info["unexpected_keys"])
    assert unused and all(k.startswith("model.layers.2.") for k in unused)
    expected = r"num_hidden_layers=2: the 9 tensor\(s\) of layers 2"
    with pytest.warns(UserWarning, match=expected) as seen:
        lm = genlab.load(tmp_path)
    assert len(unused) == 9 and unused[0] in str(seen[0].message)
    assert "num_hidden_layers=3" in str(seen[0].message)
    assert lm.info.num_hidden_layers == 2


# ---- 3.6 a system message with a list of messages --------------------------------------------


def test_system_goes_first_in_a_message_list(demo):
    messages = [{"role": "user", "content": "Name a colour."}]
    system = {"role": "system", "content": "Answer in one word."}
    with_system, _ = demo.encode(messages, system=system["content"])
    assert with_system.tolist() == demo.encode([system, *messages])[0].tolist()
    assert with_system.tolist() != demo.encode(messages)[0].tolist()
    with pytest.raises(ValueError, match="already begin with a system message"):
        demo.encode([system, *messages], system="Be brief.")
    with pytest.raises(ValueError, match="pass chat=True"):
        demo.encode("Name a colour.", system="Be brief.")
    assert demo.encode("Name a colour.", chat=True, system=system["content"])[0].tolist() == (
        with_system.tolist()
    )


# ---- 3.8 the beam trace's raw record ---------------------------------------------------------


def test_beam_trace_records_the_tokens_the_search_took(demo):
    res = demo.generate(PROMPT, num_beams=3, num_return_sequences=3, max_new_tokens=3, trace=True)
    trace = res.trace
    last = trace.records[-1]
    for row in range(3):
        node = trace.returned_path(row).iloc[-1]
        assert int(node.token_id) == int(res.sequences[row, -1])
    best = trace.returned_path(0).iloc[-1]
    assert int(last.chosen_for_row[int(best.parent_beam)]) == int(best.token_id)
    # every token the record names went on as a beam or into the pool, from that row
    cands = last.info.candidates
    took = {
        (int(p), int(t))
        for p, t, f in zip(cands.parent, cands.token, cands.fates(), strict=True)
        if f in (CandidateFate.KEPT, CandidateFate.FINISHED)
    }
    named = [(r, t) for r, t in enumerate(last.chosen_for_row.tolist()) if t >= 0]
    assert named and set(named) <= took


# ---- 3.9 and 4.3: the Playground's worker ----------------------------------------------------


def test_closing_a_playground_stops_its_generation(demo):
    from genlab.widgets import Playground

    pg = Playground(demo, PROMPT, max_new_tokens=400, auto_update=False)
    pg.update()
    deadline = time.monotonic() + 60
    while not pg.progress.value and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pg.worker.busy, "the generation should still be running"
    pg.close()
    pg.worker.wait(timeout=5)
    assert not pg.worker.busy, "close() left the generation running"


PLAYGROUND_SCRIPT = """
    import time
    import genlab
    from genlab.widgets import Playground

    pg = Playground(genlab.load("demo"), "Once upon a time, " * 100, max_new_tokens=50)
    pg.update()
    while not (pg.worker._job and pg.worker._job.started):
        time.sleep(0.005)
    time.sleep(0.2)  # the worker thread is in the prompt's forward pass when the script ends
    print("ending")
"""


def test_a_script_that_updates_a_playground_exits_cleanly():
    # before the fix, 4 runs of 4 here aborted: SIGABRT, "terminate called without an
    # active exception" (a daemon thread inside torch while the interpreter shut down)
    done = _python(PLAYGROUND_SCRIPT, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "ending" in done.stdout


# ---- 4.1 and 4.2: sweeps ---------------------------------------------------------------------


FORK_SCRIPT = """
    import concurrent.futures as cf
    import multiprocessing as mp
    import sys

    import torch

    import genlab

    torch.set_num_threads(2)
    x = torch.randn(768, 768)
    (x @ x).sum()  # torch's thread pool has run in the parent: a forked worker inherits it
    lm = genlab.load(sys.argv[1])
    prompt, grid = torch.tensor([[5, 9, 2, 7, 11]]), {"temperature": [0.7, 1.3]}
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as pool:
        got = genlab.sweep(lm, prompt, grid, n=2, seed=0, max_new_tokens=3, executor=pool)
    want = genlab.sweep(lm, prompt, grid, n=2, seed=0, max_new_tokens=3)
    print("same" if got.samples.token_ids.tolist() == want.samples.token_ids.tolist() else "differ")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")
def test_a_fork_pool_sweep_finishes_with_the_in_process_samples(tmp_path):
    tiny_llama(seed=4).save_pretrained(tmp_path / "tiny")
    done = _python(FORK_SCRIPT, str(tmp_path / "tiny"), timeout=180)
    assert done.returncode == 0, done.stdout[-2000:]
    assert done.stdout.strip().endswith("same"), done.stdout[-2000:]


@pytest.fixture(scope="module")
def tiny_lm():
    return genlab.LM(tiny_llama(0, eos_token_id=3))


def test_sweep_over_sampling_and_length_fields(tiny_lm):
    sw = genlab.sweep(tiny_lm, TINY_PROMPT, {"do_sample": [False, True]}, n=3, max_new_tokens=5)
    greedy = sw.samples[~sw.samples.do_sample].token_ids.tolist()
    want = tiny_lm.generate(TINY_PROMPT, max_new_tokens=5).generated_ids[0].tolist()
    assert len(greedy) == 3 and all(g == want[: len(g)] for g in greedy)
    assert len(sw.samples[sw.samples.do_sample]) == 3
    sw = genlab.sweep(tiny_lm, TINY_PROMPT, {"max_new_tokens": [2, 4]}, n=2, eos_token_id=None)
    assert sw.samples.groupby("max_new_tokens").length.max().to_dict() == {2: 2, 4: 4}
    with pytest.raises(ValueError, match="pass n instead of num_return_sequences"):
        genlab.sweep(tiny_lm, TINY_PROMPT, {"top_k": [5]}, num_return_sequences=2)
    with pytest.raises(ValueError, match="given both in grid and as a setting"):
        genlab.sweep(tiny_lm, TINY_PROMPT, {"max_new_tokens": [2]}, max_new_tokens=3)


# ---- 4.4 Ctrl-C with a TextIteratorStreamer ---------------------------------------------------


def test_an_interrupted_generate_ends_its_streamer(demo):
    streamer = TextIteratorStreamer(demo.tokenizer, skip_prompt=True, timeout=3)
    steps = []

    def interrupt(logits, *, step):
        steps.append(step)
        if step == 2:
            raise KeyboardInterrupt

    run = demo.start(PROMPT, max_new_tokens=10, streamer=streamer)
    run.add_hook("logits", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run.run(keep_on_interrupt=False)
    try:
        text = "".join(streamer)  # the reader sees the end, not a 3 s timeout
    except queue.Empty:
        pytest.fail("the interrupted generation never ended its streamer")
    assert text == demo.tokenizer.decode(run.sequences[0, run.prompt_length :])
    assert steps == [0, 1, 2]


def test_an_interrupted_genlab_generate_ends_its_streamer(demo):
    streamer = TextIteratorStreamer(demo.tokenizer, skip_prompt=True, timeout=3)

    ids = demo.encode(PROMPT)[0]

    def interrupt(input_ids, scores):
        if input_ids.shape[1] > ids.shape[1] + 1:  # at the third step
            raise KeyboardInterrupt
        return scores

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(KeyboardInterrupt):
            genlab.generate(
                demo.model, ids, max_new_tokens=10, streamer=streamer, logits_processor=[interrupt]
            )
    try:
        list(streamer)
    except queue.Empty:
        pytest.fail("the interrupted generate never ended its streamer")
