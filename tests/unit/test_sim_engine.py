"""Event logs of tiny hand-derived scenarios (simpy style): a 2-stage 1F1B with 4 micro-batches, a
DataLoader that starves compute, collectives sharing one link; memory peaks; speed factors."""

import dataclasses

import pytest
import simpy

import simtrain as st
from simtrain.estimator import build_program, prepare_model
from simtrain.parallel.memory_plan import stage_memories
from simtrain.parallel.program import CommTask, Layout, RankProgram
from simtrain.sim import SharedLink, SimOptions, run_program, simulate_data_loader
from simtrain.specs.train import DataPipeline
from tests.conftest import invented_cluster, linear_op

# one linear per block on the invented device (1e12 FLOP/s fp32, ideal efficiencies): k = n = 1000,
# 100 rows per sample, micro-batch 1 → forward 2·100·1000·1000 = 2e8 FLOP = 200 us; backward (agrad +
# wgrad) 400 us; sends ~0 on the 1 EB/s invented link
TF_US, TB_US = 200.0, 400.0


def _model(blocks: int) -> st.Model:
    return st.Model("pipe", [linear_op(f"layers.{i}/fc", f"layers.{i}", 100, 1000, 1000) for i in range(blocks)])


def _cfg(m: int, pp: int, **kw) -> st.TrainConfig:
    kw.setdefault("stack", "reference")  # the kernels alone: the event logs below are hand-derived
    return st.TrainConfig(global_batch_size=m, micro_batch_size=1, precision="fp32", optimizer="sgd", pp=pp, **kw)


def _compute_log(report) -> list[tuple[str, int, float, float]]:
    return sorted(((n, r, round(a * 1e6, 3), round(b * 1e6, 3)) for n, r, a, b in report.timeline.log()
                   if n[:2] in ("F ", "B ")), key=lambda e: (e[2], e[1]))


def test_two_stage_1f1b_four_microbatches():
    """Rank 0 runs F0 F1 B0 F2 B1 F3 B2 B3 (one warm-up forward), rank 1 F0 B0 F1 B1 …; every task
    starts when its rank is free and its input is there: the step is (m + p − 1)·(t_f + t_b) = 3000 us."""
    s = st.simulate(_model(2), invented_cluster(2), _cfg(4, 2))
    f, b = TF_US, TB_US
    assert _compute_log(s) == [
        ("F mb0 c0", 0, 0.0, f), ("F mb1 c0", 0, f, 2 * f), ("F mb0 c1", 1, f, 2 * f),
        ("B mb0 c1", 1, 2 * f, 2 * f + b),                      # 400 – 800
        ("B mb0 c0", 0, 800.0, 1200.0), ("F mb1 c1", 1, 800.0, 1000.0),
        ("B mb1 c1", 1, 1000.0, 1400.0), ("F mb2 c0", 0, 1200.0, 1400.0),
        ("B mb1 c0", 0, 1400.0, 1800.0), ("F mb2 c1", 1, 1400.0, 1600.0),
        ("B mb2 c1", 1, 1600.0, 2000.0), ("F mb3 c0", 0, 1800.0, 2000.0),
        ("B mb2 c0", 0, 2000.0, 2400.0), ("F mb3 c1", 1, 2000.0, 2200.0),
        ("B mb3 c1", 1, 2200.0, 2600.0), ("B mb3 c0", 0, 2600.0, 3000.0),
    ]
    # every forward of chunk 0 and backward of chunk 1 sends: one arrow per send to the task it feeds
    assert len(s.timeline.flows) == 8
    first = min(s.timeline.flows, key=lambda fl: fl.dst_s)
    assert (first.src_rank, first.dst_rank, round(first.dst_s * 1e6, 3)) == (0, 1, 200.0)


def test_memory_peak_is_static_plus_the_activations_in_flight():
    """1F1B: stage s holds min(p − s, m) micro-batches at its peak, GPipe all m: the containers reach
    exactly the estimate's per-stage allocated total."""
    model, cluster = _model(4), invented_cluster(4)
    for schedule in ("1f1b", "gpipe"):
        cfg = _cfg(6, 4, pipeline_schedule=schedule)
        program = build_program(prepare_model(model, cfg), cluster, cfg)
        mems = stage_memories(model, cluster, cfg, program)
        result = run_program(program, schedule, SimOptions(), mems)
        assert result.timeline.memory_peak_bytes == pytest.approx([mm.total_bytes for mm in mems], rel=1e-12)


def test_a_slow_rank_stretches_the_pipeline():
    """Rank 1 at half speed: its tasks take twice as long, 1F1B with p = 2, m = 1: F0 (200) → F1 (400)
    → B1 (800) → B0 (400) = 1800 us, against 1200 us at full speed."""
    s = st.simulate(_model(2), invented_cluster(2), _cfg(1, 2), speed=(1.0, 0.5))
    assert _compute_log(s) == [("F mb0 c0", 0, 0.0, 200.0), ("F mb0 c1", 1, 200.0, 600.0),
                               ("B mb0 c1", 1, 600.0, 1400.0), ("B mb0 c0", 0, 1400.0, 1800.0)]
    # the slow rank's optimizer runs at half speed too: the report's step ends when the run does
    assert s.step_time_s == pytest.approx(max(e for *_, e in s.timeline.log()), rel=1e-12)
    bad = st.simulate(_model(2), invented_cluster(2), _cfg(1, 2), speed=(1.0,))
    assert not bad.feasible and "speed" in bad.reasons[0]


