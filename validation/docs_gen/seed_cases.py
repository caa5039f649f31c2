"""The source chapter's worked examples (shared/seed/ai-training-chapter.md) as simtrain snippets: the
data of docs/seed-examples.md (rendered by :mod:`validation.docs_gen.seed`)."""

from __future__ import annotations

from dataclasses import dataclass

from validation.docs_gen.snippets import Worked

__all__ = ["Example", "AREAS"]


@dataclass(frozen=True)
class Example:
    where: str
    chapter: str
    """The chapter's claim, quoted or closely paraphrased, with its figure."""
    worked: tuple[Worked, ...]
    verdict: str
    row: int | None = None
    """Row of docs/chapter-disagreements.md, when the figure is listed there."""


_CONV = "conv = st.load_model(\"resnet50\").ops[0]  # stem/conv: 7×7, 64 filters, stride 2\n"
_PM = "param_memory((param_op({n}),), regime(\"{p}\"), \"{o}\", tp=1, sp=False, ep=1, dp=1, zero_stage=0)"
_RING = "topology = LogicalTopology((Dimension(8, 100e9, 1e-6),))  # 8 GPUs on one switch\n"
_TINY = "model = st.Model(\"tiny\", [param_op(1024)])\n"


def _opt(kind: str) -> Worked:
    return Worked(f"memory-cost-{kind}", f"pm = {_PM.format(n='100_000', p='fp32', o=kind)}\n"
                  "(pm.params_bytes + pm.optimizer_bytes) / pm.params_bytes")


def _ops(kind: str) -> Worked:
    return Worked(f"ops-per-param-{kind}", f"traits(\"{kind}\").flops_per_param")


DATA = (
    Example("§8.4.2 Data pipeline", "A GPU that could run ResNet-50 at 1000 images/s, fed at 200 images/s, "
            "is \"merely 20%\" utilised.",
            (Worked("utilization-20", "data = DataPipeline(transform_s_per_sample=5e-3, num_workers=1)  # 200 img/s\n"
                    "pipeline_times(data, samples=32, compute_s=32e-3).utilization  # compute: 1000 img/s"),),
            "Agrees: utilisation = pipeline rate / device rate.", 17),
    Example("§8.4.2 Data pipeline", "An NVMe drive of 3 GB/s theoretical sustains about 1.5 GB/s "
            "(T_practical = 0.5 × B_theoretical); random access for shuffling cuts that by 90 %.",
            (Worked("nvme-effective",
                    "data = DataPipeline(sample_bytes=1e6, storage_bandwidth_bytes_per_s=3e9, access_factor=0.5 * 0.1)\n"
                    "t = pipeline_times(data, samples=100, compute_s=0.0)\n"
                    "100 * 1e6 / t.fetch_s  # effective read rate", "B/s"),),
            "Agrees (0.15 GB/s). simtrain takes the access factor as an input (`DataPipeline.access_factor`); "
            "it does not derive the chapter's 0.5 or 0.1."),
)

FORWARD = (
    Example("§8.4.3 Forward pass", "\"A typical layer with dimensions of 512×1024 processing a batch of 64 "
            "executes over 33 million operations\".",
            (Worked("linear-flops", "make_op(\"linear\", \"fc\", \"fc\", in_features=1024, out_features=512).flops.fw * 64",
                    "FLOP"),),
            "Differs in units: 33,554,432 is the multiply-accumulate count; in FLOPs (FMA = 2, the unit of "
            "hardware peaks) the forward is twice that.", 2),
    Example("§8.4.3 Forward pass", "A 7×7 convolution with 64 filters on 224×224×3 images works \"across "
            "218×218 spatial dimensions\", 147 multiply-accumulates per output position.",
            (Worked("conv-output", _CONV + "conv.out_shape[1]  # output height"),
             Worked("conv-macs", _CONV + "conv.flops.fw / 2 / (64 * 112 * 112)  # MACs per output position")),
            "Differs: ResNet's first convolution has stride 2 and padding 3, so its output is 112×112, "
            "not 218×218 (a stride-1, unpadded convolution). The 147 MACs per position agree.", 3),
    Example("§8.4.3 Forward pass", "ResNet-50 at batch 32: the first layer's 112×112×64 fp32 activations take "
            "\"approximately 98 MB\".",
            (Worked("activation-98", _CONV + "conv.out_elements * 32 * 4  # bytes, fp32", "B"),),
            "Agrees when MB is read as MiB: exactly 98 MiB (102.8 MB).", 8),
)

