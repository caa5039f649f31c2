"""The validation report's arithmetic on hand-made cases, and the suite's small pure helpers."""

from __future__ import annotations

import math

import pytest

from validation.report import Case, MetricSummary, load_cases, summarise, write_json, write_markdown


def test_error_and_mape_by_hand():
    # step: +10 % and −30 %  → MAPE 20 %, worst −30 %;  stall 0.002 vs 0.001 of a 0.02 s iteration → +5 %
    cases = [Case("a", "step_time", 1.1, 1.0), Case("b", "step_time", 0.7, 1.0),
             Case("loader", "pipeline_stall", 0.002, 0.001, basis=0.02)]
    assert cases[0].error_pct == pytest.approx(10.0)
    assert cases[2].error_pct == pytest.approx(5.0)
    s = summarise(cases)
    assert s["step_time"] == MetricSummary("step_time", 2, pytest.approx(20.0), "b", pytest.approx(-30.0))
    assert s["pipeline_stall"].mape_pct == pytest.approx(5.0)


def test_undefined_errors_are_left_out_of_the_summary():
    cases = [Case("zero", "pipeline_stall", 0.0, 0.0), Case("nan", "step_time", math.nan, 1.0)]
    assert all(c.error_pct is None for c in cases)
    assert summarise(cases) == {}


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        Case("x", "latency", 1.0, 1.0)


def test_json_round_trip_and_markdown(tmp_path):
    cases = [Case("gpt/small b8", "step_time", 2e-3, 4e-3, detail={"threads": 1}),
             Case("gpt/small b8", "flops", 100.0, 100.0)]
    meta = {"machine": {"cpu_model": "Test CPU", "cpu_cores": 2}, "calibration": {"key": "ab" * 32}}
    back, rest = load_cases(write_json(tmp_path / "r.json", cases, meta))
    assert back == cases and rest["summary"]["step_time"]["mape_pct"] == pytest.approx(50.0)
    md = write_markdown(tmp_path / "r.md", cases, dict(meta, machine_slug="test-2c"), notes=["a note"],
                        sections=[("Extra", ["line"])]).read_text()
    assert "| step_time | 1 | 50.00 % | gpt/small b8 | -50.00 % |" in md
    assert "- a note" in md and "## Extra" in md and "| gpt/small b8 | flops |" in md


def test_theil_sen_ignores_one_outlier():
    from validation.overhead import theil_sen
    # y = 2x + 1 at x = 0..4, and one outlier at x = 5: of the 15 pairwise slopes the 10 clean pairs
    # give 2, the 5 with the outlier more, so the median (8th) is 2; residuals y − 2x = 1,1,1,1,1,90 → 1
    x = [0, 1, 2, 3, 4, 5]
    y = [1, 3, 5, 7, 9, 100]
    slope, intercept = theil_sen(x, y)
    assert slope == pytest.approx(2.0)
    assert intercept == pytest.approx(1.0)


