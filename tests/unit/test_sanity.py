"""Sanity warnings (simtrain/report/sanity.py) on hand-built reports and on real estimates.

Hand-built reports fix MFU exactly: model FLOPs = MFU × step × devices × peak. The public figures
come from the packaged table; the expected record per family is read off public_mfu.yaml by hand:
A100 dense transformer 65.3 % (MegaScale Table 2), H100 48 % (Megatron-LM README), TPU v4 46.2 %
(PaLM Table 3); the GPU-kind fallback is the best GPU record, the A100 one.
"""

from importlib import resources
from pathlib import Path

import pytest
import yaml

import simtrain as st
from simtrain.glossary import OpClass
from simtrain.report.sanity import (
    COMM_BOUND_SHARE,
    DATA_STALL_SHARE,
    MEMORY_FULL_SHARE,
    MFU_MARGIN,
    MODEL_CLASSES,
    model_class_of,
    public_mfu,
    sanity_warnings,
)
from simtrain.report.step_report import MemoryReport, StepReport
from simtrain.report.text import render_report
from simtrain.specs.efficiency import Efficiency

A100, H100, TPU4 = "a100-sxm4-80gb", "h100-sxm5-80gb", "tpu-v4"
DENSE = "dense-transformer"


def report(mfu=0.4, device=A100, *, hw_ratio=1.0, breakdown=None, memory=None, feasible=True, step=2.0,
           peak=312e12, devices=8) -> StepReport:
    flops = mfu * step * devices * peak
    return StepReport(model_name="m", cluster_name="c", devices_count=devices, feasible=feasible, reasons=(),
                      step_time_s=step, global_batch_size=8, tokens_per_sample=1024, model_flops_per_step=flops,
                      hardware_flops_per_step=flops * hw_ratio, peak_flops_per_s=peak,
                      time_breakdown_s=breakdown or {"compute": step}, memory=memory, bottleneck="compute",
                      bottleneck_reason="", device_name=device)


def best(family: str):
    return max((r for r in public_mfu().records if r.family == family and r.model_class == DENSE),
               key=lambda r: r.value)


# --- the packaged table ------------------------------------------------------------------------
def test_table_is_package_data_read_through_importlib_resources():
    ref = resources.files("simtrain.report").joinpath("public_mfu.yaml")
    assert ref.is_file()
    raw = yaml.safe_load(ref.read_text(encoding="utf-8"))
    assert raw["records"], "no records"
    for rec in raw["records"]:
        assert 0 < rec["value"] <= 1 and rec["source"].strip() and rec["run"].strip(), rec
        assert rec["family"] in raw["families"] and rec["model_class"] in MODEL_CLASSES
    table = public_mfu()
    assert len(table.records) == len(raw["records"])
    assert {f.name for f in table.families} == {r.family for r in table.records}  # no family without a record
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "report/public_mfu.yaml" in pyproject["tool"]["setuptools"]["package-data"]["simtrain"]


def test_table_figures_are_the_published_ones():
    assert (best("a100").value, best("h100").value, best("tpu-v4").value) == (0.653, 0.48, 0.462)
    assert "Jiang et al. 2024" in best("a100").source and "Table 2" in best("a100").source
    assert "Chowdhery et al. 2022" in best("tpu-v4").source and best("tpu-v4").hfu == 0.578
    korthikanti = [r for r in public_mfu().records if "Korthikanti" in r.source]
    assert [(r.value, r.hfu) for r in korthikanti] == [(0.563, 0.570)]


def test_device_family_matches_whole_tokens():
    table = public_mfu()
    assert table.family_of("a100-sxm4-40gb").name == "a100"
    assert table.family_of("tpu-v4").name == "tpu-v4"
    assert table.family_of("a1000") is None and table.family_of("h200-sxm-141gb") is None


