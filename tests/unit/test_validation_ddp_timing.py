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
