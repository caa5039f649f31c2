"""How the settings of a torchtitan job TOML become TrainConfig fields and stack knobs (the rules
behind :data:`simtrain.frameworks.torchtitan.TORCHTITAN_SETTINGS`; same torchtitan commit, 238fa9953e,
as that module)."""

from __future__ import annotations

from simtrain.frameworks.base import Draft, Setting, as_bool, as_float, as_int
from simtrain.specs.stack import load_stack

__all__ = ["NOTED", "resolve", "NGPU_DEFAULT"]

NGPU_DEFAULT = 8
"""GPUs of a run launched with torchtitan's ``run_train.sh`` and no NGPU (``NGPU=${NGPU:-"8"}``)."""

_LAYERS = "needs the model's layer count: give {fields} to train_config()"
NOTED: dict[str, str] = {
    "training.enable_cpu_offload": "FSDP CPU offload is not modelled: the estimate keeps the states on the device",
    "training.dtype": "pure bf16 training (no fp32 master weights) is not a simtrain regime: costed as mixed precision",
    "parallelism.pipeline_parallel_first_stage_less_layers": _LAYERS.format(fields="first_stage_layers"),
    "parallelism.pipeline_parallel_last_stage_less_layers": _LAYERS.format(fields="last_stage_layers"),
    "parallelism.pipeline_parallel_layers_per_stage": _LAYERS.format(fields="virtual_stages"),
    "parallelism.module_fqns_per_model_part": _LAYERS.format(fields="virtual_stages"),
    "parallelism.expert_tensor_parallel_degree": "expert tensor parallelism is not a separate simtrain axis",
    "activation_checkpoint.memory_budget": "the compiler's memory-budget recomputation is not modelled",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": "a detail below recompute='selective-op'",
    "quantize.linear.float8.filter_fqns": "every matmul is costed in fp8, the filtered ones (the output layer) too",
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp": "a scaling detail below stack.fp8_recipe",
    "compile.backend": "the fsdp2-compile preset stands for Inductor",
    "optimizer.early_step_in_backward": "the optimizer step inside the backward is not modelled",
}
"""Known settings that change time or memory but that simtrain does not map, with the reason."""

_SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved-1f1b",
              "LoopedBFS": "interleaved-1f1b", "InterleavedZeroBubble": "interleaved-1f1b",
              "ZBVZeroBubble": "interleaved-1f1b", "DualPipeV": "dualpipev"}
_ZERO_BUBBLE = ("InterleavedZeroBubble", "ZBVZeroBubble")
"""Looped zero-bubble schedules simtrain has no twin for (it has ZB-H1 with one stage per rank)."""
_PARAM_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}
_FP8_CONVERTERS = ("float8", "quantize.linear.float8")
_FP8_RECIPES = {None: "tensorwise", "tensorwise": "tensorwise", "rowwise": "rowwise", "rowwise_with_gw_hp": "rowwise"}
_OPTIMIZERS = {"AdamW": "adamw", "Adam": "adam"}
_IMPLS = ("for-loop", "foreach", "fused")


class _Args:
    """The given settings, parsed by the row's kind; :meth:`get` falls back on the default and records it."""

    def __init__(self, draft: Draft, given: dict, rows: dict[str, Setting]) -> None:
        self.draft, self.given, self.rows = draft, given, rows
        self.c, self.knobs = draft.config, draft.knobs

    def get(self, name: str):
        if name not in self.given:
            self.draft.defaulted(name)
            return self.rows[name].value
        value, kind = self.given[name], self.rows[name].kind
        if kind == "int":
            return as_int(self.draft, name, value)
        if kind == "float":
            return as_float(self.draft, name, value)
        if kind == "bool":
            return as_bool(self.draft, name, value)
        if kind == "list":
            return [p.strip() for p in value.split(",")] if isinstance(value, str) else _strings(self, name, value)
        return value if value is None or isinstance(value, str) else str(value)

    def error(self, name: str, reason: str):
        return self.draft.error(name, reason)


