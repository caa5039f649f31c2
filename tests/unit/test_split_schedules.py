"""ZB-H1 and DualPipeV: the backward split into input- (I) and weight-gradient (W) passes, the V of
chunks and the overlapped forward / backward pairs — orders, hand-derived step times, memory, both
engines and the configuration checks."""

from __future__ import annotations

import numpy as np
import pytest

import simtrain as st
from simtrain.glossary import PipelineSchedule as S
from simtrain.parallel.schedule import (
    chunk_rank,
    in_flight_microbatches,
    pipeline_finish_s,
    rank_order,
    stage_chunks,
)
from simtrain.search.vector_pipeline import pipeline_finish_many


def _equal(p: int, f: float, i: float, w: float, pair: float | None = None) -> dict:
    """Per-rank seconds of every task kind for equal stages (B = I + W; a pair of F + B by default)."""
    pair = f + i + w if pair is None else pair
    return {"I": [i] * p, "W": [w] * p, "Fo": [f] * p, "Bo": [pair - f] * p}


def _finish(p: int, m: int, schedule: S, v: int, f: float, i: float, w: float, pair: float | None = None) -> float:
    return max(pipeline_finish_s([f] * p, [i + w] * p, m, schedule, v, None, _equal(p, f, i, w, pair)))


# --- orders ----------------------------------------------------------------------------------------------------

def test_zb_h1_order_defers_rank_weight_passes():
    """p = 4, m = 4, rank 1: 1F1B's two warm-up forwards, F I pairs, its first W one iteration late."""
    got = [f"{k}{mb}" for k, _, mb in rank_order(1, 4, 4, S.ZB_H1)]
    assert got == ["F0", "F1", "F2", "I0", "F3", "I1", "W0", "I2", "W1", "I3", "W2", "W3"]
    assert [f"{k}{mb}" for k, _, mb in rank_order(0, 2, 3, S.ZB_H1)] == ["F0", "F1", "I0", "W0", "F2", "I1", "W1",
                                                                          "I2", "W2"]


def test_every_task_runs_once():
    for schedule, v, m in ((S.ZB_H1, 1, 5), (S.DUALPIPE_V, 2, 9)):
        for p in (2, 3, 4):
            for r in range(p):
                order = rank_order(r, p, m, schedule, v)
                chunks = stage_chunks(r, p, v, schedule)
                for c in chunks:
                    fw = [mb for k, cc, mb in order if cc == c and k in ("F", "Fo")]
                    bw = [mb for k, cc, mb in order if cc == c and k in ("B", "I", "Bo")]
                    ws = [mb for k, cc, mb in order if cc == c and k == "W"]
                    full = [mb for k, cc, mb in order if cc == c and k in ("B", "Bo")]
                    assert sorted(fw) == sorted(bw) == list(range(m))
                    assert sorted(ws + full) == list(range(m))  # a W for every split backward


