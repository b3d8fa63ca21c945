"""GenerationConfig: fields, defaults, JSON/Hub I/O, validation and metadata, checked
against transformers 4.56.2 where the reference defines the behaviour."""

from __future__ import annotations

import itertools
import json
import math
import warnings

import pytest
import transformers
from transformers import GenerationConfig as HFGenerationConfig

from genlab.config import (
    FIELDS,
    GROUPS,
    KINDS,
    SYNTHID_FIELDS,
    WATERMARK_FIELDS,
    CompileConfig,
    GenerationConfig,
    GenerationMode,
    SynthIDTextWatermarkingConfig,
    WatermarkingConfig,
    normalize_sequence_bias,
)

BOOKKEEPING = {"_from_model_config", "_commit_hash", "transformers_version"}


def quiet(fn, *args, **kwargs):
    """Call without letting the reference's or genlab's consistency warnings through."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        try:
            return fn(*args, **kwargs)
        finally:
            transformers.logging.set_verbosity_warning()


def as_json(config) -> dict:
    """What a config writes to disk (full, not diff), read back as plain JSON data."""
    return json.loads(config.to_json_string(use_diff=False))


# A config touching most groups, consistent enough for transformers' strict save.
RICH = dict(
    max_new_tokens=12,
    min_new_tokens=2,
    stop_strings=["\n\n", "END"],
    do_sample=True,
    temperature=0.7,
    top_k=10,
    top_p=0.9,
    min_p=0.05,
    typical_p=0.95,
    epsilon_cutoff=3e-4,
    repetition_penalty=1.2,
    no_repeat_ngram_size=3,
    bad_words_ids=[[5], [6, 7]],
    suppress_tokens=[9],
    begin_suppress_tokens=[3],
    sequence_bias={(1, 2): -1.5, (4,): 2.0},
    exponential_decay_length_penalty=(5, 1.5),
    renormalize_logits=True,
    forced_eos_token_id=2,
    guidance_scale=1.5,
    num_return_sequences=2,
    return_dict_in_generate=True,
    output_scores=True,
    output_logits=True,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=[2, 3],
    cache_implementation="static",
    num_assistant_tokens_schedule="heuristic",
    prefill_chunk_size=64,
    custom_model_key="kept",
)


# ----------------------------------------------------------------------------- fields


def test_every_reference_attribute_and_default_is_reproduced_in_order():
    ours, ref = vars(GenerationConfig()), vars(HFGenerationConfig())
    assert list(ours) == list(ref)
    assert ours == ref


def test_field_specs_cover_exactly_the_public_attributes():
    public = {k for k in vars(GenerationConfig()) if k not in BOOKKEEPING}
    assert set(FIELDS) == public
    assert GenerationConfig.field_specs() is FIELDS
    ref = vars(HFGenerationConfig())
    for name, spec in FIELDS.items():
        assert spec.name == name
        assert spec.default == ref[name], name
        assert spec.group in GROUPS and spec.kind in KINDS, name
        assert spec.help and "\n" not in spec.help and len(spec.help) <= 100, name
        assert (spec.choices is not None) == (spec.kind == "choice"), name
        if spec.default is None:
            assert spec.nullable, name
        if spec.only_when is not None:
            assert FIELDS[spec.only_when].kind == "bool", name
    assert [n for n, s in FIELDS.items() if s.group == "watermark"] == ["watermarking_config"]
    assert {s.group for s in FIELDS.values()} == set(GROUPS)


def test_watermark_field_specs_match_their_dataclasses():
    assert list(WATERMARK_FIELDS) == list(WatermarkingConfig().to_dict())
    for name, spec in WATERMARK_FIELDS.items():
        assert getattr(WatermarkingConfig(), name) == spec.default
    synthid = SynthIDTextWatermarkingConfig(ngram_len=5, keys=[1, 2])
    assert set(SYNTHID_FIELDS) == set(synthid.to_dict())
    for name in ("context_history_size", "sampling_table_seed", "sampling_table_size"):
        assert getattr(synthid, name) == SYNTHID_FIELDS[name].default


def test_watermark_defaults_equal_the_reference():
    assert WatermarkingConfig().to_dict() == transformers.WatermarkingConfig().to_dict()
    ref = transformers.SynthIDTextWatermarkingConfig(ngram_len=5, keys=[7, 8])
    assert SynthIDTextWatermarkingConfig(ngram_len=5, keys=[7, 8]).to_dict() == ref.to_dict()


# --------------------------------------------------------------------- validation (specs)


def _outside(spec):
    """Values just outside a spec's numeric range (and the boundaries inside it)."""
    kind_step = 1 if spec.kind == "int" else 0.01
    bad, good = [], []
    if spec.min is not None:
        (bad if spec.min_exclusive else good).append(spec.min)
        bad.append(spec.min - kind_step)
    if spec.max is not None:
        (bad if spec.max_exclusive else good).append(spec.max)
        bad.append(spec.max + kind_step)
    if spec.kind == "int":
        bad = [int(v) for v in bad if float(v).is_integer()]
        good = [int(v) for v in good]
    return bad, good


