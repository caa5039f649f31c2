"""simtrain.frameworks: Megatron-LM / NeMo arguments, torchtitan TOMLs and DeepSpeed JSON read into a
TrainConfig + stack preset; every example imported, its fields asserted and estimated; bad input is a
SpecError naming the setting; unknown settings are listed in ``ignored``."""

import math
from pathlib import Path

import pytest

import simtrain as st
from simtrain.errors import SpecError
from simtrain.frameworks import (
    DEEPSPEED_SETTINGS,
    MEGATRON_SETTINGS,
    TORCHTITAN_SETTINGS,
    Imported,
    from_deepspeed,
    from_megatron,
    from_torchtitan,
    mapping_markdown,
)
from simtrain.specs.stack import Stack, load_stack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"

# NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh @ d98e8a64dd (its argument arrays with
# the script's values: TP 1, CP 1, MBS 1, GBS 128, seq 8192, DTYPE fp8; mock data; 8 GPUs), written out
LLAMA3_8B_FP8 = [
    "--use-mcore-models", "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336",
    "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8", "--kv-channels", "128",
    "--seq-length", "8192", "--max-position-embeddings", "8192", "--position-embedding-type", "rope",
    "--rotary-base", "1000000", "--rotary-percent", "1.0", "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
    "--swiglu", "--normalization", "RMSNorm", "--init-method-std", "0.0134", "--attention-backend", "fused",
    "--apply-layernorm-1p", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--micro-batch-size", "1", "--global-batch-size", "128", "--train-samples", "1953125000", "--lr", "0.00015",
    "--min-lr", "0.00001", "--lr-decay-style", "cosine", "--clip-grad", "1.0", "--weight-decay", "0.1",
    "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--bf16", "--grad-reduce-in-bf16", "--cross-entropy-loss-fusion",
    "--calculate-per-token-loss", "--manual-gc", "--empty-unused-memory-level", "1",
    "--fp8-format hybrid", "--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max", "--fp8-param-gather",
    "--tensor-model-parallel-size", "1", "--context-parallel-size", "1", "--sequence-parallel",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
    "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256", "--split", "99,1,0",
    "--num-workers", "1", "--log-interval", "1", "--save-interval", "1000", "--ckpt-format", "torch_dist",
]

# NeMo 24.07 Llama3-70B pretraining on 64 H100 (NVIDIA/NeMo docs/source/performance/performance_summary.md
# @ 070a0bb168, row LLAMA3-70B: TP 4, PP 4, CP 2, VP 5, GBS 128, MBS 1, seq 8192, FP8; the performance
# recipe's distributed optimizer, overlaps and TP comm overlap) as the Megatron-Core arguments NeMo sets
NEMO_LLAMA3_70B = """
python pretrain_gpt.py \\
  --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 \\
  --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 \\
  --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear \\
  --tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 --context-parallel-size 2 \\
  --num-layers-per-virtual-pipeline-stage 4 --sequence-parallel --tp-comm-overlap \\
  --micro-batch-size 1 --global-batch-size 128 --bf16 --fp8-format hybrid --fp8-recipe delayed \\
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather   # NeMo performance recipe
"""

DS_ZERO3 = """{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 4,
  "gradient_clipping": 1.0,
  "bf16": {"enabled": true},
  "zero_optimization": {
    "stage": 3, "overlap_comm": true, "contiguous_gradients": true, "reduce_bucket_size": 5e8,
    "stage3_prefetch_bucket_size": 5e8, "stage3_param_persistence_threshold": 1e6,
    "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": true
  },
  "activation_checkpointing": {"partition_activations": false, "contiguous_memory_optimization": false},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
  "steps_per_print": 10,
  "wall_clock_breakdown": false
}"""


def _estimate(imported: Imported, model: str, nodes: int, **overrides):
    r = st.estimate(st.load_model(model), st.load_cluster("dgx-h100", nodes=nodes), imported.train_config(**overrides))
    assert math.isfinite(r.step_time_s) and r.step_time_s > 0
    return r


def _ignored(imported: Imported) -> dict[str, str]:
    return dict(imported.ignored)


# --- Megatron-LM / NeMo -------------------------------------------------------------------------------


