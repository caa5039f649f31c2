"""Shared fixtures: an invented device with round numbers, and hand-built op records."""

from __future__ import annotations

import pytest

from simtrain.glossary import OpClass
from simtrain.graph.model import Model
from simtrain.graph.op import Gemm, Op, PhaseCounts, Saved
from simtrain.specs.hardware import Cluster, Device
from tests.solo_lock import machine_turn


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of each test inside its turn on the machine (tests/solo_lock.py): a
    ``solo`` test, which times this machine, runs while no other xdist worker runs a test."""
    run_id = getattr(item.config, "workerinput", {}).get("testrunuid")
    with machine_turn(run_id, solo=item.get_closest_marker("solo") is not None):
        yield


def _s(value, source="invented for tests"):
    return {"value": value, "source": source, "mark": "U"}


def invented_device(**overrides) -> Device:
    """1 TFLOP/s fp32, 4 TFLOP/s bf16, 100 GB/s, 10 GB; ideal efficiencies unless overridden."""
    spec = {
        "name": "invented", "kind": "gpu",
        "peak_flops_per_s": {"fp32": _s(1e12), "bf16": _s(4e12), "fp16": _s(4e12)},
        "memory": [{"name": "hbm", "level": "hbm", "capacity_bytes": _s(10e9), "bandwidth_bytes_per_s": _s(100e9)}],
        "tdp_w": _s(100), "idle_power_w": _s(20), "price_per_hour": _s(1.0),
        "efficiency": {
            "compute": {c.value: {"peak_fraction": 1.0, "half_flops": 0.0} for c in OpClass},
            "memory_bandwidth_fraction": 1.0, "memory_half_bytes": 0.0, "launch_overhead_s": 0.0,
            "link_bandwidth_fraction": 1.0,
            "extra": {"collective_base_latency_s": 0.0},
        },
    }
    spec.update(overrides)
    return Device.model_validate(spec)


def linear_op(name: str, block: str, m: int, k: int, n: int, tp_split: str = "column") -> Op:
    """A bias-free linear layer, per sample: m rows of k inputs → n outputs (hand-derived counts)."""
    f = 2.0 * m * k * n
    return Op(name=name, kind="linear", op_class=OpClass.MATMUL, block=block,
              flops=PhaseCounts(f, f, f),
              act_read=PhaseCounts(m * k, m * n, m * n + m * k), act_write=PhaseCounts(m * n, m * k, 0),
              weight_read=PhaseCounts(k * n, k * n, 0), weight_write=PhaseCounts(0, 0, k * n),
              param_count=k * n, saved=Saved(act=m * k), shapes=((m, k),), out_shape=(m, n),
              gemm=Gemm(m, n, k), tp_split=tp_split)


def relu_op(name: str, block: str, elems: int) -> Op:
    return Op(name=name, kind="relu", op_class=OpClass.ELEMENTWISE, block=block,
              flops=PhaseCounts(elems, elems, 0), act_read=PhaseCounts(elems, 2 * elems, 0),
              act_write=PhaseCounts(elems, elems, 0), saved=Saved(act=elems), shapes=((elems,),),
              out_shape=(elems,), tp_split="sequence")


@pytest.fixture
def device() -> Device:
    return invented_device()


@pytest.fixture
def single(device) -> Cluster:
    return Cluster.single(device)


@pytest.fixture
def tiny_mlp() -> Model:
    """Two blocks: linear(100→200) + relu, linear(200→100); one row per sample."""
    ops = [linear_op("layers.0/fc", "layers.0", 1, 100, 200), relu_op("layers.0/act", "layers.0", 200),
           linear_op("layers.1/fc", "layers.1", 1, 200, 100, tp_split="row")]
    return Model("tiny-mlp", ops)


def invented_cluster(devices: int = 2, link_bytes_per_s: float = 1e18, latency_s: float = 0.0, **device_kw) -> Cluster:
    """``devices`` invented devices on one NVSwitch-like crossbar of an invented link."""
    from simtrain.specs.hardware import Fabric, Host, Link, Network, Node
    link = Link.model_validate({"name": "invented-link", "kind": "nvlink",
                                "bandwidth_per_direction_bytes_per_s": _s(link_bytes_per_s), "latency_s": _s(latency_s)})
    host = Host(cpu_cores=_s(8), dram_bandwidth_bytes_per_s=_s(1e11))
    node = Node(name="invented-node", device=invented_device(**device_kw), devices_count=devices,
                fabric=Fabric(topology="nvswitch", link=link), host=host)
    return Cluster(name="invented-cluster", node=node, nodes_count=1, network=Network(topology="none"))
