"""validation/ddp.py times the overlapped and no-overlap DDP steps alternately, sample by sample."""

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from validation import ddp  # noqa: E402


@pytest.fixture()
def one_rank(tmp_path):
    if not dist.is_available():
        pytest.skip("torch.distributed not built")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_samples_alternate_after_every_warmup(one_rank):
    log: list[str] = []
    medians = ddp._timed_alternately((lambda: log.append("a"), lambda: log.append("b")), warmup=2, repeats=3)
    assert log == ["a", "a", "b", "b"] + ["a", "b"] * 3  # warm-ups of each first, then one of each in turn
    assert len(medians) == 2 and all(m >= 0 for m in medians)


def test_single_function_is_the_median_of_its_samples(one_rank, monkeypatch):
    ticks = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])  # samples of 1, 3 and 2 s
    monkeypatch.setattr(ddp.time, "perf_counter", lambda: next(ticks))
    assert ddp._timed(lambda: None, warmup=0, repeats=3) == 2.0


def test_attribution_shows_the_wait_for_the_slower_rank():
    """The exposed-comm cell carries the wait in brackets and the MAPE line the calibration's σ with
    its two-rank wait, 2·Φ(σ/√2) − 1 = 5.6 % at σ = 0.1."""
    from validation.ddp import attribution_markdown
    from validation.report import Case
    detail = {"breakdown_s": {"compute": 0.012, "optimizer": 0.003, "comm_exposed": 0.010}, "sync_wait_s": 0.0007,
              "rank_jitter_sigma": 0.1, "simulated_s": 0.025, "measured_rank_alone_s": 0.014,
              "measured_ranks_concurrent_no_comm_s": 0.015}
    cases = [Case("mlp/medium dp2 b64 overlap", "ddp_step", 0.025, 0.028, detail=detail),
             Case("mlp/medium dp2 b64 no_overlap", "ddp_step", 0.025, 0.030, detail=detail)]
    lines = attribution_markdown(cases)
    assert "| mlp/medium dp2 b64 | 15.0 | 14.0 | 15.0 | 10.0 (0.7) | 25.0 | 25.0 | 28.0 / 30.0 |" in lines
    assert "rank_jitter_sigma 0.100, a step waiting 5.6 %" in lines[-1]
