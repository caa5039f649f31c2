"""How parsed Megatron-LM arguments become TrainConfig fields and stack knobs (the rules behind
:data:`simtrain.frameworks.megatron.MEGATRON_SETTINGS`; same Megatron-LM commit, d98e8a64dd, as that
module). Every rule reads a setting through :class:`_Args`, which records a default it falls back on.
Megatron's own consistency checks are repeated as SpecErrors naming the argument."""

from __future__ import annotations

from simtrain.frameworks.base import Draft, Setting
from simtrain.parallel.recompute import MODULES
from simtrain.specs.stack import load_stack

__all__ = ["MEGATRON_MODEL", "NOTED", "resolve"]

MEGATRON_MODEL: dict[str, tuple[str, str]] = {
    "--num-layers": ("num_layers", "int"), "--encoder-num-layers": ("encoder_num_layers", "int"),
    "--decoder-num-layers": ("decoder_num_layers", "int"), "--hidden-size": ("hidden_size", "int"),
    "--ffn-hidden-size": ("ffn_hidden_size", "int"), "--num-attention-heads": ("num_attention_heads", "int"),
    "--num-query-groups": ("num_query_groups", "int"), "--group-query-attention": ("group_query_attention", "flag"),
    "--kv-channels": ("kv_channels", "int"), "--max-position-embeddings": ("max_position_embeddings", "int"),
    "--vocab-size": ("vocab_size", "int"), "--make-vocab-size-divisible-by": ("make_vocab_size_divisible_by", "int"),
    "--num-experts": ("num_experts", "int"), "--moe-router-topk": ("moe_router_topk", "int"),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", "int"),
    "--moe-shared-expert-intermediate-size": ("moe_shared_expert_intermediate_size", "int"),
    "--moe-layer-freq": ("moe_layer_freq", "str"), "--swiglu": ("swiglu", "flag"),
    "--untie-embeddings-and-output-weights": ("untie_embeddings_and_output_weights", "flag"),
    "--normalization": ("normalization", "str"), "--position-embedding-type": ("position_embedding_type", "str"),
    "--disable-bias-linear": ("disable_bias_linear", "flag"), "--multi-latent-attention": ("multi_latent_attention", "flag"),
}
"""Model-shape arguments: reported under ``Imported.model`` (key, how the value parses), not mapped."""

_LAUNCHER = "launcher argument: pass world_size= (GPUs) to derive the data-parallel size"
NOTED: dict[str, str] = {
    "--optimizer-cpu-offload": "CPU offload of optimizer states is not modelled: the estimate keeps them on the device",
    "--cpu-offloading": "activation / weight offload to the CPU is not modelled",
    "--moe-router-load-balancing-type": "sets the balancing loss, not the load it reaches: give moe_load_imbalance",
    "--moe-aux-loss-coeff": "sets the balancing loss, not the load it reaches: give moe_load_imbalance",
    "--transformer-impl": "kernel choice: the stack preset's kernels stand for Transformer Engine",
    "--cross-entropy-loss-fusion": "the stack preset's loss_kernel stands for the loss kernel",
    "--num-workers": "data loader: TrainConfig.data needs per-sample costs the arguments do not give",
    "--ddp-num-buckets": "a bucket count: simtrain takes a bucket size (--ddp-bucket-size)",
    "--main-grads-dtype": "simtrain keeps gradients as the stack sets (grad_fp32_buffer)",
    "--use-precision-aware-optimizer": "optimizer-state dtypes other than fp32 are not modelled",
    "--overlap-param-gather-with-optimizer-step": "not modelled beyond dp_overlap",
    "--no-gradient-accumulation-fusion": "wgrad accumulation fusion: inside the stack preset",
    "--fp8-amax-history-len": "fp8 scaling detail below stack.fp8_recipe",
    "--fp8-amax-compute-algo": "fp8 scaling detail below stack.fp8_recipe",
    "--nproc_per_node": _LAUNCHER, "--nproc-per-node": _LAUNCHER, "--nnodes": _LAUNCHER,
}
"""Known arguments that change time or memory but that simtrain does not map, with the reason."""