BACKWARD = (
    Example("§8.4.4 Backward pass", "For that convolution at batch 64 in fp32: activations \"0.38 GB\", "
            "gradient signals \"8.1 GB\", weight gradients \"0.037 GB\"; per image 224×224×64×4 B, "
            "\"approximately 3.2 GB\" at batch 64.",
            (Worked("bw-input", _CONV + "conv.saved.act * 64 * 4  # saved input, bytes", "B"),
             Worked("bw-output-grad", _CONV + "conv.out_elements * 64 * 4  # gradient of the output, bytes", "B"),
             Worked("bw-weight-grad", _CONV + "conv.weight_write.wgrad * 4  # weight gradient, bytes", "B")),
            "Differs: 0.0385 GB, not 0.38 GB (factor 10); the output gradient has the output's 112×112 "
            "shape, 0.206 GB (the chapter's own product is 0.822 GB, not 8.1 GB, and not 3.2 GB); the "
            "weight gradient is 37,632 B = 3.8·10⁻⁵ GB, not 0.037 GB (factor 1000).", 4),
)

OPTIMIZERS = (
    Example("§8.3.2 Optimizer trade-offs (Table 8.3)", "Memory cost SGD 1×, momentum 2×, RMSprop 2×, Adam 3× "
            "(parameters + optimizer state).",
            tuple(_opt(k) for k in ("sgd", "momentum", "rmsprop", "adam")),
            "Agrees: 0, 1, 1 and 2 fp32 state elements per parameter."),
    Example("§8.3.2 Optimizer trade-offs (Table 8.3)", "Operations per parameter: SGD 2, momentum 3, "
            "RMSprop 4, Adam 5.",
            tuple(_ops(k) for k in ("sgd", "momentum", "rmsprop", "adam")),
            "Differs: counting the arithmetic of PyTorch's update "
            "rules (`cost/optimizer.py`: multiplies, adds, the square root and the divide, Adam's bias "
            "corrections) gives 2, 4, 6 and 12. The step time does not use these counts: the update is "
            "memory-bound and priced by its bytes (formulas.md §9).", row=20),
    Example("§8.3.3 Optimizer implementation", "Adam on 100 million fp32 parameters needs \"approximately "
            "800 MB\" more memory.",
            (Worked("adam-100m", f"{_PM.format(n='100_000_000', p='fp32', o='adam')}.optimizer_bytes", "B"),),
            "Agrees.", 19),
    Example("§8.3.3 Optimizer implementation", "Adam's memory traffic: Bandwidth_separate = 5 × Size_params, "
            "Bandwidth_fused = 2 × Size_params; Memory_Adam-FP16 = 3/2 × Size_params.",
            (Worked("adam-fused-passes", "step_passes(\"adam\", fused=True, has_master_copy=False)"),
             Worked("adam-unfused-passes", "step_passes(\"adam\", fused=False, has_master_copy=False)"),
             Worked("adam-mixed-memory",
                    f"pm = {_PM.format(n='100_000', p='bf16', o='adam')}\n"
                    "(pm.params_bytes + pm.optimizer_bytes) / (4 * 100_000)  # × the fp32 parameter size")),
            "Differs: a fused step reads p, g, m, v and writes p, m, v — 7 parameter-sized passes, not 2; "
            "the unfused path makes the second number, not 5 (the ratio of the two is close to the chapter's "
            "2.5). Mixed-precision "
            "Adam keeps 16-bit weights + an fp32 master + fp32 m and v: 3.5× the fp32 parameter size, not "
            "1.5×.", 11),
    Example("§8.4.5 Parameter updates", "100,000 fp32 parameters: gradient descent 0.4 MB, Adam 3 × 0.4 = 1.2 MB.",
            (Worked("gd-100k", f"{_PM.format(n='100_000', p='fp32', o='sgd')}.params_bytes", "B"),
             Worked("adam-100k", f"pm = {_PM.format(n='100_000', p='fp32', o='adam')}\n"
                    "pm.params_bytes + pm.optimizer_bytes", "B")),
            "Agrees (parameters and states; the gradients, another 0.4 MB, are counted apart)."),
)