def _context(spec):
    """Other fields that make a value of ``spec`` reachable without hard errors."""
    ctx = {}
    if spec.only_when:
        ctx[spec.only_when] = True
    if spec.name == "num_return_sequences":
        ctx["do_sample"] = True
    if spec.name == "num_beam_groups":
        ctx.update(num_beams=4, diversity_penalty=0.5)
    return ctx


RANGED = [s for s in FIELDS.values() if s.min is not None or s.max is not None]


@pytest.mark.parametrize("spec", RANGED, ids=lambda s: s.name)
def test_spec_ranges_are_what_validate_enforces(spec):
    bad, good = _outside(spec)
    ctx = _context(spec)
    for value in good:
        cfg = quiet(GenerationConfig, **ctx, **{spec.name: value})
        quiet(cfg.validate, strict=False)
    for value in bad:
        with pytest.raises(ValueError) as err:
            quiet(GenerationConfig, **ctx, **{spec.name: value}).validate(strict=True)
        assert f"`{spec.name}`" in str(err.value)
        assert repr(value) in str(err.value)
        assert spec.range_text() in str(err.value)


def test_range_is_only_enforced_when_its_condition_holds():
    # temperature=0 means nothing without sampling: the reference accepts it (with a warning)
    with pytest.warns(UserWarning, match="temperature"):
        GenerationConfig(temperature=0.0)
    with pytest.raises(ValueError, match="`temperature`"):
        GenerationConfig(temperature=0.0, do_sample=True)


def test_negative_pad_token_id_warns_like_the_reference_and_fails_strictly():
    with pytest.warns(UserWarning, match="pad_token_id"):
        cfg = GenerationConfig(pad_token_id=-1)
    with pytest.raises(ValueError, match="`pad_token_id`"):
        cfg.validate(strict=True)


WRONG_TYPE = {
    "int": 2.5,
    "float": "x",
    "bool": "yes",
    "choice": "not-a-choice",
    "str_list": ["ok", ""],
    "token_ids": [1, -2],
    "token_id_lists": [[1], []],
    "token_id_or_ids": [-1],
    "mapping": {(1,): "big"},
    "json": object(),
}


@pytest.mark.parametrize("spec", list(FIELDS.values()), ids=lambda s: s.name)
def test_every_field_rejects_a_value_of_the_wrong_kind(spec):
    value = WRONG_TYPE[spec.kind]
    with pytest.raises(ValueError) as err:
        quiet(GenerationConfig, **_context(spec), **{spec.name: value})
    assert spec.name in str(err.value)


