"""docs/formulas.md: every formula of the cost model, its source, the function that implements it and
a worked number evaluated through that function (``python -m validation.docs_gen formulas.md``)."""

from __future__ import annotations

from dataclasses import dataclass

from validation.docs_gen.snippets import Worked, block

__all__ = ["FORMULAS", "Formula", "formulas_markdown", "all_worked"]


@dataclass(frozen=True)
class Formula:
    title: str
    formula: str
    source: str
    implemented_by: str
    worked: tuple[Worked, ...]
    notes: str = ""


_MEGATRON = "s, l, h, V, B = 2048, 24, 2304, 51200, 1"
_KORT = "s, b, h, a, t = 2048, 1, 12288, 96, 8"
_LAYER = "layer = gpt_layer(seq=2048, hidden=12288, heads=96)  # GPT-3 175B's layer\n"

FORMULAS = (
    Formula(
        "Transformer FLOPs per iteration (Megatron-LM)",
        "Per layer and sample the matmuls of the forward do 24·s·h² + 4·s²·h FLOPs (one FMA = 2), the "
        "logits 2·s·h·V; the backward does twice the forward. Model FLOPs per iteration "
        "= 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)); with full activation recomputation one more forward "
        "of every layer runs, giving Narayanan et al.'s eq. (3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).",
        "Narayanan et al. 2021, \"Efficient Large-Scale Language Model Training on GPU Clusters Using "
        "Megatron-LM\" (SC21), §5.1 eq. (3); model vs hardware FLOPs: Korthikanti et al. 2022 §6.",
        "`simtrain.graph.summary.model_flops` (per-op counts of `simtrain/graph/rules/dense.py`, "
        "`attention.py`); `StepReport.model_flops_per_step` / `hardware_flops_per_step` "
        "(`simtrain/estimator.py` `_flops_per_step`)",
        (Worked("megatron-model",
                "model = st.load_model(\"megatron-1.7b\")  # Narayanan et al. Table 1, first row\n"
                "model_flops(model, matmul_only=True).total  # one sample of 2048 tokens",
                "FLOP", paper="72*B*s*l*h**2*(1 + s/(6*h) + V/(12*l*h))", given=_MEGATRON, rel=1e-12),
         Worked("megatron-eq3",
                "model = st.load_model(\"megatron-1.7b\")\n"
                "cfg = st.TrainConfig(global_batch_size=1, micro_batch_size=1, precision=\"bf16\",\n"
                "                     optimizer=\"adamw\", recompute=\"full\")\n"
                "st.estimate(model, \"a100-sxm4-80gb\", cfg).hardware_flops_per_step",
                "FLOP", paper="96*B*s*l*h**2*(1 + s/(6*h) + V/(16*l*h))", given=_MEGATRON, rel=2e-3,
                note="simtrain counts the element-wise work too (norms, GeLU, dropout, residual adds: "
                     "about 0.06 % here), which eq. (3) leaves out.")),
    ),
    Formula(
        "Training FLOPs per token, MFU and HFU (PaLM)",
        "FLOPs per token = 6·N + 12·L·H·Q·T (N parameters used per token, L layers, H heads, Q head "
        "dimension, T tokens per sequence). MFU = achieved model FLOP/s per device / peak FLOP/s "
        "(recomputation excluded); HFU counts the recomputed FLOPs as well.",
        "Chowdhery et al. 2022, \"PaLM: Scaling Language Modeling with Pathways\", Appendix B.",
        "`simtrain.graph.summary.palm_flops_per_token`; `StepReport.mfu`, `StepReport.hfu` "
        "(`simtrain/report/step_report.py`)",
        (Worked("palm-per-token", "palm_flops_per_token(st.load_model(\"megatron-1.7b\"))", "FLOP",
                paper="6*N + 12*L*H*Q*T", given="N, L, H, Q, T = 1_652_230_656, 24, 24, 96, 2048", rel=1e-12),
         Worked("mfu",
                "demo_report(devices=64, step_time_s=3.0, model_flops=4.0e16, hardware_flops=5.2e16,\n"
                "            peak_flops_per_s=312e12).mfu",
                paper="4.0e16 / (3.0 * 64 * 312e12)", rel=1e-12),
         Worked("hfu",
                "demo_report(devices=64, step_time_s=3.0, model_flops=4.0e16, hardware_flops=5.2e16,\n"
                "            peak_flops_per_s=312e12).hfu",
                paper="5.2e16 / (3.0 * 64 * 312e12)", rel=1e-12)),
        notes="simtrain's `model_flops_per_step` is the detailed per-op count (element-wise work included, "
              "the full attention square by default; `TrainConfig.attention_flops=\"causal\"` halves it); "
              "PaLM's closed form is printed beside it by `simtrain model`.",
    ),
    Formula(
        "Activation memory of a transformer layer",
        "Bytes saved for the backward per layer (16-bit activations, 1-byte dropout masks): "
        "s·b·h·(34 + 5·a·s/h) without parallelism; s·b·h·(10 + 24/t + 5·a·s/(h·t)) with t-way tensor "
        "parallelism; s·b·h/t·(34 + 5·a·s/h) with sequence parallelism as well; selective "
        "recomputation of the attention core drops the 5·a·s/h term (34·s·b·h/t with SP); full "
        "recomputation keeps only the layer input, 2·s·b·h.",
        "Korthikanti et al. 2022, \"Reducing Activation Recomputation in Large Transformer Models\", "
        "§4 and Table 2.",
        "`simtrain.cost.memory.activation_bytes_per_microbatch` (per-op saved tensors × "
        "`simtrain.cost.op_cost.shard_factors`), `simtrain.cost.memory.checkpoint_bytes`",
        (Worked("korthikanti-none",
                _LAYER + "activation_bytes_per_microbatch(layer, 1, regime(\"bf16\"), \"none\", 1, False, 1) \\\n"
                "    - norm_stats_bytes(layer, 1, 1, False)",
                "B", paper="s*b*h*(34 + 5*a*s/h)", given=_KORT, rel=1e-12),
         Worked("korthikanti-tp",
                _LAYER + "activation_bytes_per_microbatch(layer, 1, regime(\"bf16\"), \"none\", 8, False, 1) \\\n"
                "    - norm_stats_bytes(layer, 1, 8, False)",
                "B", paper="s*b*h*(10 + 24/t + 5*a*s/(h*t))", given=_KORT, rel=1e-12),
         Worked("korthikanti-sp",
                _LAYER + "activation_bytes_per_microbatch(layer, 1, regime(\"bf16\"), \"none\", 8, True, 1) \\\n"
                "    - norm_stats_bytes(layer, 1, 8, True)",
                "B", paper="s*b*h/t*(34 + 5*a*s/h)", given=_KORT, rel=1e-12),
         Worked("korthikanti-selective",
                _LAYER + "activation_bytes_per_microbatch(layer, 1, regime(\"bf16\"), \"selective\", 8, True, 1) \\\n"
                "    - norm_stats_bytes(layer, 1, 8, True)",
                "B", paper="34*s*b*h/t", given=_KORT, rel=1e-12),
         Worked("korthikanti-full",
                _LAYER + "checkpoint_bytes([layer[0]], 1, regime(\"bf16\"), 1, False)",
                "B", paper="2*s*b*h", given=_KORT, rel=1e-12)),
        notes="simtrain also saves each LayerNorm's fp32 mean and rstd (2 × s·b·8 B per layer), which "
              "Table 2 leaves out; the snippets subtract them (`norm_stats_bytes`) to compare like with "
              "like. Micro-batches in flight multiply this (`parallel/schedule.py` "
              "`in_flight_microbatches`: GPipe m, 1F1B p − s on stage s).",
    ),
    Formula(
        "Model-state memory under ZeRO",
        "Per parameter, mixed-precision Adam keeps 2 B of 16-bit weights, 2 B of 16-bit gradients and "
        "K = 12 B of fp32 master weights, momentum and variance: (2 + 2 + K)·Ψ. ZeRO stage 1 shards the "
        "optimizer state over N_d data-parallel ranks: 2Ψ + 2Ψ + KΨ/N_d; stage 2 the gradients too: "
        "2Ψ + (2 + K)Ψ/N_d; stage 3 (FSDP full shard) everything: (2 + 2 + K)Ψ/N_d.",
        "Rajbhandari et al. 2020, \"ZeRO: Memory Optimizations Toward Training Trillion Parameter "
        "Models\" (SC20), §3.1, §5.1–5.3 and Fig. 1 (Ψ = 7.5B, N_d = 64).",
        "`simtrain.cost.memory.param_memory` (N_d = dp · cp: `zero_degree`), byte sizes from "
        "`simtrain.cost.precision.regime` and state counts from `simtrain.cost.optimizer`",
        tuple(Worked(f"zero-{stage}",
                     f"pm = param_memory((param_op(7_500_000_000),), regime(\"bf16\"), \"adam\", tp=1, sp=False,\n"
                     f"                  ep=1, dp=64, zero_stage={stage})\n"
                     "pm.params_bytes + pm.grads_bytes + pm.optimizer_bytes",
                     "B", paper=paper, given="psi, n_d, k = 7.5e9, 64, 12", rel=1e-12)
              for stage, paper in ((0, "(2 + 2 + k)*psi"), (1, "2*psi + 2*psi + k*psi/n_d"),
                                   (2, "2*psi + (2 + k)*psi/n_d"), (3, "(2 + 2 + k)*psi/n_d"))),
        notes="With gradient accumulation simtrain adds a 4 B/parameter fp32 gradient buffer in 16-bit "
              "regimes (and the stack may keep Megatron's `main_grad` instead: `Stack.grad_fp32_buffer`).",
    ),
    Formula(
        "Collective bus bandwidth and ring all-reduce time",
        "algbw = S / t; busbw = algbw × factor, the factor 2(n − 1)/n for all-reduce, (n − 1)/n for "
        "reduce-scatter, all-gather and all-to-all, 1 for broadcast, reduce and send/recv. A ring "
        "all-reduce is a reduce-scatter then an all-gather: 2(n − 1) steps of S/n, time "
        "2(n − 1)·α + 2(n − 1)/n · S / B.",
        "nccl-tests `doc/PERFORMANCE.md` (bus bandwidth); Thakur, Rabenseifner & Gropp 2005, "
        "\"Optimization of collective communication operations in MPICH\", §3 (ring cost).",
        "`simtrain.cost.collectives.bus_bandwidth_factor`, `busbw_bytes_per_s`, `collective_time` "
        "(algorithms in `simtrain/cost/collective_algorithms.py`)",
        (Worked("busbw-factor", "bus_bandwidth_factor(\"all_reduce\", 8)",
                paper="2*(n - 1)/n", given="n = 8", rel=1e-12),
         Worked("busbw", "busbw_bytes_per_s(\"all_reduce\", 1e9, 5e-3, 8)  # 1 GB in 5 ms on 8 ranks",
                "B/s", paper="S/t*2*(n - 1)/n", given="S, t, n = 1e9, 5e-3, 8", rel=1e-12),
         Worked("ring-all-reduce",
                "topology = LogicalTopology((Dimension(8, 450e9, 0.0),))  # 8 ranks on a 450 GB/s switch\n"
                "collective_time(\"all_reduce\", 1e9, topology, algorithm=\"ring\").seconds",
                "s", paper="2*(n - 1)/n*S/B", given="S, n, B = 1e9, 8, 450e9", rel=1e-12)),
    ),
    Formula(
        "Pipeline bubble",
        "With p stages, m micro-batches per step and v model chunks per stage (interleaved 1F1B), equal "
        "stages of t = t_f + t_b: step = m·t + (p − 1)·t/v; the bubble is (p − 1)/v / (m + (p − 1)/v) "
        "of the step, i.e. (p − 1)/(v·m) of the ideal time. GPipe and 1F1B have v = 1.",
        "Narayanan et al. 2021 (SC21) §2.2.1–2.2.2; Huang et al. 2019 (GPipe).",
        "`simtrain.parallel.schedule.bubble_fraction`, `pipeline_time_s` (closed forms); both engines "
        "time the schedule exactly with `pipeline_finish_s` / `rank_order`",
        (Worked("bubble-1f1b", "bubble_fraction(p=8, m=32)", paper="(p - 1)/(m + p - 1)", given="p, m = 8, 32"),
         Worked("bubble-interleaved", "bubble_fraction(p=8, m=32, v=4)",
                paper="(p - 1)/v/(m + (p - 1)/v)", given="p, m, v = 8, 32, 4"),
         Worked("pipeline-step", "pipeline_time_s([1.0] * 8, 32, PipelineSchedule.ONE_F_ONE_B)  # t = 1 s",
                "s", paper="(m + p - 1)*t", given="p, m, t = 8, 32, 1.0")),
    ),
    Formula(
        "Split-backward pipelines (ZB-H1, DualPipeV)",
        "The backward splits into its input-gradient half I (the previous stage waits for it) and its "
        "weight-gradient half W (nothing waits for it). ZB-H1 runs 1F1B's order with rank r's first r "
        "W passes deferred into the drain: its bubble is (p − 1)(t_F + t_I − t_W) against 1F1B's "
        "(p − 1)(t_F + t_I + t_W), at 1F1B's peak memory (p micro-batches, now on every rank: each is held "
        "until its W). DualPipeV puts 2p chunks on p ranks as a V and runs a forward of one chunk with a "
        "full backward of the other as an overlapped pair whose collectives hide behind each other's "
        "compute; its bubble is (PP/2 − 1)(t_F&B + t_I − 3 t_W) with PP = 2p chunks, and it holds 2p + 1 "
        "chunk-activations. Both engines run the frameworks' own per-rank orders.",
        "Qi et al. 2024 (ICLR), Zero Bubble Pipeline Parallelism §3.1; DeepSeek-AI 2024, DeepSeek-V3 "
        "Technical Report §3.2.1 and Table 2; PyTorch `ScheduleInterleavedZeroBubble` / `ScheduleDualPipeV` "
        "(the orders are tested equal).",
        "`simtrain.parallel.schedule.rank_order`, `pipeline_finish_s` (task kinds F, B, I, W, Fo, Bo); "
        "`StageProgram.task_seconds` (W = the weight-gradient compute; a pair = max(both computes, both "
        "exposed communications))",
        (Worked("zb-h1-step", "f, i, w = 1.0, 1.0, 1.0  # seconds per micro-batch on each of 8 stages\n"
                "max(pipeline_finish_s([f] * 8, [i + w] * 8, 32, PipelineSchedule.ZB_H1, 1, None,\n"
                "                      {'I': [i] * 8, 'W': [w] * 8}))",
                "s", paper="m*(f + i + w) + (p - 1)*(f + i - w)", given="p, m, f, i, w = 8, 32, 1.0, 1.0, 1.0"),
         Worked("dualpipev-step", "f, i, w, fb = 1.0, 1.0, 1.0, 3.0  # per chunk; 4 ranks, 8 chunks; a pair F&B\n"
                "max(pipeline_finish_s([f] * 4, [i + w] * 4, 16, PipelineSchedule.DUALPIPE_V, 2, None,\n"
                "                      {'I': [i] * 4, 'W': [w] * 4, 'Fo': [f] * 4, 'Bo': [fb - f] * 4}))",
                "s", paper="2*m*(f + i + w) + (PP/2 - 1)*(fb + i - 3*w)",
                given="PP, m, f, i, w, fb = 8, 16, 1.0, 1.0, 1.0, 3.0")),
    ),
    Formula(
        "Input pipeline",
        "Per device and step of n samples: fetch = n·bytes/(min(disk, network)·access factor); "
        "process = n·transform seconds / max(workers, 1); transfer = n·device bytes / host-to-device "
        "bandwidth (half rate from pageable memory). With prefetching (workers > 0, prefetch factor > 0) "
        "the stages overlap each other and the compute, but a worker reads and then transforms its batch "
        "(one __getitem__ after another) and the storage serves one read at a time, so iteration = "
        "max(fetch, fetch / workers + process, transfer, compute); without, they add. Utilisation = "
        "compute / iteration.",
        "The source chapter §8.4.2 (\"Data Pipeline\": T_effective = T_storage × F_access, GPU "
        "utilisation = R_pipeline / R_GPU) and §8.5.1 (prefetching and overlapping); PyTorch "
        "`DataLoader` semantics for `num_workers` / `prefetch_factor` / `pin_memory`.",
        "`simtrain.cost.data_pipeline.pipeline_times` (closed form); `simtrain/sim/dataloader.py` "
        "simulates the same stages",
        (Worked("data-iteration",
                "data = DataPipeline(sample_bytes=150e3, storage_bandwidth_bytes_per_s=3e9, access_factor=0.5,\n"
                "                    transform_s_per_sample=2e-3, num_workers=8, prefetch_factor=2)\n"
                "pipeline_times(data, samples=256, compute_s=0.05).iteration_s",
                "s", paper="max(n*sb/(disk*f), n*sb/(disk*f)/w + n*tr/w, c)",
                given="n, sb, disk, f, tr, w, c = 256, 150e3, 3e9, 0.5, 2e-3, 8, 0.05", rel=1e-12),
         Worked("data-utilization",
                "data = DataPipeline(sample_bytes=150e3, storage_bandwidth_bytes_per_s=3e9, access_factor=0.5,\n"
                "                    transform_s_per_sample=2e-3, num_workers=8, prefetch_factor=2)\n"
                "pipeline_times(data, samples=256, compute_s=0.05).utilization",
                paper="c/max(n*sb/(disk*f), n*sb/(disk*f)/w + n*tr/w, c)",
                given="n, sb, disk, f, tr, w, c = 256, 150e3, 3e9, 0.5, 2e-3, 8, 0.05", rel=1e-12)),
    ),
    Formula(
        "Roofline time of one op",
        "t = max(F / (P · c · e · F/(F + F½)), M·(M + M½)/(M · BW · f)) + launch, with F the op's FLOPs, "
        "P the peak of the unit it runs on (matrix peak × tile-alignment factor for matmuls, the vector "
        "peak otherwise), c the sustained-clock fraction, e the op class's peak fraction and F½ its "
        "half-saturation size; M the bytes moved, BW the memory bandwidth, f its attainable fraction and "
        "M½ its half-saturation size.",
        "Williams, Waterman & Patterson 2009, \"Roofline: An Insightful Visual Performance Model\" "
        "(CACM 52(4)); the saturation curves are fitted to measured GEMM / copy sweeps "
        "(`simtrain/calibrate/fit_compute.py`, `docs/devices/`).",
        "`simtrain.cost.compute.op_seconds` (`compute_seconds`, `memory_seconds`)",
        (Worked("roofline-matmul",
                "# 4096 × 4096 × 4096 bf16 GEMM on the demo device (1000 TFLOP/s, 80 %, F½ = 10 GFLOP)\n"
                "op_seconds(2 * 4096**3, 3 * 2 * 4096**2, \"matmul\", demo_device(), \"bf16\")",
                "s", paper="max(F/(P*e*F/(F + fh)), M*(M + mh)/(M*bw*fb)) + launch",
                given="F, M, P, e, fh, bw, fb, mh, launch = 2*4096**3, 6*4096**2, 1000e12, 0.8, 1e10, 3e12, "
                      "0.9, 1e6, 5e-6", rel=1e-12),
         Worked("roofline-elementwise",
                "# GeLU over 64 Mi bf16 elements: memory-bound (read + write)\n"
                "op_seconds(8 * 2**26, 2 * 2 * 2**26, \"elementwise\", demo_device(), \"bf16\")",
                "s", paper="M*(M + mh)/(M*bw*fb) + launch",
                given="M, bw, fb, mh, launch = 4*2**26, 3e12, 0.9, 1e6, 5e-6", rel=1e-12)),
        notes="The demo device is invented (`validation/docs_gen/fixtures.py` `demo_device`) so the "
              "numbers stay put when a library spec is refined; its vector peak is its fp32 peak.",
    ),
    Formula(
        "Optimizer step",
        "The update is memory-bound: time = passes × 4 B × (trainable parameters / N_d) / (BW · f), "
        "passes being parameter-sized fp32 reads and writes. Fused Adam reads p, g, m, v and writes p, "
        "m, v (7), + 1 to write the 16-bit copy under mixed precision; PyTorch's unfused for-loop path "
        "makes about 16. Loss scaling (fp16) adds 2, global-norm clipping 3 gradient passes, zeroing "
        "the gradients 1.",
        "First principles from the update rules (Kingma & Ba 2015 Adam; Loshchilov & Hutter 2019 "
        "AdamW) and PyTorch's `torch.optim` implementations (`foreach` / `fused` paths).",
        "`simtrain.cost.optimizer.step_passes`, `traits`; time in `simtrain/parallel/program.py` "
        "`_optimizer_seconds` through `simtrain.cost.compute.memory_seconds`",
        (Worked("adam-passes-fused", "step_passes(\"adamw\", fused=True, has_master_copy=True)",
                paper="7 + 1"),
         Worked("adam-passes-unfused", "step_passes(\"adamw\", fused=False, has_master_copy=True)"),
         Worked("adam-step-time",
                "# 1.7 B parameters, fused AdamW, bf16 + zeroing the bf16 gradients (0.5 pass), one device\n"
                "passes = step_passes(\"adamw\", fused=True, has_master_copy=True) + 0.5\n"
                "memory_seconds(passes * 4 * 1.7e9, demo_device(), device_efficiency(demo_device()))",
                "s", paper="M*(M + mh)/(M*bw*fb)", given="M, bw, fb, mh = 8.5*4*1.7e9, 3e12, 0.9, 1e6",
                rel=1e-12)),
    ),
    Formula(
        "Checkpoint interval and expected run time",
        "Young: τ = √(2·δ·M); Daly: τ = √(2δM)·[1 + ⅓·√(δ/2M) + ⅑·(δ/2M)] − δ for δ < 2M, else M; Daly's "
        "expected wall time T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ (δ save seconds, M job MTBF, R "
        "restart seconds, T_s compute seconds). A full checkpoint holds weights + fp32 master + "
        "optimizer states: 2 + 4 + 8 = 14 B per parameter for mixed-precision Adam.",
        "Young 1974, CACM 17(9); Daly 2006, FGCS 22(3) §3–4; checkpoint size: Rajbhandari et al. 2020 §3.1.",
        "`simtrain.sim.young_daly.young_interval_s`, `daly_interval_s`, `daly_wall_s`, "
        "`checkpoint_bytes_of`; the goodput simulation (`simtrain/sim/goodput.py`, `docs/goodput.md`) "
        "is checked against them",
        (Worked("young", "young_interval_s(checkpoint_s=60.0, mtbf_s=4 * 3600.0)", "s",
                paper="math.sqrt(2*d*m)", given="d, m = 60.0, 4*3600.0", rel=1e-12),
         Worked("daly", "daly_interval_s(checkpoint_s=60.0, mtbf_s=4 * 3600.0)", "s",
                paper="math.sqrt(2*d*m)*(1 + math.sqrt(d/(2*m))/3 + d/(2*m)/9) - d",
                given="d, m = 60.0, 4*3600.0", rel=1e-12),
         Worked("daly-wall",
                "tau = daly_interval_s(60.0, 4 * 3600.0)\n"
                "daly_wall_s(solve_s=7 * 86400.0, interval_s=tau, checkpoint_s=60.0, recovery_s=600.0,\n"
                "            mtbf_s=4 * 3600.0)",
                "s", paper="m*math.exp(r/m)*(math.exp((tau + d)/m) - 1)*ts/tau",
                given="d, m, r, ts = 60.0, 4*3600.0, 600.0, 7*86400.0\n"
                      "x = d/(2*m); tau = math.sqrt(2*d*m)*(1 + math.sqrt(x)/3 + x/9) - d", rel=1e-12),
         Worked("checkpoint-bytes",
                "cfg = st.TrainConfig(global_batch_size=1, micro_batch_size=1, precision=\"bf16\", optimizer=\"adamw\")\n"
                "checkpoint_bytes_of(st.load_model(\"megatron-1.7b\"), cfg)",
                "B", paper="14*N", given="N = 1_652_230_656", rel=1e-12)),
    ),
    Formula(
        "Energy of a step",
        "",  # filled from ENERGY_MODEL below, so the page says what the code says
        "simtrain's own device-power model (stated, not fitted); TDP and idle power from the device "
        "spec's cited sources.",
        "`simtrain.report.step_report.StepReport.energy_kwh` (`ENERGY_MODEL`); `st.compare` per hardware",
        (Worked("energy",
                "r = demo_report(devices=8, step_time_s=1.0, model_flops=0.0, hardware_flops=0.0,\n"
                "                peak_flops_per_s=1e15, tdp_w=700.0, idle_power_w=100.0,\n"
                "                breakdown={\"compute\": 0.6, \"recompute\": 0.1, \"optimizer\": 0.05})\n"
                "r.energy_kwh(duration_s=3600.0)  # one hour of such steps",
                "kWh", paper="n*(idle + (tdp - idle)*busy)*secs/3.6e6",
                given="n, idle, tdp, busy, secs = 8, 100.0, 700.0, 0.75, 3600.0", rel=1e-12),),
    ),
)