_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
_OPTIMIZERS = {"adam": "adamw", "sgd": "momentum"}
_FP8_RECIPES = {"delayed": "delayed", "tensorwise": "tensorwise", "blockwise": "rowwise", "mxfp8": "rowwise"}
_ATTENTION = {"flash": "fa2", "fused": "cudnn", "unfused": "eager", "local": "eager", "auto": None}


class _Args:
    """The given arguments; :meth:`get` falls back on the row's default and records that it did."""

    def __init__(self, draft: Draft, given: dict, rows: dict[str, Setting]) -> None:
        self.draft, self.given, self.rows = draft, given, rows
        self.c, self.knobs = draft.config, draft.knobs

    def get(self, name: str):
        if name in self.given:
            return self.given[name]
        self.draft.defaulted(name)
        return self.rows[name].value

    def error(self, name: str, reason: str):
        return self.draft.error(name, reason)


def resolve(draft: Draft, given: dict, rows: dict[str, Setting], world_size: int | None) -> str:
    """Fill ``draft`` from the parsed arguments; the stack preset's name."""
    a = _Args(draft, given, rows)
    _parallel(a)
    dp = _dp(a, world_size)
    _batch(a, dp)
    _recompute(a)
    _precision(a)
    _data_parallel(a, dp)
    _optimizer(a)
    return _stack(a)


def _parallel(a: _Args) -> None:
    for name, field in (("--tensor-model-parallel-size", "tp"), ("--pipeline-model-parallel-size", "pp"),
                        ("--context-parallel-size", "cp"), ("--expert-model-parallel-size", "ep")):
        a.c[field] = a.get(name)
    a.c["sequence_parallel"] = bool(a.get("--sequence-parallel")) and a.c["tp"] > 1
    vs = _virtual_stages(a, a.c["pp"])
    a.c["virtual_stages"] = vs
    a.c["pipeline_schedule"] = "interleaved-1f1b" if vs > 1 else "1f1b"
    for name, field in (("--decoder-first-pipeline-num-layers", "first_stage_layers"),
                        ("--decoder-last-pipeline-num-layers", "last_stage_layers")):
        value = a.get(name)
        if value is not None:
            a.c[field] = value


