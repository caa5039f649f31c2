"""report/plot*: each figure is drawn to a PNG and carries the numbers it was given (hand-derived)."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.errors import SimtrainError
from simtrain.report import plot
from simtrain.report.step_report import MemoryReport, StepReport

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GIB = 2.0**30


def _png(path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000


def _report(**kw) -> StepReport:
    mem = MemoryReport(params_bytes=2 * GIB, grads_bytes=2 * GIB, optimizer_bytes=12 * GIB, activations_bytes=20 * GIB,
                       buffers_bytes=1 * GIB, overhead_bytes=0.0, capacity_bytes=80 * GIB, reserve_fraction=0.1,
                       workspace_bytes=1 * GIB)
    fields = dict(model_name="toy", cluster_name="box", devices_count=8, feasible=True, reasons=(),
                  step_time_s=0.100, global_batch_size=8, tokens_per_sample=1024, model_flops_per_step=1e15,
                  hardware_flops_per_step=1e15, peak_flops_per_s=1e15,
                  time_breakdown_s={"compute": 0.060, "recompute": 0.0, "comm_exposed": 0.020,
                                    "pipeline_bubble": 0.015, "data_stall": 0.0, "optimizer": 0.005},
                  memory=mem, bottleneck="compute", bottleneck_reason="why")
    fields.update(kw)
    return StepReport(**fields)


def test_breakdown_bars_are_the_breakdown_in_ms(tmp_path):
    fig = plot.breakdown(_report(), path=tmp_path / "b.png")
    _png(tmp_path / "b.png")
    bars = fig.axes[0].patches
    # four non-zero parts: 60, 20, 15 and 5 ms, laid end to end
    assert [round(b.get_width(), 9) for b in bars] == [60.0, 20.0, 15.0, 5.0]
    assert [round(b.get_x(), 9) for b in bars] == [0.0, 60.0, 80.0, 95.0]
    assert "step time 100 ms" in fig.axes[0].get_title()


def test_breakdown_of_an_infeasible_report_says_why():
    with pytest.raises(SimtrainError, match="no peak"):
        plot.breakdown(_report(step_time_s=float("nan"), time_breakdown_s={}, reasons=("no peak",), feasible=False))


def test_memory_stack_heights_are_the_terms_in_gib(tmp_path):
    fig = plot.memory_stack(_report(), path=tmp_path / "m.png")
    _png(tmp_path / "m.png")
    heights = [round(b.get_height(), 9) for b in fig.axes[0].patches]
    # params 2, grads 2, optimizer 12, activations 20, buffers 1 (GiB); the reserve grows on the
    # transient tensors only: (20 + 1) × 0.1 + 1 GiB workspace = 3.1
    assert heights == [2.0, 2.0, 12.0, 20.0, 1.0, 3.1]
    assert "reserved peak 40.1 GiB; fits" in fig.axes[0].get_title()


def test_memory_stack_one_bar_per_pipeline_stage(tmp_path):
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=256, pp=2)
    cluster = st.load_cluster("dgx-h100", nodes=1)
    mems = plot.stage_memory_reports("gpt2", cluster, cfg)
    assert [m.stage for m in mems] == [0, 1]
    fig = plot.memory_stack(mems, path=tmp_path / "s.png")
    assert len(fig.axes[0].get_xticks()) == 2


def test_gantt_draws_one_bar_per_event(tmp_path):
    log = [("F mb0 c0", 0, 0.0, 0.001), ("F mb0 c1", 1, 0.001, 0.002), ("B mb0 c1", 1, 0.002, 0.004),
           ("send bw c1", 1, 0.004, 0.0041), ("B mb0 c0", 0, 0.0041, 0.0061)]
    fig = plot.gantt(log, path=tmp_path / "g.png")
    _png(tmp_path / "g.png")
    bars = fig.axes[0].patches
    assert len(bars) == 5
    assert [round(b.get_x(), 9) for b in bars] == [0.0, 1.0, 2.0, 4.0, 4.1]  # milliseconds
    assert "2 ranks, 6.1 ms" in fig.axes[0].get_title()


def test_gantt_takes_objects_with_rank_name_start_and_duration():
    from types import SimpleNamespace
    # the fields simtrain.sim.trace.TimelineEvent has: name, rank, start_s, dur_s (end_s optional)
    events = SimpleNamespace(events=[SimpleNamespace(name="F mb0 c0", rank=0, start_s=0.0, dur_s=0.002)])
    fig = plot.gantt(events)
    assert [round(b.get_width(), 9) for b in fig.axes[0].patches] == [2.0]
    with pytest.raises(SimtrainError, match="no events"):
        plot.gantt([])


def test_predicted_vs_measured_title_has_the_mape(tmp_path):
    import pandas as pd
    df = pd.DataFrame({"case": ["a", "b"], "metric": ["step_time"] * 2, "predicted": [1.1, 1.8], "measured": [1.0, 2.0]})
    fig = plot.predicted_vs_measured(df, path=tmp_path / "p.png")
    _png(tmp_path / "p.png")
    # |1.1 − 1| / 1 = 10 %, |1.8 − 2| / 2 = 10 % → MAPE 10.0 %
    assert "2 cases, MAPE 10.0%" in fig.axes[0].get_title()


def test_predicted_vs_measured_reads_validation_results(tmp_path):
    import json
    doc = {"cases": [{"case": "x", "metric": "step_time", "predicted": 3.0, "measured": 2.0},
                     {"case": "y", "metric": "flops", "predicted": 1e9, "measured": 1e9}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    fig = plot.predicted_vs_measured(path, metric="step_time")
    assert "1 cases, MAPE 50.0%" in fig.axes[0].get_title()
    with pytest.raises(SimtrainError, match="no rows"):
        plot.predicted_vs_measured(path, metric="nothing")


def test_roofline_places_a_linear_op_by_hand():
    cfg = st.TrainConfig(global_batch_size=4, micro_batch_size=4, precision="bf16")
    points = {p.name: p for p in plot.op_points("mlp-mnist", "h100-sxm5-80gb", cfg)}
    fc = points["layers.0/fc"]
    # fw 2·784·512 = 802,816 FLOP and wgrad the same, per sample (no input grad on the first layer); × 4 samples
    assert fc.flops == 4 * 2 * 802_816
    # bytes (bf16, 2 B): fw act (784 + 512) · 2 · 4 + W 401,920 · 2; wgrad act 1,296 · 2 · 4 + (read + write) W · 2
    assert fc.bytes_moved == (784 + 512) * 8 + 401_920 * 2 + 1_296 * 8 + 2 * 401_920 * 2
    assert fc.achieved_flops_per_s <= 989.4e12  # under the bf16 roof


def test_roofline_png(tmp_path):
    cfg = st.TrainConfig(global_batch_size=2, micro_batch_size=2, seq_len=256)
    fig = plot.roofline("gpt2", "h100-sxm5-80gb", cfg, path=tmp_path / "r.png")
    _png(tmp_path / "r.png")
    assert "gpt2 on h100-sxm5-80gb" in fig.axes[0].get_title()
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "matrix peak (bf16) 989 TFLOP/s" in texts and "memory 3.35 TB/s" in texts


def test_saving_to_an_unwritable_path_is_a_simtrain_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SimtrainError, match="cannot write"):
        plot.breakdown(_report(), path=blocker / "sub" / "b.png")