def all_worked() -> tuple[Worked, ...]:
    return tuple(w for f in FORMULAS for w in f.worked)


_HEADER = """# Formulas of the cost model

Every closed form simtrain's cost model uses, where it comes from, which function implements it, and a
worked number. Each number below is **the value of the snippet printed above it**, evaluated through
that function; where the source gives a closed form, it is evaluated beside it (plain Python, no
simtrain) and the two are compared. Generated by `python -m validation.docs_gen formulas.md`;
`tests/unit/test_docs_formulas.py` re-evaluates every marked number and fails when this page and the
code disagree. Units: SI (B = byte, GB = 10⁹ B); one fused multiply-add = 2 FLOPs.

Snippet names come from `simtrain` (`st`) and the modules `simtrain.cost.{memory, precision,
collectives, compute, optimizer, data_pipeline}`, `simtrain.graph.summary`, `simtrain.parallel.{schedule,
partition}` and `simtrain.sim.young_daly`; the helpers `param_op`, `gpt_layer`, `norm_stats_bytes`,
`demo_device` and `demo_report` are in `validation/docs_gen/fixtures.py`.
"""


def _section(i: int, f: Formula) -> str:
    from simtrain.report.step_report import ENERGY_MODEL
    formula = f.formula or ENERGY_MODEL
    parts = [f"## {i}. {f.title}", "", formula, "", f"**Source.** {f.source}", "",
             f"**Implemented by.** {f.implemented_by}", "", "**Worked.**", ""]
    for w in f.worked:
        parts += [block(w), ""]
    if f.notes:
        parts += [f.notes, ""]
    return "\n".join(parts)


def formulas_markdown() -> str:
    toc = "\n".join(f"{i}. [{f.title}](#{_anchor(i, f.title)})" for i, f in enumerate(FORMULAS, 1))
    body = "\n".join(_section(i, f) for i, f in enumerate(FORMULAS, 1))
    return f"{_HEADER}\n{toc}\n\n{body}".rstrip() + "\n"


def _anchor(i: int, title: str) -> str:
    import re
    text = f"{i}. {title}".lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")
