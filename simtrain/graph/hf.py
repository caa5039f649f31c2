"""``Model.from_hf_config``: a Hugging Face ``config.json`` (path or dict) → a Model, with no weights
and no torch.

Supported ``model_type`` s: gpt2, gpt_neox, llama, mistral, qwen2, mixtral, qwen2_moe (MoE fields
only: no shared expert), qwen3 and qwen3_moe (qk-norm, ``head_dim``, ``moe_intermediate_size``),
llama4_text (Llama 4's ``text_config``: shared expert, ``interleave_moe_layer_step``,
``intermediate_size_mlp`` for the dense layers), deepseek_v3 (MLA, shared experts,
``first_k_dense_replace``, ``num_nextn_predict_layers`` MTP modules), nemotron (squared ReLU, partial
rotary), bert. Field names follow the ``transformers`` configuration classes
(shared/reference/ecosystem.md §4) with the usual aliases (GPT-2's ``n_embd`` / ``n_layer`` /
``n_head`` / ``n_positions`` / ``n_inner``, ``d_model``, ``num_experts`` for
``num_local_experts``, …). A multimodal config whose own ``model_type`` is not a text model but
which nests one under ``text_config`` is read from there. An unknown type is a
:class:`~simtrain.errors.SpecError` naming the field; so is a missing required field.

Not modelled: Mistral's ``sliding_window`` (attention is counted over the whole sequence — an
over-estimate when seq_len exceeds the window), rope scaling, and dropout fields other than the
hidden / attention probabilities.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simtrain.errors import SpecError
from simtrain.graph.spec import ModelSpec
from simtrain.specs.base import spec_error_from_validation
from simtrain.specs.reading import clip, read_json_file

__all__ = ["hf_config_to_spec", "SUPPORTED_MODEL_TYPES"]

_MISSING = object()
_ALIASES = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads"),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "d_ff"),
    "positions": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "moe_top_k"),
    "act": ("hidden_act", "activation_function"),
}
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                "relu": "relu", "relu2": "relu2"}


class _Cfg:
    """A config dict with alias lookup and errors that name the file and the field."""

    def __init__(self, data: dict, file: str | None) -> None:
        self.data, self.file = data, file

    def get(self, concept: str, default: Any = _MISSING) -> Any:
        for key in _ALIASES[concept]:
            if self.data.get(key) is not None:
                return self.data[key]
        if default is _MISSING:
            raise SpecError.one(self.file, _ALIASES[concept][0], f"required ({concept}); also read as "
                                f"{', '.join(_ALIASES[concept][1:]) or 'no alias'}")
        return default

    def raw(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def activation(self, gated: bool) -> str:
        act = str(self.get("act", "silu" if gated else "gelu"))
        if gated:
            if act not in ("silu", "swish"):
                raise SpecError.one(self.file, "hidden_act", f"gated MLP with {act!r} is not supported (silu only)")
            return "swiglu"
        if act not in _ACTIVATIONS:
            raise SpecError.one(self.file, "hidden_act", f"unknown activation {act!r}; known: {sorted(_ACTIVATIONS)}")
        return _ACTIVATIONS[act]


_FUSED_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def _fused_attention(c: _Cfg) -> bool:
    """Hugging Face ``attn_implementation`` (also saved as ``_attn_implementation``): ``eager``
    materialises the scores; sdpa / flash_attention_2/3 / flex run a fused kernel. Absent means
    sdpa, transformers' default since v4.36, so fused."""
    impl = c.raw("attn_implementation") or c.raw("_attn_implementation") or "sdpa"
    if impl not in ("eager", *_FUSED_IMPLEMENTATIONS):
        raise SpecError.one(c.file, "attn_implementation",
                            f"must be one of eager, {', '.join(_FUSED_IMPLEMENTATIONS)}")
    return impl != "eager"


def _common(c: _Cfg) -> dict:
    return {"layers": c.get("layers"), "hidden": c.get("hidden"), "heads": c.get("heads"), "vocab": c.get("vocab"),
            "flash_attention": _fused_attention(c)}


def _gpt2(c: _Cfg) -> dict:
    return {**_common(c), "ffn_hidden": c.get("ffn", None), "max_positions": c.get("positions"),
            "activation": c.activation(False), "norm": "layernorm", "position": "learned",
            "tied_embeddings": c.raw("tie_word_embeddings", True), "biases": True,
            "dropout": c.raw("resid_pdrop", 0.0), "attention_dropout": c.raw("attn_pdrop", 0.0)}


