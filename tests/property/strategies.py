"""Random valid training configurations, shared by the invariant tests (hypothesis) and the
invariant benchmark (benchmarks/bench_invariants.py, seeded ``random.Random``).

One generator, two sources of choices: :func:`random_case` asks a ``chooser`` (anything with
``choice(seq)``, ``integer(lo, hi)`` and ``boolean()``) for every decision, so hypothesis can
shrink a failing case and the benchmark can draw 100,000 of them without hypothesis.

A case is a model (small library models and tiny built transformers: dense, GQA, MoE, fused or
materialised attention), a cluster (DGX A100 / H100 and TPU v4 with one or two nodes, a partial
node, a wafer-scale system that streams its weights) and a TrainConfig whose layout divides the
cluster and the model (tp / pp / dp / cp / ep, micro-batches fewer and more than the stages, every
pipeline schedule, precision the device has, recompute policies with modules and layer counts,
ZeRO 0–3, sequence parallelism, software-stack presets and knob overrides).

Helpers scale a cluster's compute peaks, memory bandwidth or link bandwidth (modified Device /
Link specs: ``model_copy`` of the ``Sourced`` values).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from typing import Any

import simtrain as st
from simtrain.glossary import DType
from simtrain.specs.stack import stack_names

__all__ = ["Case", "RandomChooser", "DrawChooser", "random_case", "build_cfg", "scaled_flops", "tiny_model",
           "library_model", "library_cluster",
           "scaled_memory_bandwidth", "scaled_links", "cases", "STACK_PRESETS"]

STACK_PRESETS = tuple(stack_names())  # what `simtrain stacks` lists

_LIBRARY_MODELS = ("gpt2", "bert-base", "gpt2-medium", "llama3-8b")
_CLUSTERS = ("dgx-a100-80gb", "dgx-h100", "tpu-v4-pod", "cs-3-cluster")
_PRECISION_DTYPE = {"fp32": DType.FP32, "tf32": DType.TF32, "fp16": DType.FP16, "bf16": DType.BF16,
                    "fp8": DType.FP8}


# ----------------------------------------------------------------------------------------------
# choosers
# ----------------------------------------------------------------------------------------------
class RandomChooser:
    """Choices from a seeded ``random.Random`` (the benchmark)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choice(self, seq):
        seq = list(seq)
        return seq[self.rng.randrange(len(seq))]

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def boolean(self) -> bool:
        return self.rng.random() < 0.5


class DrawChooser:
    """Choices from hypothesis' ``draw`` (the tests: shrinkable, derandomised in CI)."""

    def __init__(self, draw) -> None:
        from hypothesis import strategies as hs
        self.draw, self.hs = draw, hs

    def choice(self, seq):
        return self.draw(self.hs.sampled_from(list(seq)))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.hs.integers(lo, hi))

    def boolean(self) -> bool:
        return self.draw(self.hs.booleans())


# ----------------------------------------------------------------------------------------------
# models and clusters (cached: the same choice gives the same object, so the library's memos hit)
# ----------------------------------------------------------------------------------------------
@functools.cache
def library_model(name: str) -> st.Model:
    return st.load_model(name)


@functools.cache
def tiny_model(layers: int, hidden: int, heads: int, kv_heads: int | None, activation: str, flash: bool,
               moe: tuple[int, int, int] | None, tied: bool, seq_len: int, vocab: int = 512) -> st.Model:
    """A tiny transformer (tests/unit/test_cp_ep.py ``_tiny_moe`` style): ``moe`` = (experts, top_k, every)."""
    from simtrain.graph.model import build_model
    from simtrain.graph.spec import ModelSpec
    t: dict[str, Any] = {"layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab, "ffn_hidden": 4 * hidden,
                         "activation": activation, "biases": activation != "swiglu", "flash_attention": flash,
                         "tied_embeddings": tied}
    if kv_heads is not None:
        t["kv_heads"] = kv_heads
    if moe is not None:
        t["moe"] = {"experts": moe[0], "top_k": moe[1], "every": moe[2]}
    name = f"tiny-l{layers}-h{hidden}-a{heads}" + (f"-moe{moe[0]}" if moe else "")
    return build_model(ModelSpec.model_validate({"name": name, "family": "transformer", "seq_len": seq_len,
                                                 "transformer": t}))