PREFETCH = (
    Example("§8.5.1 Prefetching and overlapping", "Random crop 10 ms + colour jitter 15 ms + normalisation "
            "5 ms: \"these 30ms of preprocessing would delay each training step\"; prefetching hides them.",
            (Worked("prefetch-without",
                    "data = DataPipeline(transform_stages_s=[10e-3, 15e-3, 5e-3], num_workers=0)\n"
                    "pipeline_times(data, 1, compute_s=50e-3).iteration_s  # one batch, 50 ms of compute", "s"),
             Worked("prefetch-with",
                    "data = DataPipeline(transform_stages_s=[10e-3, 15e-3, 5e-3], num_workers=1, prefetch_factor=2)\n"
                    "pipeline_times(data, 1, compute_s=50e-3).iteration_s", "s")),
            "Agrees.", 18),
    Example("§8.5.1 Prefetching and overlapping", "Prefetch factor 2 and batches of 256 images of 1024×1024 "
            "pixels: \"the buffer might require an additional 2GB of GPU memory\".",
            (Worked("prefetch-buffer",
                    _TINY + "data = DataPipeline(sample_bytes=1024 * 1024 * 3, num_workers=1, prefetch_factor=2)\n"
                    "cfg = st.TrainConfig(global_batch_size=256, micro_batch_size=256, precision=\"fp32\",\n"
                    "                     optimizer=\"sgd\", data=data)\n"
                    "st.estimate(model, st.Cluster.single(demo_device()), cfg).memory.host_prefetch_bytes", "B"),),
            "Differs: 1.61 GB (1.5 GiB) of uint8 RGB, and PyTorch's DataLoader keeps it in host memory, "
            "not on the GPU; simtrain reports it as `memory.host_prefetch_bytes`.", 13),
)

MIXED = (
    Example("§8.5.2 Mixed precision", "10⁹ parameters take 4 GB in FP32 and 2 GB in FP16 / bfloat16.",
            (Worked("params-1b-fp32", f"{_PM.format(n='1_000_000_000', p='fp32', o='sgd')}.params_bytes", "B"),
             Worked("params-1b-bf16", f"{_PM.format(n='1_000_000_000', p='bf16', o='sgd')}.params_bytes", "B")),
            "Agrees."),
    Example("§8.5.2 Mixed precision", "\"BERT (345M parameters)\".",
            (Worked("bert-large", "st.load_model(\"bert-large\").param_count"),),
            "Differs: BERT-large counts 335.2M (Devlin et al. quote 340M); 345M is Megatron-LM's label for "
            "its 24-layer, 1024-wide checkpoints.", 1),
    Example("§8.5.2 Mixed precision", "With 8 GPUs, FP16 instead of FP32 halves the gradient traffic, "
            "\"from 320 GB/s to 160 GB/s\".",
            (Worked("comm-halved",
                    _RING + "sent = lambda p: collective_time(\"all_reduce\", 1e9 * regime(p).grad_bytes, topology,\n"
                    "                                 algorithm=\"ring\").bytes_sent_per_rank[\"link\"]\n"
                    "sent(\"bf16\") / sent(\"fp32\")"),),
            "Agrees: 16-bit gradients halve the all-reduce bytes (the 320 GB/s itself is not derived)."),
    Example("§8.5.2 Mixed precision", "Tensor cores give reduced precision \"an order of magnitude higher "
            "computational throughput\" than FP32; FP16 matmuls \"2-3× speedup compared to FP32\".",
            (Worked("a100-bf16-over-fp32",
                    "a100 = st.load_device(\"a100-sxm4-80gb\")\n"
                    "matrix_peak_flops_per_s(a100, \"bf16\") / matrix_peak_flops_per_s(a100, \"fp32\")"),
             Worked("a100-bf16-over-tf32",
                    "a100 = st.load_device(\"a100-sxm4-80gb\")\n"
                    "matrix_peak_flops_per_s(a100, \"bf16\") / matrix_peak_flops_per_s(a100, \"tf32\")")),
            "Both agree, against different baselines: the peak ratio to plain FP32 is an order of magnitude, "
            "to TF32 tensor cores (PyTorch's default for FP32 matmuls on Ampere) 2×."),
)

