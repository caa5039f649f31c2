"""The simulator's exports: Chrome / Perfetto trace (tracks, slices, flows), Gantt PNG, the CLI flags;
multi-step runs with evaluation."""

import json

import pytest

import simtrain as st
from simtrain.cli import main
from tests.conftest import invented_cluster
from tests.unit.test_sim_engine import _cfg, _model


def _no_overlap(xs) -> bool:
    for key in {(e["pid"], e["tid"]) for e in xs}:
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs if (e["pid"], e["tid"]) == key)
        if any(a[1] > b[0] + 1e-6 for a, b in zip(track, track[1:], strict=False)):
            return False
    return True


@pytest.fixture(scope="module")
def rich():
    """gpt2 on one DGX A100: tp 2, pp 2, dp 2, ZeRO-3 (overlapped gathers), interleaved, shared links."""
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=256, tp=2, pp=2, zero_stage=3,
                         pipeline_schedule="interleaved-1f1b", virtual_stages=2)
    return st.simulate(st.load_model("gpt2"), st.load_cluster("dgx-a100-80gb", nodes=1), cfg, contention=True,
                       granularity="layer")


def test_trace_has_a_track_per_stream_and_no_overlap_on_any(rich):
    doc = rich.timeline.to_chrome_trace()
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    threads = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    for lane in ("compute", "tp", "pp fw send", "pp bw send", "dp overlapped", "dp sync"):
        assert (0, lane) in threads and (1, lane) in threads
    assert {e["cat"] for e in xs} >= {"compute", "tp", "dp overlapped", "dp sync"}
    assert _no_overlap(xs)


def test_every_pipeline_send_is_an_arrow_to_the_task_it_feeds(rich):
    """p = 2, v = 2 (4 chunks), m = 4 per replica: 3 forward and 3 backward chunk boundaries × 4 = 24."""
    doc = rich.timeline.to_chrome_trace()
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert len(starts) == len(ends) == 24 and starts.keys() == ends.keys()
    for i, s in starts.items():
        f = ends[i]
        assert f["bp"] == "e" and f["pid"] != s["pid"] and f["ts"] >= s["ts"]


def test_gantt_png(tmp_path):
    s = st.simulate(_model(2), invented_cluster(2), _cfg(4, 2))
    path = s.timeline.to_gantt_png(tmp_path / "g.png", lanes=("compute", "pp fw send"))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_trace_and_gantt(tmp_path, capsys):
    trace, gantt = tmp_path / "t.json", tmp_path / "g.png"
    assert main(["simulate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "1", "--pp", "2",
                 "--global-batch-size", "16", "--seq-len", "256", "--trace", str(trace), "--gantt", str(gantt),
                 "--contention"]) == 0
    assert "simtrain simulate" in capsys.readouterr().out
    assert json.loads(trace.read_text())["traceEvents"] and gantt.read_bytes()[:4] == b"\x89PNG"
    # a missing folder is made, as the other verbs' --out do; a path that cannot be a folder is bad input
    assert main(["simulate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "1",
                 "--gantt", str(tmp_path / "new" / "g.png")]) == 0
    assert (tmp_path / "new" / "g.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    (tmp_path / "a-file").write_text("x")
    assert main(["simulate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "1",
                 "--gantt", str(tmp_path / "a-file" / "g.png")]) == 2
    assert "--gantt" in capsys.readouterr().err


def test_steps_and_evaluation():
    """Evaluation every 2 steps of 2 micro-batches, forward only, on the 2-stage pipeline (200 us a
    forward): mb0 c0 0–200, mb1 c0 200–400 beside mb0 c1 200–400, mb1 c1 400–600 → 600 us each, two
    of them in 4 steps: 300 us a step — the estimate's (m + p − 1)·t_f / every_steps here."""
    cfg = _cfg(4, 2, eval={"every_steps": 2, "batches": 1, "batch_size": 2})
    s = st.simulate(_model(2), invented_cluster(2), cfg, steps=4)
    assert len(s.steps_s) == 4 and all(x == pytest.approx(s.step_time_s, rel=1e-9) for x in s.steps_s)
    evals = [(n, r, a, b) for n, r, a, b in s.timeline.log() if n.startswith("s1 eval")]
    t0 = min(a for _, _, a, _ in evals)
    assert sorted((n, r, round((a - t0) * 1e6, 3), round((b - t0) * 1e6, 3)) for n, r, a, b in evals) == [
        ("s1 eval F mb0 c0", 0, 0.0, 200.0), ("s1 eval F mb0 c1", 1, 200.0, 400.0),
        ("s1 eval F mb1 c0", 0, 200.0, 400.0), ("s1 eval F mb1 c1", 1, 400.0, 600.0)]
    assert s.eval_time_per_step_s == pytest.approx(300e-6, rel=1e-6)
    for bad in ({"steps": 0}, {"steps": 1.5}, {"granularity": "kernel"}):
        with pytest.raises(st.SpecError) as err:
            st.simulate(_model(2), invented_cluster(2), cfg, **bad)
        assert err.value.fields == list(bad)