# --- the input pipeline ----------------------------------------------------------------------------------
def test_data_loader_that_starves_compute():
    """Two workers, one sample per batch at 3 s of transform, a 1 s step, one batch of prefetch each.
    Both workers deliver at 3; the loop computes b0 at 3–4 and b1 at 4–5 and hands a slot back as it
    takes each batch, so worker 0 builds b2 at 3–6, worker 1 b3 at 4–7, b4 6–9, b5 7–10: the loop
    computes at 3, 4, 6, 7, 9, 10 — 1.5 s a step in steady state, 0.5 s of it stalled (closed form:
    process = 1·3/2 = 1.5 s > 1 s of compute)."""
    data = DataPipeline(num_workers=2, prefetch_factor=1, transform_s_per_sample=3.0)
    run = simulate_data_loader(data, samples=1, compute_s=1.0, steps=6)
    log = sorted((n, a, b) for n, a, b in run.log if n.startswith(("transform", "compute")))
    assert log == sorted([("transform b0", 0.0, 3.0), ("transform b1", 0.0, 3.0), ("transform b2", 3.0, 6.0),
                          ("transform b3", 4.0, 7.0), ("transform b4", 6.0, 9.0), ("transform b5", 7.0, 10.0),
                          ("compute b0", 3.0, 4.0), ("compute b1", 4.0, 5.0), ("compute b2", 6.0, 7.0),
                          ("compute b3", 7.0, 8.0), ("compute b4", 9.0, 10.0), ("compute b5", 10.0, 11.0)])
    assert run.starts_s == (3.0, 4.0, 6.0, 7.0, 9.0, 10.0)
    assert run.times.iteration_s == pytest.approx(1.5) and run.times.stall_s == pytest.approx(0.5)
    assert run.times.iteration_s == pytest.approx(run.closed_form.iteration_s)


def test_data_loader_without_workers_adds_every_stage():
    """num_workers 0: read 2 s (2 samples · 1e9 B at 1 GB/s), transform 2 s, compute 1 s, in turn: 5 s a
    step, the first computing at 4 s."""
    data = DataPipeline(num_workers=0, sample_bytes=1e9, storage_bandwidth_bytes_per_s=1e9, transform_s_per_sample=1.0)
    run = simulate_data_loader(data, samples=2, compute_s=1.0, steps=3)
    assert run.starts_s == pytest.approx((4.0, 9.0, 14.0))
    assert run.times.stall_s == pytest.approx(4.0) == run.closed_form.stall_s
    assert run.host_peak_bytes == 2e9  # one batch of 2 samples in host memory at a time


def test_simulated_data_stall_reaches_the_report():
    """A process-bound loader: the simulated stall equals the closed form the estimate reports."""
    data = {"num_workers": 2, "transform_s_per_sample": 2e-3}
    cfg = _cfg(4, 2, data=data)
    s, e = st.simulate(_model(2), invented_cluster(2), cfg), st.estimate(_model(2), invented_cluster(2), cfg)
    assert s.data_loader is not None and s.time_breakdown_s["data_stall"] > 0
    assert s.time_breakdown_s["data_stall"] == pytest.approx(e.time_breakdown_s["data_stall"], rel=1e-9)
    assert s.step_time_s == pytest.approx(e.step_time_s, rel=1e-9)


# --- shared links ----------------------------------------------------------------------------------------
def _flows(starts_and_work: list[tuple[float, float]]) -> list[float]:
    env = simpy.Environment()
    link, ends = SharedLink(env, "nic"), {}

    def flow(i, at, work):
        yield env.timeout(at)
        yield link.transfer(work)
        ends[i] = env.now
    for i, (at, work) in enumerate(starts_and_work):
        env.process(flow(i, at, work))
    env.run()
    return [ends[i] for i in range(len(starts_and_work))]


