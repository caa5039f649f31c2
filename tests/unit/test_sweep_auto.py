"""The sweep's auto engine (search/vector_rows.py) gives the estimate engine's rows: every column,
reasons and warnings included, on 1,000 random points of four workloads; it is the default; a failure
inside it costs only speed; and its point keys are ``point_key``'s."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

import simtrain as st
from simtrain.search.sweep import ENGINES
from simtrain.search.sweep_rows import evaluate_chunk, grid_points, point_key
from simtrain.search.vector_rows import auto_rows, grid_codes, point_keys

STACKS = ["megatron-core", "fsdp2", "fsdp2-compile", "deepspeed", "ddp", "llm-foundry", "megatron-lm", "reference"]

# (model, cluster, base config, axes, points): 1,000 points in all, bad values among them on purpose
WORKLOADS = {
    "dense-a100": ("gpt2-medium", ("dgx-a100-80gb", 1), {"global_batch_size": 64, "seq_len": 1024},
                   {"nodes": [1, 2, 2.5], "tp": [1, 2, 3, 4, 8], "pp": [1, 2, 3, 4], "micro_batch_size": [1, 2, 4, 64],
                    "zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"],
                    "sequence_parallel": [False, True], "virtual_stages": [1, 2, 3],
                    "pipeline_schedule": ["1f1b", "gpipe", "interleaved-1f1b"], "stack": [*STACKS, "megatron"],
                    "precision": ["bf16", "fp16", "fp32", "fp8"]}, 300),
    "moe-h100": ("mixtral-8x7b", ("dgx-h100", 1), {"global_batch_size": 64, "seq_len": 2048},
                 {"nodes": [1, 2, 4], "tp": [1, 2, 4, 8], "pp": [1, 2, 4], "cp": [1, 2], "ep": [1, 2, 4, 8],
                  "micro_batch_size": [1, 2], "zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"],
                  "sequence_parallel": [False, True], "stack": ["megatron-core", "fsdp2", "reference"],
                  "precision": ["bf16", "fp8"]}, 300),
    "torus-tpu": ("llama3-8b", ("tpu-v5p-pod", 1), {"global_batch_size": 128, "seq_len": 4096},
                  {"nodes": [1, 2, 4], "tp": [1, 2, 4], "pp": [1, 2, 4], "micro_batch_size": [1, 2],
                   "zero_stage": [0, 1, 3], "recompute": ["none", "full"], "optimizer": ["adamw", "sgd", "adafactor"],
                   "dp_overlap": [True, False], "fused_optimizer": [True, False], "grad_clipping": [True, False],
                   "optimizer_impl": [None, "for-loop", "foreach", "fused"]}, 200),
    "llama-64-h100": ("llama3-8b", ("dgx-h100", 8), {"global_batch_size": 256, "seq_len": 8192},
                      {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "cp": [1, 2], "micro_batch_size": [1, 2, 4, 8],
                       "recompute": ["none", "selective", "full"], "zero_stage": [0, 1, 2, 3],
                       "sequence_parallel": [False, True], "virtual_stages": [1, 2],
                       "global_batch_size": [64, 256, 1024], "precision": ["bf16", "fp8"],
                       "dp_overlap": [False, True], "fused_optimizer": [False, True], "stack": STACKS}, 200),
}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_auto_rows_equal_the_estimate_rows_on_random_points(name):
    model_name, (cluster_name, nodes), base, axes, count = WORKLOADS[name]
    model, cluster, cfg = st.load_model(model_name), st.load_cluster(cluster_name, nodes=nodes), st.TrainConfig(**base)
    rng = random.Random(name)
    points = [{k: rng.choice(v) for k, v in axes.items()} for _ in range(count)]
    fast, scalar = auto_rows(model, cluster, cfg, points), evaluate_chunk(model, cluster, cfg, points, "estimate")
    assert len(fast) == len(scalar) == count
    for point, a, b in zip(points, fast, scalar, strict=True):
        assert set(a) == set(b)  # (the auto rows' keys come in schema order)
        # inputs as the sweep's schema types them (a column of 1, 2 and 2.5 is float)
        wrong = {k: (a[k], b[k]) for k in b if not (_same(a[k], b[k]) or (k in axes and a[k] == b[k]))}
        assert not wrong, (point, wrong)
    statuses = {r["status"] for r in scalar}
    assert {"ok", "infeasible"} <= statuses  # the workloads reach both costed kinds of row
    if name == "dense-a100":
        assert "invalid" in statuses
    warned = sum(bool(r["warnings"]) for r in scalar)
    assert warned > 0 or name == "dense-a100", warned  # the warnings are compared where there are some


def test_auto_is_the_default_and_its_frame_is_the_estimate_engines():
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-h100", nodes=1)
    cfg = {"global_batch_size": 64, "seq_len": 1024}
    grid = {"tp": [1, 2, 3], "micro_batch_size": [1, 3, 64], "zero_stage": [0, 3], "stack": ["fsdp2", "ddp"]}
    fast = st.sweep(model, cluster, cfg, grid)
    pd.testing.assert_frame_equal(fast, st.sweep(model, cluster, cfg, grid, engine="estimate"))
    assert set(fast.status) == {"ok", "invalid", "infeasible"}


def test_a_failure_inside_the_vectorized_engine_costs_only_speed(monkeypatch):
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-h100", nodes=1)
    cfg, grid = {"global_batch_size": 64, "seq_len": 1024}, {"tp": [1, 2], "micro_batch_size": [1, 2]}
    want = st.sweep(model, cluster, cfg, grid, engine="estimate")

    def broken(*args, **kwargs):
        raise FloatingPointError("planted")
    monkeypatch.setattr("simtrain.search.vector_rows.auto_table", broken)
    with pytest.warns(RuntimeWarning, match="planted"):
        got = st.sweep(model, cluster, cfg, grid)
    pd.testing.assert_frame_equal(got, want)


def test_unknown_engine_is_named():
    with pytest.raises(st.SpecError, match="unknown engine 'fast'; one of auto, estimate, simulate"):
        st.sweep("gpt2", "dgx-h100", {"global_batch_size": 8}, {"tp": [1]}, engine="fast")
    assert ENGINES[0] == "auto"


def test_point_keys_of_codes_are_point_key():
    grid = {"tp": [1, 1.0, True, "1", None], "stack": ["fsdp2", "ddp"], "nodes": [1, 2]}
    names, uniques, codes = grid_codes(grid)
    want = [point_key(p) for p in grid_points(grid)]
    assert point_keys(names, uniques) == want
    pick = np.array([7, 0, 19, 3])
    assert point_keys(names, uniques, {k: codes[k][pick] for k in names}) == [want[i] for i in pick]