def test_megatron_llama3_8b_fp8_example():
    imp = from_megatron(LLAMA3_8B_FP8)
    assert imp.stack == "megatron-core"
    c = imp.config
    assert (c["tp"], c["pp"], c["cp"], c["ep"]) == (1, 1, 1, 1)
    assert (c["micro_batch_size"], c["global_batch_size"], c["seq_len"]) == (1, 128, 8192)
    assert c["precision"] == "fp8" and c["zero_stage"] == 1 and c["dp_overlap"] is True
    assert c["sequence_parallel"] is False           # Megatron turns it off with tp = 1
    assert c["recompute"] == "none" and c["optimizer"] == "adamw" and c["grad_clipping"] is True
    assert c["dp_bucket_bytes"] == 40_000_000 * 2    # default bucket, reduced in bf16 (--grad-reduce-in-bf16)
    assert imp.stack_overrides == {"fp8_allgather": True, "fp8_params": True, "grad_reduce_fp32": False,
                                   "grad_buffer_16bit": True, "tp_comm_overlap": 0.0}
    assert imp.model["num_layers"] == 32 and imp.model["num_query_groups"] == 8 and imp.model["vocab_size"] == 128256
    assert imp.model_mismatches(st.load_model("llama3-8b")) == []
    ignored = _ignored(imp)
    assert "model shape" in ignored["--hidden-size"] and "--lr" in ignored and "--split" in ignored
    assert "--pipeline-model-parallel-size" in imp.defaults and "--tensor-model-parallel-size" not in imp.defaults
    cfg = imp.train_config()
    assert cfg.stack.name == "megatron-core" and cfg.stack.fp8_allgather is True and cfg.stack.tp_comm_overlap == 0
    r = _estimate(imp, "llama3-8b", 1)
    # NVIDIA's own example runs on one DGX H100: fp8 weights and a bf16 main_grad make it fit (78.7 GiB)
    assert r.feasible and r.memory.params_bytes < 9 * 2**30 and r.memory.grads_bytes < 16 * 2**30


def test_megatron_nemo_llama3_70b_interleaved():
    imp = from_megatron(NEMO_LLAMA3_70B)
    c = imp.config
    assert (c["tp"], c["pp"], c["cp"], c["virtual_stages"]) == (4, 4, 2, 5)   # 80 layers / pp 4 / 4 per chunk
    assert c["pipeline_schedule"] == "interleaved-1f1b" and c["sequence_parallel"] is True
    assert (c["micro_batch_size"], c["global_batch_size"], c["precision"]) == (1, 128, "fp8")
    assert c["zero_stage"] == 1 and c["dp_overlap"] is True
    assert c["dp_bucket_bytes"] == 40_000_000 * 4    # bf16: Megatron reduces in fp32
    assert imp.stack_overrides == {}                 # TP overlap on, fp32 reduction: the preset as it is
    assert _ignored(imp)["python pretrain_gpt.py"] == "the command before the first argument"
    assert imp.model_mismatches(st.load_model("llama3-70b")) == []
    assert imp.model_mismatches(st.load_model("llama3-8b"))   # 80 layers vs 32
    r = _estimate(imp, "llama3-70b", 8)
    assert r.feasible, r.reasons


