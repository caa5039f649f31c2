"""The software stack as an input: the framework, kernel and runtime choices that set how much of a
device's measured component efficiency a training step realises.

A device profile (``Efficiency``) says what the hardware reaches on isolated kernels (GEMM by shape,
fused attention by kernel family, HBM streaming, NCCL bus bandwidth). The same model on the same
GPUs runs at very different speeds under Megatron-Core and under eager FSDP; what differs is not
the GPU but these knobs. Presets ship in ``simtrain/specs/stacks/*.yaml`` (one per framework, every
value with its reason); each knob can be overridden::

    st.TrainConfig(..., stack="fsdp2")
    st.TrainConfig(..., stack={"preset": "fsdp2", "attention_kernel": "cudnn"})
    st.TrainConfig(..., stack=st.load_stack("megatron-core").model_copy(update={"tp_comm_overlap": 0.5}))

Knobs that are also ``TrainConfig`` fields (``zero_stage``, ``dp_overlap``, ``fused_optimizer``,
``flash_attention``) are *defaults*: a field the user set explicitly wins (see
:func:`simtrain.specs.stack_resolve.resolve_stack`).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from simtrain.specs.base import Seconds, Spec

__all__ = ["Stack", "AttentionKernelName", "load_stack", "stack_names", "DEFAULT_STACK", "DEFAULT_GPU_STACK",
           "FRAMEWORK_KNOBS"]

AttentionKernelName = Literal["default", "cudnn", "fa3", "fa2", "sdpa", "triton", "triton-fa1", "eager"]
"""Fused-attention kernel families (components.md §2): cuDNN / Transformer Engine fused attention,
FlashAttention-3, FlashAttention-2, PyTorch SDPA (its flash backend is FA2), Triton kernels
(the Triton tutorial's FA2); ``triton-fa1`` = FlashAttention in Triton (HazyResearch
``flash_attn_triton.py``, 2022, with an attention-bias input: the kernel llm-foundry's ``attn_impl: triton``
copies for ALiBi); ``eager`` = materialised QKᵀ → softmax → A·V;
``default`` = the device profile's generic ``attention`` curve (the model keeps its own fused flag)."""

DEFAULT_STACK = "reference"
"""The stack used when a TrainConfig names none: neutral knobs, kernels costed from the device
profile alone (the behaviour of simtrain before stacks were inputs)."""
DEFAULT_GPU_STACK = "generic-gpu"
"""The stack used on a GPU when a TrainConfig names none (resolved with the device): the reference
kernels plus the fit pool's cross-stack idle share, so a prediction out of the box carries the
realisation every framework in the pool showed (docs/fit-pool.md)."""
FRAMEWORK_KNOBS = ("idle_gap_fraction", "kernel_gap_s")
"""The realisation knobs of a framework's own code (cost/realisation.py): idle between kernels and per
launch, fitted per stack on public runs, and what the cross-stack prior pools for a framework never
fitted. The attention realisation and the interference residual belong to the kernels and collectives
a preset names, and stay with them."""

Share = Annotated[float, Field(ge=0, le=1)]

_PRECISION_MODES = {"grad_reduce_fp32": ("bf16", "fp32 only where the 16-bit dtype is bf16"),
                    "grad_buffer_16bit": ("fp16", "16-bit only under fp16")}
"""The knobs that are true, false or a precision-dependent mode (Megatron's rules): the mode and what it means."""


