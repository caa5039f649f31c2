"""How much of a fused attention's work its kernel runs: PyTorch's CPU flash-attention tiles (each one
pays the attention curve's fixed cost where the efficiency prices tiles) and the share of a causal
score matrix a kernel executes, on a GPU and on a CPU. Used by the per-op cost (``cost.op_cost``) and
by the calibration's bench rows (``calibrate.predict``), so both count the same work."""

from __future__ import annotations

from simtrain.glossary import DeviceKind
from simtrain.graph.op import Op
from simtrain.graph.rules.attention import block_causal_fraction, key_blocks_run
from simtrain.specs.hardware import Device, Efficiency

__all__ = ["cpu_flash_blocks", "cpu_flash_tiles", "priced_flash_tiles", "flash_tiles", "causal_executed_fraction",
           "executed_flops_fraction"]


def cpu_flash_blocks(seq_q: int) -> tuple[int, int]:
    """(query block, key block) of PyTorch's CPU flash-attention kernel for ``seq_q`` queries: 32 /
    64 / 256 queries below 192 / below 768 / from 768, always 512 keys, forward and backward
    (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp, ``flash_attention_kernel_impl``)."""
    return (32 if seq_q < 192 else 64 if seq_q < 768 else 256), 512


def cpu_flash_tiles(seq_q: int, seq_kv: int, causal: bool) -> int:
    """Tiles one head of PyTorch's CPU flash-attention kernel runs (:func:`cpu_flash_blocks`): each
    block of queries against each 512-key block it does not skip (``key_blocks_run``, the walk
    ``block_causal_fraction`` counts the work by), the same blocks forward and backward."""
    return sum(blocks for _, blocks in key_blocks_run(seq_q, seq_kv, *cpu_flash_blocks(seq_q), causal))


def priced_flash_tiles(batch_heads: float, seq_q: int, seq_kv: int, causal: bool, device: Device,
                       eff: Efficiency) -> float:
    """Tiles of a fused attention over ``batch_heads`` (samples × heads) where the efficiency prices
    them (``Efficiency.flash_tiles`` on a CPU); 1 elsewhere, where the attention curve's
    ``half_flops`` is per call. One rule for a graph's ops (:func:`flash_tiles`) and the bench's rows
    (``calibrate.predict.row_flash_tiles``)."""
    if not eff.flash_tiles or device.kind is not DeviceKind.CPU:
        return 1.0
    return max(1.0, batch_heads * cpu_flash_tiles(seq_q, seq_kv, causal))


def flash_tiles(op: Op, micro_batch: float, heads_share: float, device: Device, eff: Efficiency) -> float:
    """:func:`priced_flash_tiles` of a fused attention ``op`` for one micro-batch on one rank (samples
    × this rank's ``heads_share`` of the heads: its FLOPs' shard factor); 1 for other ops."""
    att = op.attention
    if att is None or not att.fused:
        return 1.0
    return priced_flash_tiles(micro_batch * att.heads * heads_share, att.seq_q, att.seq_kv, att.causal, device, eff)


def causal_executed_fraction(seq_q: int, seq_kv: int, device: Device | None = None) -> float:
    """Share of the seq_q × seq_kv score matrix a fused causal attention kernel executes. On a GPU it
    skips the tiles above the diagonal, ≈ (s + 1) / (2s) of the square; PyTorch's CPU flash kernel
    skips only whole 512-key blocks past each query block's last key (:func:`cpu_flash_blocks`,
    ``block_causal_fraction``): nothing up to 512 keys, a quarter of the square at 1024."""
    if device is not None and device.kind is DeviceKind.CPU:
        return block_causal_fraction(seq_q, seq_kv, *cpu_flash_blocks(seq_q))
    return (seq_q + 1) / (2.0 * seq_q)


def executed_flops_fraction(op: Op, device: Device | None = None) -> float:
    """Fraction of the op's (full-convention) FLOPs the kernel actually executes: a fused causal
    attention kernel what :func:`causal_executed_fraction` says for ``device``; a materialised one
    computes the whole score matrix and masks it."""
    att = op.attention
    if att is None or not att.causal or not att.fused:
        return 1.0
    return causal_executed_fraction(att.seq_q, att.seq_kv, device)