@pytest.mark.parametrize("spec", [s for s in FIELDS.values() if not s.nullable], ids=str)
def test_non_nullable_fields_reject_none(spec):
    with pytest.raises(ValueError, match=f"`{spec.name}`"):
        quiet(GenerationConfig, **{spec.name: None})


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(early_stopping="sometimes"), "early_stopping"),
        (dict(num_assistant_tokens_schedule="fast"), "num_assistant_tokens_schedule"),
        (dict(cache_implementation="paged"), "cache_implementation"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_length=0), "max_length"),
        (dict(top_k=-1), "top_k"),
        (dict(num_beams=0), "num_beams"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
        (dict(eos_token_id="2"), "eos_token_id"),
        (dict(bos_token_id=-3), "bos_token_id"),
        (dict(eos_token_id=[]), "eos_token_id"),
        (dict(stop_strings=""), "stop_strings"),
        (dict(num_beams=2, num_return_sequences=3), "num_return_sequences"),
        (dict(num_return_sequences=2), "num_return_sequences"),
        (dict(num_beams=4, num_beam_groups=3, diversity_penalty=1.0), "num_beam_groups"),
        (dict(num_beams=4, num_beam_groups=2), "diversity_penalty"),
        (dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0, do_sample=True), "do_sample"),
        (dict(num_beams=2, force_words_ids=[[3]], do_sample=True), "do_sample"),
        (dict(exponential_decay_length_penalty=(1.5, 2)), "exponential_decay_length_penalty"),
        (dict(force_words_ids=[[1, -1]]), "force_words_ids"),
        (dict(sequence_bias={(): 1.0}), "sequence_bias"),
        (dict(dola_layers="middle"), "dola_layers"),
        (dict(compile_config=3), "compile_config"),
        (dict(watermarking_config={"seeding_scheme": "midhash"}), "seeding_scheme"),
        (dict(watermarking_config={"greenlist_ratio": 1.5}), "greenlist_ratio"),
        (dict(watermarking_config={"context_width": 0}), "context_width"),
        (
            dict(watermarking_config={"ngram_len": 5, "keys": [1], "sampling_table_size": 2**25}),
            "sampling_table_size",
        ),  # fmt: skip
        (dict(streamer=object()), "streamer"),
    ],
)
def test_invalid_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError) as err:
        quiet(GenerationConfig, **kwargs)
    assert f"`{field}" in str(err.value) or f".{field}`" in str(err.value)


def test_watermark_dict_with_unknown_key_names_it():
    with pytest.raises(ValueError, match="colour"):
        GenerationConfig(watermarking_config={"colour": "green"})


# The reference's own combination rules: a grid where both must agree on hard errors,
# on the strict (warning -> error) verdict, and on the mode.
GRID_AXES = dict(
    do_sample=[False, True],
    num_beams=[1, 4],
    num_beam_groups=[1, 2],
    diversity_penalty=[0.0, 0.5],
    num_return_sequences=[1, 2, 5],
    temperature=[1.0, 0.7],
    force_words_ids=[None, [[3, 4]]],
    length_penalty=[1.0, 2.0],
    use_cache=[True, False],
    cache_implementation=[None, "static"],
    output_scores=[False, True],
)


def _grid():
    keys = list(GRID_AXES)
    combos = itertools.product(*GRID_AXES.values())
    return [dict(zip(keys, c, strict=True)) for c in combos]


def _verdict(cls, kwargs):
    try:
        cfg = quiet(cls, **kwargs)
    except ValueError:
        return "error", None
    try:
        quiet(cfg.validate, strict=True)
    except ValueError:
        return "inconsistent", cfg
    return "ok", cfg


def test_combination_rules_agree_with_the_reference_on_a_grid():
    counts = {"error": 0, "inconsistent": 0, "ok": 0}
    for kwargs in _grid():
        ours, ours_cfg = _verdict(GenerationConfig, kwargs)
        ref, ref_cfg = _verdict(HFGenerationConfig, kwargs)
        assert ours == ref, kwargs
        counts[ours] += 1
        if ours_cfg is not None:
            mode = quiet(ours_cfg.get_generation_mode)
            assert mode.value == quiet(ref_cfg.get_generation_mode).value, kwargs
    assert min(counts.values()) > 50, counts  # the grid reaches all three verdicts


