"""Per-chunk data-parallel sync of an interleaved pipeline (parallel/chunk_sync.py, ChunkWindows):
Megatron-core reduces a chunk's gradients when its last backward ends and gathers chunk j + 1's
parameters at chunk j's first forward, so all but one chunk's share hides behind the rank's other tasks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import simtrain as st
from simtrain.estimator import build_program
from simtrain.parallel.chunk_sync import (
    bucketed_exposed_s,
    chunked_gather_exposed_s,
    chunked_grad_exposed_s,
    gather_exposed_s,
    grad_sync_exposed_s,
)
from simtrain.parallel.comm_tasks import _bucketed_exposed
from simtrain.parallel.schedule_orders import ONE_CHUNK, chunk_windows
from simtrain.specs.stack_resolve import resolve_stack


# --- the windows, read off the schedule's static order ------------------------------------------
def test_interleaved_windows_by_hand():
    # p = 4, m = 8, v = 3: Megatron-core's table walks groups of 4 micro-batches through chunks 0, 1, 2
    # (backward 2, 1, 0). The backward tail is chunk 2 × 4, chunk 1 × 4, chunk 0 × 4: after chunk 2's
    # last backward 8 backward tasks remain, after chunk 1's 4. The forward head is chunk 0 × 4,
    # chunk 1 × 4, chunk 2 × 4: chunk 1 is launched at the start and needed after 4 forwards, chunk 2
    # launched at chunk 1's first forward (4) and needed after 8.
    for rank in range(4):
        w = chunk_windows(rank, 4, 8, "interleaved-1f1b", 3)
        assert w.grad_after == ((0.0, 8.0), (0.0, 4.0)), rank
        assert w.gather == (((0.0, 0.0), (4.0, 0.0)), ((4.0, 0.0), (8.0, 0.0))), rank


def test_one_chunk_per_rank_has_no_windows_whatever_the_micro_batch_count():
    for schedule in ("1f1b", "gpipe", "zb-h1"):
        assert chunk_windows(0, 4, 8, schedule, 1) is ONE_CHUNK
    assert chunk_windows(0, 4, 10**9, "1f1b", 1) is ONE_CHUNK   # never walks a huge order
    assert chunk_windows(0, 1, 8, "interleaved-1f1b", 1) is ONE_CHUNK


def test_dualpipev_rank_zero_finishes_one_chunk_before_the_other():
    w = chunk_windows(0, 4, 8, "dualpipev", 2)
    assert len(w.grad_after) == 1 and len(w.gather) == 1
    assert w.grad_after[0][1] > 0


# --- the rules, hand-derived ----------------------------------------------------------------------
def test_gradient_shares_hide_behind_the_backward_left_after_their_chunk():
    # 3 shares of 2 s; the earlier chunks end 10 s and 5 s before the backward does: both run long
    # before the end (link free 3 s before it); the last share's 4 buckets hide 1.5 s behind a 2 s
    # task: max(0.5, 2 − 2·3/4) = 0.5 s exposed
    assert chunked_grad_exposed_s(2.0, 4, 2.0, [10.0, 5.0]) == pytest.approx(0.5)
    # windows too short: 1 s and 0.5 s before the end. The link runs share 1 from −1 to 1 and share 2
    # from 1 to 3: 3 s past the end of the backward, then the last share, 2 s with nothing left to hide it
    assert chunked_grad_exposed_s(2.0, 4, 2.0, [1.0, 0.5]) == pytest.approx(3.0 + 2.0)
    # link free 0.5 s before the end: the last share hides behind 0.5 s only: max(0.5, 2 − 0.5·3/4)
    assert chunked_grad_exposed_s(2.0, 4, 2.0, [2.5]) == pytest.approx(2.0 - 0.375)


def test_gather_shares_are_waited_for_at_their_chunks_first_forward():
    # 3 shares of 1 s, 2 buckets; first task 1 s: chunk 0 waits max(0.5, 1 − 0.5) = 0.5 s. Chunk 1:
    # launched at 0, link free at 1, done at 2, needed at 4 + 0.5: no wait. Chunk 2: launched at
    # 4 + 0.5, done at 5.5, needed at 8.5: no wait.
    assert chunked_gather_exposed_s(1.0, 2, 1.0, [(0.0, 4.0), (4.0, 8.0)]) == pytest.approx(0.5)
    # needed at 1.5 (+ 0.5): done at 2 → a 0 s wait; chunk 2 launched at 1.5 + 0.5 = 2, done at 3,
    # needed at 2 + 0.5: waits 0.5 more → 1.0 s in all
    assert chunked_gather_exposed_s(1.0, 2, 1.0, [(0.0, 1.5), (1.5, 2.0)]) == pytest.approx(1.0)


def test_one_share_is_the_bucketed_overlap_exactly():
    for total, nbytes, hide in ((0.3, 1e9, 0.1), (2.0, 3e6, 5.0), (1.0, 5e8, 0.0)):
        bucket = 25 * 2**20
        old = _bucketed_exposed(total, nbytes, bucket, hide)
        assert grad_sync_exposed_s(total, nbytes, bucket, 0.7, hide, ONE_CHUNK) == old
        assert gather_exposed_s(total, nbytes, bucket, hide, 9.0, ONE_CHUNK) == old
        assert bucketed_exposed_s(total, max(1, math.ceil(nbytes / bucket)), hide) == old


@settings(max_examples=200, deadline=None)
@given(share=hs.floats(0.0, 10.0), buckets=hs.integers(1, 64), hide=hs.floats(0.0, 10.0),
       leads=hs.lists(hs.floats(0.0, 100.0), max_size=6), more=hs.floats(0.0, 10.0))
def test_grad_exposure_is_bounded_and_monotone(share, buckets, hide, leads, more):
    leads = sorted(leads, reverse=True)
    n = len(leads) + 1
    e = chunked_grad_exposed_s(share, buckets, hide, leads)
    assert share / buckets - 1e-12 <= e <= n * share + 1e-9       # never less than the last bucket, never more than all
    # more room (a longer last task, or every chunk ending earlier) never exposes more
    assert chunked_grad_exposed_s(share, buckets, hide + more, leads) <= e + 1e-9
    assert chunked_grad_exposed_s(share, buckets, hide, [x + more for x in leads]) <= e + 1e-9


def test_rules_take_arrays_point_by_point():
    shares, hides = np.array([0.5, 2.0, 1.0]), np.array([1.0, 0.25, 3.0])
    leads = [np.array([4.0, 1.0, 0.0]), np.array([2.0, 0.5, 0.0])]
    out = chunked_grad_exposed_s(shares, 4, hides, leads)
    for i in range(3):
        assert out[i] == chunked_grad_exposed_s(shares[i], 4, hides[i], [x[i] for x in leads])


# --- in the estimate -------------------------------------------------------------------------------
def _cfg(v: int) -> st.TrainConfig:
    return st.TrainConfig(global_batch_size=64, micro_batch_size=1, seq_len=4096, precision="bf16",
                          tp=4, pp=4, sequence_parallel=True, virtual_stages=v, stack="megatron-core",
                          pipeline_schedule="interleaved-1f1b" if v > 1 else "1f1b")


def _dp_exposed(program) -> float:
    return sum(t.exposed_s for s in program.stages for t in s.step_comm if t.axis == "dp")


def test_interleaving_hides_all_but_the_last_chunk_of_the_sync():
    model, cluster = st.load_model("llama2-13b"), st.load_cluster("dgx-h100", nodes=4)  # dp 2
    one, four = (build_program(model, cluster, resolve_stack(_cfg(v))) for v in (1, 4))
    stage = four.stages[1]
    grad = next(t for t in stage.step_comm if t.axis == "dp" and t.phase == "step" and t.kind != "allgather")
    assert grad.total_s > 0
    # the rank's gradient sync is four shares; three end long before the backward does (the windows
    # are 12, 8 and 4 backward tasks), so only the last share can show, behind the last task
    w = chunk_windows(1, 4, four.layout.micro_batches, "interleaved-1f1b", 4)
    assert [b for _, b in w.grad_after] == [12.0, 8.0, 4.0]
    assert grad.total_s - grad.overlap_s <= grad.total_s / 4 + 1e-12
    assert _dp_exposed(four) < _dp_exposed(one)


def test_both_engines_and_the_sweep_agree_on_an_interleaved_sync():
    model, cluster = st.load_model("llama2-13b"), st.load_cluster("dgx-h100", nodes=4)
    cfg = _cfg(4)
    point = st.estimate(model, cluster, cfg)
    assert st.simulate(model, cluster, cfg).step_time_s == pytest.approx(point.step_time_s, rel=1e-6)
    grid = {"global_batch_size": [32, 64, 128]}
    swept = st.sweep(model, cluster, cfg, grid)
    for gbs, row in zip(grid["global_batch_size"], swept.itertuples(), strict=True):
        one = st.estimate(model, cluster, cfg.model_copy(update={"global_batch_size": gbs}))
        assert row.step_time_s == pytest.approx(one.step_time_s, rel=1e-9), gbs


# --- in the simulator's timeline ----------------------------------------------------------------------
def test_the_simulator_runs_each_chunks_share_beside_that_chunks_last_backward():
    from simtrain.parallel.schedule import rank_order
    from simtrain.sim.recipe import Segment, StepSync, sync_extras
    grad = (Segment("dp overlapped", "dp reducescatter bucket 0", 0.3, "dp", 3e8),)
    gather = (Segment("dp overlapped", "dp allgather (overlapped)", 0.6, "dp", 6e8),)
    sync = StepSync((), gather, grad, ())
    order = rank_order(0, 4, 8, "interleaved-1f1b", 3)
    extras = sync_extras(sync, order)
    ends = [i for i, (k, c, _) in enumerate(order) if k == "B" and all(
        not (k2 == "B" and c2 == c) for k2, c2, _ in order[i + 1:])]
    firsts = [next(i for i, (k, c2, _) in enumerate(order) if k == "F" and c2 == c) for c in (0, 4, 8)]
    assert sorted(extras) == sorted({0, firsts[1], *ends})   # chunks 0, 1 gathered from the start, 2 from 1's first F
    for i in ends:
        assert [s.seconds for s in extras[i] if "bucket" in s.name] == [pytest.approx(0.1)]
    assert [s.seconds for s in extras[0]] == [pytest.approx(0.2), pytest.approx(0.2)]
    assert [s.seconds for s in extras[firsts[1]]] == [pytest.approx(0.2)]
    one = sync_extras(sync, rank_order(0, 4, 8, "1f1b", 1))          # one chunk: as before
    assert one == {0: gather, 15: grad}


def test_the_timeline_shows_the_sync_beside_every_chunk():
    model, cluster = st.load_model("llama2-13b"), st.load_cluster("dgx-h100", nodes=4)
    sim = st.simulate(model, cluster, _cfg(4))
    buckets = [e for e in sim.timeline.events if e.rank == 1 and "reducescatter bucket" in e.name]
    computes = sorted((e for e in sim.timeline.events if e.rank == 1 and e.lane == "compute"), key=lambda e: e.start_s)
    backward_starts = {round(e.start_s, 9) for e in computes if e.name.startswith("B")}
    beside = {round(e.start_s, 9) for e in buckets} & backward_starts
    assert len(beside) == 4                       # a burst from each chunk's last backward, not all at the end
    assert min(e.start_s for e in buckets) < computes[-1].start_s