# --- MFU against the public record -------------------------------------------------------------
@pytest.mark.parametrize("device,family,label", [(A100, "a100", "A100"), (H100, "h100", "H100"), (TPU4, "tpu-v4", "TPU v4")])
def test_mfu_above_public_record_names_figure_and_source(device, family, label):
    rec = best(family)
    w = sanity_warnings(report(0.95, device), model_class=DENSE)
    assert len(w) == 1
    assert w[0].startswith(f"predicted MFU 95.0% exceeds the highest publicly reported for {label} "
                           f"dense-transformer training ({100 * rec.value:.1f}%, {rec.source})")


def test_example_message_for_a100():
    (w,) = sanity_warnings(report(0.741), model_class=DENSE)
    assert w == ("predicted MFU 74.1% exceeds the highest publicly reported for A100 dense-transformer training "
                 "(65.3%, Jiang et al. 2024, MegaScale, NSDI '24 (arXiv:2402.15627), §6.1, Table 2 (175B, 256 GPUs, "
                 "MegaScale row) and Table 3 row 9) by more than 10%: check the efficiency settings")


def test_margin_is_relative():
    edge = 0.653 * (1 + MFU_MARGIN)
    assert sanity_warnings(report(edge - 1e-6), model_class=DENSE) == ()
    assert len(sanity_warnings(report(edge + 1e-4), model_class=DENSE)) == 1
    assert sanity_warnings(report(0.5, H100), model_class=DENSE) == ()  # below 48 % × 1.1


def test_fallback_to_the_best_of_the_device_kind():
    (w,) = sanity_warnings(report(0.75, "h200-sxm-141gb"), device_kind="gpu", model_class=DENSE)
    assert "dense-transformer training on any GPU (the record is A100) (65.3%" in w
    (w,) = sanity_warnings(report(0.6, "tpu-v5p"), device_kind="tpu", model_class=DENSE)
    assert "on any TPU (the record is TPU v4) (46.2%, Chowdhery et al. 2022" in w
    assert sanity_warnings(report(0.9, "host-cpu"), device_kind="cpu", model_class="other") == ()
    assert sanity_warnings(report(0.9, "mystery"), model_class=DENSE) == ()  # no family, no kind


def test_other_model_classes_use_the_family_bound():
    (w,) = sanity_warnings(report(0.8), device_kind="gpu", model_class="other")
    assert "for A100 any-model training (65.3%" in w
    assert sanity_warnings(report(0.6), device_kind="gpu", model_class="moe") == ()


# --- impossible and inconsistent ---------------------------------------------------------------
def test_mfu_above_one_is_impossible_and_not_also_compared():
    (w,) = sanity_warnings(report(1.2), model_class=DENSE)
    assert w.startswith("predicted MFU 120.0% exceeds 100% of the dense peak (312 TFLOP/s): impossible")


def test_hfu_above_one_is_impossible():
    (w,) = sanity_warnings(report(0.6, hw_ratio=2.0), model_class=DENSE)
    assert w.startswith("predicted HFU 120.0% exceeds 100% of the dense peak")


def test_hardware_flops_below_model_flops():
    (w,) = sanity_warnings(report(0.4, hw_ratio=0.9))
    assert "HFU < MFU" in w


# --- time shares and memory --------------------------------------------------------------------
def test_communication_bound():
    (w,) = sanity_warnings(report(breakdown={"compute": 0.8, "comm_exposed": 1.2}))
    assert w.startswith("communication-bound: exposed communication is 60% of the step")
    assert sanity_warnings(report(breakdown={"compute": 1.0, "comm_exposed": COMM_BOUND_SHARE * 2.0})) == ()


def test_data_stall():
    (w,) = sanity_warnings(report(breakdown={"compute": 1.5, "data_stall": 0.5}))
    assert w.startswith("data-bound: the input pipeline stalls the devices for 25% of the step")
    assert sanity_warnings(report(breakdown={"compute": 1.6, "data_stall": DATA_STALL_SHARE * 2.0})) == ()


def _memory(share: float) -> MemoryReport:
    return MemoryReport(params_bytes=share * 100.0, grads_bytes=0, optimizer_bytes=0, activations_bytes=0,
                        buffers_bytes=0, overhead_bytes=0, capacity_bytes=100.0, rank=3)


