"""torchtitan job TOML → simtrain (:func:`from_torchtitan`).

Facts read from pytorch/torchtitan at commit 238fa9953e4aec2a62582121564273d7cbb1e9f1 (2026-02-23,
version 0.2.2), the last one with TOML job configs (the next, 9810191bb, replaced them with Python
config registries): ``torchtitan/config/job_config.py`` (every default below, line numbers at that
commit), ``torchtitan/models/llama3/infra/parallelize.py`` (what reshard_after_forward "default"
means, which converters enable float8), ``torchtitan/distributed/pipeline_parallel.py`` (stages per
rank of a looped schedule), ``torchtitan/distributed/activation_checkpoint.py`` (selective_ac_option)
and ``run_train.sh`` (NGPU). Older TOMLs (``torchtitan/config_manager.py`` before 2025-07) spelled
``[training] batch_size``, ``[training] compile`` and ``[float8]``; both spellings are read.
"""

from __future__ import annotations

import tomllib

from simtrain.frameworks.base import Draft, Imported, Setting, ignored_reason, read_source
from simtrain.frameworks.torchtitan_rules import NOTED, resolve

__all__ = ["from_torchtitan", "TORCHTITAN_SETTINGS"]

_J = "torchtitan/config/job_config.py"
_S = Setting
_F8 = "quantize.linear.float8"

TORCHTITAN_SETTINGS: tuple[Setting, ...] = (
    _S("parallelism.data_parallel_replicate_degree", "dp, zero_stage", "dp = replicate × shard; replicate only → 0 "
       "(DDP); with shard > 1 (HSDP) sharded over all of dp (noted in ignored)", "1", f"{_J}:313", "int", 1),
    _S("parallelism.data_parallel_shard_degree", "dp, zero_stage", "> 1 → zero_stage 3 (FSDP); -1 → the GPUs left "
       "(dp None; world_size= or NGPU 8 sizes the batch)", "-1", f"{_J}:324", "int", -1),
    _S("parallelism.fsdp_reshard_after_forward", "reshard_after_forward",
       "always → True, never → False, default → True without PP, False with PP", "default",
       f"{_J}:336; 'default' at torchtitan/models/llama3/infra/parallelize.py:324", "str", "default"),
    _S("parallelism.tensor_parallel_degree", "tp, sequence_parallel",
       "as is; torchtitan's TP shards the norms' sequence (sequence_parallel = tp > 1)", "1", f"{_J}:351", "int", 1),
    _S("parallelism.enable_async_tensor_parallel", "stack.tp_comm_overlap",
       "on with the model compiled → the megatron-core preset's share (U); off → 0", "off", f"{_J}:357", "bool", False),
    _S("parallelism.pipeline_parallel_degree", "pp", "as is", "1", f"{_J}:360", "int", 1),
    _S("parallelism.pipeline_parallel_schedule", "pipeline_schedule, virtual_stages",
       "1F1B → 1f1b, GPipe → gpipe, DualPipeV → dualpipev; looped (Interleaved1F1B, LoopedBFS, ...) → "
       "interleaved-1f1b with 2 stages per rank (the looped zero-bubble ones noted)", "1F1B", f"{_J}:396; 2 per rank at torchtitan/distributed/"
       "pipeline_parallel.py:114", "str", "1F1B"),
    _S("parallelism.pipeline_parallel_microbatch_size", "micro_batch_size", "with pp > 1: as is", "1",
       f"{_J}:412", "int", 1),
    _S("parallelism.context_parallel_degree", "cp", "as is", "1", f"{_J}:428", "int", 1),
    _S("parallelism.expert_parallel_degree", "ep", "as is", "1", f"{_J}:454", "int", 1),
    _S("training.local_batch_size", "micro_batch_size, global_batch_size",
       "micro_batch_size without PP; global batch = this × dp when global_batch_size is -1", "8", f"{_J}:253",
       "int", 8),
    _S("training.batch_size", "micro_batch_size, global_batch_size", "older spelling of local_batch_size", "8",
       "torchtitan/config_manager.py:192 at 4c4388f650 (2025-06)", "int", 8),
    _S("training.global_batch_size", "global_batch_size", "as is; -1 → local_batch_size × dp", "-1",
       f"{_J}:256", "int", -1),
    _S("training.seq_len", "seq_len", "as is", "2048", f"{_J}:261", "int", 2048),
    _S("training.max_norm", "grad_clipping", "> 0 → True", "1.0", f"{_J}:264", "float", 1.0),
    _S("training.mixed_precision_param", "precision", "bfloat16 → bf16, float32 → fp32 (float8 converters → fp8)",
       "bfloat16", f"{_J}:282", "str", "bfloat16"),
    _S("training.mixed_precision_reduce", "stack.grad_reduce_fp32", "float32 → True (the only value)", "float32",
       f"{_J}:290", "str", "float32"),
    _S("training.compile", "stack", "older spelling of compile.enable", "false",
       "torchtitan/config_manager.py:221 at 4c4388f650", "bool", False),
    _S("activation_checkpoint.mode", "recompute", "none → none, full → full, selective → by selective_ac_option",
       "selective", f"{_J}:652", "str", "selective"),
    _S("activation_checkpoint.selective_ac_option", "recompute, recompute_every_k_blocks",
       "op → selective-op; an integer k → full with recompute_every_k_blocks = k", "'2'", f"{_J}:655", "str", "2"),
    _S("activation_checkpoint.early_stop", "stack.recompute_early_stop", "as is", "false",
       f"{_J}:675 (since torchtitan 25413d224, 2025-08-29)", "bool", False),
    _S("compile.enable", "stack", "with 'model' in components → fsdp2-compile, else fsdp2", "false",
       f"{_J}:722", "bool", False),
    _S("compile.components", "stack", "read with compile.enable", "['model', 'loss']", f"{_J}:725", "list",
       ["model", "loss"]),
    _S("model.norm_type", "stack.norm_kernel", "rmsnorm → eager-fp32 (torchtitan's own fp32 RMSNorm; nn.RMSNorm "
       "from 2025-03) unless compiled, fused_rmsnorm → fused; not given → the preset's", "rmsnorm",
       "torchtitan/models/norms.py @9dec370 (2024-12; the key was removed in 9cf88aa1a, 2025-04)", "str",
       "rmsnorm"),
    _S("model.converters", "precision", "'float8' / 'quantize.linear.float8' → fp8", "[]",
       f"{_J}:118; float8 test at torchtitan/models/llama3/infra/parallelize.py:76", "list", []),
    _S(f"{_F8}.recipe_name", "stack.fp8_recipe", "None / tensorwise → tensorwise; rowwise, rowwise_with_gw_hp → "
       "rowwise", "None (torchao's tensorwise)", f"{_J}:738", "str"),
    _S(f"{_F8}.enable_fsdp_float8_all_gather", "stack.fp8_allgather", "as is", "false", f"{_J}:732", "bool", False),
    _S(f"{_F8}.emulate", "emulate_precision", "as is", "false", f"{_J}:747", "bool", False),
    _S("optimizer.name", "optimizer", "AdamW → adamw, Adam → adam", "AdamW", f"{_J}:135", "str", "AdamW"),
    _S("optimizer.implementation", "optimizer_impl", "for-loop / foreach / fused as is", "fused", f"{_J}:151", "str",
       "fused"),
)
"""The older ``[float8]`` section's keys are read as their ``quantize.linear.float8`` rows."""

