"""Golden counts of the model library against published figures, the PaLM closed form, and the
source chapter's worked examples (docs/chapter-disagreements.md explains where the chapter slips)."""

from __future__ import annotations

from pathlib import Path

import pytest

import simtrain as st
from simtrain.graph.model import Model
from simtrain.graph.rules import make_op
from simtrain.graph.summary import active_param_count, model_flops, palm_flops_per_token

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


@pytest.mark.parametrize("name, published, rel", [
    ("gpt3-175b", 174.6e9, 1e-3),        # Megatron counting (Narayanan et al. 2021, Table 1)
    ("gpt3-5b", 5_047_558_144, 1e-12),   # NeMo launcher 5b: 24·(12h² + 13h) + (50304 + 2048)·h + 2h, h 4096
    ("gpt3-20b", 20_257_296_384, 1e-12), # NeMo launcher 20b: 44·(12h² + 13h) + (50432 + 2048)·h + 2h, h 6144
    ("nemotron4-340b", 341.0e9, 1e-3),   # Nemotron-4 340B report: 9.4B embedding + 331.6B non-embedding
    ("llama3-8b", 8.03e9, 1e-3),
    ("llama2-7b", 6.74e9, 1e-3),
    ("llama3-70b", 70.6e9, 1e-3),
    ("llama3-405b", 405.9e9, 1e-3),
    ("mixtral-8x7b", 46.7e9, 1e-3),
    ("gpt2", 124.44e6, 1e-4),            # 124,439,808 with the tied head
    ("bert-large", 335e6, 5e-3),         # the chapter's 345M: see docs/chapter-disagreements.md
    ("resnet50", 25.557e6, 1e-4),        # 25,557,032 (torchvision)
    ("resnet18", 11.690e6, 1e-4),
    ("resnet152", 60.193e6, 1e-4),
    ("vgg16", 138.358e6, 1e-4),
    ("mobilenet-v1", 4.232e6, 1e-3),
    ("vit-b16", 86.568e6, 1e-4),
])
def test_parameter_counts(name, published, rel):
    assert st.load_model(name).param_count == pytest.approx(published, rel=rel)


def test_exact_parameter_counts_of_reference_implementations():
    exact = {"gpt2": 124_439_808, "resnet50": 25_557_032, "resnet18": 11_689_512, "resnet152": 60_192_808,
             "vgg16": 138_357_544, "mobilenet-v1": 4_231_976, "vit-b16": 86_567_656, "llama3-8b": 8_030_261_248}
    assert {n: st.load_model(n).param_count for n in exact} == exact


def test_mixtral_active_parameters():
    # active = attention + 2 of 8 experts per layer + embeddings ≈ 12.9B (Jiang et al. 2024)
    assert active_param_count(st.load_model("mixtral-8x7b")) == pytest.approx(12.9e9, rel=2e-3)


@pytest.mark.parametrize("row, published", [
    ("1.7b", 1.7), ("3.6b", 3.6), ("7.5b", 7.5), ("18.4b", 18.4), ("39.1b", 39.1), ("76.1b", 76.1),
    ("145.6b", 145.6), ("310.1b", 310.1), ("529.6b", 529.6), ("1t", 1008.0)])
def test_megatron_table1_rows_round_to_the_published_size(row, published):
    """Narayanan et al. 2021 Table 1 quotes one decimal (billions): our count rounds to it."""
    assert round(st.load_model(f"megatron-{row}").param_count / 1e9, 1) == published


@pytest.mark.parametrize("fixture, published, rel", [
    ("llama3-8b.json", 8.03e9, 5e-3), ("mixtral-8x7b.json", 46.7e9, 5e-3), ("gpt2.json", 124e6, 5e-3),
    ("qwen2-7b.json", 7.62e9, 5e-3), ("bert-large-uncased.json", 335e6, 5e-3), ("gpt-neox-20b.json", 20.55e9, 5e-3),
    ("mistral-7b.json", 7.24e9, 5e-3)])
def test_hf_config_parameter_counts(fixture, published, rel):
    assert Model.from_hf_config(HF / fixture).param_count == pytest.approx(published, rel=rel)