@pytest.mark.parametrize("name, cls", [
    ("aten::addmm", "matmul"), ("aten::mm", "matmul"), ("aten::bmm", "matmul"),
    ("aten::convolution_backward", "conv"), ("aten::mkldnn_convolution", "conv"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("aten::native_layer_norm_backward", "norm"), ("aten::native_batch_norm", "norm"),
    ("aten::_log_softmax_backward_data", "reduction"), ("aten::nll_loss_forward", "reduction"),
    ("aten::embedding_dense_backward", "embedding"), ("aten::copy_", "memory"), ("aten::cat", "memory"),
    ("aten::gelu_backward", "elementwise"), ("aten::bernoulli_", "elementwise"),
    # pooling: a reduction, as the graph classes it (these read as elementwise before, 7 ms of cnn_bn's step)
    ("aten::max_pool2d_with_indices", "reduction"), ("aten::max_pool2d_with_indices_backward", "reduction"),
    ("aten::_adaptive_avg_pool2d", "reduction"), ("aten::avg_pool2d_backward", "reduction"),
])
def test_profiler_names_map_to_op_classes(name, cls):
    from validation.diagnose import class_of_aten
    assert class_of_aten(name) == cls


def test_row_shift_is_the_median_ratio_of_matching_benchmarks_per_bench():
    """B's GEMMs all 10 % slower, its copy unchanged, a benchmark only A timed left out."""
    from simtrain.calibrate.machine import MachineFacts
    from simtrain.calibrate.records import Measurements, Row
    from simtrain.glossary import DType, OpClass
    from validation.lab.repeatability import row_shift

    def row(bench, t, **params):
        return Row(bench, OpClass.MATMUL, DType.FP32, params, 1.0, 1.0, t, t, t, 3)
    facts = MachineFacts(cpu_model="Test CPU", cpu_cores=2, cpu_flags=(), cpu_mhz=2000.0, torch_version="2.13.0",
                         threads=2, device="cpu", gpu_name=None, gpu_count=0, cuda_version=None, hostname_hash="00",
                         date="2026-12-03")
    a = Measurements((row("gemm", 1.0, m=1), row("gemm", 2.0, m=2), row("gemm", 4.0, m=4), row("copy", 1.0, n=1),
                      row("gemm", 9.0, m=9)), facts)
    b = Measurements((row("gemm", 1.1, m=1), row("gemm", 2.2, m=2), row("gemm", 4.4, m=4), row("copy", 1.0, n=1)),
                     facts)
    got = row_shift(a, b)
    assert got["gemm"][0] == 3 and got["gemm"][1] == pytest.approx(1.1)
    assert got["copy"] == (1, pytest.approx(1.0))


def _facts():
    from simtrain.calibrate.machine import MachineFacts
    return MachineFacts(cpu_model="Test CPU", cpu_cores=2, cpu_flags=(), cpu_mhz=2000.0, torch_version="2.13.0",
                        threads=2, device="cpu", gpu_name=None, gpu_count=0, cuda_version=None, hostname_hash="00",
                        date="2026-12-04")


def _gemm(t, m):
    from simtrain.calibrate.records import Row
    from simtrain.glossary import DType, OpClass
    return Row("gemm", OpClass.MATMUL, DType.FP32, {"m": m}, 1.0, 1.0, t, t, t, 3)


def test_pass_speed_is_each_pass_over_the_benchmarks_median_across_passes():
    """Three passes of two GEMMs: pass 2 twice as slow on both, pass 3 as pass 1 but one GEMM 10 %
    faster. Medians across passes: m=1 → 1.0, m=2 → 2.0. Pass 1: ratios 1, 1 → 1.0; pass 2: 2, 2 → 2.0;
    pass 3: 0.9 and 1.0 → median 0.95. A benchmark missing from one pass is left out."""
    from simtrain.calibrate.records import Measurements
    from validation.lab.repeatability import pass_speed
    facts = _facts()
    p1 = Measurements((_gemm(1.0, 1), _gemm(2.0, 2), _gemm(5.0, 5)), facts)
    p2 = Measurements((_gemm(2.0, 1), _gemm(4.0, 2)), facts)
    p3 = Measurements((_gemm(0.9, 1), _gemm(2.0, 2)), facts)
    got = pass_speed([p1, p2, p3])
    assert got["gemm"] == pytest.approx([1.0, 2.0, 0.95])
    assert got["all"] == pytest.approx([1.0, 2.0, 0.95])


def test_spread_is_the_largest_difference_between_consecutive_calibrations():
    """A 100, B 110, C 99: A→B 10 %, B→C 11/99 = 11.1 %; A and C (1 % apart) are not neighbours."""
    from validation.lab.repeatability import _markdown, spread
    row = {"case": "m", "unseen": False, "predicted_s": {"A": 0.100, "B": 0.110, "C": 0.099}}
    assert spread(row) == pytest.approx(0.011 / 0.099)
    md = _markdown([row], {"machine": "x", "threads": 2, "grid": "full", "passes": [5, 5, 5], "when": "d",
                           "seconds": [1.0, 1.0, 1.0], "load": [0.1, 0.1, 0.1], "command": "c",
                           "speed": {"all": [1.0, 1.2]}})
    assert "| A → B | 10.0 % | 10.0 % | 0 of 1 |" in md and "| B → C | 11.1 % |" in md
    assert "| all | 1.00 | 1.20 |" in md and "not met" in md


def test_deal_splits_passes_in_runs_or_in_turn():
    from validation.lab.repeatability import deal
    passes = list(range(1, 7))
    assert deal(passes, 2) == [[1, 2, 3], [4, 5, 6]]
    assert deal(passes, 3) == [[1, 2], [3, 4], [5, 6]]
    assert deal(passes, 2, interleave=True) == [[1, 3, 5], [2, 4, 6]]
    with pytest.raises(ValueError, match="do not split"):
        deal(passes, 4)


@pytest.mark.parametrize("argv", [["--sets", "3"], ["--interleave"], ["--pass-dir", "x", "--sets", "1"],
                                  ["--pass-dir", "x", "--sets", "27"], ["--pass-dir", "x", "--passes", "0"]])
def test_repeatability_refuses_options_it_cannot_honour(argv, capsys):
    """Exit 2 with argparse's message before measuring anything."""
    from validation.lab.repeatability import main
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "--" in capsys.readouterr().err


def test_merged_measurements_is_the_median_of_pass_medians_with_summed_wall_time():
    """Passes of 1.0, 3.0 and 2.0 s on one GEMM → 2.0 s; wall 1 + 2 + 3 s; settings from the first pass,
    ``passes`` = 3, extra settings added."""
    from simtrain.calibrate.records import Measurements
    from simtrain.calibrate.robust import merged_measurements
    facts = _facts()
    ps = [Measurements((_gemm(t, 1),), facts, {"grid": "full", "passes": 1}, wall_s=w)
          for t, w in ((1.0, 1.0), (3.0, 2.0), (2.0, 3.0))]
    m = merged_measurements(ps, rounds=3)
    assert [r.median_s for r in m.rows] == [2.0]
    assert m.wall_s == 6.0 and m.settings["passes"] == 3 and m.settings["rounds"] == 3
    assert m.settings["grid"] == "full" and m.machine == facts


def test_by_mode_fits_every_set_at_the_same_stated_mix(monkeypatch):
    """Set A met the slow mode in 5 of 9 dispatch readings, set B in none: split over both sets' 18
    readings the mix is 5 / 18 slow, and both sets are re-fitted at that share, at 0 and at 1 (the fit is
    replaced by the re-centred gemm row's time, so the share each set was fitted at is visible). A's gemm
    row (fast pass 1.0, slow pass 2.0) at 5/18: 1.0 + 5/18; B ran one mode and keeps its centre. Sets with
    no dispatch sentinel give nothing."""
    from types import SimpleNamespace

    from simtrain.calibrate.records import Measurements, Row
    from simtrain.glossary import DType, OpClass
    from validation.lab import repeatability as rep

    def _reading(after, passes):
        return Row("sentinel_dispatch", None, DType.FP32, {"after": after}, 0.0, 0.0, passes[1], min(passes),
                   max(passes), 7, pass_medians_s=passes)

    def _bench(name, passes):
        return Row(name, OpClass.MATMUL, DType.FP32, {}, 1e6, 1e3, passes[1], min(passes), max(passes), 7,
                   pass_medians_s=passes)
    F, S = 3.7e-6, 6.2e-6
    three = [_reading("start", (F, F, S)), _bench("gemm", (1.0, 1.5, 2.0)), _reading("gemm", (F, S, S)),
             _bench("copy", (3.0, 2.0, 2.2)), _reading("copy", (F, S, S))]
    monkeypatch.setattr(rep, "fit", lambda m: SimpleNamespace(device=next(r.median_s for r in m.rows if r.bench == "gemm")))
    monkeypatch.setattr(rep, "predictions", lambda devices, models: [{"case": "m", "unseen": False, "predicted_s": devices}])
    one = [_reading("start", (F, F, F)), _bench("gemm", (1.5, 1.6, 1.7)), _reading("gemm", (F, F, F)),
           _bench("copy", (2.0, 2.0, 2.0)), _reading("copy", (F, F, F))]
    sets = {"A": Measurements(tuple(three), _facts(), {}), "B": Measurements(tuple(one), _facts(), {})}
    info, profiles = rep.by_mode(sets, models=[])
    assert info["slow_readings"] == 5 and info["readings"] == 18
    assert info["per_set_slow"] == {"A": [5, 9], "B": None}
    assert profiles["mix"][0]["predicted_s"] == pytest.approx({"A": 1.0 + 5 / 18, "B": 1.6})
    assert profiles["fast"][0]["predicted_s"] == pytest.approx({"A": 1.0, "B": 1.6})
    assert profiles["slow"][0]["predicted_s"] == pytest.approx({"A": 2.0, "B": 1.6})
    assert "## At a stated mix" in "\n".join(rep._by_mode_lines(info, profiles))
    plain = {k: Measurements(tuple(r for r in m.rows if not r.bench.startswith("sentinel")), _facts(), {})
             for k, m in sets.items()}
    assert rep.by_mode(plain, models=[]) == (None, {})
