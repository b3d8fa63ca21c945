"""The logit lens and the attention view: equal to the same computation from transformers'
``output_hidden_states`` / ``output_attentions`` on the same weights, on the transformers
adapter and on genlab's built-in decoders; tables, figures and errors."""

from __future__ import annotations

import matplotlib.text
import pytest
import torch
from helpers import tiny_gpt2, tiny_llama

import genlab
from genlab.inside.lens import attention, logit_lens
from genlab.models.architectures import build_decoder
from genlab.models.table import TableLM


def assert_legible(fig, dpi: float | None = None) -> None:
    """Every text of ``fig`` at least 9 px tall as shown in a 1000 px wide output."""
    dpi = dpi or fig.dpi
    shrink = min(1.0, 1000 / (fig.get_figwidth() * dpi))
    fig.canvas.draw() if hasattr(fig.canvas, "draw") else None
    small = [
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(matplotlib.text.Text)
        if t.get_visible() and t.get_text().strip()
        and t.get_fontsize() * dpi / 72 * shrink < 9
    ]  # fmt: skip
    assert not small, f"texts under 9 px: {small[:5]}"


@pytest.fixture(scope="module")
def hf_models():
    return {"llama": tiny_llama(0, num_hidden_layers=3), "gpt2": tiny_gpt2(n_layer=3)}


def reference_norm(hf):
    return hf.model.norm if hasattr(hf, "model") else hf.transformer.ln_f


def reference_lens(hf, ids: torch.Tensor) -> torch.Tensor:
    """(layers + 1, positions, vocab): transformers' hidden states -> final norm -> head;
    the last hidden state is already normed."""
    with torch.no_grad():
        hs = hf(ids[None], output_hidden_states=True).hidden_states
        last = len(hs) - 1
        return torch.stack(
            [hf.lm_head(h if i == last else reference_norm(hf)(h))[0] for i, h in enumerate(hs)]
        ).float()


