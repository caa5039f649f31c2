"""The simulator at op granularity (issue 39 item 3): ``st.simulate(..., granularity="op")`` lays each
op of each micro-batch's task out as its own slice, the collectives on their own lanes, the step as
at chunk granularity when nothing contends. Event-log assertions on a 2-stage × 4-micro-batch step of
the 2-layer tiny Llama (tests/unit/test_memory_frameworks.py)."""

from __future__ import annotations

import collections
import re

import pytest

import simtrain as st
from simtrain.sim.api import chunk_ops
from tests.conftest import invented_cluster
from tests.unit.test_memory_frameworks import tiny_llama

M = 4  # micro-batches


@pytest.fixture(scope="module")
def runs():
    model, cluster = tiny_llama(), invented_cluster(4)
    cfg = st.TrainConfig(global_batch_size=M, micro_batch_size=1, pp=2, tp=2, precision="bf16", optimizer="adamw")
    return model, cluster, cfg, st.simulate(model, cluster, cfg), st.simulate(model, cluster, cfg, granularity="op")


def _stage_ops(model) -> list[list[str]]:
    """The two stages' ops in execution order: embedding + layer 0; layer 1 + head."""
    return [[op.name for b in blocks for op in model.block_ops(b)]
            for blocks in (("embed", "layers.0"), ("layers.1", "head"))]


def test_one_slice_per_op_per_micro_batch_per_phase(runs):
    model, _, _, _, ops = runs
    compute = [e for e in ops.timeline.events if e.lane == "compute" and " mb" in e.name]  # not the optimizer
    seen = collections.Counter()
    for e in compute:
        kind, mb, chunk, name = re.match(r"(F|B) mb(\d+) c(\d+) (.+)", e.name).groups()
        seen[(e.rank, kind, int(mb), name)] += 1
        assert int(chunk) == e.rank            # one chunk per rank (v = 1)
    for rank, names in enumerate(_stage_ops(model)):
        for kind in "FB":
            for mb in range(M):
                got = [n for (r, k, b, n), c in seen.items() if (r, k, b) == (rank, kind, mb) for _ in range(c)]
                assert sorted(got) == sorted(names), (rank, kind, mb)


def test_forward_in_execution_order_backward_reversed_and_back_to_back(runs):
    model, _, _, _, ops = runs
    for rank, names in enumerate(_stage_ops(model)):
        for kind, order in (("F", names), ("B", names[::-1])):
            task = [e for e in ops.timeline.events if e.rank == rank and e.name.startswith(f"{kind} mb1 c{rank} ")]
            assert [e.name.split(" ", 3)[3] for e in task] == order
            for a, b in zip(task, task[1:], strict=False):
                assert b.start_s == pytest.approx(a.end_s, abs=1e-15)   # contiguous on the compute lane


def test_the_step_is_the_chunk_granularitys_and_collectives_keep_their_lanes(runs):
    _, _, _, chunk, ops = runs
    assert ops.step_time_s == pytest.approx(chunk.step_time_s, rel=1e-12)
    assert ops.time_breakdown_s == pytest.approx(chunk.time_breakdown_s, rel=1e-9)
    tp = [e for e in ops.timeline.events if "tp collective" in e.name]
    assert tp and {e.lane for e in tp} == {"tp"}
    assert {e.lane for e in ops.timeline.events if " mb" in e.name and "collective" not in e.name
            and "send" not in e.name} == {"compute"}
    # per task, the op slices sum to what the chunk-granularity task's compute slice lasts
    fwd = sum(e.dur_s for e in ops.timeline.events if e.rank == 0 and e.name.startswith("F mb0 c0 "))
    (one,) = [e for e in chunk.timeline.events if e.rank == 0 and e.name == "F mb0 c0"]
    assert fwd == pytest.approx(one.dur_s, rel=1e-12)


def test_slice_names_are_the_models_ops_as_top_ops_groups_them(runs):
    model, cluster, cfg, _, ops = runs
    sliced = {e.name.split(" ", 3)[3] for e in ops.timeline.events if e.lane == "compute" and " mb" in e.name}
    for top in ops.top_ops:
        pattern = re.compile(re.escape(top.name).replace(r"\*", r"\d+") + "$")
        assert any(pattern.match(n) for n in sliced), top.name
    trace = ops.timeline.to_chrome_trace()
    op_slices = [ev for ev in trace["traceEvents"] if ev.get("ph") == "X" and " layers.0/mlp/fc1" in ev["name"]]
    assert len(op_slices) == 2 * M                                      # forward and backward, each micro-batch


def test_chunk_ops_price_each_op_with_the_programs_costs(runs):
    """The ops' forward seconds sum to the stage's forward compute (no host-bound wait here)."""
    model, cluster, cfg, _, _ = runs
    from simtrain.estimator import program_of
    from simtrain.resolve import resolve
    r = resolve(model, cluster, cfg)
    program = program_of(r)
    per_chunk = chunk_ops(r, program)
    assert [[name for name, *_ in c] for c in per_chunk] == _stage_ops(model)
    for stage, ops in zip(program.stages, per_chunk, strict=True):
        assert sum(fw for _, fw, _ in ops) == pytest.approx(stage.fw_s, rel=1e-9)
        assert sum(bw for _, _, bw in ops) == pytest.approx(stage.bw_s + stage.recompute_s, rel=1e-9)


def test_granularity_is_checked():
    with pytest.raises(st.SpecError, match="granularity"):
        st.simulate("gpt2", "h100-sxm5-80gb", {"global_batch_size": 1}, granularity="kernel")


def test_cli_writes_an_op_level_trace(tmp_path, capsys):
    import json

    from simtrain.cli import main
    trace = tmp_path / "ops.json"
    assert main(["simulate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "1", "--pp", "2",
                 "--global-batch-size", "16", "--seq-len", "256", "--granularity", "op", "--trace", str(trace)]) == 0
    capsys.readouterr()
    names = [ev["name"] for ev in json.loads(trace.read_text())["traceEvents"] if ev.get("ph") == "X"]
    assert any(n.endswith(" layers.0/mlp/fc1") for n in names) and any(n.endswith(" head/loss") for n in names)


@pytest.mark.parametrize("recompute", [{"recompute": "full"}, {"recompute": "full", "recompute_num_layers": 1},
                                       {"recompute": "selective-op"}])
def test_chunk_ops_carry_the_programs_recomputation(recompute):
    """Per op, the backward includes what the program recomputes: all layers, only the first N of the
    stage (recompute_num_layers), or torchtitan's per-op share; the sums are the stage's."""
    from simtrain.estimator import program_of
    from simtrain.resolve import resolve
    cfg = st.TrainConfig(global_batch_size=4, micro_batch_size=1, precision="bf16", optimizer="adamw", **recompute)
    r = resolve(tiny_llama(), invented_cluster(1), cfg)
    program = program_of(r)
    (ops,) = chunk_ops(r, program)
    stage = program.stages[0]
    assert stage.recompute_s > 0
    assert sum(bw for _, _, bw in ops) == pytest.approx(stage.bw_s + stage.recompute_s, rel=1e-9)
