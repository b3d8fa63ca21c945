"""Beyond one machine: a transformers model dispatched by accelerate, and the built-in
decoders on the device given by ``--device`` (cpu by default; cuda where a GPU exists).

A tiny Llama is dispatched with an explicit ``device_map`` that keeps some layers on the CPU
and offloads the others to disk (accelerate's hooks load their weights at each forward). It
runs through genlab's loop, the Run API and the trace with results identical to the same
weights undispatched.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_gpt2, tiny_llama

import genlab
from genlab.models.architectures import build_decoder

accelerate = pytest.importorskip("accelerate")

DEVICE_MAP = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.norm": "disk",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}
PROMPT = torch.tensor([[5, 17, 33, 8, 41, 9]])


@pytest.fixture
def pair(tmp_path):
    """(plain, dispatched): the same weights, the second with layers offloaded to disk."""
    plain = tiny_llama(seed=7)
    dispatched = accelerate.dispatch_model(
        tiny_llama(seed=7), device_map=DEVICE_MAP, offload_dir=str(tmp_path / "offload")
    )
    assert hasattr(dispatched.model.layers[1], "_hf_hook")  # really dispatched
    assert any(p.device.type == "meta" for p in dispatched.model.layers[1].parameters())
    assert list((tmp_path / "offload").glob("*.dat")), "nothing was offloaded to disk"
    return plain, dispatched


def test_accelerate_did_not_bring_another_torch():
    assert torch.__version__.startswith("2.13.0")


@pytest.mark.parametrize(
    "cfg",
    [
        dict(do_sample=False),
        dict(do_sample=True, top_k=20, temperature=0.8),
        dict(num_beams=3, num_return_sequences=2),
    ],
    ids=["greedy", "sampling", "beam"],
)
def test_dispatched_model_generates_the_same(pair, cfg):
    plain, dispatched = pair
    outs = []
    for model in (plain, dispatched):
        torch.manual_seed(0)
        outs.append(
            genlab.generate(
                model,
                PROMPT,
                max_new_tokens=8,
                output_scores=True,
                return_dict_in_generate=True,
                **cfg,
            )  # fmt: skip
        )
    a, b = outs
    assert torch.equal(a.sequences, b.sequences)
    for sa, sb in zip(a.scores, b.scores, strict=True):
        torch.testing.assert_close(sa, sb, rtol=0, atol=1e-6)


def test_dispatched_model_steps_rewinds_forks_and_traces_the_same(pair):
    plain, dispatched = pair
    runs = [
        genlab.start(
            m,
            PROMPT,
            do_sample=True,
            top_k=10,
            max_new_tokens=10,
            seed=3,
            trace=True,
            keep_history=True,
        )
        for m in (plain, dispatched)
    ]
    for run in runs:
        run.step()
        run.step()
        run.rewind(1)
        run.force(11)
        run.step()
    forks = [run.fork() for run in runs]
    for run in runs + forks:
        run.run()
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    assert torch.equal(forks[0].sequences, forks[1].sequences)
    ta, tb = (run.tracer.trace for run in runs)
    sa, sb = ta.stage_summary(0), tb.stage_summary(0)
    assert list(sa.columns) == list(sb.columns) and len(sa) == len(sb)
    for col in sa.columns:
        if sa[col].dtype.kind == "f":
            assert (sa[col] - sb[col]).abs().max() <= 1e-6, col
        else:
            assert list(sa[col]) == list(sb[col]), col


# ---- the built-in decoders on --device -----------------------------------------------------


@pytest.mark.parametrize(
    "make", [lambda: tiny_llama(seed=5), lambda: tiny_gpt2(vocab=101)], ids=["llama", "gpt2"]
)
def test_builtin_decoder_matches_reference_on_device(device, make):
    """Logits of a prefill and greedy decoding: built-in decoder vs transformers, both on
    ``--device`` (run with --device cuda on a GPU machine)."""
    hf_model = make().to(device)
    lm = build_decoder(hf_model.config.to_dict(), hf_model.state_dict())
    ids = torch.tensor([[0, 0, 5, 17, 33, 8], [4, 9, 21, 40, 11, 7]], device=device)
    mask = (ids != 0).long()
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    ours = lm.forward(ids, attention_mask=mask, position_ids=pos, cache=lm.new_cache(2),
                      logits_to_keep=0).logits  # fmt: skip
    assert ours.device.type == device.type
    # TF32 matmuls on GPUs differ more than float32 ones on CPUs
    tol = 1e-4 if device.type == "cpu" else 2e-3
    assert (ours - ref).abs().max().item() <= tol
    with torch.no_grad():
        expected = hf_model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                     pad_token_id=0)  # fmt: skip
    got = genlab.generate(lm, ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                          pad_token_id=0)  # fmt: skip
    assert torch.equal(got.cpu(), expected.cpu())
