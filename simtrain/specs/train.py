"""TrainConfig: *how* a model is trained (batch, precision, optimizer, parallel layout, schedule,
recomputation, input pipeline). Validated on construction; checks that need the cluster or the model
live in :func:`layout_problems` so an estimate can report them instead of raising."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from simtrain.glossary import OptimizerKind, PipelineSchedule, Precision, Recompute
from simtrain.specs.base import Bytes, BytesPerS, Seconds, Spec, spec_error_from_validation
from simtrain.specs.stack import Stack

__all__ = ["TrainConfig", "DataPipeline", "EvalConfig", "layout_problems", "resolve_dp"]

Degree = Annotated[int, Field(ge=1, le=1_000_000)]
#: bounds that keep every product of batch, sequence and degrees inside the engines' 64-bit integers
_MAX_BATCH = 1 << 40
_MAX_SEQ = 1 << 31


class DataPipeline(Spec):
    """The input pipeline (chapter 8.4.2 / 8.5.1). The default is "never the bottleneck"."""

    sample_bytes: Bytes | None = None
    """Bytes read from storage per sample (None: data is already in memory; no fetch cost)."""
    storage_bandwidth_bytes_per_s: BytesPerS | None = None
    """Storage read rate; None uses the node's NVMe (or no limit when the node has none)."""
    network_bandwidth_bytes_per_s: BytesPerS | None = None
    """Remote storage network rate; fetch rate is min(disk, network) × access_factor."""
    access_factor: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Sequential = 1; random small reads lower it."""
    transform_s_per_sample: Seconds = 0.0
    """CPU seconds of preprocessing per sample for one worker."""
    transform_stages_s: list[Seconds] | None = None
    """Per-stage CPU seconds per sample (decode, augment, ...); summed, and exclusive with the above."""
    num_workers: Annotated[int, Field(ge=0, le=1024)] = 0
    """DataLoader workers per device; 0 = the training process preprocesses (never overlapped)."""
    prefetch_factor: Annotated[int, Field(ge=0, le=64)] = 2
    """Batches each worker keeps ready; 0 disables prefetching (fetch, process, transfer and compute add up)."""
    pin_memory: bool = True
    """Pinned host buffers: full-rate async host→device copies; pageable copies run at half rate."""
    device_bytes_per_sample: Bytes | None = None
    """Bytes copied host→device per sample (defaults to sample_bytes)."""
    handoff_s_per_batch: Seconds = 0.0
    """Seconds the training loop itself spends taking each batch: with workers, the batch's trip through
    the worker result queue (unpickling from shared memory, waking the loop); without, collation and
    the Python around each ``__getitem__``. On the loop's critical path, so it adds to every step.
    Measure it with a loader whose transform and compute cost nothing (validation/pipeline.py
    ``handoff_s``); 0 leaves it out."""

    @model_validator(mode="after")
    def _check(self) -> DataPipeline:
        if self.transform_stages_s is not None and self.transform_s_per_sample:
            raise ValueError("give transform_s_per_sample or transform_stages_s, not both")
        return self

    @property
    def transform_seconds_per_sample(self) -> float:
        return sum(self.transform_stages_s) if self.transform_stages_s else self.transform_s_per_sample

    @property
    def prefetch(self) -> bool:
        return self.num_workers > 0 and self.prefetch_factor > 0


class EvalConfig(Spec):
    """Evaluation every ``every_steps`` training steps: forward only, its own batch."""

    every_steps: Annotated[int, Field(ge=1)]
    batches: Annotated[int, Field(ge=1)] = 1
    batch_size: Annotated[int, Field(ge=1)] | None = None
    """Samples per evaluation batch (whole job); defaults to the training global batch."""


class TrainConfig(Spec):
    """How to train. Field names are the public API (DESIGN.md)."""

    global_batch_size: Annotated[int, Field(ge=1, le=_MAX_BATCH)]
    micro_batch_size: Annotated[int, Field(ge=1, le=_MAX_BATCH)] = 1
    seq_len: Annotated[int, Field(ge=1, le=_MAX_SEQ)] | None = None
    """Tokens per sample for sequence models; None keeps the model's own (or a non-sequence model)."""
    precision: Precision = Precision.BF16
    emulate_precision: bool = False
    """Cost a precision the device has no matrix units for (fp8 on an A100 or a CPU) at the nearest
    dtype it has, as a framework that upcasts would; the report warns. False: such a config is
    infeasible with a reason naming the device's dtypes."""
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    dp: Degree | None = None
    """Data-parallel degree; None = whatever the cluster leaves after tp × pp × cp."""
    tp: Degree = 1
    pp: Degree = 1
    cp: Degree = 1
    ep: Degree = 1
    """Expert parallelism, carved out of the dp × cp ranks (as Megatron-core does)."""
    zero_stage: Literal[0, 1, 2, 3] = 0
    """0 none; 1 optimizer states; 2 + gradients; 3 + parameters (== FSDP full shard)."""
    reshard_after_forward: bool = True
    """ZeRO-3 / FSDP: free each unit's gathered parameters after its forward and gather them again for
    its backward (FSDP2's ``fully_shard(reshard_after_forward=True)``, its default). False keeps every
    unit gathered from its forward to its backward: one all-gather per micro-batch instead of two, and
    the stage's whole unsharded weights alive at the start of the backward."""
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    virtual_stages: Degree = 1
    """Model chunks per pipeline rank; > 1 only with the interleaved schedule."""
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    """Activation recomputation. ``none``: every layer keeps what its backward needs. ``selective``:
    parts of each layer recomputed (``recompute_modules``; Megatron's ``--recompute-granularity
    selective``, Korthikanti et al. 2022). ``full``: each block keeps only its input and is re-run in
    the backward (Megatron ``full``; ``recompute_num_layers`` / ``recompute_every_k_blocks`` for
    Megatron's block method and torchtitan's per-layer AC every k blocks). ``selective-op``:
    torchtitan's per-op selective AC (``selective_ac_option = "op"``): every transformer layer is
    checkpointed with a policy that saves the outputs of its matmuls except every second one (counted
    in execution order within the layer) and of attention, and recomputes the rest
    (parallel/recompute.py ``op_sac_plan``)."""
    recompute_modules: list[str] | None = None
    """With recompute='selective': which parts of each layer are recomputed, as Megatron-Core's
    --recompute-modules names them (core_attn, mlp, layernorm, moe) or op-name patterns inside a
    layer ('mlp/act', 'attn/*'). None: the attention core (Korthikanti et al. 2022 §5)."""
    recompute_num_layers: Annotated[int, Field(ge=0, le=100_000)] | None = None
    """With recompute='full': fully recompute only the first N layers of each pipeline stage; the
    others keep their activations (Megatron --recompute-method block --recompute-num-layers N).
    None: every layer."""
    recompute_every_k_blocks: Annotated[int, Field(ge=1)] | None = None
    """With recompute='full': checkpoint only every k-th block (k=1 is every block)."""
    first_stage_layers: Annotated[int, Field(ge=0, le=100_000)] | None = None
    """Transformer layers on the first pipeline stage, the others split evenly over the rest
    (Megatron-LM / Megatron-Core ``--decoder-first-pipeline-num-layers``): frameworks put fewer there,
    where the embedding sits and, under 1F1B, the most micro-batches are in flight. None: an even split.
    Non-interleaved schedules only."""
    last_stage_layers: Annotated[int, Field(ge=0, le=100_000)] | None = None
    """Transformer layers on the last pipeline stage, beside the output layer and the loss
    (``--decoder-last-pipeline-num-layers``). None: an even split."""
    fused_optimizer: bool = True
    """Legacy switch, read only when set explicitly (or by a stack) and ``optimizer_impl`` is None:
    True ≡ ``optimizer_impl="fused"``, False ≡ ``"for-loop"``."""
    optimizer_impl: Literal["for-loop", "foreach", "fused"] | None = None
    """How the optimizer step runs (PyTorch ``foreach=False`` / ``foreach=True`` / ``fused=True``):
    for-loop = one kernel per op per tensor with temporaries; foreach = the same ops as multi-tensor
    kernels; fused = one pass. None: what PyTorch picks for the device (foreach on GPUs, the for-loop
    on CPUs), unless ``fused_optimizer`` is set explicitly. Costs: ``simtrain/cost/optimizer.py``."""
    grad_clipping: bool = True
    """Clip gradients by their global norm before the step (Megatron --clip-grad 1.0, torchtitan
    max_norm, HF max_grad_norm=1.0: all on by default): a read pass for the norm, a scaling pass."""
    zero_grad_to_none: bool = False
    """``optimizer.zero_grad(set_to_none=True)`` (PyTorch's default since 2.0): the gradients are
    freed, not zeroed, so the step has no zeroing pass (the next backward writes fresh tensors, costed
    as first touch where the device has that rate). False: a pass zeroes a persistent gradient buffer
    (Megatron / DeepSpeed contiguous buffers, ``set_to_none=False``)."""
    dp_overlap: bool = True
    """Overlap gradient all-reduce buckets with the backward pass."""
    dp_bucket_bytes: Bytes = 25 * 2**20
    frozen_prefixes: list[str] = Field(default_factory=list)
    """Op-name prefixes whose parameters are frozen: no gradients, no optimizer state."""
    flash_attention: bool | None = None
    """Fused attention (scores never materialised); None keeps the model's setting."""
    attention_flops: Literal["full", "causal"] = "full"
    """MFU convention for causal attention: 'full' (PaLM, the default) or 'causal' (halved)."""
    rank_order: str = "tp-cp-ep-dp-pp"
    """Parallel axes from innermost (adjacent ranks, same node) to outermost."""
    moe_load_imbalance: Annotated[float, Field(ge=1, le=100)] = 1.0
    memory_overhead_fraction: Annotated[float, Field(ge=0, le=1)] = 0.05
    """Allocator fragmentation + framework workspace, as a fraction of usable device memory."""
    data: DataPipeline = Field(default_factory=DataPipeline)
    eval: EvalConfig | None = None
    stack: str | Stack | None = None
    """Software stack: a preset name (``st.stack_names()``: megatron-core, fsdp2, fsdp2-compile,
    deepspeed, ddp, llm-foundry, megatron-lm, reference), a ``Stack``, or in a file a mapping
    ``{preset: NAME, knob: value, ...}`` overriding some knobs; ``realisation: prior`` in it runs the
    preset's kernels for a framework it only stands for (``Stack.with_prior_realisation``: the
    cross-stack prior's idle and host gaps instead of those fitted on the preset's own framework).
    None: the neutral reference stack."""

    @field_validator("stack", mode="before")
    @classmethod
    def _stack_overrides(cls, value):
        """``{preset: NAME, [realisation: fitted | prior,] knob: value}`` is the preset (for a framework
        it only stands for under ``realisation: prior``) with those knobs replaced (parsed here so a bad
        knob is reported as ``stack.<knob>`` at construction)."""
        if isinstance(value, dict) and "preset" in value:
            from simtrain.specs.stack import load_stack
            knobs = {k: v for k, v in value.items() if k not in ("preset", "realisation")}
            base = load_stack(str(value["preset"]))
            realisation = value.get("realisation", "fitted")
            if realisation == "prior":
                base = base.with_prior_realisation()
            elif realisation != "fitted":
                raise ValueError(f"stack.realisation must be 'fitted' (the preset's own framework) or 'prior' (a "
                                 f"framework the preset only stands for), got {str(realisation)[:40]!r}")
            return Stack.model_validate({**base.model_dump(), **knobs, "name": knobs.get("name", base.name)})
        return value

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        problems = self._local_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _local_problems(self) -> list[str]:
        out: list[str] = []
        if self.global_batch_size % self.micro_batch_size:
            out.append(f"micro_batch_size={self.micro_batch_size} does not divide "
                       f"global_batch_size={self.global_batch_size}")
        if self.dp is not None:
            if self.global_batch_size % self.dp:
                out.append(f"dp={self.dp} does not divide global_batch_size={self.global_batch_size}")
            elif (self.global_batch_size // self.dp) % self.micro_batch_size:
                out.append(f"micro_batch_size={self.micro_batch_size} does not divide the per-replica "
                           f"batch {self.global_batch_size}/dp={self.global_batch_size // self.dp}")
            if (self.dp * self.cp) % self.ep:
                out.append(f"ep={self.ep} must divide dp × cp = {self.dp} × {self.cp}")
        out += self._schedule_problems()
        if self.rank_order_axes is None:
            out.append(f"rank_order {self.rank_order!r} must name each of tp, cp, ep, dp, pp once, joined by '-'")
        if self.recompute_every_k_blocks is not None and self.recompute is not Recompute.FULL:
            out.append("recompute_every_k_blocks needs recompute='full'")
        if self.recompute_num_layers is not None and self.recompute is not Recompute.FULL:
            out.append("recompute_num_layers needs recompute='full'")
        if self.recompute_num_layers is not None and self.recompute_every_k_blocks not in (None, 1):
            out.append("give recompute_num_layers or recompute_every_k_blocks, not both")
        if self.recompute_modules is not None:
            from simtrain.parallel.recompute import check_modules
            if self.recompute is not Recompute.SELECTIVE:
                out.append("recompute_modules needs recompute='selective'")
            out += check_modules(self.recompute_modules)
        if self.optimizer_impl is not None and "fused_optimizer" in self.model_fields_set and \
                (self.optimizer_impl == "fused") != self.fused_optimizer:
            out.append(f"optimizer_impl={self.optimizer_impl!r} contradicts fused_optimizer={self.fused_optimizer}; "
                       "give one of them")
        if isinstance(self.stack, str):
            from simtrain.specs.stack import stack_names
            if self.stack not in stack_names():
                out.append(f"stack {self.stack!r} is not a preset ({', '.join(stack_names())})")
        return out

    def _schedule_problems(self) -> list[str]:
        out = []
        schedule = self.pipeline_schedule
        if schedule is PipelineSchedule.INTERLEAVED:
            if self.pp < 2:
                out.append("pipeline_schedule 'interleaved-1f1b' needs pp >= 2")
            if self.virtual_stages < 2:
                out.append("pipeline_schedule 'interleaved-1f1b' needs virtual_stages >= 2")
        elif schedule is PipelineSchedule.DUALPIPE_V:
            if self.pp < 2:
                out.append("pipeline_schedule 'dualpipev' needs pp >= 2")
            if self.virtual_stages != 2:
                out.append(f"pipeline_schedule 'dualpipev' runs two chunks per rank (a V): set virtual_stages=2, "
                           f"got {self.virtual_stages}")
        elif self.virtual_stages != 1:
            out.append(f"virtual_stages={self.virtual_stages} needs pipeline_schedule 'interleaved-1f1b' "
                       "(or 2 with 'dualpipev')")
        if schedule is PipelineSchedule.ZB_H1 and self.pp < 2:
            out.append("pipeline_schedule 'zb-h1' needs pp >= 2")
        return out

    @property
    def rank_order_axes(self) -> tuple[str, ...] | None:
        axes = tuple(self.rank_order.split("-"))
        return axes if sorted(axes) == sorted(("tp", "cp", "ep", "dp", "pp")) else None

    @classmethod
    def from_megatron(cls, args, **overrides) -> TrainConfig:
        """The config of a Megatron-LM / NeMo argument list or string (``st.from_megatron`` gives the
        full import: stack, model shape, what was ignored); ``overrides`` replace any field."""
        return _framework("from_megatron", args, overrides)

    @classmethod
    def from_torchtitan(cls, toml, **overrides) -> TrainConfig:
        """The config of a torchtitan job TOML (text or path); see :meth:`from_megatron`."""
        return _framework("from_torchtitan", toml, overrides)

    @classmethod
    def from_deepspeed(cls, config, **overrides) -> TrainConfig:
        """The config of a DeepSpeed JSON (text, dict or path); see :meth:`from_megatron`."""
        return _framework("from_deepspeed", config, overrides)

    @classmethod
    def build(cls, file: str | None = None, **fields) -> TrainConfig:
        """Construct, turning validation errors into a SpecError that names ``file`` and the field."""
        try:
            return cls.model_validate(fields)
        except ValidationError as err:
            raise spec_error_from_validation(err, file) from None


def _framework(name: str, source, overrides: dict) -> TrainConfig:
    # simtrain.frameworks builds on this module; it is reached by name when called, so the spec layer
    # has no import edge up to it (tests/unit/test_import_cycles.py)
    import importlib
    importer = getattr(importlib.import_module("simtrain.frameworks"), name)
    world = overrides.pop("world_size", None)
    return importer(source, world_size=world).train_config(**overrides)


def resolve_dp(cfg: TrainConfig, devices_count: int) -> tuple[int | None, list[str]]:
    """The data-parallel degree on ``devices_count`` devices, or None and the reasons it has none."""
    inner = cfg.tp * cfg.pp * cfg.cp
    if cfg.dp is None:
        if devices_count % inner:
            return None, [f"the cluster's {devices_count} devices are not a multiple of tp × pp × cp = "
                          f"{cfg.tp} × {cfg.pp} × {cfg.cp} = {inner}"]
        dp = devices_count // inner
    else:
        dp = cfg.dp
        if dp * inner != devices_count:
            return None, [f"dp × tp × pp × cp = {dp} × {cfg.tp} × {cfg.pp} × {cfg.cp} = {dp * inner} "
                          f"does not match the cluster's {devices_count} devices"]
    reasons = []
    if cfg.global_batch_size % dp:
        reasons.append(f"dp={dp} does not divide global_batch_size={cfg.global_batch_size}")
    elif (cfg.global_batch_size // dp) % cfg.micro_batch_size:
        reasons.append(f"micro_batch_size={cfg.micro_batch_size} does not divide the per-replica batch "
                       f"{cfg.global_batch_size}/dp={cfg.global_batch_size // dp}")
    if (dp * cfg.cp) % cfg.ep:
        reasons.append(f"ep={cfg.ep} must divide dp × cp = {dp} × {cfg.cp}")
    return (dp if not reasons else None), reasons


def _stage_layer_problems(cfg: TrainConfig, layers: int | None) -> list[str]:
    """Why ``first_stage_layers`` / ``last_stage_layers`` cannot cut the model's ``layers`` (empty = fine):
    Megatron asks the layers left to divide evenly over the stages left."""
    given = [n for n in (cfg.first_stage_layers, cfg.last_stage_layers) if n is not None]
    if not given:
        return []
    if cfg.pp < 2 or cfg.virtual_stages > 1:
        return ["first_stage_layers / last_stage_layers need pp ≥ 2 and a non-interleaved schedule "
                f"(pp={cfg.pp}, virtual_stages={cfg.virtual_stages})"]
    if layers is None:
        return ["first_stage_layers / last_stage_layers need a model with repeated layers"]
    rest, stages = layers - sum(given), cfg.pp - len(given)
    if rest < 0 or (stages > 0 and rest % stages) or (stages == 0 and rest):
        return [f"first_stage_layers / last_stage_layers leave {rest} of the model's {layers} layers for "
                f"{stages} other stage(s): they must split evenly"]
    return []


def _micro_batch_problems(cfg: TrainConfig, devices_count: int) -> list[str]:
    """DualPipeV needs at least 2 × pp micro-batches per step (its order fills both arms of the V)."""
    if cfg.pipeline_schedule is not PipelineSchedule.DUALPIPE_V:
        return []
    dp, reasons = resolve_dp(cfg, devices_count)
    if reasons or not dp:
        return []
    m = cfg.global_batch_size // dp // cfg.micro_batch_size
    if m < 2 * cfg.pp:
        return [f"pipeline_schedule 'dualpipev' needs at least 2 × pp = {2 * cfg.pp} micro-batches per step, got "
                f"{m} (global_batch_size {cfg.global_batch_size} / dp {dp} / micro_batch_size {cfg.micro_batch_size})"]
    return []


def layout_problems(cfg: TrainConfig, devices_count: int, model=None) -> list[str]:
    """Every reason the layout cannot run on ``devices_count`` devices for ``model`` (empty = fine).

    Model facts are read through ``model.layout_facts()`` (heads, kv_heads, experts, blocks, seq_len)
    so this module does not depend on the graph package.
    """
    _, reasons = resolve_dp(cfg, devices_count)
    reasons += _micro_batch_problems(cfg, devices_count)
    if model is None:
        return reasons
    facts = model.layout_facts()
    heads, kv = facts.get("heads"), facts.get("kv_heads")
    if cfg.tp > 1 and heads and heads % cfg.tp:
        reasons.append(f"tp={cfg.tp} does not divide the model's {heads} attention heads")
    if cfg.tp > 1 and kv and kv != heads and kv % cfg.tp and cfg.tp % kv:
        reasons.append(f"tp={cfg.tp} and the model's {kv} KV heads neither divide the other")
    blocks = facts.get("blocks")
    if blocks is not None and cfg.pp * cfg.virtual_stages > blocks:
        reasons.append(f"pp × virtual_stages = {cfg.pp} × {cfg.virtual_stages} exceeds the model's {blocks} blocks")
    reasons += _stage_layer_problems(cfg, facts.get("layers"))
    experts = facts.get("experts")
    if cfg.ep > 1 and not experts:
        reasons.append(f"ep={cfg.ep} needs a mixture-of-experts model")
    elif experts and experts % cfg.ep:
        reasons.append(f"ep={cfg.ep} does not divide the model's {experts} experts")
    seq = cfg.seq_len or facts.get("seq_len")
    if cfg.cp > 1 and (not seq or seq % (2 * cfg.cp)):
        reasons.append(f"cp={cfg.cp} needs seq_len divisible by 2 × cp = {2 * cfg.cp} (got {seq})")
    if cfg.sequence_parallel and seq and cfg.tp > 1 and seq % cfg.tp:
        reasons.append(f"sequence_parallel needs seq_len={seq} divisible by tp={cfg.tp}")
    return reasons

