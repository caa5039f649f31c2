"""Fold the captured ATen events of one torch call into the counts of one simtrain Op, per sample.

Byte accounting (elements unless said otherwise; B = the example batch):

* an operator reads its tensor inputs and writes its outputs, a rule's ``io`` refining that
  (views and allocations move nothing, fills only write, gathers read what they write); a
  broadcast input reads min(elements, storage elements);
* parameters and buffers read → ``weight_read`` (per micro-batch, not divided by B); forward
  tensors that do not derive from the inputs (constants, functions of the weights) and backward
  weight-only parameter-sized tensors (dW, db) → ``weight_read`` / ``weight_write``;
* floating tensors → ``act_read`` / ``act_write`` ÷ B; other dtypes (int64 indices, bool masks) and
  fp32 statistics a rule names → ``fixed_read_bytes`` / ``fixed_write_bytes`` ÷ B;
* FLOPs ÷ B into the event's phase (or each rule part's phase); an operator none of whose inputs
  and none of whose outputs scales with the batch (on weights, constants or a loss scalar) keeps its
  FLOPs per micro-batch in the ``flops_per_batch`` attribute instead (not in ``flops``, which the
  cost layer multiplies by the micro-batch). The outputs matter: under a ``.sum()`` loss the output
  gradient is a scalar broadcast to the batch (one element behind it), so the last layer's
  ``dX = dY · W`` reads nothing batch-sized, yet writes B rows and does B times the work.

Saved tensors (deduplicated by storage at capture, parameters and buffers excluded) land on the call
that saved them first: floating storages → ``Saved.act`` (elements), 1-byte bool/uint8 →
``Saved.mask``, other integers and named fp32 statistics → ``Saved.fixed_bytes``; storages that do
not scale with the batch (one element, constants, batch-norm statistics, a loss's total weight)
→ the ``stats_bytes_per_batch`` attribute, not ``saved``.

What this measures, and its gaps (it equals ``saved_tensors_hooks`` deduplicated by storage):

* views and aliasing: a saved view counts its whole storage, once (q, k, v split from one qkv
  output are one storage; a saved slice keeps its parent alive, so the parent is what is counted);
* parameters and buffers saved by reference (``Wᵀ`` for a linear, batch-norm running statistics)
  are model state, not activation memory: excluded;
* on the CPU, dropout is ``bernoulli_`` + ``mul`` and saves a float mask (4 B per element in fp32),
  where CUDA's ``native_dropout`` saves a 1-byte bool mask — the capture reports what ran;
* tensors a custom ``autograd.Function`` keeps as ``ctx`` attributes (not ``save_for_backward``)
  are invisible to the hooks and to this count; so are the allocator's rounding and caching;
* under autocast, the low-precision copy of a weight a matmul saves is counted as an activation
  (per sample) although it does not scale with the batch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from simtrain.graph.aten.registry import AtenCost
from simtrain.graph.capture.events import AtenEvent, SavedRecord, TensorMeta
from simtrain.graph.capture.phase import BackwardPhases
from simtrain.graph.op import PhaseCounts, Saved

__all__ = ["OpCounts", "fold_event", "fold_saved"]

_PHASES = ("fw", "agrad", "wgrad")
_MASK_DTYPES = frozenset({"bool", "uint8", "int8"})


def _pc(d: dict[str, float]) -> PhaseCounts:
    return PhaseCounts(d.get("fw", 0.0), d.get("agrad", 0.0), d.get("wgrad", 0.0))


@dataclass
class OpCounts:
    """Mutable per-sample tallies of one op while its events are folded in."""

    batch: int
    flops: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    act_read: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    act_write: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    weight_read: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    weight_write: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    fixed_read: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    fixed_write: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    aten_flops: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    flops_per_batch: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """FLOPs of work that does not scale with the batch (on weights or constants only)."""
    aten_flops_per_batch: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    saved: Saved = field(default_factory=Saved)
    random_draws: float = 0.0
    """Random numbers drawn in the forward pass, per sample (dropout masks)."""
    stats_bytes: float = 0.0
    stats_bytes_per_batch: float = 0.0
    kernel_calls: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """ATen calls that do work (not views, not allocations) per phase: each one a kernel the host issues
    (a backward with parts, e.g. ``convolution_backward``, one per part it produces)."""

    def fields(self) -> dict:
        return dict(flops=_pc(self.flops), act_read=_pc(self.act_read), act_write=_pc(self.act_write),
                    weight_read=_pc(self.weight_read), weight_write=_pc(self.weight_write),
                    fixed_read_bytes=_pc(self.fixed_read), fixed_write_bytes=_pc(self.fixed_write),
                    saved=self.saved)

    @property
    def busy(self) -> bool:
        return any(sum(d.values()) for d in (self.flops, self.act_read, self.act_write, self.weight_read,
                                            self.weight_write, self.fixed_read, self.fixed_write)) or \
            self.saved.bytes(1.0) > 0 or self.stats_bytes_per_batch > 0 or sum(self.flops_per_batch.values()) > 0

    # --- bytes ---------------------------------------------------------------------------------
    def read(self, phase: str, m: TensorMeta, per_mb: bool) -> None:
        n = m.footprint
        if per_mb:
            self.weight_read[phase] += n
        elif m.floating:
            self.act_read[phase] += n / self.batch
        else:
            self.fixed_read[phase] += n * m.itemsize / self.batch

    def write(self, phase: str, m: TensorMeta, per_mb: bool, stat: bool) -> None:
        n = m.numel
        if per_mb:
            self.weight_write[phase] += n
        elif m.floating and not stat:
            self.act_write[phase] += n / self.batch
        else:
            self.fixed_write[phase] += n * m.itemsize / self.batch


def _per_mb_fw(m: TensorMeta) -> bool:
    """A forward tensor is per micro-batch when it is model state, does not derive from the
    inputs, or is a single element (a loss value, or a scalar broadcast to any shape)."""
    return m.model_state or not m.batch or m.footprint <= 1


def _named(ev: AtenEvent, names: tuple[str, ...]) -> list[TensorMeta]:
    out: list[TensorMeta] = []
    for n in names:
        v = ev.args.get(n)
        if isinstance(v, TensorMeta):
            out.append(v)
        elif isinstance(v, list):
            out.extend(t for t in v if isinstance(t, TensorMeta))
    return out


def _fold_piece(acc: OpCounts, ev: AtenEvent, cost: AtenCost, phase: str, flops: float,
                reads: list[TensorMeta], writes: list[tuple[int, TensorMeta]], per_mb) -> None:
    # no input and no output scales with the batch (see the module docstring: a broadcast dY)
    fixed = all(per_mb(m) for m in ev.inputs) and all(per_mb(m) for _, m in writes)
    if fixed and flops:
        acc.flops_per_batch[phase] += flops
        acc.aten_flops_per_batch[(ev.name, phase)] += flops
    elif flops:
        acc.flops[phase] += flops / acc.batch
        acc.aten_flops[(ev.name, phase)] += flops / acc.batch
    if cost.io in ("view", "none"):
        return
    if cost.io != "write":
        if cost.act_read is not None and fixed:
            acc.weight_read[phase] += cost.act_read
        elif cost.act_read is not None:
            acc.act_read[phase] += cost.act_read / acc.batch
        else:
            for m in reads:
                acc.read(phase, m, per_mb(m))
    for j, m in writes:
        acc.write(phase, m, per_mb(m) or j in cost.mb_stats, j in cost.stats)


def _count_kernels(acc: OpCounts, ev: AtenEvent, cost: AtenCost, phases: BackwardPhases) -> None:
    if cost.io in ("view", "none"):
        return
    if ev.phase == "fw":
        acc.kernel_calls["fw"] += 1
    elif cost.parts:
        for part in cost.parts:
            if part.out < len(ev.outs) and ev.outs[part.out] is not None:
                acc.kernel_calls[phases.out_phase(ev, part.out)] += 1
    else:
        acc.kernel_calls[phases.event_phase.get(ev.index, "agrad")] += 1


def fold_event(acc: OpCounts, ev: AtenEvent, cost: AtenCost, phases: BackwardPhases) -> None:
    """Add one event's FLOPs and bytes to ``acc`` in its phase (or its parts' phases)."""
    outs = [(j, m) for j, m in enumerate(ev.outs) if m is not None]
    _count_kernels(acc, ev, cost, phases)
    if ev.phase == "fw":
        _fold_piece(acc, ev, cost, "fw", cost.flops, ev.inputs, outs, _per_mb_fw)
        if cost.draws and outs and not _per_mb_fw(outs[0][1]):
            acc.random_draws += outs[0][1].numel / acc.batch
        return
    if cost.parts:
        for part in cost.parts:
            if part.out >= len(ev.outs) or ev.outs[part.out] is None:
                continue
            _fold_piece(acc, ev, cost, phases.out_phase(ev, part.out), part.flops, _named(ev, part.reads),
                        [(part.out, ev.outs[part.out])], phases.per_microbatch)
        return
    phase = phases.event_phase.get(ev.index, "agrad")
    _fold_piece(acc, ev, cost, phase, cost.flops, ev.inputs, outs, phases.per_microbatch)


def fold_saved(acc: OpCounts, rec: SavedRecord, producer: tuple[AtenEvent, AtenCost | None] | None) -> None:
    """Add one saved storage to ``acc`` (see the module docstring for the classes)."""
    stat = mb_stat = False
    if producer is not None and rec.producer is not None and producer[1] is not None:
        j = rec.producer[1]
        stat, mb_stat = j in producer[1].stats, j in producer[1].mb_stats
    if mb_stat or not rec.batch or rec.numel <= 1:
        acc.stats_bytes_per_batch += rec.nbytes
        return
    per_sample = rec.nbytes / acc.batch
    if stat:
        acc.saved = acc.saved + Saved(fixed_bytes=per_sample)
        acc.stats_bytes += per_sample
    elif rec.floating:
        acc.saved = acc.saved + Saved(act=per_sample / rec.itemsize)
    elif rec.dtype in _MASK_DTYPES:
        acc.saved = acc.saved + Saved(mask=per_sample)
    else:
        acc.saved = acc.saved + Saved(fixed_bytes=per_sample)
