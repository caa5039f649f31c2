"""st.plan: names accepted, constraints respected, one row per job, a non-dominated Pareto front, the CLI."""

import json
import math

import pandas as pd
import pytest

import simtrain as st
from simtrain.cli import main
from simtrain.errors import SimtrainError
from simtrain.search.plan import pareto_front

TOKENS, DAY = 1e10, 86400.0


@pytest.fixture(scope="module")
def gpt2_plan():
    return st.plan("gpt2", "dgx-a100-80gb", tokens=TOKENS, deadline_s=2 * DAY, budget_usd=60.0, max_devices=24,
                   global_batch_size=128, seq_len=1024, top=15)


def test_names_are_accepted_and_constraints_hold(gpt2_plan):
    p = gpt2_plan
    assert len(p) > 0 and p.feasible.all()
    assert (p.time_to_train_s <= 2 * DAY).all() and (p.cost_usd <= 60.0).all() and (p.devices <= 24).all()
    # any node count, not only powers of two: 24 devices allows 1, 2 and 3 nodes of 8
    assert set(p.attrs["nodes_searched"]) == {1, 2, 3}
    assert list(p.cost_usd) == sorted(p.cost_usd)
    assert p.why.str.len().gt(0).all() and p.why[0].startswith("cheapest")


def test_cost_and_energy_follow_the_report_formulas(gpt2_plan):
    row = gpt2_plan.iloc[0]
    price = st.load_device("a100-sxm4-80gb").price_per_hour.value
    assert row.cost_usd == pytest.approx(row.devices * row.time_to_train_s / 3600 * price, rel=1e-12)
    assert row.time_to_train_s == pytest.approx(TOKENS / (128 * 1024) * row.step_time_s, rel=1e-12)
    cfg = st.TrainConfig(global_batch_size=128, seq_len=1024, tp=int(row.tp), pp=int(row.pp),
                         micro_batch_size=int(row.micro_batch_size), zero_stage=int(row.zero_stage),
                         recompute=row.recompute, sequence_parallel=bool(row.sequence_parallel),
                         virtual_stages=int(row.virtual_stages), pipeline_schedule=row.pipeline_schedule)
    r = st.estimate("gpt2", st.load_cluster("dgx-a100-80gb", nodes=int(row.nodes)), cfg)
    assert row.step_time_s == pytest.approx(r.step_time_s, rel=1e-9)
    assert row.energy_kwh == pytest.approx(r.energy_kwh(tokens=TOKENS), rel=1e-9)


def test_no_duplicate_jobs(gpt2_plan):
    cols = ["nodes", "tp", "pp", "dp", "cp", "ep", "micro_batch_size", "virtual_stages", "sequence_parallel",
            "zero_stage", "recompute"]
    assert not gpt2_plan.duplicated(subset=cols).any()
    assert not gpt2_plan.duplicated(subset=cols[:9] + ["step_time_s", "memory_reserved_bytes"]).any()


def test_objective_time_ranks_by_time():
    p = st.plan("gpt2", "dgx-a100-80gb", tokens=TOKENS, max_devices=16, objective="time", global_batch_size=64,
                seq_len=512, top=5)
    assert list(p.time_to_train_s) == sorted(p.time_to_train_s) and p.why[0].startswith("fastest")


def test_an_impossible_deadline_explains_the_closest_miss():
    p = st.plan("gpt2", "dgx-a100-80gb", tokens=1e13, deadline_s=60.0, max_devices=16, global_batch_size=64,
                seq_len=512)
    assert p.empty and "deadline" in p.attrs["explanation"] and len(p.attrs["closest"]) > 0
    assert (p.attrs["closest"].miss_factor > 1).all()