def test_two_collectives_sharing_one_link():
    """Processor sharing: 3 s and 1 s of work started together run at half rate while both run —
    the short one ends at 2 (1 s of service in 2 s), the long one has 2 s left and ends at 4; a 2 s
    flow alone for 1 s, then joined by another 2 s flow: the first ends at 3, the second at 4."""
    assert _flows([(0.0, 3.0), (0.0, 1.0)]) == pytest.approx([4.0, 2.0])
    assert _flows([(0.0, 2.0), (1.0, 2.0)]) == pytest.approx([3.0, 4.0])
    assert _flows([(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]) == pytest.approx([3.0, 3.0, 3.0])


def _one_stage_program(comm: tuple[CommTask, ...]) -> RankProgram:
    """A hand-made program: 1 s forward and 1 s backward compute, the given per-micro-batch collectives."""
    cfg = _cfg(1, 1)
    program = build_program(_model(1), invented_cluster(1), cfg)
    stage = dataclasses.replace(program.stages[0], fw_s=1.0, bw_s=1.0, recompute_s=0.0, comm=comm, step_comm=(),
                                optimizer_s=0.0)
    return RankProgram(Layout(1, 2, 1, 1, 1, 1, 1, 1), (stage,), program.regime)


def test_overlapped_gather_and_blocking_allreduce_share_a_link():
    """The forward hides a 2 s parameter gather (overlap 2 s) and ends with a 2 s exposed tp
    all-reduce. Apart (contention off): gather 0–2 beside compute 0–1, all-reduce 1–3, backward 3–4.
    On one link: the gather runs alone 0–1 (1 s left), then both share it — the gather ends at 3,
    the all-reduce (1 s done by 3) at 4 — and the backward runs 4–5."""
    program = _one_stage_program((CommTask("dp", "allgather", "fw", 1e6, 2.0, overlap_s=2.0),
                                  CommTask("tp", "allreduce", "fw", 1e6, 2.0)))
    apart = run_program(program, "1f1b", SimOptions())
    shared = run_program(program, "1f1b", SimOptions(contention=True, tiers=(("tp", "fabric"), ("dp", "fabric"))))
    assert sorted(apart.timeline.log()) == [("B mb0 c0", 0, 3.0, 4.0), ("F mb0 c0", 0, 0.0, 1.0),
                                            ("dp collective (overlapped)", 0, 0.0, 2.0), ("tp collective", 0, 1.0, 3.0)]
    assert sorted(shared.timeline.log()) == [("B mb0 c0", 0, 4.0, 5.0), ("F mb0 c0", 0, 0.0, 1.0),
                                             ("dp collective (overlapped)", 0, 0.0, 3.0),
                                             ("tp collective", 0, 1.0, 4.0)]
    assert shared.timeline.link_max_concurrent == {"rank 0 fabric": 2}
    # on separate links (tp on the fabric, dp on the NIC) nothing contends: the same times as apart
    split = run_program(program, "1f1b", SimOptions(contention=True, tiers=(("tp", "fabric"), ("dp", "network"))))
    assert sorted(split.timeline.log()) == sorted(apart.timeline.log())


def test_layer_granularity_cuts_the_task_and_keeps_its_time():
    """granularity="layer": a 2-block stage's forward is two halves of compute, each followed by half
    of the exposed all-reduce (0.5 + 1 + 0.5 + 1 s); the task still takes 3 s."""
    program = _one_stage_program((CommTask("tp", "allreduce", "fw", 1e6, 2.0),))
    two = dataclasses.replace(program.stages[0], blocks=("a", "b"))
    program = dataclasses.replace(program, stages=(two,))
    log = sorted(run_program(program, "1f1b", SimOptions(granularity="layer")).timeline.log(), key=lambda e: e[2])
    assert log == [("F mb0 c0 l0", 0, 0.0, 0.5), ("tp collective l0", 0, 0.5, 1.5), ("F mb0 c0 l1", 0, 1.5, 2.0),
                   ("tp collective l1", 0, 2.0, 3.0), ("B mb0 c0 l0", 0, 3.0, 3.5), ("B mb0 c0 l1", 0, 3.5, 4.0)]


def test_a_worker_reading_is_not_transforming():
    """One worker, a 1 s read (1 sample · 1e9 B at 1 GB/s) and a 1 s transform per batch, a 0.5 s step:
    the worker does them in turn, so the loop gets a batch every 2 s — a stall of 1.5 s. The closed
    form says the same (max(fetch, fetch / W + process, …) = max(1, 1 + 1) = 2 s); it once overlapped
    read and transform (1 s), which the simulator showed to be optimistic."""
    data = DataPipeline(num_workers=1, sample_bytes=1e9, storage_bandwidth_bytes_per_s=1e9, transform_s_per_sample=1.0)
    run = simulate_data_loader(data, samples=1, compute_s=0.5)
    assert run.closed_form.iteration_s == pytest.approx(2.0)
    assert run.times.iteration_s == pytest.approx(2.0) and run.times.stall_s == pytest.approx(1.5)


def test_loop_handoff_sits_on_the_critical_path_in_both_engines():
    """2 workers, 10 ms transform per batch, 20 ms compute, 1.5 ms hand-off: the workers keep up
    (10 / 2 = 5 ms a batch), so a step is compute + hand-off = 21.5 ms in both; with no workers the
    stages add: 10 + 1.5 + 20 = 31.5 ms."""
    data = DataPipeline(num_workers=2, transform_s_per_sample=2.5e-3, handoff_s_per_batch=1.5e-3)
    run = simulate_data_loader(data, samples=4, compute_s=0.02)
    assert run.closed_form.iteration_s == pytest.approx(0.0215)
    assert run.times.iteration_s == pytest.approx(0.0215)
    serial = simulate_data_loader(data.model_copy(update={"num_workers": 0}), samples=4, compute_s=0.02)
    assert serial.closed_form.iteration_s == pytest.approx(0.0315) == serial.times.iteration_s
    assert any(name.startswith("handoff b") for name, _, _ in run.log)