def _neox(c: _Cfg) -> dict:
    return {**_common(c), "ffn_hidden": c.get("ffn"), "activation": c.activation(False), "norm": "layernorm",
            "position": "rotary", "rotary_fraction": c.raw("rotary_pct", 0.25),
            "parallel_residual": c.raw("use_parallel_residual", True),
            "tied_embeddings": c.raw("tie_word_embeddings", False), "biases": True,
            "dropout": c.raw("hidden_dropout", 0.0), "attention_dropout": c.raw("attention_dropout", 0.0)}


def _llama_like(c: _Cfg, qkv_bias: bool | None = None) -> dict:
    out = {**_common(c), "kv_heads": c.get("kv_heads", None), "head_dim": c.raw("head_dim"),
           "ffn_hidden": c.get("ffn"), "activation": c.activation(True), "norm": "rmsnorm", "position": "rotary",
           "tied_embeddings": c.raw("tie_word_embeddings", False), "biases": c.raw("mlp_bias", False),
           "qkv_bias": c.raw("attention_bias", False) if qkv_bias is None else qkv_bias,
           "attention_dropout": c.raw("attention_dropout", 0.0)}
    experts = c.get("experts", None)
    if experts:
        ffn = c.raw("moe_intermediate_size") or out["ffn_hidden"]
        out.update(ffn_hidden=ffn, moe={"experts": experts, "top_k": c.get("top_k", 2),
                                        "every": c.raw("decoder_sparse_step", 1)})
    return out


def _qwen3(c: _Cfg) -> dict:
    """Qwen3 (HF ``Qwen3Attention``: q_norm / k_norm RMSNorm over head_dim); qwen3_moe adds experts of
    ``moe_intermediate_size`` on every ``decoder_sparse_step``-th layer, no shared expert."""
    out = {**_llama_like(c), "qk_norm": "rmsnorm", "moe": None, "ffn_hidden": c.get("ffn")}
    experts = c.get("experts", None)
    if experts:
        if c.raw("mlp_only_layers"):
            raise SpecError.one(c.file, "mlp_only_layers", "dense layers listed by index are not supported")
        out["moe"] = {"experts": experts, "top_k": c.get("top_k"), "every": c.raw("decoder_sparse_step", 1),
                      "ffn_hidden": c.raw("moe_intermediate_size")}
    return out


def _llama4(c: _Cfg) -> dict:
    """Llama 4 text model (HF ``Llama4TextConfig``): MoE layers every ``interleave_moe_layer_step``
    with experts and one shared expert of ``intermediate_size``; dense layers ``intermediate_size_mlp``;
    ``use_qk_norm`` a weightless L2 norm."""
    step = c.raw("interleave_moe_layer_step", 1)
    layers = c.get("layers")
    listed = c.raw("moe_layers")
    if listed is not None and list(listed) != list(range(step - 1, layers, step)):
        raise SpecError.one(c.file, "moe_layers", "only every interleave_moe_layer_step-th layer is supported")
    return {**_llama_like(c), "ffn_hidden": c.raw("intermediate_size_mlp") or c.get("ffn"),
            "qk_norm": "l2" if c.raw("use_qk_norm", False) else "none",
            "moe": {"experts": c.get("experts"), "top_k": c.get("top_k", 1), "every": step,
                    "ffn_hidden": c.get("ffn"), "shared_experts": 1}}


def _deepseek_v3(c: _Cfg) -> dict:
    """DeepSeek-V3 (HF ``DeepseekV3Config``): MLA, ``first_k_dense_replace`` dense layers then MoE with
    ``n_shared_experts``; ``num_nextn_predict_layers`` MTP modules (transformers drops them at load,
    training keeps them)."""
    if c.raw("moe_layer_freq", 1) != 1:
        raise SpecError.one(c.file, "moe_layer_freq", "only 1 is supported")
    mla = {"q_lora_rank": c.raw("q_lora_rank"), "kv_lora_rank": c.raw("kv_lora_rank"),
           "qk_nope_head_dim": c.raw("qk_nope_head_dim"), "qk_rope_head_dim": c.raw("qk_rope_head_dim"),
           "v_head_dim": c.raw("v_head_dim")}
    out = {**_llama_like(c), "kv_heads": None, "head_dim": None, "mla": mla,
           "mtp_modules": c.raw("num_nextn_predict_layers", 0), "ffn_hidden": c.get("ffn")}
    out["moe"] = {"experts": c.get("experts"), "top_k": c.get("top_k"), "ffn_hidden": c.raw("moe_intermediate_size"),
                  "shared_experts": c.raw("n_shared_experts", 0), "first_dense": c.raw("first_k_dense_replace", 0)}
    return out


