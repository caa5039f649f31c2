"""Which ops a selective recomputation policy re-runs, named as frameworks name them.

Megatron-Core's ``--recompute-modules`` (and torchtitan's selective activation checkpointing) pick
parts of each layer to recompute in the backward pass instead of keeping what they save:

| module      | ops of a layer (builders/layers.py names)          |
|-------------|----------------------------------------------------|
| core_attn   | attn/core (default: Korthikanti et al. 2022 §5)    |
| mlp         | mlp/fc1, mlp/act, mlp/fc2 (dense); router, experts |
| layernorm   | attn/norm, mlp/norm                                |
| moe         | mlp/router, mlp/experts                            |

Anything else is an fnmatch pattern over an op's name inside its layer (``"mlp/act"``, ``"attn/*"``).
Memory (cost/memory.py): a recomputed run of ops keeps only what its first op saves (its input);
the op right after a recomputed run drops its saved input when it is a matmul (it is recomputed);
a recomputed materialised attention core drops its score-sized tensors (Korthikanti Table 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["MODULES", "local_name", "selected", "check_modules", "recomputed_count", "recomputed_blocks",
           "early_stop_tail", "early_stop_skips", "SacRole", "op_sac_plan", "op_sac_roles", "in_layer"]

MODULES = {
    "core_attn": ("attn/core",),
    "mlp": ("mlp/fc1", "mlp/act", "mlp/fc2", "mlp/router", "mlp/experts"),
    "layernorm": ("attn/norm", "mlp/norm"),
    "moe": ("mlp/router", "mlp/experts"),
}


def local_name(op) -> str:
    """The op's name inside its block (``layers.3/mlp/fc1`` → ``mlp/fc1``)."""
    return op.name.split("/", 1)[1] if "/" in op.name else op.name


def _patterns(modules) -> tuple[str, ...]:
    return tuple(p for m in modules for p in MODULES.get(m, (m,)))


def _default(op) -> bool:
    return bool(op.attr("attn_core")) or (op.attention is not None and not op.attention.fused)


def selected(op, modules) -> bool:
    """Is ``op`` recomputed under selective recomputation of ``modules`` (None: the attention core)?
    A fused attention kernel recomputes its scores internally: there is nothing more to recompute."""
    if modules is None:
        return _default(op)
    if op.attention is not None and op.attention.fused:
        return False
    name = local_name(op)
    return any(fnmatchcase(name, p) for p in _patterns(modules))


def check_modules(modules) -> list[str]:
    """Problems with a recompute_modules list (an empty list means the user chose nothing)."""
    out = []
    for m in modules:
        if m not in MODULES and "/" not in m and "*" not in m:
            out.append(f"recompute_modules: {m!r} is neither a module ({', '.join(MODULES)}) nor an op-name "
                       "pattern such as 'mlp/act' or 'attn/*'")
    return out


def recomputed_count(n: int, cfg) -> int:
    """How many of an op's ``n`` repeats on a stage are recomputed under full recomputation:
    all, or the first ``recompute_num_layers`` layers (one repeat per layer)."""
    limit = getattr(cfg, "recompute_num_layers", None)
    return n if limit is None else min(n, limit)


def recomputed_blocks(blocks: tuple[str, ...], cfg) -> set[str]:
    """The stage's blocks whose activations full recomputation drops: every block, or, with
    ``recompute_num_layers``, the first N transformer layers (``layers.*``) and the blocks outside
    the layers (embedding, head: treated as under full recomputation either way)."""
    limit = getattr(cfg, "recompute_num_layers", None)
    if limit is None:
        return set(blocks)
    layers = [b for b in blocks if b.startswith("layers.")]
    if not layers:
        return set(list(blocks)[:limit])
    return set(layers[:limit]) | {b for b in blocks if not b.startswith("layers.")}


def early_stop_tail(model) -> frozenset[str]:
    """Names of the ops that a non-reentrant checkpoint with early stop never recomputes (PyTorch's
    default since ``set_checkpoint_early_stop``: "non-reentrant checkpoint stops recomputation as soon
    as it has computed all needed Tensors"): in each block, the ops after the last tensor its backward
    unpacks. That tensor is the output of the block's last op that saves its own output (relu, softmax,
    fused attention), or the input of the last op that saves only its input (a linear, a norm, gelu):
    a pre-LN transformer block never recomputes its second MLP matmul and the residual add after it.
    Cached with the model."""
    key = "_early_stop_tail"
    if key not in model.meta:
        model.meta[key] = frozenset(name for b in model.blocks for name in _tail_of(model.block_ops(b)))
    return model.meta[key]


