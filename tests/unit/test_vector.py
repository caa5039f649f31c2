"""The vectorized estimate equals st.estimate point by point (step time, memory, feasibility, MFU)."""

import random

import numpy as np
import pytest

import simtrain as st
from simtrain.errors import SpecError
from simtrain.parallel.schedule import pipeline_finish_s
from simtrain.search.vector import estimate_grid, estimate_points
from simtrain.search.vector_pipeline import pipeline_finish_many

STACKS = ["megatron-core", "fsdp2", "fsdp2-compile", "deepspeed", "ddp", "llm-foundry", "megatron-lm", "reference"]


def _random_points(axes: dict, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    points = []
    for _ in range(n):
        p = {k: rng.choice(v) for k, v in axes.items()}
        if "virtual_stages" in axes:  # interleaving when v > 1; otherwise 1F1B or GPipe
            p["pipeline_schedule"] = "interleaved-1f1b" if p["virtual_stages"] > 1 else rng.choice(["1f1b", "gpipe"])
        points.append(p)
    return points


def _assert_equal_to_scalar(model, cluster, base, points) -> int:
    df = estimate_points(model, cluster, base, points)
    checked = 0
    for p, (_, row) in zip(points, df.iterrows(), strict=True):
        target = cluster.with_nodes(p["nodes"]) if "nodes" in p else cluster
        fields = {**base.model_dump(exclude_unset=True), **{k: v for k, v in p.items() if k != "nodes"}}
        try:
            cfg = st.TrainConfig(**fields)
        except ValueError:
            assert not row.valid and not row.feasible and row.reasons
            continue
        r = st.estimate(model, target, cfg)
        assert bool(row.feasible) == r.feasible, (p, row.reasons, r.reasons)
        if r.memory is None:  # a layout that cannot run: rejected with a reason by both paths
            assert not row.valid and row.reasons
            continue
        assert row.valid, (p, row.reasons)
        got = (row.step_time_s, row.mfu, row.hfu, row.memory_bytes, row.memory_reserved_bytes,
               row.compute_s, row.bubble_s, row.stragglers_s)
        want = (r.step_time_s, r.mfu, r.hfu, r.memory.total_bytes, r.memory.reserved_bytes,
                r.time_breakdown_s["compute"], r.time_breakdown_s["pipeline_bubble"],
                r.time_breakdown_s["stragglers"])
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), p
        checked += 1
    return checked


def test_dense_transformer_every_knob_and_stack():
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-a100-80gb")
    axes = {"nodes": [1, 2], "tp": [1, 2, 4, 8], "pp": [1, 2, 3, 4], "micro_batch_size": [1, 2, 4],
            "zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"], "sequence_parallel": [False, True],
            "virtual_stages": [1, 2, 3], "stack": STACKS, "precision": ["bf16", "fp16", "fp32"]}
    base = st.TrainConfig(global_batch_size=64, seq_len=1024)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 90, seed=1)) >= 30


def test_fp8_on_hopper_with_and_without_the_weight_cache():
    """fp8 runs natively on an H100: megatron-core casts each weight once a step (fp8_weight_cache), fsdp2 in
    every forward, and so does megatron-core with the cache off (the data-parallel side's memo must tell the
    two apart); the vector path prices each as the scalar estimate does."""
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-h100", nodes=1)
    axes = {"tp": [1, 2, 4], "pp": [1, 2], "micro_batch_size": [1, 2, 4], "zero_stage": [1, 3],
            "virtual_stages": [1, 2], "precision": ["fp8", "bf16"],
            "stack": ["megatron-core", st.load_stack("megatron-core").with_overrides(fp8_weight_cache=False), "fsdp2"]}
    base = st.TrainConfig(global_batch_size=64, seq_len=1024)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 40, seed=7)) >= 15


def test_slow_hosts_over_jobs_of_one_to_a_hundred_nodes():
    """The stragglers line of persistently slow hosts grows with the hosts a point spans (1 − 0.995^hosts),
    and the vector path prices it per point as the scalar estimate does; the reference stack has none."""
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-a100-80gb")
    axes = {"nodes": [1, 16, 100], "tp": [1, 8], "pp": [1, 2], "micro_batch_size": [1, 2],
            "stack": ["megatron-core", "fsdp2", "reference"]}
    base = st.TrainConfig(global_batch_size=1600, seq_len=1024, precision="bf16")
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 30, seed=11)) >= 15
    df = estimate_points(model, cluster, base, [{"nodes": n, "stack": "fsdp2"} for n in (1, 100)])
    share = df.stragglers_s / (df.step_time_s - df.optimizer_s - df.idle_gaps_s - df.stragglers_s)
    assert share.iloc[1] > 50 * share.iloc[0] > 0  # 0.013 · 0.39 against 0.013 · 0.005


def test_fsdp2_with_and_without_the_gathers_copy_out():
    """FSDP2 copies every gather out on the compute stream, FSDP1 does not: two stacks that differ only
    there must not share the data-parallel side's memo, and each prices as the scalar estimate."""
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-a100-80gb", nodes=2)
    axes = {"micro_batch_size": [1, 2, 4], "zero_stage": [1, 3], "recompute": ["none", "full"],
            "stack": ["fsdp2", st.load_stack("fsdp2").with_overrides(fsdp_gather_copy_out=False)]}
    base = st.TrainConfig(global_batch_size=64, seq_len=1024)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 24, seed=11)) >= 12


