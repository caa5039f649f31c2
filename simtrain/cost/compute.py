"""Time of one op on one device: a roofline with efficiency curves, matrix-unit effects and launch overhead.

    t = max( flops / (peak(dtype) · e_c(flops) · a(gemm)) + t_panel,  bytes / (bw_main · e_m(bytes)) ) + t_launch

* ``peak(dtype)``: the dense datasheet peak of the dtype the op runs in (matrix classes), or the
  device's vector rate (elementwise / norm / reduction / embedding / memory classes);
* ``e_c(f) = peak_fraction · f / (f + half_flops) · m / (m + half_rows) · k / (k + half_depth)``: large
  ops approach the
  class ceiling (for matmuls: max achievable matmul FLOP/s / peak, "MAMF", hardware.md §1c); small
  ops do not fill the machine (the chapter's "batch 16 vs 32" effect); a GEMM with few rows m (a conv
  on a small feature map: m = N·P·Q) under-fills it whatever its FLOPs (``half_rows``), and one with
  a short reduction k spends its time loading and storing its output tile (``half_depth``; both 0 by
  default: no effect); a weight gradient is the GEMM with m and n swapped and reduces over m;
  backward phases use the efficiency's backward curve where it has one;
* ``t_panel = k · n · batch · dtype_bytes / panel_bytes_per_s``: the GEMM's shared operand packed once
  per call, however few rows share it (:func:`panel_seconds`; 0 by default);
* ``a(gemm)``: matrix-unit geometry. Each GEMM dim is padded up to the unit's tile (tensor-core tile
  / TPU MXU: the chapter's "32×32 alignment" effect) and the output tiles run in waves over
  ``parallel_tiles`` units (SMs); a partial last wave idles the rest ("wave quantization");
* ``e_m(b) = memory_bandwidth_fraction · b / (b + memory_half_bytes)``: achievable streaming
  bandwidth (≈90 % of the datasheet, hardware.md §1c) and the latency cost of small transfers;
* ``t_launch``: per-op launch / dispatch overhead;
* ``sustained_clock_fraction`` scales every compute peak (power / thermal limits, components.md §8),
  and so does a device's ``power_limit_w`` through :func:`power_clock_fraction` (the cube law);
* a matmul in a dtype the efficiency gives its own ceiling (``Efficiency.dtype_peak_fraction``, e.g.
  fp8) runs at that ceiling instead of the curve's ``peak_fraction`` (:func:`matmul_ceiling`).

Everything here is a pure function of floats and frozen specs, so estimate, simulate and calibrate
share it (calibration fits exactly this function).
"""

from __future__ import annotations

import functools
import math

from simtrain.cost.ceilings import (
    EMULATED_SOURCE,
    compute_clock_fraction,
    matmul_ceiling,
    power_clock_fraction,
)
from simtrain.errors import SimtrainError
from simtrain.glossary import DTYPE_BYTES, DType, OpClass
from simtrain.graph.op import Gemm
from simtrain.specs.hardware import ComputeCurve, Device, Efficiency

__all__ = ["op_seconds", "op_device_seconds", "issue_bound", "launch_seconds", "attention_kernel_seconds", "matrix_peak_flops_per_s", "alignment_factor", "device_efficiency",
           "MATRIX_CLASSES", "compute_seconds", "memory_seconds", "dataflow_efficiency",
           "streaming_bandwidth_bytes_per_s", "cache_miss_slowdown", "first_touch_seconds", "conv_layout_seconds",
           "strided_agrad_factor", "panel_seconds", "cold_call_scale", "cold_fraction", "COLD_REFERENCE_GAP_S", "COLD_GAP_CAP_S",
           "power_clock_fraction", "compute_clock_fraction", "matmul_ceiling", "EMULATED_SOURCE"]

MATRIX_CLASSES = frozenset({OpClass.MATMUL, OpClass.CONV, OpClass.ATTENTION})
COLD_REFERENCE_GAP_S = 0.02
"""Gap of other kernels after which a profile's ``step_call_overhead_s`` and ``step_optimizer_s`` were
measured (calibrate/bench_memory.py): the order of a CPU training step."""
COLD_GAP_CAP_S = 0.06
"""Longest gap the bench samples; :func:`cold_call_scale` holds its value beyond it rather than extend
the power law past the data (the cost must level off once everything is cold)."""

