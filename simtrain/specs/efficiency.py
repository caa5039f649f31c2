"""Efficiency parameters of a device: data, not code. Defaults per device kind live in
hardware_specs/efficiency/<kind>.yaml; a device may carry its own block; st.calibrate fits them."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from simtrain.glossary import DType, OpClass
from simtrain.specs.base import Seconds, Spec

__all__ = ["AttentionKernel", "ComputeCurve", "Efficiency", "Fraction"]

Fraction = Annotated[float, Field(gt=0, le=1)]


# ----------------------------------------------------------------------------------------------
class ComputeCurve(Spec):
    """Achieved fraction of peak as a function of op size: ``peak_fraction · f / (f + half_flops)``.

    ``peak_fraction`` is the large-op ceiling (for matmuls: max achievable matmul FLOP/s over the
    datasheet peak, "MAMF"); ``half_flops`` is the op size (FLOPs) at which half the ceiling is reached.
    """

    peak_fraction: Fraction
    half_flops: Annotated[float, Field(ge=0)] = 0.0
    half_rows: Annotated[float, Field(ge=0, le=1e9)] = 0.0
    """Rows of the (implicit) GEMM at which a matrix op reaches half its rate, whatever its FLOPs: the
    rate is further scaled by ``m / (m + half_rows)``, m the GEMM's rows (a conv's N·P·Q output
    positions: what a CPU conv kernel blocks over and its dW reduces over, so a conv on a 2×2 feature
    map runs slowly however many channels it has). 0: no such term."""
    half_depth: Annotated[float, Field(ge=0, le=1e9)] = 0.0
    """Reduction length k of the (implicit) GEMM at which a matrix op reaches half its rate: the rate
    is further scaled by ``k / (k + half_depth)`` (each output tile is loaded and stored once per k
    FMAs, so a short reduction (a 1×1 conv over few channels; depthwise, k = 9) spends its time on
    loads and stores; the roofline of the register tile, Williams et al. CACM 2009). 0: no such term."""
    panel_bytes_per_s: Annotated[float, Field(ge=0, le=1e15)] = 0.0
    """Rate at which a matrix kernel packs the operand every output row shares: each call adds
    ``k · n · batch · dtype_bytes / panel_bytes_per_s`` seconds to its compute leg, whatever its rows.
    A blocked GEMM copies the weight panel B (k × n) into a contiguous buffer once per call before its
    inner kernel runs, and that copy is amortised over the call's m rows only (Goto & van de Geijn, ACM
    TOMS 34(3), 2008, §4-5); the weight gradient writes a k × n output after a reduction of m, the same
    bytes. So a 16-row GEMM against a 4096-wide weight runs far below the rate of a square one while
    a 4096-row GEMM against a 64 × 64 weight does not: a ramp in the rows cannot tell the two apart,
    and slows a memory-bound matrix-vector product's compute leg instead of adding its copy. 0: no
    such term (a GPU's tensor-core kernels stream their tiles from HBM inside the kernel)."""


class AttentionKernel(Spec):
    """Achieved throughput of one fused-attention kernel family on one device.

    Fraction of the dense matrix peak, on the FLOPs the kernel executes (flash-attention benchmark
    convention, components.md §2: forward 4·B·S²·H·D, halved when causal; backward 2.5 × forward,
    five matmuls including the recomputed QKᵀ), as a function of the sequence length:
    ``fw_peak_fraction · s / (s + half_seq)`` (forward) and the same with ``bw_peak_fraction``
    (backward). Causal kernels skip the masked blocks but fill the machine later: their ramp is
    ``causal_half_seq`` (defaults to ``half_seq``).
    """

    fw_peak_fraction: Fraction
    bw_peak_fraction: Fraction
    half_seq: Annotated[float, Field(ge=0, le=1e7)] = 0.0
    causal_half_seq: Annotated[float, Field(ge=0, le=1e7)] | None = None
    source: str = "unsourced"

    def fraction(self, phase: str, seq: int, causal: bool) -> float:
        """Achieved fraction of peak for ``phase`` ("fw" or a backward phase) at sequence ``seq``."""
        half = self.causal_half_seq if (causal and self.causal_half_seq is not None) else self.half_seq
        ceiling = self.fw_peak_fraction if phase == "fw" else self.bw_peak_fraction
        return ceiling * seq / (seq + half)


class Efficiency(Spec):
    """Efficiency parameters of one device (defaults per kind; fitted by ``st.calibrate``)."""

    library_kind: ClassVar[str | None] = "efficiency"

    compute: dict[OpClass, ComputeCurve]
    memory_bandwidth_fraction: Fraction = 0.85
    memory_half_bytes: Annotated[float, Field(ge=0)] = 0.0
    launch_overhead_s: Seconds = 0.0
    launch_async: bool = False
    """The host queues kernels ahead of the device (CUDA streams): an op costs max(its device time, the
    host's time to issue it) instead of their sum, so a small kernel is hidden by its own issue and a
    large one hides the host (cost/compute.py ``issue_bound``). Set by ``st.calibrate`` from CUDA
    measurements, whose timed calls run back to back exactly so; False keeps a CPU's serial sum, where
    the thread that issues an op also runs it."""
    step_host_overhead_s: Seconds = 0.0
    """Host time once per training step outside every op: ``zero_grad``, the autograd engine's start and
    finish, the training loop's own Python. Charged with the optimizer step and never overlapped: a
    step that ends in a synchronisation (a logged loss, a timed step) starts the next one on an empty
    device queue. Measured by the validation suite's overhead chains (validation/overhead.py: the
    intercept of their time against their launches; 0.72 ms on the H200 machine's host)."""
    class_launch_overhead_s: dict[OpClass, Seconds] = Field(default_factory=dict)
    backward_class_launch_overhead_s: dict[OpClass, Seconds] = Field(default_factory=dict)
    """The same for a class's backward kernels, which the autograd engine issues from C++ rather than a
    Python call each; absent classes issue their backward kernels at their forward figure. Fitted from
    CUDA measurements' backward rows, as ``launch:<class>@bw``."""
    """The host's time to issue one kernel of an op class where it differs from ``launch_overhead_s``
    (cost/compute.py ``launch_seconds``). Fitted per class from CUDA measurements, whose small rows sit
    on the host's issue time instead of the kernel's: on an H200 host, timed back to back, an
    elementwise op issued every ~10 µs, a GEMM every ~22 µs and a convolution every 15–50 µs (cuDNN's
    plan lookup), so one shared figure mispriced every class but one."""
    link_bandwidth_fraction: Fraction = 0.8
    link_latency_scale: Annotated[float, Field(gt=0, le=1000)] = 1.0
    link_half_bytes: Annotated[float, Field(ge=0, le=1e12)] = 0.0
    """Per-rank chunk size (bytes) at which a collective reaches half of its large-message bus
    bandwidth (NCCL's protocol / channel ramp, components.md §4a). A ring / pairwise collective of S
    bytes over n ranks moves chunks of S/n, so its bandwidth is scaled by ``c / (c + link_half_bytes)``
    with c = S/n (c = S for sends and broadcasts): the same ramp costs a 2-rank group less than an
    8-rank one at one message size."""
    link_fractions: dict[str, Fraction] = Field(default_factory=dict)
    """Achieved fraction of the per-direction rate on particular links, by link library name
    (e.g. ``ib-hdr``: NCCL reaches 96 % of the NICs' rate across nodes, components.md §4c, against
    ≈ 75 % of NVLink inside an A100 node); links not named use ``link_bandwidth_fraction``."""
    sustained_clock_fraction: Fraction = 1.0
    """Sustained clock under a training load over the clock the datasheet peak assumes (power and
    thermal limits, components.md §8); scales every compute peak."""
    dtype_peak_fraction: dict[DType, Fraction] = Field(default_factory=dict)
    """Large-GEMM ceiling of matmuls computed in a dtype, where it differs from the ``matmul`` curve's
    ``peak_fraction`` (fitted on bf16): replaces that ceiling, in every phase, for MATMUL ops of that
    dtype (cost/ceilings.py ``matmul_ceiling``); the curve's ramps and fixed cost stay. Keys are dtype
    names (fp8, bf16, ...). An fp8 GEMM does not reach the bf16 share of its doubled datasheet peak:
    sustained cuBLASLt fp8 GEMMs on an H100 SXM run ~1,230-1,280 TFLOP/s, 0.62-0.65 of 1,979, against
    0.70-0.73 of 989 in bf16 (the per-tile scaling and the narrower data path feed the tensor cores
    less well), so the bf16 ceiling times the fp8 peak overstated fp8 matmuls by ~25 %. Convolution
    and attention keep their own curves. Empty: every dtype at the curve's ceiling."""
    attention_kernels: dict[str, AttentionKernel] = Field(default_factory=dict)
    """Fused-attention kernel families measured on this device (cudnn, fa3, fa2, sdpa, triton); a
    stack picks one by name, and a family missing here falls back to the ``attention`` curve."""
    flash_tiles: bool = False
    """The ``attention`` curves' ``half_flops`` is per tile of PyTorch's CPU flash-attention kernel (one
    block of queries against one block of 512 keys, cost/attention_work.py ``cpu_flash_tiles``) rather than per
    call: each tile pays a fixed cost (two small GEMM calls, the running-softmax rescale of its rows)
    besides its FLOPs, so a call of many short tiles (short sequences, many heads) runs below the rate of
    one with the same FLOPs in few long ones. Set by ``st.calibrate`` on a CPU; False (per call) in
    profiles fitted before, which keep their predictions."""
    fixed_cost_unramped: bool = False
    """The curves' ``half_flops`` is a fixed cost per call (per tile) that the ``half_rows`` and
    ``half_depth`` ramps do not multiply: t = F / (rate · ramps) + half_flops / rate. The ramps price work
    done at a lower rate (a register tile with few rows filled, an output tile stored every few
    multiply-adds), which grows with the FLOPs; the fixed cost (dispatch, packing setup, the thread
    team) does not. Multiplied, a 4 × 16 × 16 GEMM was priced at ~11.7 µs against ~2 µs timed here.
    Set by ``st.calibrate``; False in profiles fitted before, which keep their predictions."""
    cache_bytes: Annotated[float, Field(ge=0, le=1e12)] = 0.0
    """Capacity of the on-chip cache tier streaming ops may hit (a CPU's last-level cache); 0: one tier.
    An op moving B bytes finds h = min(1, cache_bytes / B) of them in cache (the producer's last
    ``cache_bytes`` of output are still resident) at the streaming bandwidth, and the rest at
    ``cache_miss_bandwidth_fraction`` of it (cost/compute.py ``memory_seconds``). Calibrated: the
    effective capacity the copies over sizes show (fitted on them alone, calibrate/fit_compute.py
    ``_cache_tier``), started from the size sysfs reports (on a shared VM other tenants hold part of
    it: 12–42 MiB fitted against 32 MiB reported)."""
    cache_miss_bandwidth_fraction: Fraction = 1.0
    """Bandwidth of bytes that miss ``cache_bytes``, as a fraction of the streaming bandwidth."""
    cache_hit_exponent: Annotated[float, Field(ge=1, le=8)] = 1.0
    """k of the share a stream past the cache still finds there, h = (cache_bytes / B)^k. 1 keeps the
    producer's last ``cache_bytes`` resident: the EPYC's copies follow it (512 MiB moved: 36.5 GB/s
    predicted, 35.6 measured). A cache that keeps almost nothing of a stream longer than itself (LRU
    streamed past its size) is a large k: a Xeon VM's copies fell from 46 to 23 GB/s between 64 and
    128 MiB moved and stayed at 23 GB/s to 512 MiB, where k = 1 predicts 14.6 (docs/own-device.md,
    "A second machine"). Fitted with the tier on the copy rows (calibrate/fit_compute.py ``_cache_tier``)."""
    first_touch_bytes_per_s: Annotated[float, Field(ge=0, le=1e15)] = 0.0
    """Rate at which fresh pages are faulted in and zeroed on first write; 0: not costed. Applies to
    each tensor an op writes of at least ``first_touch_min_bytes`` (calibrate/bench_memory.py)."""
    first_touch_min_bytes: Annotated[float, Field(ge=0, le=1e15)] = 0.0
    conv_layout_bytes_per_s: Annotated[float, Field(ge=0, le=1e15)] = 0.0
    """Rate at which a convolution over NCHW activations (PyTorch's default memory format) converts them
    to and from its kernel's own layout, per byte of the activation tensors one phase reads and
    writes; 0: not costed. oneDNN's CPU convolutions run on blocked layouts (nChw8c / nChw16c) or
    NHWC, so an NCHW input and output each get a reorder pass outside the kernel: a memory pass that
    does not overlap the compute, worth most on 1×1 and depthwise convolutions over large maps (few
    FLOPs per byte). Measured as NCHW minus channels-last forward time (calibrate/bench_memory.py)."""
    rng_draws_per_s: Annotated[float, Field(ge=0, le=1e15)] = 0.0
    """Random numbers per second the framework draws for dropout masks; 0: not costed. PyTorch on a
    CPU fills the mask with ``bernoulli_``, one Mersenne-Twister draw per element on one thread
    (≈ 8 ns each on an EPYC core: slower than the multiply it feeds by ~50×), before the elementwise
    pass; a GPU draws Philox numbers inside the memory-bound dropout kernel (not a separate cost).
    Charged on each op's ``random_draws`` attribute in its forward (calibrate/bench_memory.py)."""
    step_call_overhead_s: Annotated[float, Field(ge=0, le=1e-1)] = 0.0
    """Extra seconds each kernel launch costs inside a training step over the benchmarks' back-to-back
    calls: each op instance last ran a whole step earlier, so its code, branch history and address
    translations are fetched again (calibrate/bench_memory.py: an 8×64 @ 64×64 matmul 12 µs slower
    after 20 ms of other kernels, on this project's EPYC VM). Charged on every launch of the model's
    ops; not on the optimizer's, which repeat over the parameter tensors back to back as in their
    bench. 0: not costed (bench rows never pay it)."""
    step_call_half_gap_s: Annotated[float, Field(ge=0, le=1)] = 0.0
    """How the in-step costs measured after a 20 ms gap (``step_call_overhead_s``, ``step_optimizer_s``)
    depend on the time g since a kernel of the same signature last ran: × φ(g) / φ(20 ms) with
    φ(g) = g / (g + h), h this field, g held at 60 ms at most (``cost.compute.cold_call_scale``).
    Measured on this project's EPYC VM (the 8×64 @ 64×64 matmul after 0.2 / 1 / 5 / 20 / 60 ms of
    other small kernels: +0.6 / 2.6 / 6.1 / 11.1 / 12.6 µs, h ≈ 5 ms), while after 30 ms of the same
    matmul on other tensors it was +1.5 µs: what goes cold is the kernel's code path at its shapes,
    not its data. So a layer repeated many times in a short step launches nearly hot and an op run
    once per long step pays the full cost; the cost layer takes an op's gap as the micro-batch's time
    over the number of ops of its signature (``parallel.cold_calls``). 0: every launch pays
    ``step_call_overhead_s`` (profiles fitted before the bench sampled several gaps)."""
    step_cold_bytes_per_s: Annotated[float, Field(ge=0, le=1e15)] = 0.0
    """Rate at which an op inside a step streams the bytes nobody touched since the step before
    (weights, saved activations, a second operand, the memory its output goes to): all it moves but
    the tensor the op just before it wrote (``cost.op_cost``), and the optimizer's whole pass. Measured
    on data a step-long gap has pushed out of every cache (the gap reads twice the last-level cache
    first), as a step's own weights and activations do. What these bytes cost over the warm memory
    model is added to the phase's roofline, not overlapped with its compute
    (``cost.op_cost.cold_stall_seconds``). 0: the step is costed with the benchmarks' own (cache-warm)
    memory model (calibrate/bench_memory.py)."""
    step_optimizer_s: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Fixed cost of one ``optimizer.step()`` inside a training step beyond what the optimizer benches
    time back to back: its Python and dispatch code, cold after the forward and backward (≈ 0.4 ms
    here, whatever the tensor count; calibrate/bench_memory.py). Where set (> 0) the update's stream is
    priced at the memory model the optimizer benches fit — they time this very kernel on buffers larger
    than the cache, and ``opt.step()`` after each zoo model's backward ran at it (AdamW within −7 to
    +6 %) — instead of at ``step_cold_bytes_per_s`` (1.6–2.1× too slow for it); 0: a profile fitted
    before, which keeps the cold rate for the whole pass."""
    rank_jitter_sigma: Annotated[float, Field(ge=0, le=2)] = 0.0
    """σ of the lognormal (mean 1) factor by which one rank's time for the same work varies from step
    to step (cost/variability.py). Ranks of a synchronous job meet at the gradient sync, so each step
    lasts as long as its slowest rank: the cost layer adds ``E[max of N ranks] − 1`` times a rank's
    forward + backward work as a wait inside the sync (two ranks: 2·Φ(σ/√2) − 1, ≈ 0.56·σ). Measured
    by ranks sharing a host running the same work in lockstep (calibrate/collectives_bench.py,
    ``st.measure(colocated=N)``); 0: ranks finish together (datasheet devices)."""
    backward_compute: dict[OpClass, ComputeCurve] = Field(default_factory=dict)
    """Curves for the backward phases (activation- and weight-gradient) of classes whose backward
    kernels run at a different rate from their forward (a CPU's oneDNN convolution backward: other
    loop orders, reductions over the batch for dW); classes not named use ``compute``."""
    strided_agrad_exponent: Annotated[float, Field(ge=0, le=2)] = 0.0
    """γ in the work multiplier (s_h·s_w)^γ of a stride-s convolution's activation gradient. dX of a
    strided conv is a transposed conv; run as a direct conv over the zero-inserted gradient it executes
    s_h·s_w times the useful MACs (γ = 1; Dumoulin & Visin 2016, "A guide to convolution arithmetic",
    §4.5), a dedicated strided-dgrad kernel skips the zeros (γ = 0, the default)."""
    kind_compute: dict[str, ComputeCurve] = Field(default_factory=dict)
    """Curves for op kinds whose kernels run at another rate than the rest of their class, keyed by
    ``Op.kind`` (forward) and ``kind + "@bw"`` (backward phases). On a CPU, max pooling over NCHW is a
    scalar loop with arg-max bookkeeping per window element (ATen ``max_pool2d_with_indices``), far
    below the vectorised softmax that calibrates the reduction class. Kinds not named use the class."""
    optimizer_tensor_overhead_s: dict[str, Annotated[float, Field(ge=0, le=1.0)]] = Field(default_factory=dict)
    """Host seconds per parameter tensor of one optimizer step beyond its kernels' launches, keyed
    ``"<optimizer>/<impl>"`` (e.g. ``"adamw/for-loop"``; ``cost/optimizer.py tensor_overhead_key``); 0
    for keys not named. PyTorch's for-loop AdamW runs a dozen Python statements per tensor around its
    nine kernels (step counter, bias corrections, hyper-parameter reads), and its CPU fused path sets up
    each tensor in C++: the per-kernel launch overhead fitted on single ops leaves that out. Fitted on the
    optimizer bench's 8, 32 and 256 tensor rows; on the shared 2-core EPYC it is 20–50 µs for the
    for-loop AdamW, 4–15 µs fused, about 1 µs for SGD (residuals before the term existed)."""
    optimizer_step_overhead_s: dict[str, Annotated[float, Field(ge=0, le=1.0)]] = Field(default_factory=dict)
    """Host seconds of one optimizer step beyond its per-tensor work, kernels and stream, keyed as
    ``optimizer_tensor_overhead_s``: ``optimizer.step()``'s own Python (the param-group loop, state and
    hyper-parameter gathering, the fused op's dispatch) once per step whatever the tensor count. Back to
    back here a fused AdamW step over 16 tensors of 1024 elements took 115 µs and a fused SGD-with-
    momentum one 61 µs, about 40 µs over stream and per-tensor work. Fitted jointly with the per-tensor
    overhead where a key's bench rows span three tensor counts or more (4 to 256); 0 elsewhere."""
    source: str = "default"
    extra: dict[str, float] = Field(default_factory=dict)

    def curve(self, op_class: OpClass) -> ComputeCurve:
        try:
            return self.compute[op_class]
        except KeyError:
            from simtrain.errors import MissingRuleError
            raise MissingRuleError(f"efficiency has no curve for op class {op_class!s}") from None

    def phase_curve(self, op_class: OpClass, phase: str, kind: str | None = None) -> ComputeCurve:
        """The curve of ``op_class`` in ``phase`` (fw, agrad, wgrad, bw): the backward one when given;
        ``kind``'s own curve (``kind_compute``) when there is one for that phase; a kind measured only
        forward runs its backward at its forward curve (the same loop over the same layout)."""
        if kind is not None and self.kind_compute:
            own = self.kind_compute.get(kind if phase == "fw" else kind + "@bw")
            if own is None and phase != "fw":
                own = self.kind_compute.get(kind)
            if own is not None:
                return own
        if phase != "fw" and op_class in self.backward_compute:
            return self.backward_compute[op_class]
        return self.curve(op_class)