def _virtual_stages(a: _Args, pp: int) -> int:
    name = "--num-layers-per-virtual-pipeline-stage"
    per_chunk = a.given.get(name)
    if per_chunk is None:
        vs = a.given.get("--num-virtual-stages-per-pipeline-rank") or a.given.get("--virtual-pipeline-model-parallel-size")
        if vs is None:
            a.draft.defaulted(name)
        return 1 if vs is None else vs
    layers = a.draft.model.get("num_layers")
    if layers is None:
        raise a.error(name, "needs --num-layers to derive the virtual stages (arguments.py:974)")
    if per_chunk < 1 or pp < 1 or layers % pp or (layers // pp) % per_chunk:
        raise a.error(name, f"{per_chunk} must divide the {layers} layers / pp={pp} of a stage (arguments.py:972)")
    return layers // pp // per_chunk


def _dp(a: _Args, world_size) -> int | None:
    """Megatron's data-parallel size world / (tp·pp·cp), or None without ``world_size``."""
    if world_size is None:
        return None
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise a.error("world_size", f"expected a positive number of GPUs, got {str(world_size)[:40]!r}")
    inner = a.c["tp"] * a.c["pp"] * a.c["cp"]
    if world_size % inner:
        raise a.error("world_size", f"{world_size} GPUs are not a multiple of tp × pp × cp = {inner}")
    return world_size // inner


def _batch(a: _Args, dp: int | None) -> None:
    mbs = a.given.get("--micro-batch-size")
    if mbs is None:
        raise a.error("--micro-batch-size", "required: Megatron-LM asserts it is set (arguments.py:693)")
    a.c["micro_batch_size"] = mbs
    gbs = a.get("--global-batch-size")
    if gbs is None:
        if dp is None:
            raise a.error("--global-batch-size", "absent, and Megatron's default (micro-batch-size × data-parallel "
                                                 "size) needs the run's GPUs: pass world_size=")
        gbs = mbs * dp
    a.c["global_batch_size"] = gbs
    a.c["seq_len"] = a.get("--seq-length")


def _recompute(a: _Args) -> None:
    granularity = a.get("--recompute-granularity")
    if granularity is None and a.get("--recompute-activations"):
        granularity = "selective"
    method, layers = a.get("--recompute-method"), a.get("--recompute-num-layers")
    modules = a.get("--recompute-modules")
    if granularity is None:
        a.c["recompute"] = "none"
        for name in ("--recompute-method", "--recompute-num-layers", "--recompute-modules"):
            if name in a.given:
                a.draft.ignore(name, "no effect without --recompute-granularity")
    elif granularity == "full":
        _full(a, method, layers, modules)
    elif granularity == "selective":
        if layers is not None:
            raise a.error("--recompute-num-layers", "must be None with selective recomputation "
                                                    "(transformer_config.py:1927)")
        a.c["recompute"] = "selective"
        if modules is not None:
            a.c["recompute_modules"] = _modules(a, modules)
    else:
        raise a.error("--recompute-granularity", f"must be full or selective, got {granularity[:40]!r}")


def _full(a: _Args, method, layers, modules) -> None:
    if method not in ("block", "uniform"):
        raise a.error("--recompute-method", "full recomputation needs block or uniform (transformer_config.py:1913)")
    if layers is None or layers < 1:
        raise a.error("--recompute-num-layers", "full recomputation needs a positive number of layers "
                                                "(transformer_config.py:1919)")
    a.c["recompute"] = "full"
    if method == "block":
        a.c["recompute_num_layers"] = layers
    elif layers > 1:
        a.draft.ignore("--recompute-num-layers", f"uniform chunks of {layers} layers: simtrain recomputes every "
                                                 "layer and keeps one input per layer")
    if modules is not None:
        a.draft.ignore("--recompute-modules", "only with selective recomputation")


def _modules(a: _Args, modules: list[str]) -> list[str]:
    known = [m for m in modules if m in MODULES]
    for m in modules:
        if m not in MODULES:
            a.draft.ignore(f"--recompute-modules {m}", f"no simtrain module of that name ({', '.join(MODULES)})")
    return known


def _precision(a: _Args) -> None:
    fp8, bf16, fp16 = a.get("--fp8-format"), a.get("--bf16"), a.get("--fp16")
    if bf16 and fp16:
        raise a.error("--fp16", "cannot be combined with --bf16 (arguments.py:1196)")
    if fp8 is not None and fp8 not in ("e4m3", "hybrid"):
        raise a.error("--fp8-format", f"must be e4m3 or hybrid, got {fp8[:40]!r}")
    a.c["precision"] = "fp8" if fp8 else "bf16" if bf16 else "fp16" if fp16 else "fp32"
    recipe = a.get("--fp8-recipe")
    if recipe not in _FP8_RECIPES:
        raise a.error("--fp8-recipe", f"must be one of {', '.join(_FP8_RECIPES)}, got {str(recipe)[:40]!r}")
    if fp8:
        a.knobs["fp8_recipe"] = _FP8_RECIPES[recipe]
    a.knobs["fp8_allgather"] = bool(a.get("--fp8-param-gather"))
    if fp8 and a.knobs["fp8_allgather"]:  # the compute weights themselves are fp8 (arguments.py help text)
        a.knobs["fp8_params"] = True
    in_bf16 = a.get("--grad-reduce-in-bf16")
    if a.get("--accumulate-allreduce-grads-in-fp32"):
        a.knobs["grad_reduce_fp32"] = True
    elif in_bf16 or (fp16 and fp8):  # fp8 on fp16: the 16-bit dtype is fp16, which reduces in fp16
        a.knobs["grad_reduce_fp32"] = False
    else:  # Megatron's own rule, as the presets say it: forced on for --bf16, off for --fp16
        a.knobs["grad_reduce_fp32"] = "bf16"
    # main_grad takes the reduction's dtype (param_and_grad_buffer.py): the presets' "fp16" says Megatron's
    # default (fp32 under --bf16, fp16 under --fp16); a flag that fixes the reduction's dtype fixes the buffer's
    if a.knobs["grad_reduce_fp32"] is True:
        a.knobs["grad_buffer_16bit"] = False
    elif a.knobs["grad_reduce_fp32"] is False:
        a.knobs["grad_buffer_16bit"] = True


def _data_parallel(a: _Args, dp: int | None) -> None:
    zero = 1 if a.get("--use-distributed-optimizer") else 0
    if a.get("--use-torch-fsdp2"):
        zero = 3
    if a.get("--use-megatron-fsdp"):
        strategy = a.get("--data-parallel-sharding-strategy")
        if strategy not in _SHARDING:
            raise a.error("--data-parallel-sharding-strategy", f"must be one of {', '.join(_SHARDING)}, "
                                                               f"got {str(strategy)[:40]!r}")
        zero = _SHARDING[strategy]
    elif "--data-parallel-sharding-strategy" in a.given:
        a.draft.ignore("--data-parallel-sharding-strategy", "only with --use-megatron-fsdp")
    a.c["zero_stage"] = zero
    grad, param = a.get("--overlap-grad-reduce"), a.get("--overlap-param-gather")
    if param and not grad:
        raise a.error("--overlap-param-gather", "Megatron-LM requires --overlap-grad-reduce with it (arguments.py:1028)")
    a.c["dp_overlap"] = bool(grad)
    params = a.get("--ddp-bucket-size")
    if params is None:
        params = max(40_000_000, 1_000_000 * dp) if dp else 40_000_000
    mode = a.knobs["grad_reduce_fp32"]
    wide = a.c["precision"] == "fp32" or mode is True or (mode == "bf16" and a.c["precision"] != "fp16")
    a.c["dp_bucket_bytes"] = float(params * (4 if wide else 2))


def _optimizer(a: _Args) -> None:
    name = a.get("--optimizer")
    if name not in _OPTIMIZERS:
        raise a.error("--optimizer", f"no simtrain optimizer for {str(name)[:40]!r} (adam → adamw, sgd → momentum)")
    a.c["optimizer"] = _OPTIMIZERS[name]
    a.c["grad_clipping"] = a.get("--clip-grad") > 0


def _stack(a: _Args) -> str:
    legacy, mcore = a.get("--use-legacy-models"), a.get("--use-mcore-models")
    if legacy and mcore:
        raise a.error("--use-legacy-models", "cannot be combined with --use-mcore-models")
    core = load_stack("megatron-core")
    if a.get("--tp-comm-overlap"):
        if not a.c["sequence_parallel"]:
            raise a.error("--tp-comm-overlap", "needs --sequence-parallel with tp > 1 (arguments.py:1442)")
    # off: NCCL's SMs (comm_sms) stay with the overlapped data-parallel collectives, and the backward's
    # input-gradient collective still runs beside the weight-gradient GEMM (tp_dgrad_comm_async)
    a.knobs["tp_comm_overlap"] = core.tp_comm_overlap if a.get("--tp-comm-overlap") else 0.0
    if a.get("--no-overlap-p2p-communication"):
        a.knobs["pp_comm_overlap"] = 0.0
    backend = a.get("--attention-backend")
    if backend not in _ATTENTION:
        raise a.error("--attention-backend", f"must be one of {', '.join(_ATTENTION)}, got {str(backend)[:40]!r}")
    kernel = _ATTENTION[backend] or ("fa2" if a.get("--use-flash-attn") else None)
    if kernel:
        a.knobs["attention_kernel"] = kernel
    cap = a.get("--moe-expert-capacity-factor")
    if cap is not None:
        a.c["moe_load_imbalance"] = min(100.0, max(1.0, cap))
    return "megatron-lm" if legacy else "megatron-core"
