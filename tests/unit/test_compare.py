"""st.compare: one row per hardware, numbers equal to the report's by hand, rows that cannot run say why."""

from __future__ import annotations

import pytest

import simtrain as st
from simtrain.cli import main
from simtrain.errors import SimtrainError
from simtrain.report.compare import COLUMNS, compare
from simtrain.report.plot_compare import compare_bar

CFG = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=256)


def test_rows_follow_the_estimate_and_the_energy_and_price_formulas():
    df = compare("gpt2", ["h100-sxm5-80gb"], CFG)
    assert list(df.columns) == list(COLUMNS) and len(df) == 1
    row = df.iloc[0]
    r = st.estimate(st.load_model("gpt2"), st.Cluster.single(st.load_device("h100-sxm5-80gb")), CFG)
    assert row.status == "ok" and row.kind == "gpu" and row.devices == 1
    assert row.step_time_s == r.step_time_s and row.mfu == r.mfu and row.bottleneck == r.bottleneck
    b = r.time_breakdown_s
    busy = (b["compute"] + b["recompute"] + b["optimizer"]) / r.step_time_s
    watts = 70 + (700 - 70) * busy  # H100 spec: idle 70 W, TDP 700 W
    assert row.energy_per_step_j == pytest.approx(watts * r.step_time_s, rel=1e-12)
    tokens_per_step = 8 * 256
    assert row.energy_per_mtoken_kwh == pytest.approx(watts * r.step_time_s / 3.6e6 * 1e6 / tokens_per_step, rel=1e-12)
    assert row.cost_per_step_dollars == pytest.approx(2.5 * r.step_time_s / 3600, rel=1e-12)  # $2.5 per GPU-hour
    assert "peak bf16: NV-H100-DS" in row.source


def test_every_kind_gets_a_row_and_the_ones_that_cannot_run_say_why():
    hw = ["dgx-h100", "tpu-v5p-pod", "alveo-u280", "cs-3-cluster", "host-cpu", "no-such-box"]
    df = compare("gpt2", hw, CFG, tokens=1e9)
    assert list(df.hardware) == hw
    by = df.set_index("hardware")
    assert by.loc["dgx-h100", "devices"] == 8 and by.loc["tpu-v5p-pod", "devices"] == 4  # one node each
    assert by.loc["cs-3-cluster", "kind"] == "wafer" and by.loc["host-cpu", "kind"] == "cpu"
    fpga = by.loc["alveo-u280"]
    assert fpga.kind == "fpga" and fpga.status == "cannot run" and "bf16" in fpga.reason
    assert by.loc["no-such-box", "status"] == "cannot run" and "no-such-box" in by.loc["no-such-box", "reason"]
    ok = by[by.status == "ok"]
    assert set(ok.index) == {"dgx-h100", "tpu-v5p-pod", "cs-3-cluster", "host-cpu"}
    assert (ok.time_to_train_s == 1e9 / (8 * 256) * ok.step_time_s).all()


def test_nodes_by_name_and_bad_arguments():
    df = compare("gpt2", ["dgx-h100"], CFG, nodes={"dgx-h100": 2})
    assert df.devices.iloc[0] == 16
    with pytest.raises(SimtrainError, match="non-empty list"):
        compare("gpt2", "dgx-h100", CFG)
    with pytest.raises(SimtrainError, match="engine"):
        compare("gpt2", ["dgx-h100"], CFG, engine="guess")


def test_compare_is_on_the_front_door():
    assert st.compare is compare


def test_compare_bar_and_cli(tmp_path, capsys):
    df = compare("gpt2", ["dgx-h100", "alveo-u280"], CFG)
    fig = compare_bar(df, path=tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG" and len(fig.axes) == 4
    assert main(["compare", "gpt2", "dgx-h100", "alveo-u280", "--seq-len", "256", "--csv", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert "dgx-h100" in out and "cannot run" in out and "alveo-u280: device 'alveo-u280'" in out
    assert (tmp_path / "c.csv").read_text().startswith("hardware,kind,device,devices,status")
    assert main(["compare", "gpt2", "alveo-u280", "--seq-len", "256"]) == 1  # nothing runs
