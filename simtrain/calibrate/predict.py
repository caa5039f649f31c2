"""What the cost layer predicts for one measured row: the *same* functions ``estimate`` uses, so a fit
against these predictions is a fit of the estimator itself (fit and estimate cannot drift).

* forward rows: ``simtrain.cost.compute.op_seconds`` on the row's FLOPs and bytes, with the GEMM
  geometry the model graph gives that op (``simtrain.graph.rules``: a conv is the implicit GEMM
  m = P·Q positions, n = K/G, k = (C/G)·R·S, batch = G);
* backward rows: the estimator costs backward as separate activation-gradient and weight-gradient ops
  (``simtrain.cost.op_cost.op_cost``), each with the op's own GEMM geometry and its own launch; a
  row's ``calls`` parts split its FLOPs and bytes evenly (exact for GEMMs: dA and dB both cost
  2mnk FLOPs and mn + kn + mk elements); backward parts use the efficiency's backward curve, and a
  strided conv's activation-gradient part executes ``strided_agrad_factor`` times its FLOPs;
* optimizer rows: the memory leg on the step's traffic plus one launch per kernel
  (``simtrain.parallel.stage_state.stage_optimizer_seconds``: ``memory_seconds(passes × 4 B × params) +
  kernels × launch_overhead_s + tensors × optimizer_tensor_overhead_s[kind/impl] +
  optimizer_step_overhead_s[kind/impl]``; the row's bytes and
  calls come from ``simtrain.cost.optimizer``);
* collective rows: ``simtrain.cost.collectives.collective_time`` on a one-dimension switch topology of
  ``world_size`` ranks (the fitted link), algorithm chosen as the estimator chooses it.
"""

from __future__ import annotations

from simtrain.calibrate.bench_memory import activation_bytes
from simtrain.calibrate.records import Row
from simtrain.calibrate.work_counts import counted_causal_fraction
from simtrain.cost.attention_work import causal_executed_fraction, priced_flash_tiles
from simtrain.cost.compute import (
    conv_layout_seconds,
    first_touch_seconds,
    issue_bound,
    launch_seconds,
    memory_seconds,
    op_device_seconds,
    strided_agrad_factor,
)
from simtrain.cost.optimizer import step_overhead_seconds, tensor_overhead_seconds
from simtrain.glossary import DTYPE_BYTES
from simtrain.graph.op import Gemm
from simtrain.specs.hardware import Device, Efficiency

__all__ = ["row_gemm", "row_output_bytes", "predict_row", "row_optimizer", "row_agrad_factor", "row_attention_factor",
           "row_flash_tiles", "row_conv_layout_bytes", "row_gradient_tensors", "predict_collective"]

#: vector benches that allocate their output (bench_vector.py) → its element count from the row's params
_OUTPUT_NUMEL = {"layernorm": ("rows", "cols"), "rmsnorm": ("rows", "cols"), "softmax": ("rows", "cols"),
                 "batchnorm": ("n", "c", "h", "w"), "embedding": ("tokens", "dim")}