def _nemotron(c: _Cfg) -> dict:
    """Nemotron (HF ``NemotronConfig``): squared-ReLU MLP (``hidden_act`` relu2, no gate), LayerNorm with a
    zero-centred gamma (layernorm1p: the same cost), RoPE on ``partial_rotary_factor`` of each head, untied
    output layer, no biases by default."""
    return {**_common(c), "kv_heads": c.get("kv_heads", None), "head_dim": c.raw("head_dim") or c.raw("kv_channels"),
            "ffn_hidden": c.get("ffn"), "activation": c.activation(False), "norm": "layernorm",
            "position": "rotary", "rotary_fraction": c.raw("partial_rotary_factor", 0.5),
            "tied_embeddings": c.raw("tie_word_embeddings", False), "biases": c.raw("mlp_bias", False),
            "qkv_bias": c.raw("attention_bias", False), "attention_dropout": c.raw("attention_dropout", 0.0)}


def _bert(c: _Cfg) -> dict:
    return {**_common(c), "ffn_hidden": c.get("ffn"), "max_positions": c.get("positions"),
            "activation": c.activation(False), "norm": "layernorm", "norm_position": "post", "position": "learned",
            "tied_embeddings": c.raw("tie_word_embeddings", True), "biases": True,
            "token_types": c.raw("type_vocab_size", 2), "causal": False, "head": "mlm",
            "dropout": c.raw("hidden_dropout_prob", 0.0),
            "attention_dropout": c.raw("attention_probs_dropout_prob", 0.0)}


_MAPPERS: dict[str, Callable[[_Cfg], dict]] = {
    "gpt2": _gpt2, "gpt_neox": _neox, "llama": _llama_like, "mistral": _llama_like,
    "qwen2": lambda c: _llama_like(c, qkv_bias=True), "mixtral": _llama_like,
    "qwen2_moe": lambda c: _llama_like(c, qkv_bias=True), "qwen3": _qwen3, "qwen3_moe": _qwen3,
    "llama4_text": _llama4, "deepseek_v3": _deepseek_v3, "nemotron": _nemotron, "bert": _bert,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_MAPPERS))
_ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox", "LlamaForCausalLM": "llama",
                  "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2", "MixtralForCausalLM": "mixtral",
                  "BertForMaskedLM": "bert", "BertForPreTraining": "bert", "BertModel": "bert",
                  "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
                  "DeepseekV3ForCausalLM": "deepseek_v3", "NemotronForCausalLM": "nemotron"}


def _read(path_or_dict: str | os.PathLike | dict) -> tuple[dict, str | None]:
    if isinstance(path_or_dict, dict):
        return path_or_dict, None
    try:
        path = Path(path_or_dict)
        if path.is_dir():
            path = path / "config.json"
    except (TypeError, ValueError):
        raise SpecError.one(None, "config", f"expected a config.json path or a dict, got {clip(path_or_dict)}") from None
    data = read_json_file(path, what="Hugging Face config")  # regular file, size-capped, no duplicate keys
    if not isinstance(data, dict):
        raise SpecError.one(str(path), "", "not a Hugging Face config: expected a JSON object")
    return data, str(path)


def _model_type(data: dict, file: str | None) -> tuple[str, dict]:
    """The text model's type and its fields (unnesting ``text_config`` where needed)."""
    mt = data.get("model_type")
    if mt not in _MAPPERS:
        for arch in data.get("architectures") or ():
            if arch in _ARCHITECTURES:
                return _ARCHITECTURES[arch], data
        nested = data.get("text_config")
        if isinstance(nested, dict) and nested.get("model_type") in _MAPPERS:
            return nested["model_type"], nested
        raise SpecError.one(file, "model_type", f"unknown model_type {mt!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return mt, data


def hf_config_to_spec(path_or_dict: str | os.PathLike | dict, *, seq_len: int | None = None,
                      name: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` a config describes; ``seq_len`` defaults to its maximum positions."""
    data, file = _read(path_or_dict)
    mt, fields = _model_type(data, file)
    cfg = _Cfg(fields, file)
    arch = {k: v for k, v in _MAPPERS[mt](cfg).items() if v is not None}
    seq = seq_len or cfg.get("positions", None)
    if seq is None:
        raise SpecError.one(file, "max_position_embeddings", "required when seq_len is not given")
    label = name or data.get("_name_or_path") or (Path(file).parent.name if file else mt)
    body = {"name": str(label)[:120] or mt, "family": "transformer", "source": f"Hugging Face config ({mt})",
            "seq_len": seq, "transformer": arch}
    try:
        return ModelSpec.model_validate(body)
    except ValidationError as err:
        raise spec_error_from_validation(err, file) from None