ACCUMULATION = (
    Example("§8.5.3 Gradient accumulation", "Accumulating 4 micro-batches simulates a batch of 128.",
            (Worked("accumulation",
                    _TINY + "cfg = st.TrainConfig(global_batch_size=128, micro_batch_size=32, precision=\"fp32\", optimizer=\"sgd\")\n"
                    "st.estimate(model, st.Cluster.single(demo_device()), cfg).layout[\"micro_batches\"]"),),
            "Agrees (the learning-rate scaling the chapter adds is a training choice simtrain does not model)."),
    Example("§8.5.3 Activation checkpointing", "A 12-layer transformer with checkpoints every 4 layers: "
            "\"each intermediate activation would need to be recomputed up to three times\"; checkpointing "
            "\"can reduce memory usage by 50% or more\".",
            (Worked("recompute-flops",
                    "model = gpt_model(layers=12, seq=1024, hidden=768, heads=12)\n"
                    "cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8, precision=\"bf16\", optimizer=\"adamw\",\n"
                    "                     recompute=\"full\", recompute_every_k_blocks=4)\n"
                    "r = st.estimate(model, st.Cluster.single(demo_device()), cfg)\n"
                    "(r.hardware_flops_per_step - r.model_flops_per_step) / r.model_flops_per_step"),
             Worked("recompute-memory",
                    "model = gpt_model(layers=12, seq=1024, hidden=768, heads=12)\n"
                    "act = lambda **kw: st.estimate(model, st.Cluster.single(demo_device()), st.TrainConfig(\n"
                    "    global_batch_size=8, micro_batch_size=8, precision=\"bf16\", optimizer=\"adamw\", **kw)\n"
                    "    ).memory.activations_bytes\n"
                    "act(recompute=\"full\", recompute_every_k_blocks=4) / act(recompute=\"none\")")),
            "Differs on the recomputation: each dropped activation is recomputed once, by one extra forward "
            "of its segment during the backward (Chen et al. 2016), not up to three times; the extra work "
            "(the first number, over the model FLOPs) is one forward of the layers (the LM head is not "
            "recomputed). The memory saving agrees and is larger than 50 % (the second number: the "
            "activations kept, over those kept without recomputation).", row=21),
)

