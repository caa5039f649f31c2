"""The verbs resolve names, paths and objects at the entry; anything else names the argument (issue 11)."""

import math

import pytest

import simtrain as st
from simtrain.errors import SimtrainError, SpecError
from simtrain.inputs import as_cluster, as_config, as_model, hardware_cluster

CFG = dict(global_batch_size=8, micro_batch_size=1, seq_len=128, precision="bf16")


def test_estimate_accepts_names_and_dicts():
    by_name = st.estimate("gpt2", "a100-sxm4-80gb", CFG)
    by_object = st.estimate(st.load_model("gpt2"), st.Cluster.single(st.load_device("a100-sxm4-80gb")),
                            st.TrainConfig(**CFG))
    assert by_name.feasible and by_name.step_time_s == by_object.step_time_s


@pytest.mark.parametrize("arg, call", [
    ("model", lambda: st.estimate({"hidden_size": 8}, "a100-sxm4-80gb", CFG)),
    ("model", lambda: st.estimate(42, "a100-sxm4-80gb", CFG)),
    ("cluster", lambda: st.estimate("gpt2", 3.5, CFG)),
    ("cfg", lambda: st.estimate("gpt2", "a100-sxm4-80gb", [8])),
])
def test_other_types_name_the_argument(arg, call):
    with pytest.raises(SimtrainError, match=rf"^{arg}: expected"):
        call()


def test_dict_model_hints_at_hf_config():
    with pytest.raises(SimtrainError, match="from_hf_config"):
        as_model({"hidden_size": 8})


def test_device_name_gives_one_device_and_refuses_nodes():
    assert as_cluster("h100-sxm5-80gb").devices_count == 1
    with pytest.raises(SpecError, match=r"is a device, and nodes=4 needs a cluster; clusters with it: dgx-h100"):
        hardware_cluster("h100-sxm5-80gb", nodes=4)
    assert as_cluster("dgx-h100", nodes=2).nodes_count == 2


def test_config_dict_validates():
    assert as_config({"global_batch_size": 4}).global_batch_size == 4
    with pytest.raises(SpecError, match="global_batch_size"):
        as_config({"global_batch_size": True})


@pytest.fixture(scope="module")
def report():
    return st.estimate("gpt2", "a100-sxm4-80gb", CFG)


def test_money_and_energy_take_keywords_with_units(report):
    seconds = report.time_to_train(tokens=1e9)
    assert report.cost_dollars(tokens=1e9) == report.cost_dollars(duration_s=seconds)
    assert report.energy_kwh(tokens=1e9) == report.energy_kwh(duration_s=seconds)
    # one device for an hour at its listed price
    assert report.cost_dollars(duration_s=3600.0) == pytest.approx(report.price_per_device_hour)


@pytest.mark.parametrize("call", [
    lambda r: r.cost_dollars(300e9), lambda r: r.energy_kwh(3600), lambda r: r.time_to_train(1e9),
])
def test_positional_amounts_are_refused(report, call):
    with pytest.raises(SimtrainError, match="keyword arguments only"):
        call(report)


@pytest.mark.parametrize("kwargs", [dict(tokens=-1.0), dict(tokens=math.nan), dict(samples=math.inf),
                                    dict(tokens=True), dict(tokens="1e9")])
def test_bad_amounts_are_refused(report, kwargs):
    with pytest.raises(SimtrainError):
        report.time_to_train(**kwargs)


def test_duration_and_amount_together_are_refused(report):
    with pytest.raises(SimtrainError, match="not both"):
        report.cost_dollars(duration_s=10.0, tokens=1e6)
    with pytest.raises(SimtrainError, match="duration_s"):
        report.energy_kwh(duration_s=-5.0)
