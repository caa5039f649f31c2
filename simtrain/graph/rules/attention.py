"""Scaled-dot-product attention (``attention``) and rotary position embedding (``rotary``).

FLOP convention (the one PaLM App. B, Megatron-LM and FlopCounterMode's SDPA formula use): the op's
``flops`` count the **full** seq_q × seq_kv score matrix, causal or not. Per sample, with a query
heads of head dim d:

* forward  QKᵀ 2·a·s_q·s_kv·d  +  A·V 2·a·s_q·s_kv·d  =  4·a·s_q·s_kv·d
* agrad    dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q: four products of the same size = 8·a·s_q·s_kv·d
* wgrad    0 (no weights)

The scale, mask, softmax and dropout inside the op are memory-bound and are not counted as FLOPs
(FlopCounterMode does not count them either); their bytes are. A causal *fused* kernel executes
about (s + 1)/(2s) of those FLOPs (it skips blocks above the diagonal) and its backward re-computes
QKᵀ; a *materialised* one computes the whole square and masks it. :func:`attention_flops` returns
either convention; ``AttentionInfo.causal`` and ``.fused`` let the cost layer decide what executes.

Saved for backward (PyTorch):
* materialised (``fused=False``): Q, K, V (the QKV projection output), the softmax output, and with
  dropout the 1-byte mask and the dropout output — exactly Korthikanti et al. 2022 §4.1 / Table 2
  (4sbh for Q, K; 2as²b softmax; as²b mask; 2as²b dropout output; 2sbh V at 16 bits). Without
  dropout the A·V product keeps the softmax output itself, so it is counted once.
* fused (``fused=True``, flash / memory-efficient SDPA): Q, K, V, the output O and the fp32
  log-sum-exp per query row and head (``fixed_bytes``); dropout masks are regenerated from the RNG
  state, so none is stored.
GQA: K and V have ``kv_heads`` heads; the FLOPs do not depend on it (each query head does its own
products), the bytes do.

``v_head_dim`` (multi-head latent attention, DeepSeek-V2/V3: Q/K heads of nope + rope = 192 dims, V
heads of 128) gives V and the output their own head dim d_v: forward QKᵀ 2·a·s_q·s_kv·d + A·V
2·a·s_q·s_kv·d_v, agrad twice that; V, dV and O, dO are d_v wide. None: d_v = d (every other model).
"""

from __future__ import annotations

from typing import Literal

from simtrain.glossary import OpClass
from simtrain.graph.op import AttentionInfo, Gemm, Op, PhaseCounts, Saved
from simtrain.graph.rules._util import attrs_of, pc, pos_int, prob
from simtrain.graph.rules.registry import rule

__all__ = ["attention", "rotary", "attention_flops", "causal_fraction", "block_causal_fraction", "key_blocks_run"]

LSE_BYTES = 4  # fp32 log-sum-exp per (query row, head)


def _materialised_traffic(q, kv, o, scores, dropout: bool):
    """Elements read / written per phase by the unfused sequence QKᵀ → softmax → dropout → A·V."""
    drops = 1 if dropout else 0
    fw_read = q + 2 * kv + scores * (2 + drops)              # QKᵀ reads Q,K; softmax, dropout, AV read P
    fw_write = scores * (2 + drops) + o                      # scores, softmax out, dropout out, O
    ag_read = o * 2 + kv * 2 + q + scores * (5 + drops)     # dO ×2, V, K, Q; P, (dropout bw), Y + dP, dS ×2
    ag_write = kv * 2 + q + scores * (2 + drops)            # dV, dK, dQ, dP (+ dropout bw), dS
    return pc(fw_read, ag_read), pc(fw_write, ag_write)


def _fused_traffic(q, kv, o):
    """Elements read / written per phase by a fused kernel: inputs, output and their gradients."""
    return pc(q + 2 * kv, q + 2 * kv + 2 * o), pc(o, q + 2 * kv)


