"""genlab.sweep(..., executor=...): the settings run as tasks on any concurrent.futures
Executor; on a real Dask cluster (two worker processes) the table equals the in-process
sweep's, and each worker loads the model once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.experiments import sweeps

GRID = {"temperature": [0.7, 1.0, 1.3], "top_k": [0, 20]}
PROMPT = torch.tensor([[5, 9, 2, 7, 11]])  # token ids: the tiny checkpoint has no tokenizer


@pytest.fixture
def folder(tmp_path, monkeypatch):
    # one weight form in every process (this one and the workers inherit the environment),
    # so that the products, and so the samples, are bit for bit the same
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "packed")
    tiny_llama(seed=4).save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


def in_process(source):
    return genlab.sweep(genlab.load(source), PROMPT, GRID, n=4, seed=3, max_new_tokens=6)


def test_a_dask_cluster_gives_the_in_process_table(folder):
    distributed = pytest.importorskip("distributed")
    want = in_process(folder)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        lm = genlab.load(folder)
        got = genlab.sweep(
            lm, PROMPT, GRID, n=4, seed=3, max_new_tokens=6, executor=client.get_executor()
        )
        loads = client.run(lambda: [spec.source for spec in sweeps.WORKER_LOADS])
    pd.testing.assert_frame_equal(got.metrics, want.metrics)
    pd.testing.assert_frame_equal(got.samples, want.samples)
    assert len(loads) == 2  # two worker processes ...
    assert all(len(done) <= 1 for done in loads.values())  # ... each loaded the model once
    assert sum(len(done) for done in loads.values()) >= 1


def test_any_executor_and_a_name_as_the_model(folder):
    want = in_process(folder)
    with ThreadPoolExecutor(2) as pool:
        got = genlab.sweep(str(folder), PROMPT, GRID, n=4, seed=3, max_new_tokens=6, executor=pool)
    pd.testing.assert_frame_equal(got.metrics, want.metrics)


def test_a_model_object_cannot_be_sent_to_workers():
    from genlab.models.table import TableLM

    lm = genlab.load(TableLM.classic())
    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match="loaded by name or folder"):
        genlab.sweep(lm, "The", {"temperature": [1.0]}, n=2, executor=pool)
