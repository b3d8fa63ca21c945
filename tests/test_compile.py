"""torch.compile with cache_implementation="static": the decoding steps of greedy and
sampling runs are compiled once (fixed shapes), give the eager numbers, follow the
reference's conditions, and match transformers 4.56.2 on the same model object."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import tiny_gpt2, tiny_llama
from transformers import CompileConfig as ReferenceCompileConfig

import genlab
from genlab.config import CompileConfig
from genlab.models.architectures import build_decoder
from genlab.run.engine import start
from genlab.runtime.kv_cache import StaticKVCache

IDS = torch.tensor([[5, 17, 33, 8, 5, 17, 40, 5, 17], [0, 0, 0, 9, 21, 40, 11, 7, 3]])
MASK = (torch.arange(IDS.shape[1]) >= torch.tensor([[0], [3]])).long()
COMMON = dict(
    input_ids=IDS,
    attention_mask=MASK,
    max_new_tokens=12,
    eos_token_id=95,
    pad_token_id=0,
    return_dict_in_generate=True,
    output_scores=True,
    output_logits=True,
)


def GraphCounter():
    """A torch.compile backend that records every graph it is given and runs it as is.

    A function (generate deep-copies its config, and a deep copy of a function is itself).
    """
    graphs = []

    def backend(gm, example_inputs, **options):
        graphs.append(gm)
        return gm.forward

    backend.graphs = graphs
    return backend


def compile_config(backend, cls=CompileConfig, **fields):
    cc = cls(backend=backend, **fields)
    if cls is CompileConfig:
        cc.all_devices = True  # compile on the CPU too
    else:
        cc._compile_all_devices = True  # the reference's name for it
    return cc


@pytest.fixture(scope="module")
def hf_llama():
    return tiny_llama(0)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def builtin(request, hf_llama):
    hf = hf_llama if request.param == "llama" else tiny_gpt2()
    return build_decoder(hf.config.to_dict(), hf.state_dict())


def assert_close_outputs(a, b, atol=1e-5):
    assert torch.equal(a.sequences, b.sequences)
    for field in ("scores", "logits"):
        x, y = torch.stack(getattr(a, field)), torch.stack(getattr(b, field))
        assert torch.equal(torch.isinf(x), torch.isinf(y))
        finite = torch.isfinite(x)
        torch.testing.assert_close(x[finite], y[finite], atol=atol, rtol=0)


def test_decoding_steps_compile_once_and_give_the_eager_numbers(builtin):
    counter = GraphCounter()
    cc = compile_config(counter, fullgraph=True)
    eager = genlab.generate(builtin, **COMMON)
    compiled = genlab.generate(builtin, cache_implementation="static", compile_config=cc, **COMMON)
    assert len(counter.graphs) == 1  # 11 decoding steps, one graph, no recompilation
    assert_close_outputs(eager, compiled)

    # sampling reuses the compiled step (kept on the model for the same config)
    sampled = {}
    for name, extra in (("eager", {}), ("compiled", {"compile_config": cc})):
        torch.manual_seed(7)
        sampled[name] = genlab.generate(
            builtin, do_sample=True, top_k=20, cache_implementation="static", **extra, **COMMON
        )
    assert len(counter.graphs) == 1
    assert_close_outputs(sampled["eager"], sampled["compiled"])


def test_compiled_run_steps_forces_rewinds_and_forks(hf_llama):
    lm = build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict())
    counter = GraphCounter()
    kwargs = dict(
        input_ids=IDS, attention_mask=MASK, max_new_tokens=10, eos_token_id=95, keep_history=True
    )
    plain = start(lm, **kwargs)
    run = start(lm, cache_implementation="static", compile_config=compile_config(counter), **kwargs)
    assert isinstance(run.views.kv_cache, StaticKVCache) and run.state.plan.compiled is not None
    for r in (plain, run):
        r.step()
        r.step()
        r.force(11)  # one forced token: a compiled step
        r.rewind(2)  # the cache is cropped; stale positions stay masked
        r.step()
    assert torch.equal(plain.sequences, run.sequences)
    other = run.fork()
    assert torch.equal(other.run(), plain.fork().run())
    assert torch.equal(run.run(), plain.run())
    assert len(counter.graphs) == 1


def test_parity_with_reference_on_transformers_model(hf_llama):
    counter = GraphCounter()
    cc = compile_config(counter, ReferenceCompileConfig)
    kwargs = dict(COMMON, cache_implementation="static", compile_config=cc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = hf_llama.generate(**kwargs)
    compiled_by_reference = len(counter.graphs)
    mine = genlab.generate(hf_llama, **kwargs)
    assert compiled_by_reference >= 1 and len(counter.graphs) > compiled_by_reference
    assert_close_outputs(ref, mine, atol=0)
    assert type(mine.past_key_values).__name__ == "StaticCache"
    # the builtin decoder on the same weights, compiled the same way
    lm = build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict())
    ours = genlab.generate(lm, **dict(kwargs, compile_config=compile_config(GraphCounter())))
    assert_close_outputs(ref, ours, atol=1e-5)


def test_compiling_follows_the_reference_conditions(hf_llama):
    lm = build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict())
    counter = GraphCounter()
    cc = compile_config(counter)
    kwargs = dict(input_ids=IDS, attention_mask=MASK, max_new_tokens=4)
    static = dict(kwargs, cache_implementation="static", compile_config=cc)

    genlab.generate(lm, disable_compile=True, **static)
    genlab.generate(lm, num_beams=2, **static)
    assert counter.graphs == []  # disabled; beam search is never compiled (as the reference)

    on_cpu_only = CompileConfig(backend=counter)  # no all_devices: CUDA only
    with pytest.warns(UserWarning, match="CUDA only unless compile_config.all_devices"):
        genlab.generate(lm, cache_implementation="static", compile_config=on_cpu_only, **kwargs)
    with pytest.warns(UserWarning, match="cache is not static: set cache_implementation='static'"):
        genlab.generate(lm, compile_config=cc, **kwargs)
    assert counter.graphs == []
    with warnings.catch_warnings():  # no compile_config and nothing to compile: no warning
        warnings.simplefilter("error")
        genlab.generate(lm, cache_implementation="static", **kwargs)

    # a config change on a running generation turns compiling on
    run = start(lm, cache_implementation="static", **kwargs)
    assert run.state.plan.compiled is None
    run.step()
    run.config.compile_config = cc
    run.step()
    assert run.state.plan.compiled is not None and len(counter.graphs) == 1


def test_inductor_compiles_the_static_decoding_step(hf_llama):
    """The real thing: inductor generates and builds C++ for the decoding step (tens of
    seconds on a CPU, hence a 2-layer model)."""
    lm = build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict())
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    eager = genlab.generate(lm, **COMMON)
    cc = compile_config("inductor", fullgraph=True, dynamic=False)
    compiled = genlab.generate(lm, cache_implementation="static", compile_config=cc, **COMMON)
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_hit"]
    assert_close_outputs(eager, compiled, atol=1e-4)