def test_inconsistent_settings_warn_and_strict_raises_naming_them():
    with pytest.warns(UserWarning, match="temperature"):
        cfg = GenerationConfig(temperature=0.5, top_p=0.8)
    with pytest.raises(ValueError) as err:
        cfg.validate(strict=True)
    assert "`temperature`" in str(err.value) and "`top_p`" in str(err.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GenerationConfig()  # the defaults are consistent
        GenerationConfig(do_sample=True, temperature=0.5)


# ------------------------------------------------------------------------------- modes


MODE_AXES = dict(
    force_words_ids=[None, [[3]]],
    num_beams=[1, 3],
    do_sample=[False, True],
    num_beam_groups=[1, 3],
    penalty_alpha=[None, 0.6],
    top_k=[1, 4],
    prompt_lookup_num_tokens=[None, 3],
    assistant_early_exit=[None, 2],
    dola_layers=[None, "low"],
)


def test_generation_mode_matches_the_reference_on_a_grid():
    seen = set()
    for combo in itertools.product(*MODE_AXES.values(), [None, "assistant"]):
        kwargs = dict(zip(MODE_AXES, combo[:-1], strict=True))
        if kwargs["num_beam_groups"] > 1:
            kwargs["diversity_penalty"] = 1.0
        assistant = combo[-1]
        try:
            ref = quiet(HFGenerationConfig, **kwargs)
        except ValueError:
            with pytest.raises(ValueError):
                quiet(GenerationConfig, **kwargs)
            continue
        ours = quiet(GenerationConfig, **kwargs)
        mode = quiet(ours.get_generation_mode, assistant)
        assert isinstance(mode, GenerationMode)
        assert mode.value == quiet(ref.get_generation_mode, assistant).value, (kwargs, assistant)
        seen.add(mode.value)
    assert seen == {m.value for m in GenerationMode}


def test_generation_mode_is_a_string_enum():
    assert GenerationMode.SAMPLE == "sample" and str(GenerationMode.BEAM_SEARCH) == "beam_search"
    assert GenerationConfig(do_sample=True).get_generation_mode() == "sample"


# --------------------------------------------------------------------- dicts and JSON


def test_json_text_is_identical_to_the_references():
    for kwargs in [{}, RICH, dict(num_beams=4, early_stopping="never", length_penalty=0.5)]:
        ours, ref = quiet(GenerationConfig, **kwargs), quiet(HFGenerationConfig, **kwargs)
        for use_diff in (True, False):
            assert ours.to_json_string(use_diff=use_diff) == ref.to_json_string(use_diff=use_diff)
        assert ours.to_diff_dict() == ref.to_diff_dict()


def test_file_written_by_transformers_reads_back_identically(tmp_path):
    ref = quiet(HFGenerationConfig, **RICH, watermarking_config={"bias": 3.0, "context_width": 2})
    ref.save_pretrained(tmp_path)
    ours = GenerationConfig.from_pretrained(tmp_path)
    assert isinstance(ours.watermarking_config, WatermarkingConfig)
    assert ours.watermarking_config.bias == 3.0 and ours.watermarking_config.context_width == 2
    assert ours.custom_model_key == "kept"
    assert as_json(ours) == as_json(quiet(HFGenerationConfig.from_pretrained, tmp_path))
    assert as_json(ours) == as_json(ref) | {"sequence_bias": {"(1, 2)": -1.5, "(4,)": 2.0}}
    # JSON has only string keys; they still read as the same biases
    assert normalize_sequence_bias(ours.sequence_bias) == RICH["sequence_bias"]


def test_file_written_by_genlab_reads_back_in_transformers(tmp_path):
    ours = GenerationConfig(
        **RICH, watermarking_config=WatermarkingConfig(bias=2.5, seeding_scheme="selfhash")
    )
    path = ours.save_pretrained(tmp_path / "new", config_file_name="gen.json")
    assert path == tmp_path / "new" / "gen.json"
    ref = quiet(HFGenerationConfig.from_pretrained, tmp_path / "new", "gen.json")
    assert isinstance(ref.watermarking_config, transformers.WatermarkingConfig)
    assert ref.watermarking_config.seeding_scheme == "selfhash"
    assert ref.watermarking_config.bias == 2.5
    assert ref.custom_model_key == "kept"
    assert as_json(ref) == as_json(GenerationConfig.from_pretrained(tmp_path / "new", "gen.json"))


def test_synthid_config_from_a_reference_file_and_round_trip(tmp_path):
    synthid = transformers.SynthIDTextWatermarkingConfig(ngram_len=4, keys=[11, 22, 33])
    ref = quiet(HFGenerationConfig, do_sample=True, watermarking_config=synthid)
    (tmp_path / "generation_config.json").write_text(ref.to_json_string())
    ours = GenerationConfig.from_pretrained(tmp_path)
    assert isinstance(ours.watermarking_config, SynthIDTextWatermarkingConfig)
    assert ours.watermarking_config.to_dict() == synthid.to_dict()
    ours.save_pretrained(tmp_path / "again")
    assert GenerationConfig.from_pretrained(tmp_path / "again") == ours
    # transformers' own objects are accepted directly too
    direct = GenerationConfig(do_sample=True, watermarking_config=synthid)
    assert direct == ours


def test_small_config_json_helpers(tmp_path):
    wm = WatermarkingConfig.from_dict({"bias": 1.0}, hashing_key=7)
    assert (wm.bias, wm.hashing_key) == (1.0, 7)
    assert json.loads(wm.to_json_string()) == wm.to_dict()
    wm.to_json_file(tmp_path / "wm.json")
    assert WatermarkingConfig.from_dict(json.loads((tmp_path / "wm.json").read_text())) == wm
    assert wm.update(bias=4.0, nope=1) == {"nope": 1} and wm.bias == 4.0
    assert CompileConfig.from_dict({"fullgraph": True}).fullgraph is True


def test_from_dict_and_update_return_unused_kwargs_like_the_reference():
    given = {"top_k": 3, "do_sample": True}
    ours, unused = GenerationConfig.from_dict(given, foo=1, return_unused_kwargs=True)
    ref, ref_unused = HFGenerationConfig.from_dict(given, foo=1, return_unused_kwargs=True)
    assert unused == ref_unused and ours.foo == ref.foo == 1
    cfg = GenerationConfig()
    assert cfg.update(max_new_tokens=5, not_a_field=2) == {"not_a_field": 2}
    assert cfg.max_new_tokens == 5 and not hasattr(cfg, "not_a_field")
    assert cfg.update(validate=1) == {"validate": 1}  # methods are not fields
    with pytest.raises(ValueError, match="`top_p`"):
        cfg.update(top_p=2.0)


def test_from_pretrained_kwargs_override_and_unused(tmp_path):
    GenerationConfig(max_new_tokens=4).save_pretrained(tmp_path)
    cfg, unused = GenerationConfig.from_pretrained(
        tmp_path, return_unused_kwargs=True, max_new_tokens=9
    )
    assert cfg.max_new_tokens == 9 and unused == {}
    direct = GenerationConfig.from_pretrained(tmp_path / "generation_config.json")
    assert direct.max_new_tokens == 4


def test_copy_eq_hash_and_repr():
    cfg = GenerationConfig(do_sample=True, top_k=5, bad_words_ids=[[1, 2]])
    twin = cfg.copy()
    assert twin == cfg and hash(twin) == hash(cfg) and twin is not cfg
    twin.bad_words_ids[0].append(3)
    assert cfg.bad_words_ids == [[1, 2]] and twin != cfg
    assert repr(cfg) == "GenerationConfig(do_sample=True, top_k=5, bad_words_ids=[[1, 2]])"
    assert repr(GenerationConfig()) == "GenerationConfig()"
    assert GenerationConfig() != HFGenerationConfig()
    assert GenerationConfig(transformers_version="4.0.0") == GenerationConfig()


def test_compile_config_is_kept_but_never_written():
    cfg = GenerationConfig(compile_config={"fullgraph": True})
    assert cfg.compile_config == CompileConfig(fullgraph=True)
    assert "compile_config" not in cfg.to_dict()
    ref_cc = transformers.CompileConfig(dynamic=True)
    assert GenerationConfig(compile_config=ref_cc).compile_config.dynamic is True


def test_from_any_accepts_reference_configs_and_dicts():
    ref = quiet(HFGenerationConfig, **RICH)
    ours = GenerationConfig.from_any(ref)
    assert as_json(ours) == as_json(ref)
    assert GenerationConfig.from_any({"max_new_tokens": 3}).max_new_tokens == 3
    assert GenerationConfig.from_any(None) == GenerationConfig()
    with pytest.raises(ValueError, match="generation_config"):
        GenerationConfig.from_any(3)


def test_constraints_objects_cannot_be_written_to_json():
    from genlab.strategies.constraints import PhrasalConstraint

    cfg = GenerationConfig(num_beams=2, constraints=[PhrasalConstraint([1, 2])])
    with pytest.raises(ValueError, match="constraints"):
        cfg.to_json_string()
    assert "constraints" in repr(cfg)


# -------------------------------------------------------------------------- token ids


TOKEN_FIELDS = {
    "pad_token_id": 64,
    "bos_token_id": 70,
    "eos_token_id": [1, 64],
    "forced_bos_token_id": 99,
    "forced_eos_token_id": [64],
    "decoder_start_token_id": 64,
    "suppress_tokens": [1, 2, 64],
    "begin_suppress_tokens": [64],
    "bad_words_ids": [[1], [2, 64]],
    "force_words_ids": [[[1], [64, 2]]],
    "sequence_bias": {(1, 64): 1.0},
}


def test_token_id_fields_are_exactly_the_checked_ones():
    assert {n for n, s in FIELDS.items() if s.token_ids} == set(TOKEN_FIELDS)


@pytest.mark.parametrize("name", list(TOKEN_FIELDS))
def test_check_token_ids_rejects_ids_outside_the_vocabulary(name):
    kwargs = {name: TOKEN_FIELDS[name]}
    if name == "force_words_ids":
        kwargs["num_beams"] = 2
    cfg = quiet(GenerationConfig, **kwargs)
    cfg.check_token_ids(200)
    with pytest.raises(ValueError) as err:
        cfg.check_token_ids(64)
    assert f"`{name}`" in str(err.value) and "[0, 64)" in str(err.value)


def test_check_token_ids_reads_json_style_sequence_bias_keys():
    cfg = GenerationConfig(sequence_bias={"(3, 80)": -2.0})
    with pytest.raises(ValueError, match="80"):
        cfg.check_token_ids(64)
    assert normalize_sequence_bias([[[3, 4], 1.0]]) == {(3, 4): 1.0}


# ---------------------------------------------------------------------- the Hub cache


def _fake_hub_cache(root, repo_id, content: dict, commit="0123456789abcdef0123"):
    """Lay out a Hugging Face cache entry the way huggingface_hub writes it."""
    repo_dir = root / ("models--" + repo_id.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "generation_config.json").write_text(json.dumps(content))
    return commit


@pytest.fixture
def offline(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_hub_id_loads_from_the_cache_when_offline(tmp_path, offline):
    content = {"do_sample": True, "temperature": 0.6, "eos_token_id": [1, 2], "top_p": 0.95}
    commit = _fake_hub_cache(tmp_path, "genlab-test/tiny", content)
    cfg = GenerationConfig.from_pretrained("genlab-test/tiny", cache_dir=tmp_path)
    assert (cfg.temperature, cfg.eos_token_id, cfg._commit_hash) == (0.6, [1, 2], commit)
    ref = HFGenerationConfig.from_pretrained("genlab-test/tiny", cache_dir=tmp_path)
    assert as_json(cfg) == as_json(ref)


def test_hub_id_missing_from_the_cache_gives_a_clear_error(tmp_path, offline):
    with pytest.raises(OSError, match="HF_HUB_OFFLINE"):
        GenerationConfig.from_pretrained("genlab-test/absent", cache_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="generation_config.json"):
        GenerationConfig.from_pretrained(tmp_path)  # an existing folder without the file


def test_bad_json_file_names_the_file(tmp_path):
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="generation_config.json"):
        GenerationConfig.from_pretrained(tmp_path)


def test_save_refuses_inconsistent_settings(tmp_path):
    cfg = quiet(GenerationConfig, temperature=0.5)
    with pytest.raises(ValueError, match="temperature"):
        cfg.save_pretrained(tmp_path)
    assert not (tmp_path / "generation_config.json").exists()


# ---------------------------------------------------------------------- model configs


@pytest.mark.parametrize(
    "model_config",
    [
        transformers.LlamaConfig(bos_token_id=1, eos_token_id=[2, 7], pad_token_id=0),
        transformers.GPT2Config(),
        transformers.BartConfig(),
        transformers.LlamaConfig(output_scores=True, temperature=0.3, do_sample=True),
    ],
    ids=["llama", "gpt2", "bart", "llama-legacy-generation-keys"],
)
def test_from_model_config_matches_the_reference(model_config):
    ref = quiet(HFGenerationConfig.from_model_config, model_config)
    ours = quiet(GenerationConfig.from_model_config, model_config)
    assert as_json(ours) == as_json(ref)
    from_dict = quiet(GenerationConfig.from_model_config, model_config.to_dict())
    assert as_json(from_dict) == as_json(ref)
    assert as_json(ours)["_from_model_config"] is True  # written to the file, as the reference's


def test_from_model_config_uses_the_decoder_sub_config():
    full = {"text_config": {"eos_token_id": 9, "bos_token_id": 8}, "unrelated": 1}
    cfg = GenerationConfig.from_model_config(full)
    assert (cfg.eos_token_id, cfg.bos_token_id) == (9, 8)
    assert not hasattr(cfg, "unrelated")  # model keys are not generation settings


def test_reference_version_written_is_the_reference():
    assert GenerationConfig().to_dict()["transformers_version"] == transformers.__version__
    assert math.isclose(GenerationConfig(top_p=0.5, do_sample=True).top_p, 0.5)