def test_memory_nearly_full():
    (w,) = sanity_warnings(report(memory=_memory(0.97)))
    assert w.startswith("peak memory (rank 3) uses 97% of the usable device memory")
    assert sanity_warnings(report(memory=_memory(MEMORY_FULL_SHARE))) == ()


# --- quiet when nothing is odd; never raises ---------------------------------------------------
def test_plausible_report_has_no_warnings():
    r = report(0.45, memory=_memory(0.8), breakdown={"compute": 1.6, "comm_exposed": 0.3, "data_stall": 0.1})
    assert sanity_warnings(r, device_kind="gpu", model_class=DENSE) == ()


def test_infeasible_reports_are_not_flagged():
    assert sanity_warnings(report(1.5, feasible=False)) == ()
    assert sanity_warnings(report(0.4, step=float("nan"))) == ()


def test_never_raises():
    (w,) = sanity_warnings(object())
    assert w.startswith("sanity checks skipped: AttributeError")


# --- wired into the engines, the export and the text report ------------------------------------
def test_every_estimate_has_warnings(tiny_mlp, single):
    cfg = st.TrainConfig(global_batch_size=10, micro_batch_size=10, precision="fp32", optimizer="sgd")
    for r in (st.estimate(tiny_mlp, single, cfg), st.simulate(tiny_mlp, single, cfg),
              st.estimate(tiny_mlp, single, cfg.model_copy(update={"tp": 3}))):
        assert isinstance(r.warnings, tuple) and r.to_dict()["warnings"] == list(r.warnings)


def test_library_estimate_is_quiet():
    r = st.estimate(st.load_model("gpt2"), st.load_cluster("dgx-a100-80gb", nodes=1),
                    st.TrainConfig(global_batch_size=64, micro_batch_size=8, seq_len=1024, precision="bf16",
                                   optimizer="adamw"))
    assert r.feasible and 0.2 < r.mfu < 0.6 and r.warnings == ()


def _too_good_a100():
    """An A100 with ideal efficiencies and 10 PB/s memory: nothing holds the matmuls back."""
    dev = st.load_device(A100)
    ideal = Efficiency.model_validate({
        "compute": {c.value: {"peak_fraction": 1.0, "half_flops": 0.0} for c in OpClass},
        "memory_bandwidth_fraction": 1.0, "launch_overhead_s": 0.0, "link_bandwidth_fraction": 1.0})
    tiers = [t.model_copy(update={"bandwidth_bytes_per_s": t.bandwidth_bytes_per_s.model_copy(update={"value": 1e16})})
             for t in dev.memory]
    return st.Cluster.single(dev.model_copy(update={"efficiency": ideal, "memory": tiers}))


def test_implausible_estimate_is_flagged_in_report_dict_and_text():
    r = st.estimate(st.load_model("gpt2"), _too_good_a100(),
                    st.TrainConfig(global_batch_size=8, micro_batch_size=8, seq_len=1024, precision="bf16",
                                   optimizer="adamw"))
    assert r.feasible and r.mfu > 0.653 * (1 + MFU_MARGIN)
    (w,) = r.warnings
    assert w.startswith(f"predicted MFU {100 * r.mfu:.1f}% exceeds the highest publicly reported for A100 "
                        "dense-transformer training (65.3%, Jiang et al. 2024")
    assert r.to_dict()["warnings"] == [w]
    text = render_report(r).splitlines()
    i = text.index("warnings:")
    assert text[i + 1] == f"  ! {w}" and i + 2 == len(text)


def test_model_class_of(tiny_mlp):
    assert model_class_of(st.load_model("gpt2")) == DENSE
    assert model_class_of(st.load_model("mixtral-8x7b")) == "moe"
    assert model_class_of(st.load_model("resnet18")) == "other"
    assert model_class_of(tiny_mlp) == "other"
    assert model_class_of(object()) == "other"
