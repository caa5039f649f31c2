"""An interrupted sweep resumes from its Parquet file with no row lost or repeated (issue 14).

A child process sweeps 576 points into ``out`` (each point slowed by a few ms so that the sweep is
still running when the signal lands), is interrupted once rows have streamed out — by SIGINT (Ctrl-C:
the rows in flight are flushed on the way out) or SIGKILL (a crash: nothing runs on the way out) —
and the sweep is resumed here. The result must equal an uninterrupted sweep, row for row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import simtrain as st

ROOT = Path(__file__).resolve().parents[2]
GRID = {"micro_batch_size": [1, 2, 4, 8], "tp": [1, 2, 4], "zero_stage": [0, 1, 2, 3],
        "recompute": ["none", "selective", "full"], "global_batch_size": [64, 128, 256, 512]}
CFG = {"global_batch_size": 64, "seq_len": 1024}

CHILD = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background test runner may ignore SIGINT
import simtrain as st
from simtrain.search import sweep_rows, vector_rows
def slowed(real, pause):
    def slow(*args, **kwargs):
        time.sleep(pause)
        return real(*args, **kwargs)
    return slow
sweep_rows.evaluate_point = slowed(sweep_rows.evaluate_point, 0.006)  # per point of the estimate engine
vector_rows.auto_table = slowed(vector_rows.auto_table, 0.15)  # per chunk of the auto engine
st.sweep("gpt2", st.load_cluster("dgx-h100", nodes=1), {cfg!r}, {grid!r}, out=sys.argv[1], progress=False,
         engine={engine!r}, chunk_size={chunk})
print("finished")
"""


def _parts(out: Path) -> list[Path]:
    return sorted(out.with_name(out.name + ".parts").glob("part-*.parquet"))


def _interrupt(out: Path, sig: int, engine: str) -> int:
    """Run the child sweep into ``out``; send ``sig`` once a part file exists; the rows left behind."""
    code = CHILD.format(cfg=CFG, grid=GRID, engine=engine, chunk=48 if engine == "auto" else None)
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _parts(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert "finished" not in stdout, "the sweep ended before the signal: make the child slower"
    assert proc.returncode != 0 and (sig != signal.SIGINT or "KeyboardInterrupt" in stderr)
    assert not out.exists()  # only an uninterrupted sweep writes the final file
    return sum(pq.read_metadata(p).num_rows for p in _parts(out))


@pytest.mark.parametrize("engine", ["estimate", "auto"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_interrupted_sweep_resumes_to_the_same_rows(tmp_path, sig, engine):
    # resumed with the default engine (auto): it takes up the estimate engine's file as its own
    out = tmp_path / "sweep.parquet"
    left = _interrupt(out, sig, engine)
    assert 0 < left < 576
    cluster = st.load_cluster("dgx-h100", nodes=1)
    resumed = st.sweep("gpt2", cluster, CFG, GRID, out=out, progress=False)
    whole = st.sweep("gpt2", cluster, CFG, GRID, out=tmp_path / "whole.parquet", progress=False)
    assert len(resumed) == 576 and resumed.point_key.is_unique and (resumed.status == "ok").all()
    pd.testing.assert_frame_equal(resumed, whole)
    pd.testing.assert_frame_equal(pd.read_parquet(out), whole)
    assert not _parts(out)