def row_gradient_tensors(row: Row) -> tuple[float, ...]:
    """Bytes of each fresh gradient tensor a backward matrix row allocates per call (``autograd.grad``
    returns new tensors): a GEMM's dA (m×k) and dB (k×n), per batch for bmm, a conv's dX and dW;
    empty for other rows. Each is one allocation, first-touched when it alone reaches the threshold,
    as ``op_cost`` charges a graph's weight and activation gradients."""
    if row.phase != "bw":
        return ()
    p, e = row.params, DTYPE_BYTES[row.dtype]
    if row.bench in ("gemm", "bmm"):
        b = int(p.get("batch", 1))
        return (b * int(p["m"]) * int(p["k"]) * e, b * int(p["k"]) * int(p["n"]) * e)
    if row.bench == "conv2d":
        c, g = int(p["c"]), int(p["groups"])
        return (int(p["n"]) * c * int(p["h"]) * int(p["w"]) * e, int(p["k"]) * (c // g) * int(p["r"]) * int(p["s"]) * e)
    return ()


def row_gemm(row: Row) -> tuple[Gemm | None, int]:
    """(GEMM geometry, actual row count) of a matrix row, as the graph rules describe that op."""
    p = row.params
    if row.bench == "gemm":
        return Gemm(p["m"], p["n"], p["k"]), int(p["m"])
    if row.bench == "bmm":
        return Gemm(p["m"], p["n"], p["k"], p["batch"]), int(p["m"])
    if row.bench == "conv2d":
        g = int(p["groups"])
        positions = int(p["p"]) * int(p["q"])
        gemm = Gemm(positions, int(p["k"]) // g, (int(p["c"]) // g) * int(p["r"]) * int(p["s"]), g)
        return gemm, positions * int(p["n"])
    return None, 1


def row_output_bytes(row: Row) -> float:
    """Bytes of the fresh output tensor a forward vector row allocates (0: none, or not a vector row;
    the copy bench writes into a preallocated buffer)."""
    if row.phase != "fw" or row.op_class is None or row.bench == "copy":
        return 0.0
    keys = ("numel",) if row.op_class.value == "elementwise" else _OUTPUT_NUMEL.get(row.bench)
    if keys is None or any(k not in row.params for k in keys):
        return 0.0
    numel = 1.0
    for k in keys:
        numel *= float(row.params[k])
    return numel * DTYPE_BYTES[row.dtype]


def predict_row(row: Row, device: Device, eff: Efficiency, own_kind: bool = True) -> float:
    """Predicted seconds of one timed call of a compute row (``row.op_class`` is not None);
    ``own_kind=False`` costs it on its class's curve even where its kind has one of its own."""
    if row.phase == "optim":
        kind, impl = row_optimizer(row)
        host_s = tensor_overhead_seconds(kind, impl, int(row.params.get("tensors", 0)), eff)
        host_s += step_overhead_seconds(kind, impl, eff)
        return issue_bound(memory_seconds(row.bytes_moved, device, eff), row.calls * eff.launch_overhead_s + host_s,
                           eff)
    gemm, m_rows = row_gemm(row)
    parts = row.calls
    phases = ("fw",) * parts if row.phase == "fw" else ("agrad", "wgrad", "bw", "bw")[:parts]
    total = first_touch_seconds(row_output_bytes(row), eff) + conv_layout_seconds(row_conv_layout_bytes(row), eff)
    total += sum(first_touch_seconds(b, eff) for b in row_gradient_tensors(row))
    executed = row_attention_factor(row, device)
    for phase in phases:
        work = executed * (row_agrad_factor(row, eff) if phase == "agrad" else 1.0)
        total += op_device_seconds(work * row.flops / parts, row.bytes_moved / parts, row.op_class, device, row.dtype,
                                   gemm=gemm, efficiency=eff, m_rows=m_rows, phase=phase,
                                   kind=row.bench if own_kind else None, tiles=row_flash_tiles(row, device, eff))
    launch_s = launch_seconds(row.op_class, eff, row.phase)
    if not eff.launch_async:
        return total + parts * launch_s
    # the timed calls ran back to back, each issued while the last one's kernels ran; a backward row's
    # issue includes the autograd engine's call, which the bench subtracted from its time afterwards
    engine_s = float(row.params.get("autograd_call_s", 0.0))
    return issue_bound(total, parts * launch_s + engine_s, eff) - engine_s


def row_flash_tiles(row: Row, device: Device, eff: Efficiency) -> float:
    """Flash-attention tiles of an attention row where the efficiency prices them, as ``op_cost``
    counts a graph's fused attention (``flash_tiles``: batch × heads × tiles per head); 1 otherwise."""
    p = row.params
    if row.bench != "sdpa":
        return 1.0
    return priced_flash_tiles(int(p["batch"]) * int(p["heads"]), int(p["seq_q"]), int(p["seq_kv"]),
                              bool(p.get("causal")), device, eff)


def row_optimizer(row: Row) -> tuple[str, str]:
    """(optimizer kind, implementation) of an optimizer row; rows from before implementations were
    recorded carry only ``fused`` (True: fused, else the for-loop PyTorch picks on a CPU)."""
    p = row.params
    impl = p.get("impl") or ("fused" if p.get("fused") else "for-loop")
    return str(p["optimizer"]), str(impl)


def row_conv_layout_bytes(row: Row) -> float:
    """Activation bytes a conv row's NCHW tensors put through layout reorders, as ``op_cost`` counts a
    graph conv's: input + output per phase, two phases (dX, dW) in a backward row; 0 for other rows
    and for grouped convolutions (their own curve holds it)."""
    if row.bench != "conv2d" or int(row.params["groups"]) != 1:
        return 0.0
    return activation_bytes(row.params, DTYPE_BYTES[row.dtype]) * (1 if row.phase == "fw" else 2)


def row_attention_factor(row: Row, device: Device) -> float:
    """Executed over counted work of a causal attention row: the row counts the kept triangle
    (``counts.counted_causal_fraction``), the device's kernel executes what a graph's fused causal
    attention executes there (``op_cost.causal_executed_fraction``: on a CPU, whole 512-key blocks);
    1 for other rows."""
    p = row.params
    if row.bench != "sdpa" or not p.get("causal"):
        return 1.0
    sq, skv = int(p["seq_q"]), int(p["seq_kv"])
    return causal_executed_fraction(sq, skv, device) / counted_causal_fraction(sq, skv, True)


def row_agrad_factor(row: Row, eff: Efficiency) -> float:
    """Executed-work multiplier of a conv row's activation-gradient part (op_cost does the same for a
    graph's conv ops: ``strided_agrad_factor``)."""
    if row.bench != "conv2d":
        return 1.0
    return strided_agrad_factor(int(row.params["stride"]) ** 2, eff)


def predict_collective(row: Row, bandwidth_bytes_per_s: float, latency_s: float, eff: Efficiency) -> float:
    """Predicted seconds of a collective row on a one-dimension switch of ``world_size`` ranks whose
    per-rank per-direction bandwidth and per-step latency are the (fitted) link's."""
    from simtrain.cost.collectives import LogicalTopology, collective_time
    topo = LogicalTopology.single(int(row.params["world_size"]), bandwidth_bytes_per_s, latency_s,
                                  kind="switch", tier=str(row.params.get("backend", "link")))
    return collective_time(row.bench, row.bytes_moved, topo, efficiency=eff).seconds