DATA_PARALLEL = (
    Example("§8.6.1 Data parallelism", "175 billion parameters need \"approximately 350 GB just to store "
            "model parameters in FP32\" (§8.6.3: \"700 GB\").",
            (Worked("gpt3-fp32",
                    "param_memory(st.load_model(\"gpt3-175b\").ops, regime(\"fp32\"), \"sgd\", tp=1, sp=False, ep=1,\n"
                    "             dp=1, zero_stage=0).params_bytes", "B"),),
            "Differs in §8.6.1 (350 GB is the 16-bit size), agrees with §8.6.3.", 9),
    Example("§8.6.1 Data parallelism", "8 GPUs sharing 100 MB of gradients: \"ring all-reduce requires only 7 "
            "communication steps instead of the 56 steps needed for naive peer-to-peer synchronization\".",
            (Worked("ring-phase-steps", _RING + "collective_time(\"reduce_scatter\", 100e6, topology, algorithm=\"ring\").steps"),
             Worked("ring-steps", _RING + "collective_time(\"all_reduce\", 100e6, topology, algorithm=\"ring\").steps"),
             Worked("naive-messages", _RING + "collective_time(\"all_reduce\", 100e6, topology, algorithm=\"direct\").messages"),
             Worked("ring-bytes", _RING + "collective_time(\"all_reduce\", 100e6, topology, algorithm=\"ring\")"
                    ".bytes_sent_per_rank[\"link\"]", "B"),
             Worked("naive-bytes", _RING + "collective_time(\"all_reduce\", 100e6, topology, algorithm=\"direct\")"
                    ".bytes_sent_per_rank[\"link\"]", "B")),
            "Differs: 7 is one phase of the ring; the all-reduce takes 2(n − 1) = 14 steps. 56 = n(n − 1) "
            "counts messages, which can all go out at once. The ring's gain is bytes per GPU: 175 MB "
            "against 700 MB.", 10),
    Example("§8.6.1 Data parallelism", "8 GPUs synchronising a 1-billion-parameter model \"might require "
            "transferring several gigabytes\" per step.",
            (Worked("sync-1b", _RING + "collective_time(\"all_reduce\", 4e9, topology, algorithm=\"ring\")"
                    ".bytes_sent_per_rank[\"link\"]  # fp32 gradients", "B"),),
            "Agrees: 7 GB sent per GPU per step in fp32."),
    Example("§8.6.1 Data parallelism", "\"InfiniBand (200 Gb/s)\".",
            (Worked("ib-hdr", "st.load_link(\"ib-hdr\").per_direction_bytes_per_s", "B/s"),),
            "Agrees: 200 Gb/s = 25 GB/s per direction."),
    Example("§8.6.1 Data parallelism", "Mixing A100s and V100s, \"the A100s might process batches 1.7× faster\"; "
            "the wait \"can reduce cluster utilization by 20-30%\".",
            (Worked("hetero",
                    "model = st.Model(\"m\", [param_op(1 << 20)])\n"
                    "cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=4, precision=\"fp32\", optimizer=\"sgd\")\n"
                    "groups = [st.Cluster.single(peak_device(1.7e12)), st.Cluster.single(peak_device(1e12))]\n"
                    "1 - estimate_heterogeneous(model, groups, cfg).utilization"),),
            "Agrees: with as many fast as slow devices the fast half idles about 41 % of each step; the "
            "cluster loses about 20 %.", 16),
)

MODEL_PARALLEL = (
    Example("§8.6.2 Model parallelism", "A 24-layer transformer on four devices: six consecutive blocks each.",
            (Worked("layers-per-stage",
                    "chunks = partition_blocks(st.load_model(\"megatron-1.7b\"), 4)  # 24 layers\n"
                    "min(sum(b.startswith(\"layers.\") for b in c) for c in chunks)"),),
            "Agrees (the embedding joins the first stage, the head the last)."),
    Example("§8.6.2 Model parallelism", "64 heads and hidden size 4096 on two devices: each computes "
            "[batch, sequence, 2048]; an FFN of 4096 → 16384 splits into 8192 features per device.",
            (Worked("heads-split",
                    "qkv = next(op for op in gpt_layer(seq=2048, hidden=4096, heads=64) if op.name.endswith(\"attn/qkv\"))\n"
                    "4096 * shard_factors(qkv, tp=2, sp=False).weights  # attention width per device"),
             Worked("ffn-split",
                    "fc1 = next(op for op in gpt_layer(seq=2048, hidden=4096, heads=64) if op.name.endswith(\"mlp/fc1\"))\n"
                    "4 * 4096 * shard_factors(fc1, tp=2, sp=False).weights  # intermediate features per device")),
            "Agrees (Megatron-LM's column split of QKV and fc1, Shoeybi et al. 2019)."),
    Example("§8.6.4 Challenges", "A [32, 2048, 2048] fp32 activation is \"approximately 512 MB\", sent over "
            "\"PCIe interconnects with 64 GB/s theoretical bandwidth\".",
            (Worked("pcie-transfer", "32 * 2048 * 2048 * 4 / st.load_link(\"pcie-gen4-x16\").per_direction_bytes_per_s",
                    "s"),),
            "Differs: 512 MiB; PCIe Gen4 x16 carries 31.5 GB/s per direction (64 GB/s counts both), so "
            "one transfer takes 17 ms, not 8.4 ms.", 14),
    Example("§8.6.4 Challenges", "In an 8-device pipeline the eighth device idles for 7 steps; warm-up "
            "\"reduces hardware utilization by approximately (m−1)/b percent\".",
            (Worked("warmup-loss", "(pipeline_time_s([1.0] * 8, 32, PipelineSchedule.ONE_F_ONE_B) - 32) / 32"),
             Worked("warmup-bubble", "bubble_fraction(p=8, m=32)")),
            "Differs: the loss is (p − 1)/m of the ideal time (a fraction, 21.9 % for 32 micro-batches), "
            "i.e. (p − 1)/(m + p − 1) of the step.", 15),
)