@rule("attention")
def attention(*, heads: int, head_dim: int, seq: int, kv_heads: int | None = None, seq_kv: int | None = None,
              causal: bool = True, fused: bool = False, dropout: float = 0.0, v_head_dim: int | None = None) -> dict:
    """Scaled-dot-product attention on one sample (see module docstring for the counts)."""
    a, d, s = pos_int("heads", heads), pos_int("head_dim", head_dim), pos_int("seq", seq)
    kv_h = a if kv_heads is None else pos_int("kv_heads", kv_heads)
    if a % kv_h:
        raise ValueError(f"heads={a} must be a multiple of kv_heads={kv_h}")
    dv = d if v_head_dim is None else pos_int("v_head_dim", v_head_dim)
    t = s if seq_kv is None else pos_int("seq_kv", seq_kv)
    p = prob("dropout", dropout)
    # K and V enter every count together (read both, write dK and dV): kv_el is their mean size, so
    # 2·kv_el = K + V elements (= 2·t·kv·d when dv == d)
    kv_el = t * kv_h * d if dv == d else t * kv_h * (d + dv) / 2
    q_el, o_el, scores = s * a * d, s * a * dv, a * s * t
    fw = 2 * a * s * t * (d + dv)
    if fused:
        lse = LSE_BYTES * s * a
        saved = Saved(act=q_el + 2 * kv_el + o_el, fixed_bytes=lse)
        read, write = _fused_traffic(q_el, kv_el, o_el)
        fixed_w, fixed_r = pc(lse, 0), pc(0, lse)
        scores_act, scores_mask = 0, 0
    else:
        scores_act, scores_mask = (2 * scores, scores) if p else (scores, 0)
        saved = Saved(act=q_el + 2 * kv_el + scores_act, mask=scores_mask)
        read, write = _materialised_traffic(q_el, kv_el, o_el, scores, bool(p))
        fixed_w, fixed_r = pc(scores_mask, 0), pc(0, scores_mask)
    return dict(
        op_class=OpClass.ATTENTION, flops=pc(fw, 2 * fw, 0), act_read=read, act_write=write,
        fixed_write_bytes=fixed_w, fixed_read_bytes=fixed_r, saved=saved,
        shapes=((s, a * d), (t, kv_h * d), (t, kv_h * dv)), out_shape=(s, a * dv),
        gemm=Gemm(m=s, n=t, k=d, batch=a), tp_split="heads",
        attention=AttentionInfo(heads=a, kv_heads=kv_h, head_dim=d, seq_q=s, seq_kv=t, causal=bool(causal),
                                fused=bool(fused), v_head_dim=None if v_head_dim is None else dv),
        attrs=attrs_of(dropout=p, saved_scores_act=scores_act, saved_scores_mask=scores_mask,
                       random_draws=scores if p else None),
    )


def causal_fraction(seq_q: int, seq_kv: int) -> float:
    """Share of the seq_q × seq_kv score matrix a causal mask keeps.

    Queries are aligned to the end of the keys: query i (0-based) sees off + i + 1 keys, with
    off = seq_kv − seq_q. For off ≥ 0 the kept count is seq_q·(off + 1) + seq_q·(seq_q − 1)/2; for
    off < 0 the first −off queries see nothing and the rest form a triangle of seq_kv·(seq_kv + 1)/2.
    For seq_q == seq_kv == s the share is (s + 1) / (2s).
    """
    offset = seq_kv - seq_q
    if offset >= 0:
        kept = seq_q * (offset + 1) + seq_q * (seq_q - 1) / 2
    else:
        kept = seq_kv * (seq_kv + 1) / 2
    return kept / (seq_q * seq_kv)


def block_causal_fraction(seq_q: int, seq_kv: int, q_block: int, kv_block: int) -> float:
    """Share of the seq_q × seq_kv score matrix a causal kernel computes when it skips masked work only
    in whole key blocks: each block of ``q_block`` queries starting at row m runs every block of
    ``kv_block`` keys that starts before its last visible key, min(m + q_block, seq_kv) (top-left
    aligned, as PyTorch's CPU flash kernel masks), the last one in full. One key block (seq_kv ≤
    kv_block) is the whole matrix: the mask is applied, nothing is skipped."""
    if seq_q <= 0 or seq_kv <= 0:
        return 1.0
    computed = sum(rows * min(blocks * kv_block, seq_kv)
                   for rows, blocks in key_blocks_run(seq_q, seq_kv, q_block, kv_block, causal=True))
    return computed / (seq_q * seq_kv)