def reference_attentions(hf, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    before = hf.config._attn_implementation
    hf.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return hf(ids[None], output_attentions=True).attentions
    finally:
        hf.set_attn_implementation(before)


def as_kind(hf, kind):
    return hf if kind == "transformers" else build_decoder(hf.config.to_dict(), hf.state_dict())


KINDS = [("llama", "transformers"), ("llama", "builtin"), ("gpt2", "transformers"),
         ("gpt2", "builtin")]  # fmt: skip


def sampled_run(model, prompt=(1, 5, 17, 33, 8, 40), n=7, **cfg):
    lm = genlab.LM(model)
    run = lm.start(torch.tensor([list(prompt)]), do_sample=True, seed=0, max_new_tokens=n,
                   eos_token_id=None, **cfg)  # fmt: skip
    run.run()
    return lm, run


@pytest.mark.parametrize("arch,kind", KINDS)
def test_lens_equals_transformers_hidden_states(hf_models, arch, kind):
    hf = hf_models[arch]
    _, run = sampled_run(as_kind(hf, kind))
    lens = logit_lens(run, keep_logits=True)
    seq = run.sequences[0]
    ref = reference_lens(hf, seq)[:, lens.positions]
    assert lens.positions == list(range(5, 12)) and lens.steps == list(range(7))
    assert lens.logits.shape == ref.shape == (4, 7, 96)
    assert (lens.logits - ref).abs().max() < 1e-4
    # the summaries are read from the same logits
    lp = torch.log_softmax(ref, -1)
    targets = seq[6:]
    chosen = lp.gather(-1, targets.expand(4, -1)[..., None])[..., 0]
    assert torch.allclose(lens.target_logprob, chosen, atol=1e-4)
    assert torch.equal(lens.target_rank, (lp > chosen[..., None]).sum(-1))
    assert torch.equal(lens.top_ids[..., 0], ref.argmax(-1))
    assert lens.targets == targets.tolist()


@pytest.mark.parametrize("kind", ["transformers", "builtin"])
def test_last_layer_is_the_step_the_run_took(hf_models, kind):
    """The lens' last layer is the model's own prediction: the logits the run recorded."""
    hf = hf_models["llama"]
    _, run = sampled_run(as_kind(hf, kind), output_logits=True)
    lens = logit_lens(run, keep_logits=True)
    recorded = torch.stack([x[0] for x in run.output.logits])
    assert (lens.logits[-1] - recorded).abs().max() < 1e-4


def test_greedy_run_table_and_first_layer(hf_models):
    lm = genlab.LM(as_kind(hf_models["llama"], "builtin"))
    res = lm.generate(torch.tensor([[1, 9, 4, 22]]), max_new_tokens=5, eos_token_id=None)
    lens = lm.logit_lens(res, top_k=3)
    t = lens.table(top_k=2)
    assert len(t) == 5 * 4 and list(t.layer[:4]) == [0, 1, 2, 3]
    assert {"step", "layer", "top1", "p1", "top2", "p2", "chosen", "chosen_prob",
            "chosen_rank"} <= set(t.columns)  # fmt: skip
    last = t[t.layer == 3]
    assert (last.chosen_rank == 0).all() and (last.top1 == last.chosen).all()  # greedy
    assert (t.p1 >= t.p2).all() and ((t.chosen_prob > 0) & (t.chosen_prob <= 1)).all()
    first = lens.first_layer()
    assert len(first) == 5 and (first.top_from_layer <= 3).all()
    one = lm.logit_lens(res, steps=[-1], top_k=3)
    assert one.steps == [4] and torch.equal(one.top_ids, lens.top_ids[:, 4:5])


def test_left_padded_row_is_read_without_its_padding(hf_models, padded_batch):
    hf = hf_models["llama"]
    ids, mask = padded_batch
    run = genlab.start(as_kind(hf, "builtin"), ids, attention_mask=mask, max_new_tokens=4,
                       eos_token_id=None)  # fmt: skip
    run.run()
    lens = logit_lens(run, row=0, keep_logits=True)
    seq = run.sequences[0][2:]  # two pads on the left
    assert lens.positions == [3, 4, 5, 6]
    assert (lens.logits - reference_lens(hf, seq)[:, 3:7]).abs().max() < 1e-4


def test_lens_of_a_prompt_reads_every_position(hf_models):
    hf = hf_models["gpt2"]
    lm = genlab.LM(as_kind(hf, "builtin"))
    ids = torch.tensor([1, 30, 31, 32, 50])
    lens = lm.logit_lens(ids, keep_logits=True)
    assert lens.positions == [0, 1, 2, 3, 4] and lens.targets == [30, 31, 32, 50, None]
    assert (lens.logits - reference_lens(hf, ids)).abs().max() < 1e-4
    assert torch.isnan(lens.target_prob[:, -1]).all()  # nothing follows the last position


@pytest.mark.parametrize("arch,kind", KINDS)
def test_attention_equals_transformers_output_attentions(hf_models, arch, kind):
    hf = hf_models[arch]
    before = hf.config._attn_implementation
    _, run = sampled_run(as_kind(hf, kind))
    ref = reference_attentions(hf, run.sequences[0])
    for step in (0, 3, -1):
        att = attention(run, step=step)
        p = att.position
        expected = torch.stack([a[0, :, p, : p + 1] for a in ref]).float()
        assert att.weights.shape == expected.shape == (3, 4, p + 1)
        assert (att.weights - expected).abs().max() < 1e-5
        assert torch.allclose(att.weights.sum(-1), torch.ones(3, 4), atol=1e-5)
    assert hf.config._attn_implementation == before  # eager only while the view computes
    assert att.step == 6 and att.key_ids == run.sequences[0, :12].tolist()


def test_attention_tables(hf_models):
    lm, run = sampled_run(as_kind(hf_models["llama"], "builtin"), n=3)
    att = lm.attention(run, step=1)
    t = att.table()
    assert len(t) == 3 * 4 * 7 and set(t.columns) >= {"layer", "head", "key_position", "weight"}
    assert t.groupby(["layer", "head"]).weight.sum().sub(1).abs().max() < 1e-5
    assert t.in_prompt.sum() == 3 * 4 * 6
    s = att.summary()
    assert len(s) == 12
    w = att.weights
    assert torch.allclose(
        torch.tensor(s.max_weight.values, dtype=torch.float32), w.amax(-1).reshape(-1)
    )
    entropy = -(w * w.log()).sum(-1).reshape(-1)
    assert torch.allclose(torch.tensor(s.entropy.values, dtype=torch.float32), entropy, atol=1e-5)


def test_figures_are_legible(hf_models, tmp_path):
    lm, run = sampled_run(as_kind(hf_models["llama"], "builtin"), n=12)
    lens = lm.logit_lens(run)
    fig = genlab.plots.lens_heatmap(lens)
    assert_legible(fig)
    fig.savefig(tmp_path / "lens.png")
    fig = genlab.plots.attention_heatmap(lm.attention(run, step=4))
    assert_legible(fig)
    fig = genlab.plots.attention_heatmap(
        lm.attention(run, step=4), layer=2, head=1, metric="max_weight"
    )
    assert "Layer 2, head 1" in fig.axes[-1].get_title() or any(
        "Layer 2, head 1" in ax.get_title() for ax in fig.axes
    )
    assert "logit lens" in lens._repr_html_()


def test_errors_name_what_to_fix(hf_models):
    lm, run = sampled_run(as_kind(hf_models["llama"], "builtin"), n=2)
    with pytest.raises(ValueError, match="steps"):
        logit_lens(run, steps=[5])
    with pytest.raises(ValueError, match="step=9"):
        attention(run, step=9)
    with pytest.raises(ValueError, match="row=3"):
        logit_lens(run, row=3)
    with pytest.raises(ValueError, match="prompt"):
        logit_lens(lm)
    with pytest.raises(TypeError, match="Run, a GenerationResult or an LM"):
        logit_lens("text")
    with pytest.raises(ValueError, match="final norm and the LM head"):
        logit_lens(genlab.LM(TableLM.classic()), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="metric"):
        genlab.plots.attention_heatmap(attention(run), metric="nope")


def test_lens_view_follows_its_controls(hf_models):
    from genlab.widgets import LensView

    lm = genlab.LM(as_kind(hf_models["llama"], "builtin"))
    view = LensView(lm, torch.tensor([[1, 5, 17, 33]]), max_new_tokens=5, eos_token_id=None)
    assert view.error is None and len(view.lens.steps) == 5
    assert view.lens_image.value[:4] == b"\x89PNG" and view.attention_image.value[:4] == b"\x89PNG"
    assert view.step_slider.max == 4 and view.layer_slider.max == 3 and view.head_slider.max == 3
    from genlab.plots.inside import focused_head

    shown = (view.layer_slider.value, view.head_slider.value)
    assert view.auto_head.value and shown == focused_head(view.attention)
    first, lens_png = view.attention_image.value, view.lens_image.value
    view.select(2, layer=1, head=2)
    assert view.lens_image.value != lens_png  # the selected step is framed
    assert (view.layer_slider.value, view.head_slider.value) == (1, 2)
    assert view.attention.step == 2 and "<b>step 2</b>" in view.lens_table.value
    assert view.attention_image.value != first
    view.step_slider.value = 4  # the slider alone updates the views
    assert view.attention.step == 4 and view.attention.key_ids[-1] == int(view.lens.inputs[-1])
    view.generate("no tokenizer here")  # shown as an error, the last result stays
    assert "tokenizer" in view.error and view.lens is not None
    res = lm.generate(torch.tensor([[1, 9, 9]]), max_new_tokens=3, eos_token_id=None)
    other = LensView(res)
    assert len(other.lens.steps) == 3 and other.lm is None


def test_a_beam_result_is_read_on_its_returned_rows(hf_models):
    """Beam search returns the best finished hypotheses, not the run's last rows: the lens
    reads the returned row, cut after its EOS."""
    hf = hf_models["llama"]
    lm = genlab.LM(as_kind(hf, "builtin"))
    res = lm.generate(torch.tensor([[1, 5, 17, 33]]), num_beams=3, num_return_sequences=2,
                      max_new_tokens=6, eos_token_id=44)  # fmt: skip
    for row in (0, 1):
        lens = lm.logit_lens(res, row=row, keep_logits=True)
        seq = res.sequences[row].tolist()
        gen = seq[4:]
        end = gen.index(44) + 1 if 44 in gen else len(gen)
        seq = torch.tensor(seq[: 4 + end])
        assert lens.targets == seq[4:].tolist()
        ref = reference_lens(hf, seq)[:, 3 : 3 + end]
        assert (lens.logits - ref).abs().max() < 1e-4