_ROWS = {s.name: s for s in TORCHTITAN_SETTINGS}
_MODEL_KEYS = ("model.name", "model.flavor")


def from_torchtitan(toml, *, world_size: int | None = None) -> Imported:
    """A torchtitan job TOML (text or path) → :class:`Imported`.

    ``world_size``: GPUs of the run; it sizes the data-parallel degree left over by
    ``data_parallel_shard_degree = -1`` (and so the global batch). Without it, torchtitan's launcher
    default (``run_train.sh`` NGPU=8) is taken and listed in ``defaults``."""
    text, file = read_source(toml, (".toml",), lambda s: "\n" in s or "=" in s or "[" in s)
    draft = Draft("torchtitan", file)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise draft.error("<toml>", f"not valid TOML: {err}") from None
    given = {}
    for key, value in _flatten(doc):
        key = f"{_F8}.{key[7:]}" if key.startswith("float8.") else key
        if key in _ROWS:
            given[key] = value
        elif key in _MODEL_KEYS:
            draft.model[key.split(".")[1]] = value
            draft.ignore(key, "model choice: not a TrainConfig field (reported in Imported.model)")
        else:
            draft.ignore(key, ignored_reason(key, NOTED, list(_ROWS)))
    stack = resolve(draft, given, _ROWS, world_size)
    return draft.freeze(stack, TORCHTITAN_SETTINGS, given)


def _flatten(doc: dict, prefix: str = ""):
    """(dotted key, value) of every leaf of a TOML document; tables inside tables are walked."""
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, name + ".")
        else:
            yield name, value