_DTYPE_FALLBACK = {DType.TF32: DType.FP32, DType.FP16: DType.BF16, DType.BF16: DType.FP16}


def device_efficiency(device: Device) -> Efficiency:
    """The device's own efficiency block, else the documented default of its kind; on a layer-pipelined
    FPGA, that profile as a dataflow design sees it (:func:`dataflow_efficiency`)."""
    eff = device.efficiency if device.efficiency is not None else _kind_default(device.kind.value)
    if device.execution == "layer_pipelined":
        return dataflow_efficiency(eff)
    return eff


def dataflow_efficiency(eff: Efficiency) -> Efficiency:
    """A layer-pipelined (dataflow) design: every layer has its own engine, its DSP share sized to its
    work, so a small op fills its engine (no ``half_flops`` ramp: batch-1 efficiency is the ceiling),
    the pipeline is fixed in the fabric (no per-op launch), and operands sit in BRAM/URAM next to the
    DSPs (no ``memory_half_bytes`` latency ramp). Ceilings (``peak_fraction``) are kept. FINN
    (Umuroglu et al., FPGA 2017, §4) and hls4ml size each layer's engine this way."""
    compute = {cls: curve.model_copy(update={"half_flops": 0.0}) for cls, curve in eff.compute.items()}
    return eff.model_copy(update={"compute": compute, "launch_overhead_s": 0.0, "memory_half_bytes": 0.0,
                                  "source": f"{eff.source} (layer-pipelined dataflow)"})


def streaming_bandwidth_bytes_per_s(device: Device) -> float:
    """The tier ops stream their operands from: main memory, or on a layer-pipelined FPGA the on-chip
    BRAM/URAM tier, where the weights stay resident and activations pass layer to layer."""
    if device.execution == "layer_pipelined":
        return next(t for t in device.memory if t.level == "sram").bandwidth_bytes_per_s.value
    return device.memory_bandwidth_bytes_per_s


@functools.lru_cache(maxsize=16)
def _kind_default(kind: str) -> Efficiency:
    from simtrain.specs.library import load_efficiency_default
    return load_efficiency_default(kind)


def matrix_peak_flops_per_s(device: Device, dtype: DType) -> float:
    """Dense peak for matrix work in ``dtype``. tf32 without tensor cores runs at the fp32 rate;
    fp16 and bf16 stand in for each other only on devices whose datasheet gives one of them
    (e.g. a CPU), and a CPU without either runs them at its fp32 rate (PyTorch's CPU kernels accumulate
    16-bit inputs in fp32); any other missing dtype (fp8 without fp8 units) is an error, not a guess —
    cost/emulation.py adds it only when the config asks for emulation."""
    peak = device.peak(dtype)
    if peak is not None:
        return peak
    alt = _DTYPE_FALLBACK.get(dtype)
    if alt is not None and (dtype is DType.TF32 or device.kind.value == "cpu"):
        alt_peak = device.peak(alt)
        if alt_peak is not None:
            return alt_peak
    if device.kind.value == "cpu" and dtype in (DType.FP16, DType.BF16) and device.peak(DType.FP32) is not None:
        return device.peak(DType.FP32)  # CPUs without native 16-bit math compute in fp32 (the report says so)
    raise SimtrainError(f"device {device.name!r} has no dense peak for {dtype.value} "
                        f"(it lists {', '.join(d.value for d in device.peaks_flops_per_s)})")


