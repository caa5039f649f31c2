"""The README's measure → calibrate → estimate snippet as a plain script, with NO ``__main__`` guard,
run by ``python script.py`` in a subprocess. ``st.measure`` used to start its collective ranks with
``multiprocessing`` spawn, which re-imports the caller's ``__main__`` in every child: a plain script
re-ran itself in each rank and crashed. The tiny grid keeps it to seconds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SCRIPT = textwrap.dedent("""
    import torch
    import simtrain as st

    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8, precision="fp32", optimizer="adam")
    m = st.measure("cpu", grid="tiny", threads=1)            # collectives included: child processes
    dev = st.calibrate(m)
    r = st.estimate(st.Model.from_torch(module, (x,)), st.Cluster.single(dev), cfg)
    assert r.feasible and r.step_time_s > 0, r.reasons
    assert any(row.bench == "all_reduce" for row in m.rows)
    print("STEP_S", r.step_time_s)
""")


def test_readme_snippet_runs_as_a_plain_script(tmp_path: Path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    assert "__main__" not in SCRIPT
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STEP_S" in done.stdout