def key_blocks_run(seq_q: int, seq_kv: int, q_block: int, kv_block: int, causal: bool) -> list[tuple[int, int]]:
    """(queries, key blocks run) for each block of ``q_block`` queries of a blocked attention kernel:
    causal, the ``kv_block``-key blocks that start before the query block's last visible key,
    min(m + queries, seq_kv) (top-left aligned); otherwise every key block."""
    out = []
    for m in range(0, seq_q, q_block):
        rows = min(q_block, seq_q - m)
        keys = min(m + rows, seq_kv) if causal else seq_kv
        out.append((rows, -(-keys // kv_block)))
    return out


def attention_flops(op: Op, convention: Literal["full", "causal"] = "full") -> PhaseCounts:
    """FLOPs of an attention op by phase in either convention.

    ``"full"`` (default; PaLM App. B 12·L·H·Q·T, Megatron-LM, FlopCounterMode): the whole square, as
    stored in ``op.flops``. ``"causal"``: only the kept triangle, ×(s + 1)/(2s) for a causal op —
    what a fused causal kernel actually executes (not counting its backward's recompute of QKᵀ).
    A non-causal op is the same in both conventions; a non-attention op is returned unchanged.
    """
    if convention not in ("full", "causal"):
        raise ValueError(f"convention must be 'full' or 'causal', got {convention!r}")
    info = op.attention
    if convention == "full" or info is None or not info.causal:
        return op.flops
    return op.flops * causal_fraction(info.seq_q, info.seq_kv)


#: eager complex-fp32 rotary (``rotary`` docstring): kernels per phase (Q and K each cast up,
#: multiplied, cast down; the backward also conjugates and copies the table) ...
EAGER_ROTARY_KERNELS = (6, 10, 0)
#: ... and the fp32 bytes read, and again written, per rotated element and phase.
EAGER_ROTARY_FP32_BYTES = 8
#: fms's 2×2-rotation form (``rotary`` docstring): kernels per phase for Q and K (each cast up, multiplied
#: by the rotation matrices, summed, cast down) and the fp32 bytes read, and again written, per element.
MATRIX_ROTARY_KERNELS = (8, 8, 0)
MATRIX_ROTARY_FP32_BYTES = 16


@rule("rotary")
def rotary(*, seq: int, heads: int, head_dim: int, kv_heads: int | None = None,
           rotary_dim: int | None = None, eager_fp32: bool = False, rotation_matrix: bool = False) -> dict:
    """Rotary position embedding (Su et al. 2021) applied to Q and K: x·cos + rotate(x)·sin, i.e.
    3 FLOPs per rotated element forward and 3 backward (the transpose rotation). The cos/sin tables
    are per sequence position, shared by every sample of the batch, so nothing is saved per sample
    (PyTorch's ``mul`` keeps only the table operand when the table needs no gradient).

    ``eager_fp32``: as Meta's reference Llama and torchtitan write it, ``view_as_complex(x.float())
    * freqs_cis`` then ``.type_as(x)``: three kernels per tensor and phase, each rotated element read
    once in the activation dtype and written once as fp32 (cast up), read and written as fp32 (the
    complex multiply), read as fp32 and written in the activation dtype (cast down): 8 fp32 bytes
    read and 8 written per element each way beside the fused kernel's one read and one write (20 B
    against 4 at 16-bit activations; tests/unit/test_eager_kernels.py counts it under PyTorch).

    ``rotation_matrix`` (with ``eager_fp32``): as IBM's foundation-model-stack writes it
    (``fms/modules/positions.py`` ``RotaryEmbedding.adjusted_qk`` @006bd7ed): each pair of x.float() is
    multiplied by its position's fp32 2×2 rotation matrix, a tensor twice the size, summed over the pair,
    then ``.type_as(x)``; the backward runs the same four kernels. Per element and phase, beside one
    activation-dtype read and write, 16 fp32 bytes read and 16 written (36 B against the complex form's
    20); the per-position table read is not counted (it is 2·s·d fp32 however many heads)."""
    s, a, d = pos_int("seq", seq), pos_int("heads", heads), pos_int("head_dim", head_dim)
    kv_h = a if kv_heads is None else pos_int("kv_heads", kv_heads)
    r = d if rotary_dim is None else pos_int("rotary_dim", rotary_dim)
    if r > d or r % 2:
        raise ValueError(f"rotary_dim={r} must be even and at most head_dim={d}")
    n = s * (a + kv_h) * r
    if rotation_matrix and not eager_fp32:
        raise ValueError("rotary: rotation_matrix is a form of the eager fp32 rotary (eager_fp32=True)")
    per_element, kernels = (MATRIX_ROTARY_FP32_BYTES, MATRIX_ROTARY_KERNELS) if rotation_matrix else \
        (EAGER_ROTARY_FP32_BYTES, EAGER_ROTARY_KERNELS)
    fp32 = per_element * n if eager_fp32 else 0
    return dict(
        op_class=OpClass.ELEMENTWISE, flops=pc(3 * n, 3 * n), act_read=pc(n, n), act_write=pc(n, n),
        fixed_read_bytes=pc(fp32, fp32), fixed_write_bytes=pc(fp32, fp32),
        saved=Saved(), shapes=((s, (a + kv_h) * d),), out_shape=(s, (a + kv_h) * d), tp_split="heads",
        attrs=attrs_of(rotary_dim=r, table_elements_per_batch=2 * s * r, eager_fp32=eager_fp32 or None,
                       rotation_matrix=rotation_matrix or None, aten_kernels=pc(*kernels) if eager_fp32 else None),
    )