@functools.cache
def library_cluster(name: str, nodes: int, devices_per_node: int | None = None) -> st.Cluster:
    """A library cluster with ``nodes`` nodes; ``devices_per_node`` makes one partial node."""
    c = st.load_cluster(name, nodes=nodes)
    if devices_per_node is None or devices_per_node == c.node.devices_count:
        return c
    fabric = c.node.fabric
    if fabric.torus_dims:
        from simtrain.specs.hardware import balanced_dims
        fabric = fabric.model_copy(update={"torus_dims": balanced_dims(devices_per_node, len(fabric.torus_dims))})
    node = c.node.model_copy(update={"devices_count": devices_per_node, "fabric": fabric})
    net = c.network
    if net.torus_dims:
        net = net.model_copy(update={"torus_dims": [devices_per_node]})
    return st.Cluster.model_validate({**dict(c), "node": node, "network": net, "name": f"{c.name}-{devices_per_node}"})


# ----------------------------------------------------------------------------------------------
# scaling hardware (modified specs)
# ----------------------------------------------------------------------------------------------
def _times(sourced, k: float):
    return None if sourced is None else sourced.model_copy(update={"value": sourced.value * k})


def _with_device(cluster: st.Cluster, device, tag: str) -> st.Cluster:
    node = cluster.node.model_copy(update={"device": device})
    return cluster.model_copy(update={"node": node, "name": f"{cluster.name}-{tag}"})


def scaled_flops(cluster: st.Cluster, k: float) -> st.Cluster:
    """Every compute peak (each dtype's dense peak and the vector rate) × ``k``."""
    dev = cluster.device
    peaks = {dt: _times(v, k) for dt, v in dev.peak_flops_per_s.items()}
    dev = dev.model_copy(update={"peak_flops_per_s": peaks, "vector_flops_per_s": _times(dev.vector_flops_per_s, k)})
    return _with_device(cluster, dev, f"flops{k:g}")


def scaled_memory_bandwidth(cluster: st.Cluster, k: float) -> st.Cluster:
    """Every memory tier's bandwidth (and an external weight store's streaming rate) × ``k``."""
    dev = cluster.device
    tiers = [t.model_copy(update={"bandwidth_bytes_per_s": _times(t.bandwidth_bytes_per_s, k)}) for t in dev.memory]
    ext = dev.memory_external
    if ext is not None:
        ext = ext.model_copy(update={"bandwidth_bytes_per_s": _times(ext.bandwidth_bytes_per_s, k)})
    dev = dev.model_copy(update={"memory": tiers, "memory_external": ext})
    return _with_device(cluster, dev, f"mem{k:g}")


def _scaled_link(link, k: float):
    if link is None:
        return None
    return link.model_copy(update={
        "bandwidth_per_direction_bytes_per_s": _times(link.bandwidth_per_direction_bytes_per_s, k),
        "bandwidth_bidirectional_bytes_per_s": _times(link.bandwidth_bidirectional_bytes_per_s, k)})


def scaled_links(cluster: st.Cluster, k: float) -> st.Cluster:
    """Every link's bandwidth × ``k``: the node fabric, the network NICs, the host's PCIe."""
    node = cluster.node
    fabric = node.fabric.model_copy(update={"link": _scaled_link(node.fabric.link, k)})
    host = node.host.model_copy(update={"pcie_link": _scaled_link(node.host.pcie_link, k)})
    node = node.model_copy(update={"fabric": fabric, "host": host})
    net = cluster.network.model_copy(update={"nic_link": _scaled_link(cluster.network.nic_link, k)})
    return cluster.model_copy(update={"node": node, "network": net, "name": f"{cluster.name}-links{k:g}"})


# ----------------------------------------------------------------------------------------------
# the case generator
# ----------------------------------------------------------------------------------------------
@dataclass
class Case:
    model: st.Model
    cluster: st.Cluster
    fields: dict[str, Any]
    """TrainConfig fields (``build_cfg`` makes the config; tests vary one field at a time)."""
    layers: int
    label: str = ""
    facts: dict = field(default_factory=dict)

    @property
    def cfg(self) -> st.TrainConfig:
        return build_cfg(self.fields)

    def with_fields(self, **kw) -> Case:
        return Case(self.model, self.cluster, {**self.fields, **kw}, self.layers, self.label, self.facts)

    def __repr__(self) -> str:
        return f"Case({self.label}, {self.cluster.name} × {self.cluster.devices_count}, {self.fields})"


