"""The held-out set's rows: each published run, what ran, on what, how fast and where it is printed.

docs/heldout.md has the table, the assumptions and the results; validation/published/heldout.py predicts
them. A row keeps what its source states; a setting the source leaves out takes the framework's
documented default and is listed in ``assumptions``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HeldoutRun", "HELDOUT_RUNS", "LF_README", "LF_DEF", "LF_SWEEP", "LF_ROCE", "LF_H100_NET",
           "LF_DEFAULT_MP", "LF_PURE_MP", "LF_EARLY_STOP", "LF_FULL_RECOMPUTE", "LF_PURE_1_13_KNOBS", "TT_FOREACH",
           "TT_EAGER_NORM", "NEMO_TABLE_ROWS", "NEMO_LEFT_OUT"]


@dataclass(frozen=True)
class HeldoutRun:
    """One published training run: what ran, on what, how fast, and where it is printed."""

    name: str
    model: str                      # workloads/models/<model>.yaml
    cluster: str                    # hardware_specs/clusters/<cluster>.yaml
    nodes: int
    stack: str                      # simtrain stack preset of the framework used
    global_batch_size: int          # sequences
    micro_batch_size: int
    seq_len: int
    precision: str
    metric: str                     # one of METRICS
    published: float
    definition: str                 # the source's definition of the metric and the conversion used
    source: str
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero_stage: int | None = None   # None: the stack preset's
    recompute: str = "none"
    recompute_every_k_blocks: int | None = None
    recompute_num_layers: int | None = None
    sequence_parallel: bool = False
    pipeline_schedule: str = "1f1b"
    virtual_stages: int = 1
    flash_attention: bool | None = None   # None: the stack's attention kernel decides
    dp_overlap: bool | None = None        # None: the stack preset's
    optimizer_impl: str | None = None     # None: the stack preset's (TrainConfig.optimizer_impl)
    rank_order: str | None = None         # None: TrainConfig's default (tp-cp-ep-dp-pp)
    nics_per_node: int | None = None      # network overrides where the source's fabric differs
    nic_link: str | None = None
    framework: str | None = None
    """The framework that produced the run where its preset only stands for it (None: the preset's)."""
    stack_knobs: tuple[tuple[str, object], ...] = ()
    """Stack knobs the run's own configuration sets beside its preset (torchtitan's ``norm_type``)."""
    assumptions: tuple[str, ...] = ()


TT_FOREACH = ("AdamW with foreach=True (torchtitan/optimizer.py @0413364; the fused step came as an option in June "
              "2024, 40f8fd007): optimizer_impl 'foreach', not the preset's fused (today's default)")
TT_EAGER_NORM = ("norm_type = 'rmsnorm' (train_configs/llama2_70b.toml, llama3_70b.toml at the commits that "
                 "published these numbers, 395a52627 / 1ea476e9f, Apr 2024): torchtitan's own RMSNorm, eager "
                 "fp32 (norm_kernel 'eager-fp32'); the 8B / 13B configs ran the Triton fused_rmsnorm")
_TT = ("pytorch/torchtitan docs/performance.md @ 041336434916bdc0f88c1f89fda176fd3c2092e4, "
       "'{table}' (64 A100 80GB, FSDP2 1D)")
_TT_DEF = "torchtitan train.py 'wps': tokens processed per second per rank; step = GBS·seq/(wps·GPUs)"
_TT_ASSUME = ("cluster network not stated: DGX A100 80GB with 8 x HDR 200 Gb/s assumed",
              "torchtitan defaults of that commit: bf16 params / fp32 reduce, no torch.compile, no float8, "
              "SDPA flash attention, AdamW, grad clipping",
              TT_FOREACH)
LF_README = "mosaicml/llm-foundry scripts/train/benchmarking/README.md @ 061f2c7ce64e655100286584a7629e2a09f827ba, "
LF_DEF = "README column 'Throughput (T/s/GPU)'; step = GBS·seq/(T/s/GPU · GPUs)"
LF_SWEEP = ("llm-foundry sweep defaults (submit_benchmarks.py): attn_impl triton, low-precision LayerNorm, FSDP "
            "FULL_SHARD, limit_all_gathers, Composer DecoupledAdamW")
LF_ROCE = "'1600 Gbps node-node interconnect (RoCE)' modelled as 8 x HDR 200 Gb/s per node"
LF_H100_NET = "H100 fabric not stated: the dgx-h100 cluster (8 x NDR 400 Gb/s per node) beyond one node"
LF_PURE_MP = ("FSDP mixed precision PURE: parameters gathered and gradients reduced in bf16 (Composer "
              "mosaic_fsdp_utils.get_mixed_precision @d534e0a): grad_reduce_fp32 off")
LF_DEFAULT_MP = ("amp_bf16 with FSDP mixed precision DEFAULT: bf16 parameters gathered, gradients reduced in fp32 "
                  "(Composer mosaic_fsdp_utils.get_mixed_precision @d534e0a)")
LF_EARLY_STOP = ("run by the Oct 2023 sweep (llm-foundry b2a43a147, sweep.sh IMAGE mosaicml/pytorch:2.1.0): the "
                 "yamls' non-reentrant checkpoint stops recomputing once the backward's tensors are rebuilt "
                 "(the preset's recompute_early_stop)")
LF_FULL_RECOMPUTE = ("numbers of the May-Jul 2023 tables, kept unchanged by the Oct 2023 re-run (b2a43a147: 'added "
                  "back old numbers that I didn't reproduce'; sweep.sh image then PyTorch 1.13.1): the whole block "
                  "is recomputed (recompute_early_stop off)")
LF_PURE_1_13_KNOBS = (("grad_reduce_fp32", False), ("recompute_early_stop", False))
"""The stack knobs of a pure-bf16 row of the PyTorch 1.13.1 tables (:data:`LF_PURE_MP`, :data:`LF_FULL_RECOMPUTE`)."""
_NEMO = ("NVIDIA/NeMo docs/source/performance/performance_summary.md @ 070a0bb168d405d653b9734c0017cf5078e77c0d, "
         "Pretraining table (NeMo 24.07 container, DGX-H100, FP8)")
_NEMO_DEF = "table column 'Tokens / sec / GPU'; step = GBS·seq/(value · GPUs)"
_NEMO_ASSUME = ("NeMo/Megatron-Core performance-recipe defaults: Transformer Engine FP8 (delayed scaling), "
                "distributed optimizer (ZeRO-1), overlapped grad reduce / param gather, TP comm overlap, "
                "sequence parallel with TP > 1, no activation recompute",)
_LLAMA3 = ("Dubey et al. 2024, 'The Llama 3 Herd of Models' (arXiv:2407.21783), §3.3.2 Table 4 "
           "(405B pre-training scaling configurations), row {row}; hardware §3.3.1 (H100 80GB HBM3 700 W, "
           "8 per server on NVLink, 400 Gb/s RoCE per GPU)")
_LLAMA3_DEF = ("Table 4 'TFLOPs/GPU' (BF16 MFU {mfu}); the paper prints no FLOP formula: PaLM's 6·N + "
               "12·L·H·Q·T per token (Chowdhery et al. 2022 App. B, causal attention counted in full) assumed; "
               "step = 2048 seq × 8192 tok × that / (value · GPUs)")
_LLAMA3_READ = ("§3.3.1–3.3.2 read in the stored corpus (the paper's text in a public repository, read_file id "
                "70888892482, offsets 31500-47500)")
_LLAMA3_ASSUME = ("Meta's in-house 4D-parallel stack is not a preset: megatron-core taken as the nearest "
                  "(TP + SP, PP, sharded DP, fused kernels)",
                  "DP = GPUs / (TP·CP·PP); 16M tokens/batch = 2048 sequences of 8192",
                  "micro-batch 1; interleaved 1F1B with 8 chunks per rank: the paper uses 'an interleaved "
                  "schedule ... with V pipeline stages on one pipeline rank' (§3.3.2) and states the layer "
                  "placement that fixes V: 'we reduce one Transformer layer each from the first and the last "
                  "stages ... the first model chunk on the first stage has only the embedding, and the last "
                  "model chunk on the last stage has only output projection and loss' — 126 layers + "
                  "embedding + head = 128 chunks = 16 stages x 8, one block each (simtrain's partition of "
                  "128 chunks). Before 2026-12-05 the row ran non-interleaved 1F1B (V read as unstated)",
                  "zero_stage 2: 'Our use of FSDP for Llama 3 shards optimizer states and gradients, but for "
                  "model shards we do not reshard after forward computation' (§3.3.2; " + _LLAMA3_READ + ")",
                  "no activation recompute: 'we could pre-train Llama 3 on sequences of 8K tokens without "
                  "activation checkpointing' (§3.3.2, same)",
                  "rank order tp-cp-(ep)-pp-dp: 'GPUs are divided into parallelism groups in the order of [TP, CP, "
                  "PP, DP]' (Figure 5 and 'Network-aware parallelism configuration', §3.3.2; the predicted step is "
                  "the same as with simtrain's default order, checked 2026-12-06)",
                  "gradients reduce-scattered in fp32 ('reduce-scatter gradients in FP32 across data parallel "
                  "workers in FSDP', §3.3.2): the preset's grad_reduce_fp32",
                  "tensor-parallel communication overlap not stated: Megatron-Core's documented default, "
                  "--tp-comm-overlap off (model_parallel_config.py; PyTorch's async TP is opt-in too), so "
                  "tp_comm_overlap 0 as the Megatron importer sets it; the backward's input-gradient "
                  "collective still runs beside the weight-gradient GEMM (tp_dgrad_comm_async, Megatron-Core's "
                  "linear layers). Until this change (2026-12-06) the rows carried NeMo's recipe setting, the preset's 0.7, "
                  "unlisted; this rule was applied after that miss was seen (docs/heldout.md)",
                  "RoCE 400 Gb/s per GPU modelled by the dgx-h100 cluster's 8 x NDR 400 Gb/s rail fabric; the "
                  "RoCE Clos's 1:7 oversubscription above pods of 3,072 GPUs (§3.3.1) is not modelled (a ring "
                  "crosses pods on a few of its hops, and the job scheduler keeps traffic inside pods)")

HELDOUT_RUNS: tuple[HeldoutRun, ...] = (
    # --- Llama 3 405B pre-training, H100 (nearest preset: megatron-core) ---------------------------
    HeldoutRun("Llama3-405B 8192xH100", "llama3-405b", "dgx-h100", 1024, "megatron-core", 2048, 1, 8192,
               "bf16", "TFLOP/s/GPU", 430.0, _LLAMA3_DEF.format(mfu="43%"), _LLAMA3.format(row=1),
               tp=8, pp=16, zero_stage=2, sequence_parallel=True, pipeline_schedule="interleaved-1f1b",
               virtual_stages=8, framework="meta-4d", rank_order="tp-cp-ep-pp-dp",
               stack_knobs=(("tp_comm_overlap", 0.0),), assumptions=_LLAMA3_ASSUME),
    HeldoutRun("Llama3-405B 16384xH100", "llama3-405b", "dgx-h100", 2048, "megatron-core", 2048, 1, 8192,
               "bf16", "TFLOP/s/GPU", 400.0, _LLAMA3_DEF.format(mfu="41%"), _LLAMA3.format(row=2),
               tp=8, pp=16, zero_stage=2, sequence_parallel=True, pipeline_schedule="interleaved-1f1b",
               virtual_stages=8, framework="meta-4d", rank_order="tp-cp-ep-pp-dp",
               stack_knobs=(("tp_comm_overlap", 0.0),), assumptions=_LLAMA3_ASSUME),
    # --- NeMo 24.07 (Megatron-Core), DGX-H100, FP8 -------------------------------------------------
    HeldoutRun("NeMo Llama2-7B 8xH100 fp8", "llama2-7b", "dgx-h100", 1, "megatron-core", 128, 1, 4096, "fp8",
               "tokens/s/GPU", 16847.0, _NEMO_DEF, _NEMO + ", row LLAMA2-7B", assumptions=_NEMO_ASSUME),
    HeldoutRun("NeMo Llama2-70B 64xH100 fp8", "llama2-70b", "dgx-h100", 8, "megatron-core", 128, 1, 4096,
               "fp8", "tokens/s/GPU", 1707.0, _NEMO_DEF, _NEMO + ", row LLAMA2-70B", tp=4, pp=4,
               sequence_parallel=True, pipeline_schedule="interleaved-1f1b", virtual_stages=20,
               assumptions=_NEMO_ASSUME),
    HeldoutRun("NeMo GPT3-175B 128xH100 fp8", "gpt3-175b", "dgx-h100", 16, "megatron-core", 256, 1, 2048,
               "fp8", "tokens/s/GPU", 726.0, _NEMO_DEF, _NEMO + ", row GPT3-175B (128 GPUs)", tp=4, pp=8,
               sequence_parallel=True, pipeline_schedule="interleaved-1f1b", virtual_stages=6,
               assumptions=_NEMO_ASSUME + ("NeMo's GPT-3 vocabulary (50257, padded) modelled by the library's "
                                           "gpt3-175b (51200)",)),
    HeldoutRun("NeMo Llama3-70B 64xH100 fp8 cp2", "llama3-70b", "dgx-h100", 8, "megatron-core", 128, 1, 8192,
               "fp8", "tokens/s/GPU", 1533.0, _NEMO_DEF, _NEMO + ", row LLAMA3-70B", tp=4, pp=4, cp=2,
               sequence_parallel=True, pipeline_schedule="interleaved-1f1b", virtual_stages=5,
               assumptions=_NEMO_ASSUME),
    # --- torchtitan (FSDP2, eager), 64 x A100 80GB -------------------------------------------------
    HeldoutRun("torchtitan Llama3-8B 64xA100", "llama3-8b", "dgx-a100-80gb", 8, "fsdp2", 64, 1, 8192, "bf16",
               "tokens/s/GPU", 2904.0, _TT_DEF, _TT.format(table="Llama 3 performance numbers, 8B, batch 1, "
                                                            "selective layer AC"),
               recompute="full", recompute_num_layers=16, optimizer_impl="foreach",
               assumptions=_TT_ASSUME + ("'selective layer' AC, frequency not stated: selective_ac_option "
                                         "'2' (torchtitan's example value: every 2nd block wrapped in a "
                                         "checkpoint, the others keep their activations): 16 of the 32 "
                                         "layers fully recomputed (recompute_num_layers)",
                                         "seq 8192 (the page: Llama 2's 4096 'is halved compared with "
                                         "Llama 3')")),
    HeldoutRun("torchtitan Llama3-70B 64xA100", "llama3-70b", "dgx-a100-80gb", 8, "fsdp2", 64, 1, 8192, "bf16",
               "tokens/s/GPU", 331.0, _TT_DEF, _TT.format(table="Llama 3 performance numbers, 70B, batch 1, "
                                                           "full AC"),
               recompute="full", optimizer_impl="foreach", stack_knobs=(("norm_kernel", "eager-fp32"),),
               assumptions=_TT_ASSUME + ("seq 8192 (Llama 3 default, as above)", TT_EAGER_NORM)),
    HeldoutRun("torchtitan Llama2-13B 64xA100", "llama2-13b", "dgx-a100-80gb", 8, "fsdp2", 128, 2, 4096, "bf16",
               "tokens/s/GPU", 2162.0, _TT_DEF, _TT.format(table="Llama 2 performance numbers, 13B, batch 2, "
                                                            "no AC"),
               optimizer_impl="foreach", assumptions=_TT_ASSUME + ("seq 4096: the Llama 2 default the page names",)),
    # --- llm-foundry (Composer FSDP), MPT -----------------------------------------------------------
    HeldoutRun("llm-foundry MPT-7B 8xH100", "mpt-7b", "dgx-h100", 1, "llm-foundry", 48, 6, 2048, "bf16",
               "tokens/s/GPU", 10643.0, LF_DEF, LF_README + "table 'H100 80GB BF16', row 7b/2048/8 GPUs",
               assumptions=(LF_SWEEP, LF_DEFAULT_MP)),
    HeldoutRun("llm-foundry MPT-30B 32xH100", "mpt-30b", "dgx-h100", 4, "llm-foundry", 1344, 14, 2048, "bf16",
               "tokens/s/GPU", 2308.0, LF_DEF, LF_README + "table 'H100 80GB BF16', row 30b/2048/32 GPUs",
               recompute="full",
               assumptions=(LF_SWEEP, LF_H100_NET, LF_DEFAULT_MP, LF_EARLY_STOP)),
    HeldoutRun("llm-foundry MPT-7B 8xA100-80GB", "mpt-7b", "dgx-a100-80gb", 1, "llm-foundry", 96, 6, 2048,
               "bf16", "tokens/s/GPU", 4641.0, LF_DEF,
               LF_README + "table 'A100 80GB with 1600 Gbps node-node interconnect (RoCE)', row 7b/2048/8 GPUs",
               assumptions=(LF_SWEEP, LF_DEFAULT_MP)),
    HeldoutRun("llm-foundry MPT-70B 64xA100-80GB", "mpt-70b", "dgx-a100-80gb", 8, "llm-foundry", 2048, 8, 2048,
               "bf16", "tokens/s/GPU", 410.0, LF_DEF,
               LF_README + "table 'A100 80GB with 1600 Gbps node-node interconnect (RoCE)', row 70b/2048/64 GPUs",
               recompute="full", stack_knobs=LF_PURE_1_13_KNOBS,
               assumptions=(LF_SWEEP, LF_ROCE, LF_PURE_MP, LF_FULL_RECOMPUTE)),
    HeldoutRun("llm-foundry MPT-13B 64xA100-40GB", "mpt-13b", "dgx-a100-40gb", 8, "llm-foundry", 1024, 16, 2048,
               "bf16", "tokens/s/GPU", 1976.0, LF_DEF,
               LF_README + "table 'A100 40GB with 1600 Gbps node-node interconnect (RoCE)', row 13b/2048/64 GPUs",
               recompute="full", stack_knobs=LF_PURE_1_13_KNOBS,
               assumptions=(LF_SWEEP, LF_ROCE, LF_PURE_MP, LF_FULL_RECOMPUTE)),
    # --- PyTorch FSDP (IBM fms-fsdp), Llama 2 7B on 128 x A100 80GB --------------------------------
    HeldoutRun("PyTorch FSDP Llama2-7B 128xA100", "llama2-7b", "dgx-a100-80gb", 16, "fsdp2", 256, 2, 4096, "bf16",
               "tokens/s/GPU", 3700.0, "the post's 'tokens/sec/GPU'; step = GBS·seq/(value · GPUs)",
               "Team PyTorch at IBM and at Meta, 'Maximizing training throughput using PyTorch FSDP' (PyTorch "
               "blog / IBM Research, 13 Mar 2024): 3,700 tokens/sec/GPU, 57 % MFU on 128 A100; settings from "
               "foundation-model-stack/fms-fsdp README.md table (7b, 128 x A100, HSDP, activation "
               "checkpointing False, batch size 2) and docs/configurations.md",
               assumptions=("FSDP1 with SDPA flash attention, bf16 mixed precision, no torch.compile: the fsdp2 "
                            "preset (eager PyTorch FSDP, SDPA) taken as the nearest",
                            "HSDP (parameters sharded inside each 8-GPU node, replicated across the 16 nodes) "
                            "is not a simtrain layout: modelled as full sharding over all 128 ranks (more "
                            "gather traffic over the network than the run had)",
                            "seq 4096 (the post: '4k context length'); global batch 2 x 128 = 256",
                            "cluster network not stated: 8 x HDR 200 Gb/s per node",
                            "fms's Llama norm is LayerNormParameterized(use_mean=False, use_high_precision_pow=True): "
                            "RMSNorm as eager fp32 PyTorch ops (norm_kernel 'eager-fp32'; fms/modules/layernorm.py, "
                            "fms/models/llama.py @006bd7ed, Mar 2024); its rotary is fp32 too: each pair cast up, "
                            "multiplied by its position's 2x2 rotation matrix and summed, cast down "
                            "(fms/modules/positions.py RotaryEmbedding.adjusted_qk @006bd7ed; rotary_kernel "
                            "'eager-fp32-matrix', 36 B per element and phase; until 2026-12-06 the preset's complex "
                            "form, 20 B, stood for it)",
                            "FSDP1 (FullyShardedDataParallel): the flat parameter is gathered in place and its "
                            "parameters are views, so no copy-out after each gather (fsdp_gather_copy_out off); "
                            "its flat gradient is cast and reduced on the post-backward stream, which the compute "
                            "stream does not wait for (fsdp_reduce_copy_in off)",
                            "the loss runs on the bf16 logits as they are (fms LLaMA.forward returns "
                            "self.shared(output, reverse=True); fms-fsdp train_utils.py @7746dac: "
                            "CrossEntropyLoss on the model output, no autocast under FSDP1 MixedPrecision): no "
                            "upcast copy, so the generic loss rule (loss_kernel 'upcast', 16 B a logit against "
                            "the bf16 chain's ~12), not torchtitan's eager fp32 chain"),
               framework="fms-fsdp", stack_knobs=(("norm_kernel", "eager-fp32"), ("fsdp_gather_copy_out", False),
                                                  ("fsdp_reduce_copy_in", False), ("loss_kernel", "upcast"),
                                                  ("rotary_kernel", "eager-fp32-matrix"))),
    # --- BLOOM-176B (Megatron-DeepSpeed), 384 x A100 80GB on Jean Zay --------------------------------
    HeldoutRun("BLOOM-176B 384xA100-80GB", "bloom-176b", "dgx-a100-80gb", 48, "deepspeed", 2048, 2, 2048, "bf16",
               "s/iter", 104.70,
               "'elapsed time per iteration (s)' of the training log line quoted in the README (iteration "
               "85376, global batch 2048, 'TFLOPs: 149.77' hardware FLOPs incl. recompute)",
               "bigscience-workshop/bigscience train/tr11-176B-ml/README.md @ "
               "00327f8c3533c39b3cc17013f0d0d2b770eb2bb9, 'Important checkpoints' (log line) with "
               "'Replica setup', 'Deepspeed config' and tr11-176B-ml.slurm (TP 4, PP 12, DP 8, MBS 2, bf16, "
               "--checkpoint-activations, BF16_Optimizer = ZeRO-1)",
               tp=4, pp=12, zero_stage=1, recompute="full", flash_attention=False, dp_overlap=False,
               nics_per_node=4, nic_link="ib-edr",
               assumptions=("Megatron-DeepSpeed: the deepspeed preset taken (DeepSpeed engine, pipeline and "
                            "ZeRO); its kernels are Megatron's (fused softmax / bias-GeLU), not HF eager",
                            "no FlashAttention (2022 Megatron-DeepSpeed with ALiBi used the fused masked "
                            "softmax)",
                            "DeepSpeed PipelineEngine reduces gradients after the last micro-batch: "
                            "dp_overlap off",
                            "Jean Zay nodes: 8 x A100-SXM4-80GB on NVLink, 4 Omni-Path 100 Gb/s links per "
                            "node (README 'Hardware'): DGX A100 80GB node with 4 x 100 Gb/s (ib-edr) NICs",
                            "no sequence parallelism (not in that code); AdamW (apex FusedAdam, weight decay "
                            "0.1); the README's CUDA_LAUNCH_BLOCKING=1 is not modelled")),
)

NEMO_TABLE_ROWS: tuple[HeldoutRun, ...] = (
    # The other rows of the NeMo 24.07 pretraining table that rows 3-6 come from (same page, same commit),
    # in the fit pool only: the rule lets shipped priors be fitted to NeMo's published tables. The rows
    # left out, each with its reason: NEMO_LEFT_OUT.
    HeldoutRun("NeMo Llama2-13B 16xH100 fp8", "llama2-13b", "dgx-h100", 2, "megatron-core", 128, 1, 4096,
               "fp8", "tokens/s/GPU", 8646.0, _NEMO_DEF, _NEMO + ", row LLAMA2-13B", pp=4,
               pipeline_schedule="interleaved-1f1b", virtual_stages=10, assumptions=_NEMO_ASSUME),
    HeldoutRun("NeMo Llama3-8B 8xH100 fp8 cp2", "llama3-8b", "dgx-h100", 1, "megatron-core", 128, 1, 8192,
               "fp8", "tokens/s/GPU", 12036.0, _NEMO_DEF, _NEMO + ", row LLAMA3-8B", cp=2,
               assumptions=_NEMO_ASSUME),
    HeldoutRun("NeMo GPT3-5B 64xH100 fp8", "gpt3-5b", "dgx-h100", 8, "megatron-core", 2048, 4, 2048,
               "fp8", "tokens/s/GPU", 22521.0, _NEMO_DEF, _NEMO + ", row GPT3-5B", assumptions=_NEMO_ASSUME),
    HeldoutRun("NeMo Nemotron-8B 64xH100 fp8", "nemotron3-8b", "dgx-h100", 8, "megatron-core", 256, 4, 4096,
               "fp8", "tokens/s/GPU", 12701.0, _NEMO_DEF, _NEMO + ", row Nemotron-8B", tp=2,
               sequence_parallel=True, assumptions=_NEMO_ASSUME),
    HeldoutRun("NeMo Nemotron-22B 64xH100 fp8", "nemotron3-22b", "dgx-h100", 8, "megatron-core", 256, 2, 4096,
               "fp8", "tokens/s/GPU", 4256.0, _NEMO_DEF, _NEMO + ", row Nemotron-22B", tp=2, pp=4,
               sequence_parallel=True, pipeline_schedule="interleaved-1f1b", virtual_stages=10,
               assumptions=_NEMO_ASSUME),
)

NEMO_LEFT_OUT: tuple[tuple[str, str], ...] = (
    ("GPT3-20B (64 GPUs)", "TP 2, no pipeline: under the recipe defaults the other rows take (no recompute, fp32 "
                           "gradient buffer) a rank would need 81.3 of 79.65 GiB (the gpt3-20b model is in the "
                           "library), so the run set something the table does not state (a 16-bit gradient "
                           "buffer, as NeMo's launcher performance configs set with grad_sync_dtype bf16; "
                           "recompute) that moves its time"),
    ("GPT3-175B (512 GPUs)", "micro-batch 2: under the recipe defaults the other rows take (no recompute, fp32 "
                             "gradient buffer) stage 0 would need 83.7 of 79.65 GiB, so the run set something the "
                             "table does not state (recompute, a 16-bit gradient buffer) that moves its time"),
    ("Nemotron-340B (128 GPUs)", "data parallel 2: under the recipe defaults the other rows take the optimizer "
                                 "state is sharded over 2 ranks only and stage 0 would need 93.7 of 79.65 GiB "
                                 "(nemotron4-340b is in the library), so the run set something the table does "
                                 "not state that moves its time"),
)
