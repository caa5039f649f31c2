"""The sustained-GEMM check's host side (validation/components/sustained_gemm.py): nvidia-smi parsing,
window statistics and the report, by hand; the CUDA part runs only on a GPU machine."""

from __future__ import annotations

import datetime as dt

import pytest

from validation.components import sustained_gemm as sg


def _epoch(text: str) -> float:
    return dt.datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").timestamp()


def test_smi_lines_parse_and_bad_lines_are_skipped():
    text = ("2026/12/06 03:00:00.000, 1980, 690.5, 61\n"
            "garbage line\n"
            "2026/12/06 03:00:00.200, 1755, 700.1, 63\n"
            "2026/12/06 03:00:00.400, [N/A], 699.0, 63\n")
    samples = sg.parse_smi(text)
    assert [s["sm_mhz"] for s in samples] == [1980.0, 1755.0]
    assert samples[1]["t"] - samples[0]["t"] == pytest.approx(0.2)
    t0 = _epoch("2026/12/06 03:00:00.100")
    got = sg.samples_in(samples, t0, t0 + 1.0)
    assert got == {"samples": 1, "sm_mhz": 1755.0, "power_w": 700.1, "temp_c": 63.0}
    assert sg.samples_in(samples, t0 + 5, t0 + 6) == {"samples": 0}


def test_sustained_is_the_median_of_the_second_half_against_the_first_window():
    # 6 windows: burst 800, then clocks drop; second half 680, 670, 690 → median 680
    s = sg.window_summary([800.0, 760.0, 700.0, 680.0, 670.0, 690.0], peak_tflops=989.4)
    assert s["burst_tflops"] == 800.0 and s["sustained_tflops"] == 680.0 and s["min_tflops"] == 670.0
    assert s["sustained_fraction"] == pytest.approx(680.0 / 989.4)
    assert s["sustained_over_burst"] == pytest.approx(0.85)
    with pytest.raises(ValueError):
        sg.window_summary([], 989.4)


def test_report_renders_one_row_per_run_with_the_gpu_columns():
    run = {"dtype": "bf16", "data": "random", "seconds": 40.0, "gpu": {"samples": 3, "sm_mhz": 1755.0,
           "power_w": 699.6, "temp_c": 63.0}, **sg.window_summary([800.0, 680.0], 989.4)}
    zeros = {**run, "data": "zeros", "gpu": {"samples": 0}}
    md = sg.render_md({"gpu_name": "NVIDIA H100 80GB HBM3", "device": "h100-sxm5-80gb", "date": "2026-12-06",
                       "torch": "2.13.0", "cuda": "12.9", "wall_s": 95.0, "runs": [run, zeros],
                       "profile": {"bf16": 0.675}})
    assert "| bf16 | random | 40 | 800 | 680 | 0.687 | 0.850 | 1755 | 700 | 63 |" in md
    assert "| bf16 | zeros | 40 | 800 | 680 | 0.687 | 0.850 | — | — | — |" in md


def test_without_cuda_it_exits_3_and_writes_nothing(tmp_path, monkeypatch):
    from validation.components import gpu_bench
    monkeypatch.setattr(gpu_bench, "gpu_facts", lambda: None)
    assert sg.main(["--out", str(tmp_path)]) == sg.EXIT_NO_GPU
    assert list(tmp_path.iterdir()) == []


def test_the_plan_runs_fp8_with_fast_accumulation_after_the_random_runs():
    """bf16 and fp8 on random data, fp8 with TE's forward accumulation, then both on zeros; a run of
    0 s is dropped, and a GPU without fp8 gets neither fp8 run."""
    assert sg.run_plan(["bf16", "fp8"], 40.0, 10.0, 20.0) == [
        ("bf16", "random", 40.0), ("fp8", "random", 40.0), ("fp8", sg.FAST_ACCUM, 20.0),
        ("bf16", "zeros", 10.0), ("fp8", "zeros", 10.0)]
    assert sg.run_plan(["bf16", "fp8"], 40.0, 0.0, 0.0) == [("bf16", "random", 40.0), ("fp8", "random", 40.0)]
    assert sg.run_plan(["bf16"], 40.0, 10.0, 20.0) == [("bf16", "random", 40.0), ("bf16", "zeros", 10.0)]
