"""transformers users' arguments, and messages that say what is wrong (issue 33, section 5).

Each argument the reference takes works as it does there, or is refused with a message that
names the problem and the fix: ``past_key_values=None`` and ``inputs_embeds=`` (a prompt
given as embeddings),
``top_p=0.0`` while sampling, classifier-free guidance's unconditional model of any kind,
``lm.score``'s batch size and empty texts, the loaders' messages, and the plots taking what
``lm.generate`` returns.
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
from helpers import assert_same, tiny_llama

import genlab
from genlab.models.table import TableLM

IDS = torch.tensor([[1, 5, 17, 33, 8], [4, 9, 21, 40, 11]])
OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def table_lm():
    row = {"the": 0.4, "dog": 0.3, "cat": 0.2, "<eos>": 0.1}
    return genlab.LM(TableLM({"": row}, fallback=row))


# ---- generate()'s arguments ----------------------------------------------------------------


def test_past_key_values_none_is_taken_as_the_reference_takes_it(model):
    want = model.generate(IDS, past_key_values=None, max_new_tokens=4, do_sample=False)
    got = genlab.generate(model, IDS, past_key_values=None, max_new_tokens=4)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="past_key_values: .*run.set\\(max_new_tokens"):
        genlab.generate(model, IDS, past_key_values=((torch.zeros(1),),), max_new_tokens=4)


MASK = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
EMBEDS_CASES = [
    ("embeds", dict(max_new_tokens=5)),
    ("masked", dict(attention_mask=MASK, max_new_tokens=5)),
    ("with_ids", dict(input_ids=IDS, attention_mask=MASK, max_new_tokens=5)),
    ("default_length", dict(attention_mask=MASK)),  # max_length 20 counts the embeddings
    ("beams", dict(attention_mask=MASK, num_beams=3, max_new_tokens=5)),
    ("sampled_rows", dict(do_sample=True, num_return_sequences=2, max_new_tokens=5)),
    ("penalty", dict(repetition_penalty=1.5, min_new_tokens=3, max_new_tokens=5)),
]


@pytest.mark.parametrize("name,kw", EMBEDS_CASES, ids=[c[0] for c in EMBEDS_CASES])
def test_inputs_embeds_generate_as_the_reference_does(model, name, kw):
    """The embeddings feed the first step; without input_ids only new tokens come back."""
    embeds = model.get_input_embeddings()(IDS).detach() + 0.01  # not exactly the ids'
    torch.manual_seed(0)
    ref = model.generate(inputs_embeds=embeds, **kw, **OUT)
    torch.manual_seed(0)
    ours = genlab.generate(model, inputs_embeds=embeds, **kw, **OUT)
    assert_same(ref, ours)
    prompt = IDS.shape[1] if "input_ids" in kw else 0
    assert ours.sequences.shape[1] == prompt + len(ours.scores)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_inputs_embeds_on_genlabs_own_decoders_as_the_reference_does(family):
    """genlab's Llama and GPT-2 decoders take the embeddings in place of the token
    embeddings (GPT-2 adds its position embeddings to them, as the reference does)."""
    from helpers import tiny_gpt2

    from genlab.models.architectures import build_decoder

    hf = tiny_llama() if family == "llama" else tiny_gpt2()
    builtin = build_decoder(hf.config.to_dict(), hf.state_dict())
    embeds = hf.get_input_embeddings()(IDS).detach() + 0.01
    for kw in (dict(max_new_tokens=5), dict(attention_mask=MASK, num_beams=2, max_new_tokens=4)):
        ref = hf.generate(inputs_embeds=embeds, do_sample=False, **kw, **OUT)
        assert_same(ref, genlab.generate(builtin, inputs_embeds=embeds, **kw, **OUT))


def test_inputs_embeds_refused_where_they_cannot_work(model):
    from genlab.models.table import TableLM

    embeds = model.get_input_embeddings()(IDS).detach()
    with pytest.raises(ValueError, match="inputs_embeds: .* takes token ids only.*transformers"):
        genlab.generate(TableLM.classic(), inputs_embeds=embeds, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"inputs_embeds must be a float tensor .*\(2, 5\)"):
        genlab.generate(model, inputs_embeds=IDS, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"input_ids has shape \(2, 2\) but inputs_embeds"):
        genlab.generate(model, IDS[:, :2], inputs_embeds=embeds, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 3\)"):
        genlab.generate(model, inputs_embeds=embeds, attention_mask=MASK[:, :3])


@pytest.mark.parametrize("seed", [0, 1])
def test_top_p_zero_samples_as_the_reference_does(model, seed):
    """The reference accepts top_p=0.0 (its warper keeps min_tokens_to_keep tokens: the top
    one); genlab refused it as outside (0, 1]."""
    torch.manual_seed(seed)
    ref = model.generate(IDS, do_sample=True, top_p=0.0, max_new_tokens=6, **OUT)
    torch.manual_seed(seed)
    ours = genlab.generate(model, IDS, do_sample=True, top_p=0.0, max_new_tokens=6, **OUT)
    assert_same(ref, ours)
    greedy = genlab.generate(model, IDS, max_new_tokens=6)
    assert torch.equal(ours.sequences, greedy)  # only the top token is left to draw
    assert genlab.GenerationConfig(do_sample=True, top_p=0.0).top_p == 0.0


def test_guidance_model_of_any_kind_is_taken_as_the_reference_takes_it():
    """transformers' test_serialize_generation_guidance_scale_unbatched builds the unbatched
    processor with a dict as its model; the model is only called when guidance needs it,
    and then a wrong kind or signature is named with the fix."""
    from genlab.config import GenerationConfig
    from genlab.processors import UnbatchedClassifierFreeGuidanceLogitsProcessor as Ours

    ids = torch.LongTensor([[0]])
    config = GenerationConfig(guidance_scale=2.0)
    with tempfile.TemporaryDirectory() as folder:
        config.save_pretrained(folder)
        loaded = GenerationConfig.from_pretrained(folder)
    assert Ours(loaded.guidance_scale, {}, ids).guidance_scale == 2.0
    scores = torch.randn(1, 5)
    logp = torch.log_softmax(scores, dim=-1)
    assert torch.equal(Ours(1.0, {}, ids)(ids, scores), logp)  # no guidance: never called
    with pytest.raises(ValueError, match="`model` is a dict: pass a genlab or transformers"):
        Ours(2.0, {}, ids)(ids, scores)
    one_argument = Ours(2.0, lambda input_ids: torch.zeros(1, 1, 5), ids)
    with pytest.raises(ValueError, match=r"model\(input_ids, attention_mask=.*signature \(in"):
        one_argument(ids, scores)
    wrapped = Ours(2.0, lambda input_ids, **kw: torch.zeros(1, 1, 5), ids)
    uncond = torch.log_softmax(torch.zeros(1, 5), dim=-1)
    torch.testing.assert_close(wrapped(ids, scores), 2.0 * (logp - uncond) + uncond)


# ---- lm.score ------------------------------------------------------------------------------


def test_score_refuses_a_batch_size_below_one_by_name(table_lm):
    with pytest.raises(ValueError, match="batch_size=0: .*integer >= 1"):
        table_lm.score(["the dog", "the cat"], batch_size=0)
    with pytest.raises(ValueError, match="batch_size=2.5"):
        table_lm.score("the dog", batch_size=2.5)
    assert len(table_lm.score(["the dog", "the cat"], batch_size=1).summary) == 2


def test_score_of_an_empty_text_counts_the_texts_tokens_not_the_context(table_lm):
    context = int(table_lm.encode("the dog")[0].shape[1])
    with pytest.raises(ValueError, match=rf"row 0 has no tokens after its context \({context} "):
        table_lm.score("", context="the dog")
    with pytest.raises(ValueError, match="row 0 has 1 token\\(s\\): .*context="):
        table_lm.score(torch.tensor([3]))  # one token: no prediction to score


# ---- loading messages ----------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    folder = tmp_path / "tiny"
    tiny_llama().save_pretrained(folder)
    return folder


def test_a_weights_symlink_loop_is_named_not_called_missing(saved):
    weights = saved / "model.safetensors"
    real = saved.parent / "elsewhere.safetensors"
    weights.rename(real)
    os.symlink("model.safetensors", weights)  # a link to itself
    with pytest.raises(ValueError, match="model.safetensors' is a symbolic link .*loop"):
        genlab.load(saved)
    weights.unlink()
    os.symlink("gone.safetensors", weights)
    with pytest.raises(ValueError, match="symbolic link to 'gone.safetensors' .*target is gone"):
        genlab.load(saved)
    weights.unlink()
    os.symlink(real, weights)  # a link that leads to the file, as in the Hub's cache: loads
    assert genlab.load(saved).model.info.vocab_size == 96


def test_a_folder_holding_a_gguf_says_how_to_load_it(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="holds the GGUF file 'model.gguf'") as info:
        genlab.load(tmp_path)
    assert f"genlab.load({str(tmp_path / 'model.gguf')!r})" in str(info.value)


@pytest.mark.parametrize("source", ["/no/such/dir", "./no/such", "a/b/c", "~/nowhere"])
def test_a_missing_folder_says_so_without_the_hub_clients_advice(source):
    with pytest.raises(ValueError, match="not an existing folder .*no such folder") as info:
        genlab.load(source)
    text = str(info.value)
    assert "repo_type" not in text and "Repo id must" not in text, text


# ---- plots take what generate returns -------------------------------------------------------


def test_plots_take_a_result_and_say_what_to_pass_otherwise(table_lm):
    import matplotlib

    matplotlib.use("Agg")
    from genlab import plots

    beams = table_lm.generate("the", num_beams=2, max_new_tokens=2, trace=True)
    assert plots.beam_tree(beams).axes  # the result: its trace is drawn
    sampled = table_lm.generate("the", do_sample=True, seed=0, max_new_tokens=3, trace=True)
    for fig in (
        plots.token_probs(sampled),
        plots.topk_bars(sampled, step=0),
        plots.waterfall(sampled, step=0),
        plots.token_probs(sampled.run),  # a traced run too
    ):
        assert fig.axes
    untraced = table_lm.generate("the", max_new_tokens=2)
    for draw in (plots.token_probs, plots.beam_tree):
        with pytest.raises(ValueError, match=r"without one: pass .*generate\(\.\.\., trace=True"):
            draw(untraced)
    with pytest.raises(ValueError, match="topk_bars draws a recorded trace, got str"):
        plots.topk_bars("the", step=0)


def test_table_plots_take_a_traced_result_and_the_others_name_what_they_draw(table_lm, model):
    import matplotlib

    matplotlib.use("Agg")
    from genlab import plots

    drafted = table_lm.generate(
        "the dog the dog the", prompt_lookup_num_tokens=2, max_new_tokens=6, trace=True
    )
    assert plots.acceptance_plot(drafted).axes  # assisted_table(res.trace), built for you
    contrastive = genlab.start(model, IDS[:1], penalty_alpha=0.6, top_k=4, max_new_tokens=3,
                               trace=True)  # fmt: skip
    contrastive.run()
    assert plots.contrastive_plot(contrastive).axes
    res = table_lm.generate("the", max_new_tokens=2)
    for draw, want in [
        (plots.lens_heatmap, r"lens_heatmap draws a Lens, got GenerationResult: .*logit_lens"),
        (plots.attention_heatmap, r"draws an Attention, got GenerationResult: .*attention\("),
        (plots.score_bars, r"score_bars draws a text's scores, .*lm\.score\(text\)"),
        (plots.sweep_metrics, r"sweep_metrics draws a sweep, .*genlab\.sweep\("),
        (plots.acceptance_plot, r"acceptance_plot draws a recorded trace, and this "),
    ]:
        with pytest.raises(ValueError, match=want):
            draw(res)