def test_dualpipev_places_chunks_in_a_v():
    assert [chunk_rank(c, 4, S.DUALPIPE_V) for c in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert stage_chunks(0, 4, 2, S.DUALPIPE_V) == (0, 7)
    assert stage_chunks(1, 4, 2, S.INTERLEAVED) == (1, 5)


def _torch_orders(schedule: S, p: int, m: int):
    ts = pytest.importorskip("torch.distributed.pipelining.schedules")
    kinds = {ts._ComputationType.FORWARD: "F", ts._ComputationType.BACKWARD_INPUT: "I",
             ts._ComputationType.BACKWARD_WEIGHT: "W", ts._ComputationType.FULL_BACKWARD: "B"}
    if schedule is S.ZB_H1:  # one stage per rank: PyTorch's ZB1P
        sched = object.__new__(ts.ScheduleInterleavedZeroBubble)
        sched.pp_group_size, sched.n_local_stages, sched._n_microbatches = p, 1, m
        sched.number_of_rounds = max(1, m // p)
        sched.microbatches_per_round = m // sched.number_of_rounds
    else:
        sched = object.__new__(ts.ScheduleDualPipeV)
        sched.pp_group_size, sched._n_microbatches = p, m
    out = []
    for r in range(p):
        order = []
        for a in sched._calculate_single_rank_operations(r):
            if a is None:
                continue
            if a.computation_type == ts._ComputationType.OVERLAP_F_B:
                f, b = a.sub_actions
                order += [("Fo", f.stage_index, f.microbatch_index), ("Bo", b.stage_index, b.microbatch_index)]
            else:
                order.append((kinds[a.computation_type], a.stage_index, a.microbatch_index))
        out.append(order)
    return out


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_orders_equal_pytorchs(p):
    """PyTorch's pipelining schedules (the reference implementations torchtitan runs) give the same
    per-rank orders: ZB1P with one stage per rank, and DualPipeV."""
    for m in range(p, 3 * p + 1):
        if m % max(1, m // p) == 0:
            want = _torch_orders(S.ZB_H1, p, m)
            assert [list(rank_order(r, p, m, S.ZB_H1)) for r in range(p)] == want, m
    for m in range(2 * p, 4 * p + 2):
        want = _torch_orders(S.DUALPIPE_V, p, m)
        assert [list(rank_order(r, p, m, S.DUALPIPE_V, 2)) for r in range(p)] == want, m


# --- step times by hand ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (8, 32), (2, 5)])
def test_zb_h1_bubble_is_p_minus_1_times_f_plus_i_minus_w(p, m):
    """Qi et al. 2024 §3.1: ZB-H1's bubble is (p − 1)(T_F + T_B − T_W) (their B is the input half);
    1F1B's (p − 1)(T_F + T_B + T_W). F = 2, I = 2, W = 1.5 s."""
    f, i, w = 2.0, 2.0, 1.5
    assert _finish(p, m, S.ZB_H1, 1, f, i, w) == pytest.approx(m * (f + i + w) + (p - 1) * (f + i - w))
    one = max(pipeline_finish_s([f] * p, [i + w] * p, m, S.ONE_F_ONE_B))
    assert one == pytest.approx((m + p - 1) * (f + i + w))


@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 16), (8, 32)])
def test_dualpipev_bubble_matches_deepseek_table_2(p, m):
    """DeepSeek-V3 Table 2: DualPipe's bubble is (PP/2 − 1)(F&B + B − 3W), PP the 2p chunks, B the
    input half. Per chunk F = 1, I = 1, W = 1, a pair F&B = 3 s: bubble p − 1 over 2m·3 s of work."""
    assert _finish(p, m, S.DUALPIPE_V, 2, 1.0, 1.0, 1.0) == pytest.approx(2 * m * 3.0 + (p - 1) * (3 + 1 - 3))


def test_a_pair_that_hides_communication_shortens_the_step():
    """The pair runs F and B of two chunks overlapped: 2.5 s instead of 3 s per pair."""
    p, m = 4, 8
    plain, paired = _finish(p, m, S.DUALPIPE_V, 2, 1.0, 1.0, 1.0), _finish(p, m, S.DUALPIPE_V, 2, 1.0, 1.0, 1.0, 2.5)
    pairs = sum(k == "Bo" for r in range(p) for k, _, _ in rank_order(r, p, m, S.DUALPIPE_V, 2))
    assert pairs > 0 and paired < plain
    assert plain - paired <= pairs * 0.5 + 1e-9  # never more than every pair's saving


def test_the_vectorized_recurrence_runs_split_kinds_bit_identically():
    rng = np.random.default_rng(7)
    for schedule, p, m, v in ((S.ZB_H1, 4, 6, 1), (S.DUALPIPE_V, 3, 7, 2)):
        fw, bw, start = rng.random((9, p)), rng.random((9, p)), rng.random((9, p))
        other = {"I": 0.6 * bw, "W": 0.4 * bw, "Fo": 0.9 * fw, "Bo": bw + 0.1 * fw}
        got = pipeline_finish_many(fw, bw, m, schedule, v, start, other)
        want = np.array([pipeline_finish_s(fw[i], bw[i], m, schedule, v, start[i], {k: x[i] for k, x in other.items()})
                         for i in range(9)])
        assert np.array_equal(got, want)


# --- memory ----------------------------------------------------------------------------------------------------

def test_in_flight_activations_read_off_the_order():
    """ZB-H1 keeps a micro-batch until its W: p on every rank (1F1B's peak, on the first rank only);
    DualPipeV holds 2p + 1 chunks (DeepSeek's "PP + 1"), p + ½ micro-batches of a rank's two chunks."""
    assert [in_flight_microbatches(r, 4, 8, S.ZB_H1) for r in range(4)] == [4.0] * 4
    assert [in_flight_microbatches(r, 4, 8, S.ONE_F_ONE_B) for r in range(4)] == [4.0, 3.0, 2.0, 1.0]
    assert in_flight_microbatches(0, 4, 2, S.ZB_H1) == 2.0  # fewer micro-batches than stages
    assert [in_flight_microbatches(r, 4, 8, S.DUALPIPE_V, 2) for r in range(4)] == [4.5] * 4