def test_fsdp2_with_and_without_its_root_unit_and_gradient_copy_in():
    """The root unit (a root gather and reduction apart, per-block buckets) and FSDP2's gradient copy-in
    (compute-stream seconds in each reducing backward): stacks that differ only there must not share the
    data-parallel side's memo, with one micro-batch or several, and each prices as the scalar estimate."""
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-a100-80gb", nodes=2)
    fsdp2 = st.load_stack("fsdp2")
    axes = {"micro_batch_size": [1, 2, 4], "zero_stage": [2, 3], "pp": [1, 2], "recompute": ["none", "full"],
            "stack": [fsdp2, fsdp2.with_overrides(fsdp_root_unit=False), fsdp2.with_overrides(fsdp_reduce_copy_in=False),
                      fsdp2.with_overrides(fsdp_root_unit=False, fsdp_reduce_copy_in=False)]}
    base = st.TrainConfig(global_batch_size=64, seq_len=1024)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 40, seed=13)) >= 20


def test_tensor_parallel_overlap_variants_of_one_preset():
    """Megatron-Core with --tp-comm-overlap off, its backward's input-gradient collective async (as it runs)
    or not, and a partial share: the sweep's stage signature tells them apart."""
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-a100-80gb")
    core = st.load_stack("megatron-core")
    axes = {"nodes": [1, 2], "tp": [2, 4, 8], "pp": [1, 2], "micro_batch_size": [1, 2],
            "sequence_parallel": [False, True], "recompute": ["none", "full"],
            "stack": [core.with_overrides(tp_comm_overlap=0.0), core.with_overrides(tp_comm_overlap=0.0,
                                                                               tp_dgrad_comm_async=False),
                      core.with_overrides(tp_comm_overlap=0.3, tp_dgrad_comm_async=False)]}
    base = st.TrainConfig(global_batch_size=64, seq_len=1024)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 36, seed=5)) >= 20


def test_mixture_of_experts_with_context_and_expert_parallelism():
    model, cluster = st.load_model("mixtral-8x7b"), st.load_cluster("dgx-h100")
    axes = {"nodes": [1, 2, 4], "tp": [1, 2, 4, 8], "pp": [1, 2, 4], "cp": [1, 2], "ep": [1, 2, 4, 8],
            "micro_batch_size": [1, 2], "zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"],
            "sequence_parallel": [False, True], "stack": ["megatron-core", "fsdp2", "reference"]}
    base = st.TrainConfig(global_batch_size=64, seq_len=2048)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 60, seed=2)) >= 25


def test_torus_cluster_optimizers_and_overlap_switches():
    model, cluster = st.load_model("llama3-8b"), st.load_cluster("tpu-v5p-pod")
    axes = {"nodes": [1, 2, 4], "tp": [1, 2, 4], "pp": [1, 2, 4], "micro_batch_size": [1, 2], "zero_stage": [0, 1, 3],
            "recompute": ["none", "full"], "optimizer": ["adamw", "sgd", "adafactor"], "dp_overlap": [True, False],
            "fused_optimizer": [True, False], "grad_clipping": [True, False],
            "optimizer_impl": [None, "for-loop", "foreach", "fused"]}
    base = st.TrainConfig(global_batch_size=128, seq_len=4096)
    assert _assert_equal_to_scalar(model, cluster, base, _random_points(axes, 40, seed=3)) >= 20


def test_points_outside_the_factoring_fall_back_to_the_scalar_estimate():
    # a data pipeline that can stall and a precision the A100 lacks (fp8): exact via st.estimate
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-a100-80gb", nodes=1)
    base = st.TrainConfig(global_batch_size=32, seq_len=512, data={"sample_bytes": 2e6, "num_workers": 2})
    points = [{"tp": tp, "micro_batch_size": mb, "precision": prec} for tp in (1, 2) for mb in (1, 4)
              for prec in ("bf16", "fp8")]
    assert _assert_equal_to_scalar(model, cluster, base, points) == 4


def test_grid_rows_follow_the_sweep_order_and_unknown_keys_raise():
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-a100-80gb", nodes=1)
    base = st.TrainConfig(global_batch_size=16, seq_len=256)
    df = estimate_grid(model, cluster, base, {"tp": [1, 2], "micro_batch_size": [1, 2, 4]})
    assert list(zip(df.micro_batch_size, df.tp, strict=True)) == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2)]
    with pytest.raises(SpecError, match="tpp"):
        estimate_grid(model, cluster, base, {"tpp": [1, 2]})


def test_invalid_layouts_carry_the_scalar_reason():
    model, cluster = st.load_model("gpt2"), st.load_cluster("dgx-a100-80gb", nodes=1)
    df = estimate_grid(model, cluster, st.TrainConfig(global_batch_size=16, seq_len=256), {"tp": [3, 1]})
    assert not df.valid[0] and "tp × pp × cp" in df.reasons[0] and df.valid[1] and df.reasons[1] == ""


@pytest.mark.parametrize("p,m,schedule,v", [(1, 4, "1f1b", 1), (2, 1, "1f1b", 1), (4, 8, "1f1b", 1), (4, 3, "1f1b", 1),
                                            (4, 8, "gpipe", 1), (4, 8, "interleaved-1f1b", 2),
                                            (3, 7, "interleaved-1f1b", 2), (8, 5, "interleaved-1f1b", 3)])
def test_pipeline_recurrence_is_bit_identical_to_the_scalar_one(p, m, schedule, v):
    rng = np.random.default_rng(p * 100 + m)
    fw, bw, start = rng.random((12, p)), rng.random((12, p)), rng.random((12, p))
    got = pipeline_finish_many(fw, bw, m, schedule, v, start)
    want = np.array([pipeline_finish_s(fw[i], bw[i], m, schedule, v, start[i]) for i in range(12)])
    assert np.array_equal(got, want)