class Stack(Spec):
    """One software stack (framework + kernels + runtime). Every knob is documented and overridable."""

    model_config = ConfigDict(**Spec.model_config, use_attribute_docstrings=True)

    name: Annotated[str, Field(min_length=1, max_length=100)]
    description: str = ""
    source: Annotated[str, Field(min_length=2, max_length=600)] = "user-defined"
    """Where the knob values come from (framework docs, components.md rows)."""

    attention_kernel: AttentionKernelName = "fa2"
    """Which fused-attention kernel family runs attention; its efficiency comes from the device's
    ``attention_kernels`` table. ``eager`` materialises the scores (separate bmm / softmax kernels)."""
    recompute_early_stop: bool = False
    """Full recomputation through PyTorch's non-reentrant checkpoint, which stops once every tensor the
    backward needs is rebuilt (``torch.utils.checkpoint``'s default early stop): a pre-LN transformer
    block's second MLP matmul and the residual add after it are never recomputed
    (parallel/recompute.py ``early_stop_tail``). False: the whole forward is recomputed (Megatron's and
    DeepSpeed's own, reentrant, checkpointing; PyTorch before the early stop)."""
    fused_activation: bool = False
    """The gated activation (SwiGLU) runs as one fused kernel that saves only its input and recomputes
    silu in the backward (Megatron-Core ``bias_swiglu_fusion``, on by default; Transformer Engine;
    Inductor under ``torch.compile``), not eager PyTorch's silu and multiply, which also keep silu(gate):
    a Llama layer keeps ~31.75 instead of ~38.25 bytes per token per hidden unit. Other activations:
    no effect."""
    loss_kernel: Literal["upcast", "eager", "in-place", "fused"] = "upcast"
    """How the LM loss runs, which sets what it keeps for the backward and what its backward holds at
    once (n = tokens · vocabulary logits on the rank, cost/memory.py ``LOSS_FP32_GRADIENTS``):

    * ``upcast`` — the logits upcast to fp32, fp32 log-probabilities kept (4n B) and one fp32 gradient
      of the logits in the backward (4n B): simtrain's generic model.
    * ``eager`` — PyTorch eager ``F.cross_entropy(logits.float())`` (torchtitan's ``loss_fn``,
      uncompiled): ``log_softmax`` and ``nll_loss`` are separate autograd nodes, so the backward holds
      the dense fp32 ``nll_loss`` gradient and the ``log_softmax`` input gradient beside the kept
      log-probabilities: two fp32 gradients (8n B). In time, at 16-bit activations, the chain's own
      kernels: the upcast copy, ``log_softmax``, ``nll_loss`` and their backwards, 36 B a logit against
      the generic rule's 16 (graph/rules/lookup.py).
    * ``in-place`` — Megatron's ``vocab_parallel_cross_entropy``: the fp32 softmax is kept and turned
      into the gradient in place (``grad_input = softmax``; ``mul_``): no further fp32 tensor. In time, at
      16-bit activations, its passes: the upcast, row max, subtract, exp, row sum, divide; backward the
      multiply and the cast back: 52 B a logit against the generic rule's 16.
    * ``fused`` — one kernel on the logits in their own dtype (flash-attn ``CrossEntropyLoss``,
      llm-foundry's default ``loss_fn: fused_crossentropy``): it keeps the logits and an fp32
      log-sum-exp per token, and writes the gradient in the activation dtype: no fp32 per logit."""
    train_metric_losses: Annotated[int, Field(ge=0, le=8)] = 0
    """Cross-entropies of the logits the trainer evaluates again per micro-batch, outside autograd, to
    log training metrics: each is PyTorch's ``CrossEntropyLoss`` on the kept logits under autocast, an
    fp32 upcast and a log-softmax pass (graph/rules/lookup.py ``cross_entropy_metric``). Composer's
    trainer updates the model's train metrics after every micro-batch's backward
    (``Trainer._train_microbatch`` → ``_eval_train_metrics``, composer v0.16.4), and llm-foundry's MPT
    model registers two, ``LanguageCrossEntropy`` and ``LanguagePerplexity`` (``ComposerMPTCausalLM``,
    ``use_train_metrics`` default True, llm-foundry @b2a43a147), each running its own loss: 2. Memory-bound
    work on tokens × vocabulary logits, so it weighs on small models (a 125M model's logits are as large
    as a 7B one's per token). 0: the trainer logs the loss it computed (most)."""
    norm_kernel: Literal["fused", "eager-fp32"] = "fused"
    """How RMSNorm runs: ``fused`` — one kernel forward, one per gradient (PyTorch's fused ``rms_norm``,
    Apex, Transformer Engine, a Triton kernel such as torchtitan's ``fused_rmsnorm``); ``eager-fp32`` —
    the module written as PyTorch ops in fp32 (``x.float()``, ``pow``, ``mean``, ``rsqrt``, multiply,
    cast back, ×γ: Meta's reference Llama, torchtitan's ``norm_type = "rmsnorm"`` of 2024, HF
    ``LlamaRMSNorm``), each its own kernel: ×9 the traffic, and an fp32 copy of the input kept
    (graph/rules/norm.py). LayerNorm: no effect."""
    rotary_kernel: Literal["fused", "eager-fp32", "eager-fp32-matrix"] = "fused"
    """How the rotary embedding runs: ``fused`` — one kernel per phase (Transformer Engine, Apex,
    flash-attn's rotary, Inductor); ``eager-fp32`` — ``view_as_complex(x.float()) * freqs_cis`` cast
    back (Meta's reference Llama, torchtitan), three kernels per tensor: 20 B per element against 4;
    ``eager-fp32-matrix`` — each pair of ``x.float()`` times its position's 2×2 rotation matrix, summed,
    cast back (IBM's foundation-model-stack), four kernels per tensor: 36 B (graph/rules/attention.py)."""
    elementwise_bytes_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Bytes moved by elementwise and norm ops relative to running each op as its own kernel
    (eager: 1). A fused chain of k ops reads its input and writes its output once: ≈ 1/k of the
    eager traffic; Megatron's fused bias-GeLU and bias-dropout-add chains (k = 2–3) give ≈ 0.5."""
    elementwise_kernels_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Kernel launches of elementwise and norm ops relative to one per op (fusion launches fewer)."""
    host_dispatch_s: Seconds = 0.0
    """CPU seconds to dispatch one kernel (eager PyTorch ≈ 5–10 µs per op, Inductor ≈ 7–9 µs per
    kernel, CUDA-graph replay ≈ 4 µs: components.md §5). 0 = never the limit."""
    gpu_waits_on_cpu: bool = False
    """False: the CPU runs ahead of the GPU (launch queue), so a phase costs max(GPU, CPU) time.
    True: the GPU idles during each dispatch (synchronising code), so they add."""
    tp_comm_overlap: Share = 0.0
    """Share of tensor-parallel collective time hidden behind the GEMMs that consume / produce it
    (Megatron-Core ``--tp-comm-overlap`` with userbuffers, PyTorch async TP). 0 = on the critical path
    (but see ``tp_dgrad_comm_async``)."""
    tp_dgrad_comm_async: bool = False
    """The column-parallel linears' input-gradient collective (all-reduce; reduce-scatter with sequence
    parallelism) is issued asynchronously and runs beside their weight-gradient GEMM, with or without
    ``--tp-comm-overlap`` (Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication.backward``:
    ``async_op=True`` before ``_wgrad_gemm``; Transformer Engine's ``module/linear.py`` backward, "Overlap
    dgrad-RS/AR with wgrad"). Of the backward's tensor-parallel collectives that hides all without
    sequence parallelism and half with it: the row-parallel output gradient's all-gather stays on the
    critical path (comm_tasks.tp_hidden_share).
    False: PyTorch DTensor TP and 2021 Megatron-LM, whose backward collectives wait in the stream."""
    pp_comm_overlap: Share = 0.0
    """Share of the pipeline's point-to-point sends hidden behind the next chunk's compute under the
    interleaved schedule (Megatron-LM / Megatron-Core ``overlap_p2p_comm``: the training arguments turn
    it on by default, ``--no-overlap-p2p-communication`` off, and force it off for a non-interleaved
    schedule; the sends are posted with isend / irecv before the compute and waited for after it).
    Other schedules keep their sends on the critical path. 0 = never hidden."""
    comm_compute_slowdown: Share = 0.0
    """While an overlapped collective runs, the compute beside it slows down (NCCL kernels take SMs
    and HBM bandwidth): a hidden collective of t seconds still costs slowdown · t."""
    comm_sms: Annotated[int, Field(ge=0, le=1024)] = 0
    """Streaming multiprocessors an overlapped collective holds while it runs (NCCL runs one thread
    block per channel; Transformer Engine's userbuffers TP overlap reserves 16 SMs by default;
    DeepSeek-V3 gave 20 of 132 to communication). While it runs the compute beside it has that share
    of the device's SMs fewer (``parallel_tiles``): the interference's physical part, added to
    ``comm_compute_slowdown`` (cost/realisation.py ``interference_slowdown``). 0: not modelled."""
    idle_gap_fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Realisation: seconds the device idles between kernels per second of kernel time in a training
    step (synchronisations, allocator calls, host-side Python between launches, uneven work between
    ranks inside a collective group): what no component benchmark of isolated kernels sees (MegaScale,
    Jiang et al. NSDI '24 §4–5; Lumos, MLSys '25). Charged on the pipeline's span as the
    ``idle_gaps`` line of the breakdown. Fitted per stack on the fit pool
    (validation/published/fit_priors.py); 0 = none."""
    kernel_gap_s: Seconds = 0.0
    """Realisation: idle seconds per kernel launch on the device's stream beyond the launch overhead
    (the gap between one kernel's end and the next one's start when the host is only just ahead:
    eager frameworks with many small kernels). Weighs more on a faster GPU and a smaller model, whose
    kernels are shorter. Charged as the ``host_gaps`` line of the breakdown; 0 = none."""
    attention_realisation: Annotated[float, Field(gt=0, le=2)] = 1.0
    """Realisation of the stack's attention kernel in a training step over the component curve of its
    family (the model's masking and bias variants, e.g. ALiBi in llm-foundry's Triton kernel, and
    head sizes the benchmark did not run): multiplies the attention ceilings. 1 = as benchmarked."""
    realisation_source: Annotated[str, Field(max_length=300)] = ""
    """Where the realisation knobs (idle and host gaps, attention realisation, stragglers, the residual
    interference) come from: "fit pool ..." when validation/published/fit_priors.py wrote them; empty
    when they are the defaults."""
    straggler_sigma: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Realisation: σ of the lognormal step-to-step variation of one rank's work (host jitter, GC
    pauses, thermal / power throttling differences, data imbalance). A synchronous step waits for the
    slowest of N ranks: ``E[max of N] − 1`` times the work (cost/variability.py), which grows with the
    job's size (MegaScale §5 on stragglers at scale). Charged as the ``stragglers`` line; 0 = none."""
    slow_host_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """Realisation: share of a fleet's hosts (nodes) that run persistently slow. A synchronous job whose
    hosts include at least one waits for it, which happens with probability ``1 − (1 − q)^hosts``: rare
    on a few nodes, near certain on thousands (cost/realisation.py ``slow_host_share``). MegaScale
    (Jiang et al., NSDI '24) §5.1: "a minor fraction of machines (approximately 0.5%) exhibit
    substantially slower performance", the step "predominantly determined by the slowest machine's
    performance"; §6.3: such hosts "took approximately 10% more time to execute the same forward
    computations". 0 = none."""
    slow_host_step_loss: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Realisation: share of the pipeline span a step loses when a slow host (``slow_host_fraction``) is
    among its hosts, charged as part of the ``stragglers`` line. MegaScale §6.3: removing them gave "an
    approximate 0.7% improvement in MFU" (points, as the paper states MFU gains; of the 55.2 % its 175B
    reaches on 12,288 GPUs, Table 2): 0.7 / 55.2 ≈ 0.013 of the step."""
    fsdp_prefetch_layers: Annotated[int, Field(ge=0, le=64)] = 1
    """ZeRO-3 / FSDP: how many layers ahead parameters are all-gathered (0 = gathered on demand,
    fully exposed; 1 = FSDP's default forward/backward prefetch)."""
    fsdp_gather_copy_out: bool = False
    """ZeRO-3 / FSDP gathers into a flat buffer and copies each parameter out of it on the compute stream:
    per-parameter FSDP (FSDP2 ``fully_shard``: ``_fsdp_collectives.foreach_all_gather_copy_out``,
    ``torch.split_with_sizes_copy`` in ``FSDPParamGroup.wait_for_unshard``), a read and a write of every
    gathered element per gather, each forward and, resharded after it, each backward of every micro-batch
    (parallel/fsdp_comm.py ``fsdp_copy_out_s``). False: the gather lands in the parameters themselves
    (FSDP1's flat parameter, whose parameters are views; DeepSpeed ZeRO-3's partitioned parameters)."""
    fsdp_reduce_copy_in: bool = False
    """ZeRO-3 / FSDP copies each unit's unsharded gradients into the reduce-scatter's flat input, cast to
    the reduce dtype, and the compute stream waits for the copy before the next block's backward:
    per-parameter FSDP (FSDP2 ``_fsdp_collectives.foreach_reduce``: ``foreach_reduce_scatter_copy_in``,
    then "Only after the copy-in finishes can we free the gradients" — the copy on the compute stream or
    waited for by it, in every release since FSDP2's first). A read of every gradient element and a write
    in the reduce dtype, one kernel per unit, for each reduction (parallel/fsdp_comm.py
    ``fsdp_reduce_copy_in_s``). False: the reduction reads the gradients where they are (FSDP1's flat
    gradient, cast on its post-backward stream, which the compute stream does not wait for)."""
    fsdp_root_unit: bool = False
    """ZeRO-3 / FSDP wraps each transformer block as a unit and the whole model as a root unit holding
    what no block holds (embeddings, final norm, head): PyTorch FSDP under a per-block wrapping policy
    (torchtitan's ``parallelize_llama``: ``fully_shard`` on each block, then on the model; Composer's
    per-block FSDP wrap; fms-fsdp). The root is gathered once per micro-batch before its first block,
    both waited for; FSDP keeps it gathered through the backward (the root is not resharded after the
    forward: FSDP2 ``FSDPState._lazy_init``, FSDP1 ``_post_forward_reshard``), and reduce-scatters it
    with the first block's gradients after the backward's last op, both exposed; each block's
    gradients are one reduce-scatter (parallel/fsdp_units.py, parallel/fsdp_comm.py). In memory the
    root and the prefetched block sit gathered together at the loss's backward. False: the stage's
    weights in equal units, one per block, the gradients reduced in ``dp_bucket_bytes`` buckets."""
    fp8_recipe: Literal["delayed", "tensorwise", "rowwise"] = "delayed"
    """With precision fp8: how inputs are scaled and cast (Transformer Engine delayed scaling fuses
    the amax into the cast; torchao tensorwise current scaling adds an amax pass; rowwise also
    writes transposed copies). Sets the cast traffic per fp8 GEMM (cost/op_cost.py)."""
    fp8_allgather: bool = False
    """FSDP gathers parameters already cast to fp8 (torchao float8 all-gather): half the bytes."""
    fp8_weight_cache: bool = False
    """With precision fp8: each fp8 linear casts its weight (and writes the transposed copy the
    input-gradient GEMM reads) once a step, on a chunk's first micro-batch, and the other micro-batches
    reuse it: Megatron-Core's Transformer Engine layers pass ``is_first_microbatch`` (True once a step,
    then False; megatron/core/extensions/transformer_engine.py, since 2024-01 "add is_first_microbatch
    for TE"), and TE's ``module/linear.py`` recasts only when ``update_fp8_weights`` (is_first_microbatch
    None or True). The cast is then charged once a step (stage_state.stage_fp8_weight_cast_seconds), not in
    every forward. False: every forward casts the weight (torchao ``Float8Linear``, TE called without
    the flag). fp8 weights (``fp8_params``) are cast once a step either way, in the update."""
    zero_stage: Literal[0, 1, 2, 3] | None = None
    """Default ZeRO stage of the framework (Megatron's distributed optimizer = 1, FSDP full shard = 3);
    None leaves TrainConfig's."""
    dp_overlap: bool | None = None
    """Default for overlapping the gradient reduction with the backward pass; None leaves TrainConfig's."""
    fused_optimizer: bool | None = None
    """Default for a fused / multi-tensor optimizer step; None leaves TrainConfig's."""
    grad_fp32_buffer: bool = False
    """The gradients live in fp32, 4 bytes per parameter (sharded like the gradients), and no 16-bit
    copy is kept: Megatron's ``main_grad`` (each 16-bit gradient is accumulated into it as soon as it is
    computed); PyTorch FSDP / FSDP2 with mixed precision, whose sharded parameter is the fp32 copy and
    whose reduce-scattered gradient is cast to that dtype and accumulated into its ``.grad`` (FSDP
    ``MixedPrecision``, FSDP2 ``MixedPrecisionPolicy``: "the sharded parameters stay in full
    precision"). False: 16-bit gradients, plus an fp32 accumulation buffer when micro-batches
    accumulate (cost/memory.py ``param_memory``; DeepSpeed ZeRO keeps its gradient partitions in 16 bit)."""
    fp8_params: bool = False
    """In fp8 training, the compute weights of the layers whose GEMMs run in fp8 are stored in fp8
    (1 byte per parameter; the fp32 master copy stays with the optimizer): Megatron-LM's
    ``--fp8-param-gather`` ("keep the compute param in fp8 … and perform the param all-gather in
    fp8"; Transformer Engine ``fp8_model_init``). False: 16-bit weights, cast on the fly."""
    grad_buffer_16bit: bool | Literal["fp16"] = False
    """With ``grad_fp32_buffer``: the buffer holds 16-bit gradients instead (2 bytes per parameter).
    True: always — Megatron-LM's ``--grad-reduce-in-bf16``, which sets the ``main_grad`` buffer to the
    parameters' dtype (megatron/core/distributed/param_and_grad_buffer.py: ``grad_dtype`` is fp32 only
    with ``grad_reduce_in_fp32``). ``"fp16"``: only under fp16 — Megatron's own rule, the buffer in fp32
    exactly when the gradients are accumulated and reduced in fp32, which ``--bf16`` forces and
    ``--fp16`` leaves off (Megatron-LM ``megatron/model/distributed.py`` since 2021-03 "Bfloat with
    fp32 grad acc", e.g. @285068c8: ``torch.float if accumulate_allreduce_grads_in_fp32 else
    param.dtype``; the 16-bit ``.grad`` is freed once added in). False: fp32."""
    grad_reduce_fp32: bool | Literal["bf16"] = False
    """In a mixed-precision regime the data-parallel gradient reduction (all-reduce or reduce-scatter)
    runs in fp32, 4 bytes per element on the wire instead of the 16-bit gradient's 2. True: in every
    mixed-precision regime — torchtitan (``mixed_precision_reduce = "float32"``, its default), Composer
    FSDP mixed precision ``DEFAULT`` (``reduce_dtype`` fp32), Meta's Llama 3 ("reduce-scatter
    gradients in FP32 across data parallel workers in FSDP", §3.3.2). ``"bf16"``: only where the
    16-bit dtype is bf16 (bf16, and fp8 on top of bf16), while fp16 reduces in fp16 — Megatron-LM and
    Megatron-Core, whose arguments force ``accumulate_allreduce_grads_in_fp32`` on for ``--bf16``
    ("bfloat16 requires gradient accumulation and all-reduce to be done in fp32", megatron/arguments.py
    since Megatron-LM's bf16 support, e.g. @285068c8; Megatron-Core's training/arguments.py keeps it
    unless ``--grad-reduce-in-bf16``) and leave it off for ``--fp16``. False: reduced in the gradient's
    own dtype (DeepSpeed's ``communication_data_type`` default)."""
    grad_sync_every_micro_batch_from_zero: Annotated[int, Field(ge=0, le=3)] | None = None
    """From this ZeRO stage up, the data-parallel gradient reduction runs in every micro-batch's
    backward under gradient accumulation, not once after the last. PyTorch FSDP / FSDP2 reduce-scatter
    each backward unless the training loop turns gradient sync off (``no_sync`` /
    ``set_requires_gradient_sync(False)``), which torchtitan's loop and Composer's (its ``no_sync`` path
    is for DDP only) do not; DeepSpeed reduces every micro-step from ZeRO-2 up (engine.py
    ``allreduce_gradients``: "ZeRO stage >= 2 communicates during non gradient accumulation boundaries
    as well") and at the boundary below. Each of the first m − 1 reductions hides behind its own
    micro-batch's backward as the last one does behind the step's (parallel/comm_tasks.py
    ``step_comm``, phase ``accum``); not under pipelining, whose schedules sync on each stage's last
    backward only. None: once per step (Megatron's ``no_sync`` until the last micro-batch, DDP under
    ``no_sync``)."""

    def syncs_every_micro_batch(self, zero_stage: int) -> bool:
        """True when this stack reduces gradients in every micro-batch's backward at ``zero_stage``."""
        lowest = self.grad_sync_every_micro_batch_from_zero
        return lowest is not None and zero_stage >= lowest

    @property
    def fp8_weights_cast_per_step(self) -> bool:
        """True when an fp8 linear's weight is cast once a step rather than in every forward
        (``fp8_weight_cache``, or weights kept in fp8: ``fp8_params``)."""
        return self.fp8_weight_cache or self.fp8_params
    dp_grad_copy_passes: Annotated[float, Field(ge=0, le=16)] = 0.0
    """Gradient-sized reads and writes the data-parallel wrapper adds per step beside its collective,
    when the gradients are reduced over more than one rank (one pass = reading or writing every
    gradient once). PyTorch DDP (``gradient_as_bucket_view=False``, its default): 4 — each gradient
    is copied into its bucket with the 1/world scaling fused (read + write) and back after the
    all-reduce (read + write); with ``gradient_as_bucket_view=True`` only the in-place scaling is
    left: 2. Charged at the step's cold-memory rate with the optimizer step (compute-thread work no
    collective hides). 0 = not modelled."""
    transient_memory_scale: Annotated[float, Field(gt=0, le=4)] = 1.0
    """Scale on the memory model's transient tensors (the activations kept for the backward and the
    backward's working set): 1 = as modelled. ``st.calibrate_runs`` fits it from measured peaks
    (``RunRecord.peak_memory_bytes``) within ``calibrate.memory_term.MEMORY_SCALE_BOUNDS``;
    ``Calibration.config(cfg)`` applies it."""
    allocator_reserve_fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Caching-allocator reserve over the allocated peak (fragmentation, block rounding):
    reserved = allocated · (1 + this) + workspace_bytes."""
    workspace_bytes: Annotated[float, Field(ge=0, le=1e12)] = 0.0
    """Memory outside the allocator's tensors: CUDA context, NCCL buffers, cuBLAS / cuDNN workspaces."""

    @field_validator(*_PRECISION_MODES, mode="before")
    @classmethod
    def _bool_or_mode(cls, value, info):
        """One message for a bool-or-mode union (pydantic would give one per member)."""
        mode, meaning = _PRECISION_MODES[info.field_name]
        if value is True or value is False or value == mode:
            return value
        raise ValueError(f"Input should be true, false or '{mode}' ({meaning})")

    def with_overrides(self, **knobs) -> Stack:
        """A copy with ``knobs`` replaced, validated like a file (unknown knobs are an error)."""
        return Stack.model_validate({**self.model_dump(), **knobs})

    def with_prior_realisation(self) -> Stack:
        """This stack for a framework it only stands for (your own code on its kernels; Meta's 4D stack
        for Megatron-Core): its kernels, collectives and their realisation as fitted, with the framework
        gaps (:data:`FRAMEWORK_KNOBS`) of a framework never fitted, the cross-stack prior
        (``DEFAULT_GPU_STACK``: the median of the fitted stacks), in place of those its own framework's
        runs gave. No run has measured how that framework's code idles between the kernels, so it gets
        what leave-one-source-out gives a source whose stack has no other rows."""
        prior = load_stack(DEFAULT_GPU_STACK)
        note = f"{self.name}'s kernels as fitted; idle and host gaps the cross-stack prior ({prior.name})"
        return self.with_overrides(**{k: getattr(prior, k) for k in FRAMEWORK_KNOBS}, realisation_source=note)


def stack_names() -> list[str]:
    """Names of the shipped presets."""
    folder = resources.files("simtrain.specs") / "stacks"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


@functools.lru_cache(maxsize=64)
def load_stack(name: str) -> Stack:
    """A shipped preset by name (``simtrain/specs/stacks/NAME.yaml``), validated."""
    import yaml

    from simtrain.errors import SpecError
    from simtrain.specs.base import spec_error_from_validation
    if name not in stack_names():
        from simtrain.specs.references import did_you_mean
        hint = did_you_mean(name, stack_names())
        raise SpecError.one(None, "stack", f"unknown stack {str(name)[:60]!r}{' (' + hint + ')' if hint else ''}; "
                                           f"presets: {', '.join(stack_names())}")
    fname = f"stacks/{name}.yaml"
    text = (resources.files("simtrain.specs") / "stacks" / f"{name}.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or doc.pop("spec", None) != "stack":
        raise SpecError.one(fname, "spec", "a stack preset must start with 'spec: stack'")
    from pydantic import ValidationError
    try:
        return Stack.model_validate(doc)
    except ValidationError as err:
        raise spec_error_from_validation(err, fname) from None