def _tail_of(ops) -> list[str]:
    last = max((i for i, op in enumerate(ops) if op.saved.act or op.saved.mask or op.saved.fixed_bytes), default=None)
    if last is None:
        return []
    keeps_output = ops[last].attr("saves") == "output" or ops[last].attention is not None
    start = last + 1 if keeps_output else last
    return [op.name for op in ops[start:]]


def early_stop_skips(cfg, model) -> frozenset[str]:
    """The ops full recomputation skips under the stack's early-stopping checkpoint
    (``Stack.recompute_early_stop``; ``cfg`` resolved); none otherwise."""
    if model is None or str(cfg.recompute) != "full" or not cfg.stack.recompute_early_stop:
        return frozenset()
    return early_stop_tail(model)


# --- torchtitan's per-op selective activation checkpointing (recompute="selective-op") ----------------

@dataclass(frozen=True, slots=True)
class SacRole:
    """What per-op selective AC does with one op of a checkpointed layer."""

    recompute_fraction: float
    """Share of the op's forward re-run in the backward (1: all of it; a fused projection whose
    matmuls alternate between saved and recomputed: the recomputed matmuls' share of its output)."""
    saved_output_fraction: float
    """Share of the op's output kept for the backward (0: nothing of the op is kept)."""


def in_layer(op) -> bool:
    """Is ``op`` inside a transformer layer (``layers.N/...``), the unit torchtitan checkpoints?"""
    return op.name.startswith("layers.")


def _mm_parts(ops, i: int) -> tuple[float, ...]:
    """Output widths of the separate matmuls that graph op ``ops[i]`` stands for, in execution order.
    torchtitan's Llama runs ``wq``, ``wk``, ``wv`` and ``w1``, ``w3`` as separate matmuls where simtrain's
    graph fuses them (``attn/qkv``, a gated ``mlp/fc1`` feeding SwiGLU, gate first:
    ``w2(silu(w1(x)) * w3(x))``)."""
    op = ops[i]
    width = float(op.gemm.n)
    att = next((o.attention for o in ops if o.attention is not None), None)
    if local_name(op).endswith("qkv") and att is not None:
        q, kv = att.heads * att.head_dim, att.kv_heads * att.head_dim
        if q + 2 * kv == width:
            return (float(q), float(kv), float(kv))
    if i + 1 < len(ops) and ops[i + 1].kind == "swiglu":
        return (width / 2, width / 2)
    return (width,)


def op_sac_plan(ops) -> dict[str, SacRole]:
    """Per-op selective AC of one layer's ``ops`` (in execution order), by local op name.

    torchtitan ``apply_ac`` with ``selective_ac_option = "op"`` (torchtitan/models/llama
    ``parallelize_llama.py``, ``_save_list`` and ``_custom_policy``): inside each checkpointed layer the
    policy saves the outputs of ``aten.mm`` and of the scaled-dot-product attention kernels, except
    every second ``mm`` (a counter per layer and pass: the 2nd, 4th, ... are recomputed); every other
    op is recomputed. For a Llama layer: wq, wv, w1, w2 and attention kept; wk, wo, w3, the norms,
    rotary embedding and SwiGLU re-run. A fused attention kernel's output is cached, so it is not
    re-run; a materialised attention (bmm, softmax) is not in the save list and is re-run."""
    count, roles = 0, {}
    for i, op in enumerate(ops):
        name = local_name(op)
        if op.attention is not None and op.attention.fused:
            roles[name] = SacRole(0.0, 1.0)
            continue
        if op.gemm is None or op.attention is not None:
            roles[name] = SacRole(1.0, 0.0)
            continue
        parts = _mm_parts(ops, i)
        saved = 0.0
        for width in parts:
            count += 1
            if count % 2 == 1:
                saved += width
        kept = saved / sum(parts)
        roles[name] = SacRole(1.0 - kept, kept)
    return roles


def op_sac_roles(model) -> dict[str, SacRole]:
    """:func:`op_sac_plan` of every transformer layer of ``model``, by local op name (layers with the
    same op names share roles). Cached with the model."""
    key = "_op_sac_roles"
    if key not in model.meta:
        roles: dict[str, SacRole] = {}
        for b in model.blocks:
            if b.startswith("layers."):
                for name, role in op_sac_plan(model.block_ops(b)).items():
                    roles.setdefault(name, role)
        model.meta[key] = roles
    return model.meta[key]