def build_cfg(fields: dict[str, Any]) -> st.TrainConfig:
    return st.TrainConfig(**fields)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pick_model(c, min_layers: int = 1) -> tuple[st.Model, int, str]:
    if c.integer(0, 3) == 0:
        name = c.choice(_LIBRARY_MODELS)
        m = library_model(name)
        arch = m.arch.transformer
        seq = c.choice([n for n in (128, 256, 512, 1024) if not arch.max_positions or n <= arch.max_positions])
        return m, int(arch.layers), f"{name}@{seq}"
    layers = c.choice([n for n in (2, 4, 6, 8) if n >= min_layers])
    heads = c.choice((4, 8, 16))
    kv = c.choice((None, None, 2, heads))
    moe = None
    if c.integer(0, 3) == 0:
        moe = (c.choice((4, 8)), c.choice((1, 2)), c.choice((1, 2)))
    seq = c.choice((64, 256, 1024, 2048))
    m = tiny_model(layers, c.choice((64, 256, 1024, 4096)), heads, kv, c.choice(("gelu", "swiglu")), c.boolean(), moe,
                   c.boolean(), seq, c.choice((512, 32000)))
    return m, layers, m.name


def _pick_cluster(c, min_devices: int = 1, names: tuple[str, ...] = _CLUSTERS) -> st.Cluster:
    name = c.choice([n for n in names if min_devices <= 2 or n != "cs-3-cluster"])
    if name == "cs-3-cluster":
        return library_cluster(name, c.choice([k for k in (1, 2) if k >= min_devices]))
    shape = c.integer(0, 4)
    per_node = st.load_cluster(name, nodes=1).node.devices_count
    parts = [d for d in (1, 2, 4) if min_devices <= d < per_node]
    if shape == 0 and parts:
        return library_cluster(name, 1, c.choice(parts))
    nodes = c.choice((1, 2, 4)) if shape >= 3 else 1
    return library_cluster(name, max(nodes, -(-min_devices // per_node)))


def _precisions(device) -> list[str]:
    out = []
    for prec, dt in _PRECISION_DTYPE.items():
        if device.peak(dt) is not None or (dt is DType.TF32 and device.peak(DType.FP32) is not None):
            out.append(prec)
    return out


def _layout(c, n: int, facts: dict, seq: int, min_dp: int = 1, schedule: str | None = None) -> dict[str, Any]:
    """tp / pp / cp / dp / ep dividing ``n`` devices and the model; ``schedule`` forces pp ≥ 2 and it."""
    heads, kv, blocks, experts = facts.get("heads"), facts.get("kv_heads"), facts.get("blocks"), facts.get("experts")
    min_pp = 2 if schedule else 1
    tps = [t for t in _divisors(n) if t <= 8 and (not heads or heads % t == 0)
           and (not kv or kv == heads or kv % t == 0 or t % kv == 0) and n // t >= min_dp * min_pp]
    tp = c.choice(tps)
    pps = [p for p in _divisors(n // tp) if min_pp <= p <= min(blocks, 8) and n // tp // p >= min_dp
           and (schedule not in ("interleaved-1f1b", "dualpipev") or 2 * p <= blocks)]
    pp = c.choice(pps)
    cps = [k for k in _divisors(n // tp // pp) if k <= 4 and seq % (2 * k) == 0 and n // tp // pp // k >= min_dp]
    cp = c.choice(cps) if c.integer(0, 2) == 0 else 1
    dp = n // (tp * pp * cp)
    ep = 1
    if experts:
        ep = c.choice([e for e in _divisors(dp * cp) if experts % e == 0])
    out = dict(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep)
    if pp > 1:
        sched = schedule or c.choice(("gpipe", "1f1b", "interleaved-1f1b", "interleaved-1f1b"))
        vs = [v for v in (2, 3, 4) if pp * v <= blocks]
        if sched == "interleaved-1f1b" and vs:
            out.update(pipeline_schedule=sched, virtual_stages=c.choice(vs))
        elif sched == "dualpipev":
            out.update(pipeline_schedule=sched, virtual_stages=2)
        elif sched != "interleaved-1f1b":
            out["pipeline_schedule"] = sched
    if tp > 1 and seq % tp == 0 and c.boolean():
        out["sequence_parallel"] = True
    return out


def _recompute(c, layers_: int) -> dict[str, Any]:
    policy = c.choice(("none", "selective", "full"))
    out: dict[str, Any] = {"recompute": policy}
    if policy == "selective":
        mods = c.choice((None, ["core_attn"], ["mlp"], ["layernorm"], ["core_attn", "mlp"], ["mlp/act"], ["moe"]))
        if mods is not None:
            out["recompute_modules"] = mods
    elif policy == "full":
        how = c.integer(0, 3)
        if how == 1:
            out["recompute_num_layers"] = c.integer(0, max(1, layers_ // 2))
        elif how == 2:
            out["recompute_every_k_blocks"] = 2
    return out


def _stack(c) -> dict[str, Any]:
    kind = c.integer(0, 3)
    if kind == 0:
        return {}
    preset = c.choice(STACK_PRESETS)
    if kind < 3:
        return {"stack": preset}
    knobs = {"preset": preset}
    for knob, values in (("tp_comm_overlap", (0.0, 0.3, 0.7, 1.0)), ("comm_compute_slowdown", (0.0, 0.1, 0.3)),
                         ("fsdp_prefetch_layers", (0, 1, 2)), ("host_dispatch_s", (0.0, 5e-6, 2e-5)),
                         ("gpu_waits_on_cpu", (False, True)), ("tp_dgrad_comm_async", (False, True))):
        if c.boolean():
            knobs[knob] = c.choice(values)
    return {"stack": knobs}


def random_case(c, *, min_dp: int = 1, min_layers: int = 1, schedule: str | None = None,
                micro_batches: tuple[int, ...] = (1, 2, 3, 4, 6, 8), clusters: tuple[str, ...] = _CLUSTERS,
                zero_stages: tuple[int, ...] = (0, 1, 2, 3)) -> Case:
    """One random valid case (the layout fits the cluster and the model; it may not fit in memory).
    ``min_dp`` / ``min_layers`` / ``schedule`` (which forces pp ≥ 2) / ``clusters`` / ``zero_stages``
    narrow it for one invariant; ``micro_batches``: the choices of micro-batches per replica (fewer
    and more than the stages)."""
    model, layers_, label = _pick_model(c, min_layers)
    cluster = _pick_cluster(c, max(min_dp * (2 if schedule else 1), 1), clusters)
    facts = model.layout_facts()
    seq = int(label.rsplit("@", 1)[1]) if "@" in label else facts["seq_len"]
    fields: dict[str, Any] = _layout(c, cluster.devices_count, facts, seq, min_dp, schedule)
    mb = c.choice((1, 1, 2, 4, 8))
    m = c.choice(micro_batches)
    if fields.get("pipeline_schedule") == "dualpipev":  # its order needs 2 micro-batches per stage
        m = max(m, 2 * fields["pp"])
    fields.update(micro_batch_size=mb, global_batch_size=mb * m * fields["dp"], seq_len=seq,
                  precision=c.choice(_precisions(cluster.device)))
    fields.update(_recompute(c, layers_))
    if c.integer(0, 3) or zero_stages != (0, 1, 2, 3):
        fields["zero_stage"] = c.choice(zero_stages)
    fields.update(_stack(c))
    if c.integer(0, 4) == 0:
        fields["dp_overlap"] = c.boolean()
    if c.integer(0, 4) == 0:
        fields["dp_bucket_bytes"] = c.choice((2**20, 4 * 2**20, 100 * 2**20))
    if c.integer(0, 4) == 0:
        fields["optimizer"] = c.choice(("sgd", "adam", "adafactor"))
    if c.integer(0, 5) == 0:
        fields["fused_optimizer"] = False
    if c.integer(0, 7) == 0:
        fields["data"] = {"sample_bytes": c.choice((1e4, 1e6, 1e8)), "num_workers": c.choice((0, 4)),
                          "transform_s_per_sample": c.choice((0.0, 1e-4)), "pin_memory": c.boolean()}
    return Case(model, cluster, fields, layers_, label, facts)


def cases(**narrow):
    """A hypothesis strategy of cases (``narrow``: the keywords of :func:`random_case`)."""
    from hypothesis import strategies as hs

    @hs.composite
    def _cases(draw):
        return random_case(DrawChooser(draw), **narrow)
    return _cases()