def _padded(dim: int, tile: int) -> int:
    return -(-dim // tile) * tile


def alignment_factor(gemm: Gemm | None, m_rows: int, device: Device) -> float:
    """Useful fraction of matrix-unit work for a GEMM with ``m_rows`` rows (per-sample m × batch).

    Tile padding: useful m·n·k over padded m·n·k. Wave quantization: output tiles over
    ``ceil(tiles / parallel_tiles) · parallel_tiles`` slots. 1.0 when the device gives no geometry.
    """
    unit = device.matrix_unit
    if gemm is None or unit is None or unit.tile is None:
        return 1.0
    return _best_tile_efficiency(max(m_rows, 1), max(gemm.n, 1), max(gemm.k, 1), gemm.batch, tuple(unit.tile),
                                 unit.parallel_tiles)


def _on_matrix_unit(device: Device, dtype: DType) -> bool:
    """Whether ``dtype`` matrix work runs on the device's matrix unit, whose tiles it must fill: the unit
    lists a rate for it, or the device gives none at all (the tile geometry then covers every dtype).
    An H200's tensor cores list bf16, fp16, tf32, fp8 and int8, not fp32: true fp32 GEMMs run on the
    CUDA cores, whose thread blocks are no 128 × 128 tensor-core tile (an M = 1 GEMV was priced at 10×
    its time)."""
    unit = device.matrix_unit
    return unit is None or not unit.fma_per_clock_per_unit or dtype in unit.fma_per_clock_per_unit


@functools.lru_cache(maxsize=65536)
def _best_tile_efficiency(m: int, n: int, k: int, batch: int, tile: tuple[int, int, int], slots: int | None) -> float:
    """Cached: a calibration prices the same shapes at every step of its fit."""
    tm, tn, tk = tile
    # GEMM libraries pick among several output-tile shapes per problem; take the best of the
    # spec tile, its halves and its doubles in m and n (k granularity is fixed by the unit).
    shapes = {(tm, tn), (max(tm // 2, 1), tn), (tm, max(tn // 2, 1)), (max(tm // 2, 1), max(tn // 2, 1)),
              (2 * tm, tn), (tm, 2 * tn)}
    return max(_tile_efficiency(m, n, k, batch, a, b, tk, slots) for a, b in shapes)


def _tile_efficiency(m: int, n: int, k: int, batch: int, tm: int, tn: int, tk: int, slots: int | None) -> float:
    pad = (m * n * k) / (_padded(m, tm) * _padded(n, tn) * _padded(k, tk))
    if slots is None:
        return pad
    tiles = (_padded(m, tm) // tm) * (_padded(n, tn) // tn) * max(batch, 1)
    waves = math.ceil(tiles / slots)
    return pad * tiles / (waves * slots)


def _conv_lanes(gemm: Gemm | None, op_class: OpClass) -> Gemm | None:
    """A grouped conv's GEMM as its kernel tiles it: grouped and depthwise kernels (oneDNN's
    ``jit_uni_dw_conv``, cuDNN's grouped convs) put the output channels of all groups side by side in
    the vector / tile n dim instead of running G GEMMs of n = K/G (a depthwise n of 1 would pad 1 to
    the tile width): n·G columns, one batch."""
    if gemm is None or op_class is not OpClass.CONV or gemm.batch <= 1:
        return gemm
    return Gemm(gemm.m, gemm.n * gemm.batch, gemm.k, 1)


def _rows_and_depth(gemm: Gemm, m_rows: int, phase: str) -> tuple[float, float]:
    """(rows, reduction length) of the GEMM a phase runs. Forward Y = X·W: m_rows rows, reduction k.
    Weight gradient dW = Xᵀ·dY: the forward's n columns become its rows and it reduces over the
    forward's m_rows (a conv on a 2×2 map reduces dW over N·4 positions only). Activation gradient
    dX = dY·Wᵀ: m_rows rows, reduction n (a conv's dX is the transposed conv, reducing over K/G·R·S;
    taken as k, equal when C = K, since the GEMM record does not split k into channels and taps)."""
    if phase == "wgrad":
        return float(gemm.n), float(m_rows)
    return float(m_rows), float(gemm.k)


GROUPED_CONV_KIND = "grouped_conv"
"""The curve key of grouped convolutions (``Efficiency.kind_compute``), and of depthwise ones where a
profile has no :data:`DEPTHWISE_CONV_KIND` curve."""
DEPTHWISE_CONV_KIND = "depthwise_conv"
"""The curve key of depthwise convolutions: one output channel per group."""


def curve_kind(kind: str | None, op_class: OpClass, gemm: Gemm | None) -> str | None:
    """The kind whose curve prices a kernel: a grouped or depthwise convolution (its GEMM's batch is
    the group count) runs other kernels than a dense one. A depthwise one (one output channel per
    group, ``gemm.n`` = 1) is :data:`DEPTHWISE_CONV_KIND`: oneDNN's ``jit_uni_dw_conv`` streams
    channel blocks with R·S multiply-adds per output (≈ 2 FLOP per byte moved at 3×3), a memory-bound
    loop unlike the per-group GEMMs of a grouped one (:data:`GROUPED_CONV_KIND`; cuDNN likewise has
    separate depthwise kernels)."""
    if op_class is OpClass.CONV and gemm is not None and gemm.batch > 1:
        return DEPTHWISE_CONV_KIND if gemm.n == 1 else GROUPED_CONV_KIND
    return kind


def _priced_kind(eff: Efficiency, kind: str | None) -> str | None:
    """``kind``, or the grouped curve for a depthwise conv on a profile fitted before the depthwise
    curve existed (it has a grouped curve and no depthwise one)."""
    if kind == DEPTHWISE_CONV_KIND and DEPTHWISE_CONV_KIND not in eff.kind_compute:
        return GROUPED_CONV_KIND
    return kind


def compute_seconds(flops: float, op_class: OpClass, device: Device, dtype: DType, eff: Efficiency,
                    gemm: Gemm | None = None, m_rows: int = 1, phase: str = "fw", kind: str | None = None,
                    tiles: float = 1.0) -> float:
    """The compute leg of the roofline; ``phase`` picks the backward curve and ``kind`` the op kind's
    own curve where the efficiency has them (``Efficiency.kind_compute``; grouped convolutions:
    :func:`curve_kind`). ``tiles``: pieces the kernel runs one after another, each paying the curve's
    ``half_flops`` ramp on its own share of the FLOPs (a CPU flash attention's tiles:
    ``op_cost.flash_tiles``), so t = flops / rate + tiles · half_flops / rate; the rows and depth ramps
    scale the rate of the FLOPs, and of the fixed cost too unless ``eff.fixed_cost_unramped``."""
    if flops <= 0:
        return 0.0
    curve = eff.phase_curve(op_class, phase, _priced_kind(eff, curve_kind(kind, op_class, gemm)))
    matrix = op_class in MATRIX_CLASSES
    peak = matrix_peak_flops_per_s(device, dtype) if matrix else device.vector_peak_flops_per_s
    fixed_rate = peak * compute_clock_fraction(device, eff) * matmul_ceiling(curve, op_class, dtype, device, eff)
    # padding and wave quantization waste the FLOPs' slots, not the fixed cost: divided by the aligned
    # rate, a 2×8×8 GEMM's fixed cost came to milliseconds on an H200 (its tiles are 128×256)
    tiled = matrix and _on_matrix_unit(device, dtype)
    rate = fixed_rate * (alignment_factor(_conv_lanes(gemm, op_class), m_rows, device) if tiled else 1.0)
    ramps = 1.0
    if gemm is not None:
        rows, depth = _rows_and_depth(_conv_lanes(gemm, op_class), m_rows, phase)
        ramps = rows / (rows + curve.half_rows) * depth / (depth + curve.half_depth)
    fixed_flops = max(tiles, 1.0) * curve.half_flops
    fixed_s = fixed_flops / (fixed_rate if eff.fixed_cost_unramped else fixed_rate * ramps)
    return flops / (rate * ramps) + fixed_s + (panel_seconds(gemm, dtype, curve) if matrix else 0.0)


def panel_seconds(gemm: Gemm | None, dtype: DType, curve: ComputeCurve) -> float:
    """Seconds a matrix kernel spends packing the k × n operand its rows share, once per call (per
    GEMM of a batch): ``k · n · batch · dtype_bytes / curve.panel_bytes_per_s`` (``ComputeCurve``'s
    docstring); 0 without a GEMM geometry or a panel rate. Every phase of a linear layer moves that
    panel: forward and activation gradient pack the weight, the weight gradient writes it."""
    if gemm is None or curve.panel_bytes_per_s <= 0:
        return 0.0
    return gemm.k * gemm.n * gemm.batch * DTYPE_BYTES[DType(dtype)] / curve.panel_bytes_per_s


def attention_kernel_seconds(flops: float, phase: str, seq: int, causal: bool, kernel, device: Device,
                             dtype: DType, eff: Efficiency) -> float:
    """Compute leg of a fused-attention kernel from its measured family curve (``AttentionKernel``):
    ``flops`` are the FLOPs the kernel executes (components.md §2 convention)."""
    if flops <= 0:
        return 0.0
    peak = matrix_peak_flops_per_s(device, dtype) * compute_clock_fraction(device, eff)
    return flops / (peak * kernel.fraction(phase, seq, causal))


def memory_seconds(bytes_moved: float, device: Device, eff: Efficiency, working_set_bytes: float = 0.0) -> float:
    """The memory leg of the roofline (main-memory tier; on-chip on a layer-pipelined FPGA).
    ``working_set_bytes``: the bytes the op's data competes with for the cache tier when that is more
    than it moves itself (a backward op reads activations saved long before: the step's whole saved
    set, not just its own bytes, decides how much of them is still cached)."""
    if bytes_moved <= 0:
        return 0.0
    bw = streaming_bandwidth_bytes_per_s(device) * eff.memory_bandwidth_fraction
    return (bytes_moved + eff.memory_half_bytes) / bw * cache_miss_slowdown(max(bytes_moved, working_set_bytes), eff)


def cache_miss_slowdown(bytes_moved: float, eff: Efficiency) -> float:
    """Time multiplier of a streaming op that outgrows the cache tier: h + (1 − h) / f with
    h = (cache_bytes / bytes_moved)^k the share served from cache (k = 1: what the producing op left
    resident, its last ``cache_bytes`` of output; a larger ``cache_hit_exponent`` k: a policy that keeps
    less of a stream longer than the cache) and f = ``cache_miss_bandwidth_fraction`` the main-memory
    bandwidth relative to the cache-assisted streaming rate (the two-level average-access-time model,
    Hennessy & Patterson, Computer Architecture, 6th ed., §B.1).
    1.0 with no cache tier (``cache_bytes`` 0) or when everything fits."""
    if eff.cache_bytes <= 0 or bytes_moved <= eff.cache_bytes:
        return 1.0
    hit = (eff.cache_bytes / bytes_moved) ** eff.cache_hit_exponent
    return hit + (1.0 - hit) / eff.cache_miss_bandwidth_fraction


def strided_agrad_factor(stride: tuple[int, ...] | int | None, eff: Efficiency) -> float:
    """Executed-work multiplier (∏ stride)^γ of a convolution's activation gradient, γ =
    ``eff.strided_agrad_exponent`` (see its docstring): 1.0 for stride 1 or γ = 0."""
    if stride is None or eff.strided_agrad_exponent <= 0:
        return 1.0
    prod = 1
    for s in (stride,) if isinstance(stride, int) else stride:
        prod *= max(int(s), 1)
    return float(prod) ** eff.strided_agrad_exponent


def cold_call_scale(gap_s: float, eff: Efficiency) -> float:
    """Factor on the in-step costs measured at :data:`COLD_REFERENCE_GAP_S` for a kernel whose code last
    ran ``gap_s`` ago: φ(g) / φ(reference), φ(g) = g / (g + h), h = ``eff.step_call_half_gap_s``, g held
    at :data:`COLD_GAP_CAP_S` at most (a saturating loss of state: calibrate/bench_memory.py); 1.0 for h = 0."""
    half = eff.step_call_half_gap_s
    if half <= 0:
        return 1.0
    g = min(max(gap_s, 0.0), COLD_GAP_CAP_S)
    return cold_fraction(g, half) / cold_fraction(COLD_REFERENCE_GAP_S, half)


def cold_fraction(gap_s: float, half_gap_s: float) -> float:
    """φ(g) = g / (g + h): the share of a kernel's fully cold cost lost after ``gap_s`` of other work
    (the saturating curve calibrate/bench_memory.py fits and :func:`cold_call_scale` applies)."""
    return gap_s / (gap_s + half_gap_s)


def first_touch_seconds(tensor_bytes: float, eff: Efficiency) -> float:
    """Seconds to fault in and zero the fresh pages of one newly allocated tensor of ``tensor_bytes``:
    ``tensor_bytes / first_touch_bytes_per_s`` when the tensor is at least ``first_touch_min_bytes``
    (an allocator that maps it fresh each time; calibrate/bench_memory.py), else 0 (reused memory)."""
    if eff.first_touch_bytes_per_s <= 0 or tensor_bytes <= 0 or tensor_bytes < eff.first_touch_min_bytes:
        return 0.0
    return tensor_bytes / eff.first_touch_bytes_per_s


def conv_layout_seconds(activation_bytes: float, eff: Efficiency) -> float:
    """Seconds a convolution phase spends converting its NCHW activations (``activation_bytes`` read and
    written by the phase) to and from its kernel's layout: ``activation_bytes / conv_layout_bytes_per_s``;
    0 where the rate is not calibrated (``Efficiency.conv_layout_bytes_per_s``)."""
    if eff.conv_layout_bytes_per_s <= 0 or activation_bytes <= 0:
        return 0.0
    return activation_bytes / eff.conv_layout_bytes_per_s


def launch_seconds(op_class: OpClass | None, eff: Efficiency, phase: str = "fw") -> float:
    """The host's time to issue one kernel of ``op_class`` in ``phase``: a backward kernel's own figure
    where the efficiency has one (``Efficiency.backward_class_launch_overhead_s``); else the class's
    (``class_launch_overhead_s``), else the shared ``launch_overhead_s``."""
    if op_class is None:
        return eff.launch_overhead_s
    if phase != "fw" and op_class in eff.backward_class_launch_overhead_s:
        return eff.backward_class_launch_overhead_s[op_class]
    return eff.class_launch_overhead_s.get(op_class, eff.launch_overhead_s)


ISSUE_OVERLAP_P = 8.0
"""The p of :func:`issue_bound`'s p-norm: at equal device and issue times 2^(1/8) = 1.09 × either."""


def issue_bound(device_s: float, host_s: float, eff: Efficiency) -> float:
    """Seconds of work that takes ``device_s`` on the device after the host spent ``host_s`` issuing it:
    max of the two where the host runs ahead of the device (``Efficiency.launch_async``: back-to-back
    calls then overlap one call's issue with the previous one's kernels), else their sum."""
    if not eff.launch_async:
        return device_s + host_s
    hi = max(device_s, host_s)
    if hi <= 0:
        return 0.0
    # a smooth max (the p-norm, p = ISSUE_OVERLAP_P): near the crossover the queue runs dry now and
    # then, and a fit needs the gradient on both sides
    return hi * ((device_s / hi) ** ISSUE_OVERLAP_P + (host_s / hi) ** ISSUE_OVERLAP_P) ** (1.0 / ISSUE_OVERLAP_P)


def op_device_seconds(flops: float, bytes_moved: float, op_class: OpClass | str, device: Device,
                      dtype: DType | str = DType.FP32, gemm: Gemm | None = None,
                      efficiency: Efficiency | None = None, m_rows: int = 1, phase: str = "fw",
                      kind: str | None = None, tiles: float = 1.0) -> float:
    """Seconds one op execution keeps the device busy: roofline max of the compute and memory legs.

    ``m_rows`` is the GEMM's actual row count (per-sample ``gemm.m`` × micro-batch) for alignment;
    ``phase`` (fw, agrad, wgrad) selects the efficiency's backward curve for the backward phases;
    ``tiles`` as :func:`compute_seconds`. Zero-FLOP ops still pay for their bytes.
    """
    eff = efficiency or device_efficiency(device)
    t_compute = compute_seconds(flops, OpClass(op_class), device, DType(dtype), eff, gemm, m_rows, phase, kind, tiles)
    return max(t_compute, memory_seconds(bytes_moved, device, eff))


def op_seconds(flops: float, bytes_moved: float, op_class: OpClass | str, device: Device,
               dtype: DType | str = DType.FP32, gemm: Gemm | None = None,
               efficiency: Efficiency | None = None, m_rows: int = 1, phase: str = "fw",
               kind: str | None = None, tiles: float = 1.0) -> float:
    """Seconds of one op execution: :func:`op_device_seconds` with its launch overhead, added to it or,
    on a device the host runs ahead of, overlapped with it (:func:`issue_bound`)."""
    eff = efficiency or device_efficiency(device)
    t_device = op_device_seconds(flops, bytes_moved, op_class, device, dtype, gemm, eff, m_rows, phase, kind, tiles)
    return issue_bound(t_device, launch_seconds(OpClass(op_class), eff), eff)