def _strings(a: _Args, name: str, value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise a.error(name, f"expected a list of strings, got {str(value)[:40]!r}")
    return value


def resolve(draft: Draft, given: dict, rows: dict[str, Setting], world_size: int | None) -> str:
    """Fill ``draft`` from the TOML's settings; the stack preset's name."""
    a = _Args(draft, given, rows)
    dp = _data_parallel(a, world_size)
    _model_parallel(a)
    _batch(a, dp)
    _recompute(a)
    _precision(a)
    _optimizer(a)
    return _stack(a)


def _data_parallel(a: _Args, world_size) -> int:
    """dp, zero_stage and reshard_after_forward; the data-parallel degree the run has."""
    rep, shard = a.get("parallelism.data_parallel_replicate_degree"), a.get("parallelism.data_parallel_shard_degree")
    tp, pp, cp = (a.get(f"parallelism.{k}_parallel_degree") for k in ("tensor", "pipeline", "context"))
    a.c.update(tp=tp, pp=pp, cp=cp)
    if rep < 1 or (shard < 1 and shard != -1):
        raise a.error("parallelism.data_parallel_shard_degree", "degrees are ≥ 1 (shard may be -1: the GPUs left)")
    world = _world(a, world_size, shard == -1)
    inner = rep * tp * pp * cp
    if shard == -1:
        if world % inner:
            raise a.error("parallelism.data_parallel_shard_degree", f"-1 leaves no whole degree: {world} GPUs over "
                                                                    f"replicate × tp × pp × cp = {inner}")
        shard = world // inner
    else:
        if world is not None and world != inner * shard:
            raise a.error("world_size", f"{world} GPUs ≠ replicate × shard × tp × pp × cp = {inner * shard}")
        a.c["dp"] = rep * shard
    a.c["zero_stage"] = 3 if shard > 1 or cp > 1 else 0
    if rep > 1 and shard > 1:
        a.draft.ignore("parallelism.data_parallel_replicate_degree", "HSDP: simtrain shards over all replicate × "
                                                                     "shard ranks (ZeRO-3 over the whole dp)")
    policy = a.get("parallelism.fsdp_reshard_after_forward")
    if policy not in ("default", "always", "never"):
        raise a.error("parallelism.fsdp_reshard_after_forward", f"must be default, always or never, got {policy[:40]!r}")
    a.c["reshard_after_forward"] = policy == "always" or (policy == "default" and pp == 1)
    return rep * shard


def _world(a: _Args, world_size, needed: bool) -> int | None:
    if world_size is None:
        if not needed:
            return None
        a.draft.defaulted("world_size (run_train.sh NGPU=8)")
        return NGPU_DEFAULT
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise a.error("world_size", f"expected a positive number of GPUs, got {str(world_size)[:40]!r}")
    return world_size


def _model_parallel(a: _Args) -> None:
    a.c["sequence_parallel"] = a.c["tp"] > 1
    a.c["ep"] = a.get("parallelism.expert_parallel_degree")
    name = a.get("parallelism.pipeline_parallel_schedule")
    if name not in _SCHEDULES:
        raise a.error("parallelism.pipeline_parallel_schedule", f"no simtrain schedule for {str(name)[:40]!r} "
                                                                f"({', '.join(_SCHEDULES)})")
    schedule = _SCHEDULES[name] if a.c["pp"] > 1 else "1f1b"
    a.c["pipeline_schedule"] = schedule
    a.c["virtual_stages"] = 2 if schedule in ("interleaved-1f1b", "dualpipev") else 1
    if name in _ZERO_BUBBLE and a.c["pp"] > 1:
        a.draft.ignore("parallelism.pipeline_parallel_schedule", f"{name}: the split weight-gradient pass is not "
                                                                 "modelled; costed as interleaved 1F1B")


def _batch(a: _Args, dp: int) -> None:
    old = "training.batch_size" in a.given and "training.local_batch_size" not in a.given
    local = a.get("training.batch_size" if old else "training.local_batch_size")
    glob = a.get("training.global_batch_size")
    a.c["global_batch_size"] = local * dp if glob == -1 else glob
    a.c["micro_batch_size"] = a.get("parallelism.pipeline_parallel_microbatch_size") if a.c["pp"] > 1 else local
    a.c["seq_len"] = a.get("training.seq_len")
    a.c["grad_clipping"] = a.get("training.max_norm") > 0


def _recompute(a: _Args) -> None:
    mode = a.get("activation_checkpoint.mode")
    if mode in ("none", "memory_budget"):
        a.c["recompute"] = "none"
        if mode == "memory_budget":
            a.draft.ignore("activation_checkpoint.mode", "memory_budget: the compiler's partitioner is not modelled; "
                                                         "costed without recomputation")
    elif mode == "full":
        a.c["recompute"] = "full"
    elif mode == "selective":
        _selective(a, a.get("activation_checkpoint.selective_ac_option"))
    else:
        raise a.error("activation_checkpoint.mode", f"must be none, selective, full or memory_budget, got {mode[:40]!r}")
    a.knobs["recompute_early_stop"] = a.get("activation_checkpoint.early_stop")


def _selective(a: _Args, option: str) -> None:
    if option == "op":
        a.c["recompute"] = "selective-op"
        return
    try:
        every = int(option)
    except (TypeError, ValueError):
        raise a.error("activation_checkpoint.selective_ac_option", f"must be 'op' or an integer, got {option[:40]!r}") from None
    if every < 0:
        raise a.error("activation_checkpoint.selective_ac_option", f"must be ≥ 0, got {every}")
    a.c["recompute"] = "full"   # torchtitan wraps every k-th block in a full checkpoint (0 and 1: every block)
    if every > 1:
        a.c["recompute_every_k_blocks"] = every


def _precision(a: _Args) -> None:
    converters = a.get("model.converters")
    fp8 = any(c in _FP8_CONVERTERS for c in converters)
    for c in converters:
        if c not in _FP8_CONVERTERS:
            a.draft.ignore(f"model.converters {c}", "no simtrain precision for this converter")
    dtype = a.get("training.mixed_precision_param")
    if dtype not in _PARAM_DTYPES:
        raise a.error("training.mixed_precision_param", f"must be bfloat16 or float32, got {str(dtype)[:40]!r}")
    a.c["precision"] = "fp8" if fp8 else _PARAM_DTYPES[dtype]
    reduce = a.get("training.mixed_precision_reduce")
    if reduce != "float32":
        raise a.error("training.mixed_precision_reduce", f"torchtitan allows only float32, got {str(reduce)[:40]!r}")
    a.knobs["grad_reduce_fp32"] = True
    recipe = a.get("quantize.linear.float8.recipe_name")
    if recipe not in _FP8_RECIPES:
        raise a.error("quantize.linear.float8.recipe_name", f"must be tensorwise, rowwise or rowwise_with_gw_hp, "
                                                            f"got {str(recipe)[:40]!r}")
    if fp8:
        a.knobs["fp8_recipe"] = _FP8_RECIPES[recipe]
        a.knobs["fp8_allgather"] = a.get("quantize.linear.float8.enable_fsdp_float8_all_gather")
        a.c["emulate_precision"] = a.get("quantize.linear.float8.emulate")


def _optimizer(a: _Args) -> None:
    name, impl = a.get("optimizer.name"), a.get("optimizer.implementation")
    if name not in _OPTIMIZERS:
        raise a.error("optimizer.name", f"no simtrain optimizer for {str(name)[:40]!r} (AdamW, Adam)")
    if impl not in _IMPLS:
        raise a.error("optimizer.implementation", f"must be one of {', '.join(_IMPLS)}, got {str(impl)[:40]!r}")
    a.c.update(optimizer=_OPTIMIZERS[name], optimizer_impl=impl)


def _stack(a: _Args) -> str:
    old = "training.compile" in a.given and "compile.enable" not in a.given
    if old:   # the older [training] compile = true compiled each transformer block
        compiled = a.get("training.compile")
    else:
        compiled = a.get("compile.enable") and "model" in a.get("compile.components")
    if a.get("parallelism.enable_async_tensor_parallel"):
        if compiled and a.c["tp"] > 1:
            a.knobs["tp_comm_overlap"] = load_stack("megatron-core").tp_comm_overlap
        else:
            a.draft.ignore("parallelism.enable_async_tensor_parallel", "effective only with tp > 1 and the model "
                                                                      "compiled (job_config.py:357)")
    if "model.norm_type" in a.given:
        _norm(a, compiled)
    return "fsdp2-compile" if compiled else "fsdp2"


def _norm(a: _Args, compiled: bool) -> None:
    """The older ``model.norm_type``: torchtitan's own RMSNorm class (``x.float()`` ... ``.type_as(x)``)
    runs as eager fp32 ops unless Inductor compiles the block; ``fused_rmsnorm`` is a Triton kernel."""
    norm = a.get("model.norm_type")
    if norm == "fused_rmsnorm" or (norm == "rmsnorm" and compiled):
        a.knobs["norm_kernel"] = "fused"
    elif norm == "rmsnorm":
        a.knobs["norm_kernel"] = "eager-fp32"
    elif norm in ("layernorm", "np_layernorm"):
        a.draft.ignore("model.norm_type", f"{norm}: the model file's norm is kept")
    else:
        raise a.error("model.norm_type", f"must be rmsnorm, fused_rmsnorm, layernorm or np_layernorm, "
                                         f"got {str(norm)[:40]!r}")
