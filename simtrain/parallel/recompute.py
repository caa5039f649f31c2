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

from fnmatch import fnmatchcase

__all__ = ["MODULES", "local_name", "selected", "check_modules", "recomputed_count", "recomputed_blocks", "early_stop_tail", "early_stop_skips"]

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
    (``Stack.recompute_early_stop``); none otherwise."""
    from simtrain.specs.stack import stack_of
    if model is None or str(cfg.recompute) != "full" or not stack_of(cfg).recompute_early_stop:
        return frozenset()
    return early_stop_tail(model)