def test_megatron_recompute_variants():
    base = "--micro-batch-size 1 --global-batch-size 16 --bf16 "
    block = from_megatron(base + "--recompute-granularity full --recompute-method block --recompute-num-layers 4")
    assert block.config["recompute"] == "full" and block.config["recompute_num_layers"] == 4
    uniform = from_megatron(base + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    assert uniform.config["recompute"] == "full" and "recompute_num_layers" not in uniform.config
    sel = from_megatron(base + "--recompute-granularity selective --recompute-modules core_attn mlp mla_up_proj")
    assert sel.config["recompute"] == "selective" and sel.config["recompute_modules"] == ["core_attn", "mlp"]
    assert "--recompute-modules mla_up_proj" in _ignored(sel)
    assert from_megatron(base + "--recompute-activations").config["recompute"] == "selective"
    _estimate(block, "llama3-8b", 1, seq_len=2048)


def test_megatron_world_size_defaults_and_legacy():
    imp = from_megatron("--tensor-model-parallel-size 2 --micro-batch-size 2 --fp16 --use-legacy-models", world_size=64)
    assert imp.stack == "megatron-lm"
    assert imp.config["global_batch_size"] == 2 * 32 and "--global-batch-size" in imp.defaults
    assert imp.config["precision"] == "fp16" and imp.config["dp_bucket_bytes"] == 40_000_000 * 2
    wide = from_megatron("--micro-batch-size 1 --bf16", world_size=512)
    assert wide.config["dp_bucket_bytes"] == 512 * 1_000_000 * 4    # max(40M, 1M × dp) parameters in fp32
    assert from_megatron("--micro-batch-size 1 --global-batch-size 8").config["precision"] == "fp32"
    pipe = from_megatron("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 7 "
                         "--decoder-last-pipeline-num-layers 7 --micro-batch-size 1 --global-batch-size 64 --bf16 "
                         "--no-overlap-p2p-communication --moe-expert-capacity-factor 1.25 --optimizer sgd")
    c = pipe.config
    assert (c["first_stage_layers"], c["last_stage_layers"], c["moe_load_imbalance"]) == (7, 7, 1.25)
    assert c["optimizer"] == "momentum" and pipe.stack_overrides["pp_comm_overlap"] == 0.0


def test_megatron_argument_syntax():
    imp = from_megatron(["--tensor-model-parallel-size=2", "--micro-batch-size", "1", "--global-batch-size=8",
                         "--bf16", "--tensor-model-parallel-size", "4"])   # the last occurrence wins
    assert imp.config["tp"] == 4 and imp.config["global_batch_size"] == 8
    cmd = from_megatron("python -u pretrain_gpt.py --micro-batch-size 1 --global-batch-size 8 --seed -1")
    assert _ignored(cmd)["python -u pretrain_gpt.py"] == "the command before the first argument"
    assert "--seed" in _ignored(cmd)                 # a negative number is a value, not an option


# --- torchtitan -------------------------------------------------------------------------------------


def test_torchtitan_llama3_8b_toml():
    imp = from_torchtitan(FIXTURES / "llama3_8b.toml", world_size=64)
    assert imp.stack == "fsdp2" and imp.model == {"name": "llama3", "flavor": "8B"}
    c = imp.config
    assert "dp" not in c and c["zero_stage"] == 3 and c["tp"] == 1 and c["reshard_after_forward"] is True
    assert (c["micro_batch_size"], c["global_batch_size"], c["seq_len"]) == (1, 64, 8192)
    assert c["recompute"] == "selective-op" and c["precision"] == "bf16" and c["grad_clipping"] is True
    assert c["optimizer"] == "adamw" and c["optimizer_impl"] == "fused"
    assert imp.stack_overrides == {"recompute_early_stop": False}
    assert "training.mixed_precision_param" in imp.defaults and "training.seq_len" not in imp.defaults
    assert "checkpoint.interval" in _ignored(imp) and "quantize.linear.float8.filter_fqns" in _ignored(imp)
    assert imp.source.endswith("llama3_8b.toml")
    _estimate(imp, "llama3-8b", 8)


def test_torchtitan_llama3_70b_toml_text_and_ngpu_default():
    imp = from_torchtitan((FIXTURES / "llama3_70b.toml").read_text(encoding="utf-8"))
    c = imp.config
    assert (c["tp"], c["sequence_parallel"], c["recompute"], c["micro_batch_size"]) == (8, True, "full", 8)
    assert c["global_batch_size"] == 8 * 1            # NGPU 8 / tp 8 = dp 1
    assert "world_size (run_train.sh NGPU=8)" in imp.defaults and imp.source is None
    at_64 = from_torchtitan(FIXTURES / "llama3_70b.toml", world_size=64)
    assert at_64.config["global_batch_size"] == 8 * 8
    _estimate(at_64, "llama3-70b", 8)
    _estimate(at_64, "llama3-8b", 8)


def test_torchtitan_compile_float8_async_tp_and_pipeline():
    toml = """
[model]
converters = ["float8"]
[parallelism]
data_parallel_shard_degree = 4
tensor_parallel_degree = 2
enable_async_tensor_parallel = true
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 2
[training]
local_batch_size = 8
seq_len = 4096
[activation_checkpoint]
mode = "selective"
selective_ac_option = "2"
[compile]
enable = true
components = ["model", "loss"]
[quantize.linear.float8]
recipe_name = "rowwise"
enable_fsdp_float8_all_gather = true
"""
    imp = from_torchtitan(toml)
    assert imp.stack == "fsdp2-compile"
    c = imp.config
    assert (c["dp"], c["tp"], c["pp"], c["virtual_stages"]) == (4, 2, 2, 2)
    assert c["pipeline_schedule"] == "interleaved-1f1b" and c["reshard_after_forward"] is False   # PP: no reshard
    assert (c["micro_batch_size"], c["global_batch_size"]) == (2, 32)
    assert c["recompute"] == "full" and c["recompute_every_k_blocks"] == 2 and c["precision"] == "fp8"
    knobs = imp.stack_overrides
    assert knobs["fp8_recipe"] == "rowwise" and knobs["fp8_allgather"] is True
    assert knobs["tp_comm_overlap"] == load_stack("megatron-core").tp_comm_overlap
    _estimate(imp, "llama3-8b", 2)


def test_torchtitan_older_spelling():
    imp = from_torchtitan("[training]\nbatch_size = 2\ncompile = true\n[float8]\nenable_fsdp_float8_all_gather = true\n"
                          "[model]\nconverters = ['float8']\n", world_size=16)
    assert imp.stack == "fsdp2-compile" and imp.config["global_batch_size"] == 32
    assert imp.stack_overrides["fp8_allgather"] is True and "training.local_batch_size" not in imp.defaults


def test_torchtitan_2024_norm_type():
    # torchtitan's 2024 configs: norm_type = "rmsnorm" is its own eager fp32 RMSNorm class (train_configs/
    # llama3_70b.toml @0413364), "fused_rmsnorm" the Triton kernel; compiled, Inductor fuses the eager one.
    eager = from_torchtitan("[model]\nnorm_type = 'rmsnorm'\n", world_size=8)
    assert eager.stack == "fsdp2" and eager.stack_overrides["norm_kernel"] == "eager-fp32"
    assert "model.norm_type" not in _ignored(eager)
    fused = from_torchtitan("[model]\nnorm_type = 'fused_rmsnorm'\n", world_size=8)
    assert fused.stack_overrides.get("norm_kernel", "fused") == "fused"     # the preset's already
    compiled = from_torchtitan("[model]\nnorm_type = 'rmsnorm'\n[training]\ncompile = true\n", world_size=8)
    assert compiled.stack == "fsdp2-compile" and compiled.stack_overrides.get("norm_kernel", "fused") == "fused"
    assert "norm_kernel" not in from_torchtitan("[training]\nseq_len = 2048\n", world_size=8).stack_overrides
    assert "model.norm_type" in _ignored(from_torchtitan("[model]\nnorm_type = 'layernorm'\n", world_size=8))
    with pytest.raises(SpecError, match="model.norm_type"):
        from_torchtitan("[model]\nnorm_type = 'batchnorm'\n", world_size=8)


# --- DeepSpeed --------------------------------------------------------------------------------------


def test_deepspeed_zero3_json(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(DS_ZERO3, encoding="utf-8")
    imp = from_deepspeed(path, world_size=16)
    assert imp.stack == "deepspeed" and imp.source == str(path)
    c = imp.config
    assert (c["dp"], c["micro_batch_size"], c["global_batch_size"]) == (16, 1, 64)
    assert c["zero_stage"] == 3 and c["dp_overlap"] is True and c["precision"] == "bf16"
    assert c["recompute"] == "full" and c["optimizer"] == "adamw" and c["optimizer_impl"] == "fused"
    assert c["dp_bucket_bytes"] == 5e8 * 2
    ignored = _ignored(imp)
    assert "optimizer.params.lr" in ignored and "zero_optimization.stage3_max_live_parameters" in ignored
    assert "activation_checkpointing.partition_activations" in ignored
    assert from_deepspeed(DS_ZERO3, world_size=16).config == c        # JSON text gives the same
    _estimate(imp, "llama3-8b", 2, seq_len=4096)


def test_deepspeed_batch_relation_and_defaults():
    both = from_deepspeed({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4})
    assert both.config["global_batch_size"] == 256 and "dp" not in both.config     # accumulation unknown
    three = from_deepspeed({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4,
                            "gradient_accumulation_steps": 2, "fp16": {"enabled": True}})
    assert three.config["dp"] == 32 and three.config["precision"] == "fp16"
    only = from_deepspeed({"train_batch_size": 64, "zero_optimization": {"stage": 2}}, world_size=8)
    assert (only.config["micro_batch_size"], only.config["dp"]) == (8, 8)
    assert only.config["dp_overlap"] is False and "zero_optimization.overlap_comm" in only.defaults
    auto = from_deepspeed({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
                           "bf16": {"enabled": "auto"}, "optimizer": {"type": "Adam", "params": {"adam_w_mode": False}}},
                          world_size=4)
    assert auto.config["global_batch_size"] == 8 and auto.config["optimizer"] == "adam"
    assert "train_batch_size" in _ignored(auto) and "bf16.enabled" in _ignored(auto)


# --- bad input and ignored settings ------------------------------------------------------------------


@pytest.mark.parametrize(("call", "field"), [
    (lambda: from_megatron("--micro-batch-size x --global-batch-size 8"), "--micro-batch-size"),
    (lambda: from_megatron("--micro-batch-size 1 --global-batch-size 8 --bf16 true"), "--bf16"),
    (lambda: from_megatron("-tp 8 --micro-batch-size 1"), "-tp"),
    (lambda: from_megatron("--micro-batch-size 1 --global-batch-size 8 --split '99"), "<arguments>"),
    (lambda: from_megatron("--global-batch-size 8"), "--micro-batch-size"),
    (lambda: from_megatron("--micro-batch-size 1"), "--global-batch-size"),
    (lambda: from_megatron("--micro-batch-size 3 --global-batch-size 8"), "--micro-batch-size, --global-batch-size"),
    (lambda: from_megatron("--micro-batch-size 1 --global-batch-size 8 --recompute-granularity full"),
     "--recompute-method"),
    (lambda: from_megatron("--micro-batch-size 1 --global-batch-size 8 --optimizer muon"), "--optimizer"),
    (lambda: from_megatron("--micro-batch-size 1 --global-batch-size 8 --num-layers-per-virtual-pipeline-stage 2"),
     "--num-layers-per-virtual-pipeline-stage"),
    (lambda: from_megatron(42), "<arguments>"),
    (lambda: from_torchtitan("[training\nseq_len = 8"), "<toml>"),
    (lambda: from_torchtitan("[training]\nseq_len = 'long'\n"), "training.seq_len"),
    (lambda: from_torchtitan("[activation_checkpoint]\nselective_ac_option = 'layers'\n"),
     "activation_checkpoint.selective_ac_option"),
    (lambda: from_torchtitan("[parallelism]\ntensor_parallel_degree = 3\n"), "parallelism.data_parallel_shard_degree"),
    (lambda: from_torchtitan("[optimizer]\nname = 'Shampoo'\n"), "optimizer.name"),
    (lambda: from_deepspeed("{not json"), "<json>"),
    (lambda: from_deepspeed("[1, 2]"), "<json>"),
    (lambda: from_deepspeed({"train_micro_batch_size_per_gpu": 2}), "train_batch_size"),
    (lambda: from_deepspeed({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 3,
                             "gradient_accumulation_steps": 2}), "train_batch_size"),
    (lambda: from_deepspeed({"train_batch_size": 8, "zero_optimization": {"stage": "three"}}),
     "zero_optimization.stage"),
    (lambda: from_deepspeed({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
                             "optimizer": {"type": "Shampoo"}}), "optimizer.type"),
])
def test_bad_input_is_a_spec_error_naming_the_setting(call, field):
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.fields == [field]


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read the file"):
        from_torchtitan(tmp_path / "missing.toml")
    with pytest.raises(SpecError, match="cannot read the file"):
        from_deepspeed(str(tmp_path / "missing.json"))


def test_unknown_settings_are_ignored_with_a_reason():
    meg = _ignored(from_megatron("--micro-batch-size 1 --global-batch-size 8 --my-new-flag 3 --sequence-paralel"))
    assert meg["--my-new-flag"].startswith("not read by simtrain")
    assert "did you mean '--sequence-parallel'" in meg["--sequence-paralel"]
    titan = _ignored(from_torchtitan("[experimental]\nfoo = 1\n[parallelism]\ntensor_parallel_degre = 2\n"))
    assert "experimental.foo" in titan and "did you mean" in titan["parallelism.tensor_parallel_degre"]
    ds = _ignored(from_deepspeed({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "foo": {"bar": 1},
                                  "zero_optimization": {"offload_optimizer": {"device": "cpu"}}}))
    assert "foo.bar" in ds and "not modelled" in ds["zero_optimization.offload_optimizer.device"]


# --- the tables ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [MEGATRON_SETTINGS, TORCHTITAN_SETTINGS, DEEPSPEED_SETTINGS])
def test_every_row_targets_a_real_field(rows):
    assert len({r.name for r in rows}) == len(rows)
    for row in rows:
        for target in row.target.split(", "):
            if target.startswith("stack."):
                assert target[6:] in Stack.model_fields, row
            elif target != "stack":
                assert target in st.TrainConfig.model_fields, row
        assert row.source and row.default and row.how, row


def test_the_docs_page_prints_the_tables_as_they_are():
    """docs/frameworks.md holds each table exactly as mapping_markdown prints it (regenerate the page's
    tables with ``simtrain.frameworks.mapping_markdown`` after changing a row)."""
    text = DOCS.read_text(encoding="utf-8")
    for rows in (MEGATRON_SETTINGS, TORCHTITAN_SETTINGS, DEEPSPEED_SETTINGS):
        assert mapping_markdown(rows) in text, rows[0].name