# --- both engines on a model ------------------------------------------------------------------------------------

def _cfg(schedule: str, v: int = 1, **kw) -> dict:
    return dict(global_batch_size=64, micro_batch_size=1, tp=2, pp=4, dp=2, seq_len=2048,
                pipeline_schedule=schedule, virtual_stages=v, **kw)


@pytest.fixture(scope="module")
def cluster():
    return st.load_cluster("dgx-h100", nodes=2)


@pytest.mark.parametrize("schedule,v", [("zb-h1", 1), ("dualpipev", 2)])
def test_estimate_equals_simulate_and_the_breakdown_adds_up(cluster, schedule, v):
    e = st.estimate("llama3-8b", cluster, _cfg(schedule, v))
    s = st.simulate("llama3-8b", cluster, _cfg(schedule, v))
    assert e.feasible and s.feasible
    assert s.step_time_s == pytest.approx(e.step_time_s, rel=1e-9)
    assert sum(e.time_breakdown_s.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    assert s.memory.total_bytes == pytest.approx(e.memory.total_bytes, rel=1e-9)


def test_zb_h1_shrinks_the_bubble_of_1f1b(cluster):
    one = st.estimate("llama3-8b", cluster, _cfg("1f1b"))
    zb = st.estimate("llama3-8b", cluster, _cfg("zb-h1"))
    assert zb.time_breakdown_s["pipeline_bubble"] < 0.9 * one.time_breakdown_s["pipeline_bubble"]
    assert zb.step_time_s < one.step_time_s
    assert zb.time_breakdown_s["compute"] == pytest.approx(one.time_breakdown_s["compute"])


def test_dualpipev_pairs_hide_expert_all_to_all(cluster):
    """On a MoE model the pairs hide the ep all-to-all: less exposed communication than 1F1B's."""
    kw = dict(global_batch_size=64, micro_batch_size=1, tp=1, pp=4, dp=4, ep=4, seq_len=2048)
    one = st.estimate("mixtral-8x7b", cluster, dict(kw, pipeline_schedule="1f1b"))
    dpv = st.estimate("mixtral-8x7b", cluster, dict(kw, pipeline_schedule="dualpipev", virtual_stages=2))
    assert dpv.time_breakdown_s["comm_exposed"] < one.time_breakdown_s["comm_exposed"]


def test_the_simulator_logs_split_tasks(cluster):
    s = st.simulate("llama3-8b", cluster, _cfg("zb-h1"))
    names = {e.name.split()[0] for e in s.timeline.events if e.lane == "compute"}
    assert {"F", "I", "W"} <= names and "B" not in names
    s = st.simulate("llama3-8b", cluster, _cfg("dualpipev", 2))
    names = {e.name.split()[0] for e in s.timeline.events if e.lane == "compute"}
    assert {"Fo", "Bo", "W"} <= names
    ends = {(e.rank, e.name) for e in s.timeline.events}
    assert (0, "F mb0 c0") in ends and any(r == 0 and n.endswith("c7") for r, n in ends)  # the V: c7 on rank 0


# --- configuration -----------------------------------------------------------------------------------------------

def test_dualpipev_needs_two_chunks_and_2p_micro_batches(cluster):
    with pytest.raises(st.SpecError, match="virtual_stages=2"):
        st.TrainConfig(**_cfg("dualpipev", 1))
    r = st.estimate("llama3-8b", cluster, dict(_cfg("dualpipev", 2), global_batch_size=8))
    assert not r.feasible and "at least 2 × pp = 8 micro-batches" in r.reasons[0]
    with pytest.raises(st.SpecError, match="'zb-h1' needs pp >= 2"):
        st.TrainConfig(global_batch_size=8, pipeline_schedule="zb-h1")


def test_torchtitan_dualpipev_maps_to_dualpipev():
    cfg = st.TrainConfig.from_torchtitan('[parallelism]\npipeline_parallel_degree = 4\n'
                                         'pipeline_parallel_schedule = "DualPipeV"\n'
                                         '[training]\nlocal_batch_size = 16\nseq_len = 2048\n')
    assert cfg.pipeline_schedule is S.DUALPIPE_V and cfg.virtual_stages == 2