HYBRID = (
    Example("§8.6.5 Hybrid parallelism", "\"Training a 175-billion parameter language model on a dataset of "
            "300 billion tokens\".",
            (Worked("gpt3-total-flops", "palm_flops_per_token(st.load_model(\"gpt3-175b\")) * 300e9", "FLOP"),),
            "The chapter gives no figure; Brown et al. 2020 (Table D.1) report 3.14·10²³ FLOPs, their 6·N·T "
            "without attention — simtrain's 6N + 12·L·H·Q·T is 3 % above it. `st.plan(model, \"dgx-a100-80gb\", "
            "tokens=300e9, deadline_s=...)` searches the hybrid layouts that train it by a deadline."),
)

BOTTLENECKS = (
    Example("§8.7.1 Identifying bottlenecks", "Computation, memory and data handling can each limit training.",
            (Worked("bottleneck-data",
                    _TINY + "data = DataPipeline(transform_s_per_sample=5e-3, num_workers=1)\n"
                    "cfg = st.TrainConfig(global_batch_size=32, micro_batch_size=32, precision=\"fp32\", optimizer=\"sgd\",\n"
                    "                     data=data)\n"
                    "st.estimate(model, st.Cluster.single(demo_device()), cfg).bottleneck"),
             Worked("bottleneck-compute",
                    "model = st.Model(\"gemm\", [make_op(\"linear\", \"fc\", \"layers.0\", in_features=8192, out_features=8192)])\n"
                    "cfg = st.TrainConfig(global_batch_size=4096, micro_batch_size=4096, precision=\"bf16\", optimizer=\"sgd\")\n"
                    "st.estimate(model, st.Cluster.single(demo_device()), cfg).bottleneck")),
            "simtrain names the bottleneck of every step (`StepReport.bottleneck`: compute, memory_bandwidth, "
            "communication, data or bubble) and why (`bottleneck_reason`)."),
)

HARDWARE = (
    Example("§8.8.2 TPUs", "TPUs multiply matrices on systolic arrays.",
            (Worked("tpu-padding",
                    "# a 100 × 100 × 100 GEMM on a 128 × 128 MXU: the useful share of the padded work\n"
                    "alignment_factor(Gemm(100, 100, 100), 100, st.load_device(\"tpu-v4\"))"),),
            "simtrain pads GEMMs to the matrix unit's tile (`matrix_unit.tile`); the chapter gives no figure."),
    Example("§8.8.3 FPGAs", "Project Brainwave uses FPGAs for \"low-latency inference (not training)\".",
            (Worked("fpga-bf16",
                    "cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=8, precision=\"bf16\", optimizer=\"adamw\")\n"
                    "st.estimate(st.Model(\"tiny\", [param_op(1024)]), \"alveo-u280\", cfg).feasible"),),
            "Consistent: the Alveo U280 spec lists an int8 peak only, so a bf16 training step is reported "
            "infeasible, with the reason (docs/hardware-comparison.md)."),
    Example("§8.8.4 ASICs", "The Cerebras WSE packs 850,000 cores and 40 GB of on-chip memory.",
            (Worked("wse-cores", "st.load_device(\"wse-2\").matrix_unit.units_count.value"),
             Worked("wse-memory", "st.load_device(\"wse-2\").memory[0].capacity_bytes.value", "B")),
            "Agrees (2.6 trillion transistors is not modelled)."),
)

AREAS = (("Data pipeline", DATA), ("Forward pass", FORWARD), ("Backward pass", BACKWARD),
         ("Optimizers", OPTIMIZERS), ("Prefetching", PREFETCH), ("Mixed precision", MIXED),
         ("Accumulation and checkpointing", ACCUMULATION), ("Data parallelism", DATA_PARALLEL),
         ("Model and pipeline parallelism", MODEL_PARALLEL), ("Hybrid parallelism", HYBRID),
         ("Bottleneck analysis", BOTTLENECKS), ("GPUs, TPUs, FPGAs, ASICs", HARDWARE))