def test_bad_arguments_raise():
    with pytest.raises(SimtrainError, match="objective"):
        st.plan("gpt2", "dgx-a100-80gb", tokens=1e9, objective="speed")
    with pytest.raises(SimtrainError, match="tokens"):
        st.plan("gpt2", "dgx-a100-80gb", tokens=-1.0)
    with pytest.raises(SimtrainError, match="budget_usd"):
        st.plan("gpt2", "dgx-a100-80gb", tokens=1e9, budget_usd=math.nan)


def test_pareto_front_keeps_exactly_the_non_dominated_rows():
    # by hand: b beats d (faster, cheaper, leaner); e equals a in all three (only the first stays);
    # a, b and c each win somewhere (a: cheapest, c: fastest, b: between on time and cost, least energy)
    df = pd.DataFrame({"time_to_train_s": [10.0, 8.0, 5.0, 9.0, 10.0], "cost_usd": [1.0, 2.0, 3.0, 2.5, 1.0],
                       "energy_kwh": [7.0, 6.0, 8.0, 6.5, 7.0]}, index=list("abcde"))
    front = pareto_front(df)
    assert list(front.index) == ["c", "b", "a"]
    for _, f in front.iterrows():  # none is beaten by any row
        others = df.drop(index=f.name)
        assert not ((others <= f).all(axis=1) & (others < f).any(axis=1)).any()


def test_cli_exit_codes(capsys, tmp_path):
    args = ["plan", "gpt2", "dgx-a100-80gb", "--tokens", "1e10", "--max-devices", "16", "--global-batch-size", "64",
            "--seq-len", "512", "--top", "3"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["plans"]) == 3 and out["pareto"]
    assert main(args + ["--deadline-days", "0.0001"]) == 1
    assert "no plan" in capsys.readouterr().out
    assert main(["plan", "gpt2", "dgx-a100-80gb", "--tokens", "-5"]) == 2
    assert main(["plan", "no-such-model", "dgx-a100-80gb", "--tokens", "1e9"]) == 2
    png = tmp_path / "pareto.png"
    assert main(args + ["--plot", str(png)]) == 0 and png.stat().st_size > 1000


def test_goodput_aware_plan_uses_dalys_wall_time():
    """With a device MTBF each row's time is Daly's expected wall time (hand: job MTBF = device MTBF /
    devices, δ = checkpoint bytes / write rate, τ = Daly's interval); cost scales with it."""
    from simtrain.sim.young_daly import checkpoint_bytes_of, daly_interval_s, daly_wall_s
    kw = dict(tokens=TOKENS, max_devices=16, objective="time", global_batch_size=64, seq_len=512, top=3)
    base = st.plan("gpt2", "dgx-a100-80gb", **kw)
    p = st.plan("gpt2", "dgx-a100-80gb", **kw, mtbf_device_s=3.6e6, restart_s=60.0, checkpoint_write_bytes_per_s=1e9)
    row = p.iloc[0]
    same = base[(base.devices == row.devices) & (base.tp == row.tp) & (base.pp == row.pp)
                & (base.micro_batch_size == row.micro_batch_size) & (base.zero_stage == row.zero_stage)
                & (base.recompute == row.recompute) & (base.virtual_stages == row.virtual_stages)]
    solve = same.iloc[0].time_to_train_s
    save = checkpoint_bytes_of(st.load_model("gpt2", seq_len=512), st.TrainConfig(global_batch_size=64)) / 1e9
    mtbf = 3.6e6 / row.devices
    wall = daly_wall_s(solve, daly_interval_s(save, mtbf), save, 60.0, mtbf)
    assert row.time_to_train_s == pytest.approx(wall, rel=1e-9)
    assert row.goodput == pytest.approx(solve / wall, rel=1e-9) and row.goodput < 1
    assert row.cost_usd == pytest.approx(same.iloc[0].cost_usd * wall / solve, rel=1e-9)
    with pytest.raises(SimtrainError, match="checkpoint_write_bytes_per_s"):
        st.plan("gpt2", "dgx-a100-80gb", **kw, mtbf_device_s=3.6e6)
