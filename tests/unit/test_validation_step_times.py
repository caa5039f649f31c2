"""validation.step_times' report: hand-made records, hand-derived errors."""

from validation.step_times import markdown


def test_markdown_gives_each_set_its_mape_and_the_peak_memory_error():
    rows = [{"case": "a", "unseen": False, "median_s": 2e-3, "predicted_s": 2.2e-3, "error_pct": 10.0,
             "peak_allocated_bytes": 100 * 2**20, "predicted_peak_bytes": 90 * 2**20},
            {"case": "b", "unseen": False, "median_s": 1e-3, "predicted_s": 0.7e-3, "error_pct": -30.0,
             "peak_allocated_bytes": None},
            {"case": "c", "unseen": True, "median_s": 4e-3, "predicted_s": 5e-3, "error_pct": 25.0}]
    text = markdown(rows, "t")
    assert "| a | zoo | 2.00 ms | 2.20 ms | +10.0 % | 100.0 MiB | 90.0 MiB | -10.0 % |" in text
    assert "| b | zoo | 1.00 ms | 0.70 ms | -30.0 % | — | — | — |" in text
    assert "Zoo: step-time MAPE 20.0 % over 2 models." in text  # (10 + 30) / 2
    assert "Unseen: step-time MAPE 25.0 % over 1 models." in text
    assert "Peak allocated memory: MAPE 10.0 % over 1 models." in text