def test_hf_nemotron_config_matches_the_library_model():
    """An HF NemotronConfig with Nemotron-3 8B's shape (nemotron.py Nemotron3Config8B; the Nemotron
    tokenizer's 256,000 tokens): the same parameters and FLOPs as workloads/models/nemotron3-8b.yaml."""
    cfg = {"model_type": "nemotron", "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "relu2", "partial_rotary_factor": 0.5,
           "max_position_embeddings": 4096, "vocab_size": 256000, "tie_word_embeddings": False,
           "attention_bias": False, "mlp_bias": False}
    hf, lib = Model.from_hf_config(cfg), st.load_model("nemotron3-8b")
    assert hf.param_count == lib.param_count == 8_539_869_184
    assert model_flops(hf) == model_flops(lib)


def test_hf_matches_library_for_llama3_8b():
    hf = Model.from_hf_config(HF / "llama3-8b.json")
    lib = st.load_model("llama3-8b")
    assert hf.param_count == lib.param_count and model_flops(hf) == model_flops(lib)


@pytest.mark.parametrize("name", ["gpt2", "gpt3-175b", "megatron-1t", "llama2-7b", "llama3-8b", "llama3-70b",
                                  "llama3-405b", "bert-large", "mixtral-8x7b", "vit-b16"])
def test_flops_per_token_vs_palm(name):
    """Matmul FLOPs per token (fw + bw, full attention square) vs 6N + 12·L·H·Q·T (PaLM App. B).

    Ratios (printed with -s): ≈ 0.99–1.00 for tied-embedding GPTs; 0.948 for Llama-3-8B, whose untied
    128K × 4096 input embedding is 6.5 % of N but does no matmul; MoE uses N_active."""
    m = st.load_model(name)
    tokens = m.seq_len or m.meta["tokens"]
    ratio = model_flops(m, matmul_only=True).total / tokens / palm_flops_per_token(m)
    print(f"{name}: simtrain / PaLM = {ratio:.4f}")
    assert 0.94 < ratio <= 1.0


def test_resnet50_is_4_1_gmacs_per_image():
    """He et al. 2016 Table 1: 3.8e9 FLOPs (MACs, v1); torchvision v1.5 reports 4.09 GMACs."""
    m = st.load_model("resnet50")
    macs = sum(op.flops.fw for op in m.ops if op.op_class.value in ("conv", "matmul")) / 2
    assert macs == pytest.approx(4.1e9, rel=0.01)


# --- the chapter's worked examples -----------------------------------------------------------------

def test_chapter_512x1024_linear_at_batch_64():
    """§8.4.3: "a 512×1024 layer processing a batch of 64 executes over 33 million operations": that is
    the MAC count 64·512·1024 = 33,554,432; in FLOPs (FMA = 2) the forward is 67,108,864."""
    op = make_op("linear", "fc", "fc", in_features=1024, out_features=512)
    batch = 64
    assert op.flops.fw * batch == 2 * 64 * 512 * 1024 == 67_108_864
    assert op.flops.fw * batch / 2 == 33_554_432
    assert op.param_count == 512 * 1024 + 512 == 524_800
    assert op.flops.total * batch == 3 * 67_108_864             # fw + agrad + wgrad


def test_chapter_first_resnet_convolution_bytes():
    """§8.4.4 (fp32, batch 64): the chapter's 0.38 GB / 8.1 GB / 0.037 GB, from first principles:

    input  64·3·224²·4 B = 38,535,168 B = 0.0385 GB (chapter: 0.38 GB, a factor-10 slip);
    output gradient: the conv has stride 2, so it is 64·64·112²·4 B = 205,520,896 B = 0.206 GB; the
    chapter's own formula 64·224²·64·4 B = 822,083,584 B = 0.822 GB (chapter: 8.1 GB);
    weight gradient 7·7·3·64·4 B = 37,632 B = 3.76e-5 GB (chapter: 0.037 GB)."""
    m = st.load_model("resnet50")
    conv = m.ops[0]
    assert conv.name == "stem/conv" and conv.out_shape == (64, 112, 112)
    batch, fp32 = 64, 4
    inputs = 3 * 224 * 224
    assert conv.saved.act * batch * fp32 == inputs * batch * fp32 == 38_535_168
    assert conv.out_elements * batch * fp32 == 205_520_896
    assert 64 * 224 * 224 * 64 * 4 == 822_083_584
    assert conv.weight_write.wgrad * fp32 == 7 * 7 * 3 * 64 * 4 == 37_632
    # §8.4.3: 112×112×64 at batch 32 in fp32 "≈ 98 MB": 102,760,448 B = 98.0 MiB (right, in MiB)
    assert conv.out_elements * 32 * fp32 == 102_760_448 == 98 * 2**20
    # 7·7·3 = 147 MACs per output position, as the chapter says
    assert conv.flops.fw / 2 / (64 * 112 * 112) == 147
