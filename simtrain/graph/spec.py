"""``ModelSpec``: the schema of ``workloads/models/*.yaml`` (``spec: model``).

A model file names a *family* and gives that family's section::

    spec: model
    name: llama3-8b
    family: transformer          # transformer | vit | cnn | mlp
    source: "Meta Llama 3 model card; config.json"
    published_params: 8.03e9     # the size its authors quote (checked by the golden tests)
    seq_len: 8192                # sequence models only
    transformer: {layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, ...}

``vit`` models give a ``vit`` section (patches, classes) and a ``transformer`` section (the encoder);
``cnn`` and ``mlp`` models give theirs. Defaults are the GPT-2 style pre-LN decoder; every default is
named in its field's docstring. Validators check, they never rewrite input: derived values
(``kv_heads`` None = ``heads``) are properties.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from simtrain.errors import SpecError
from simtrain.specs.base import Spec, register_schema, spec_error_from_validation

__all__ = ["ModelSpec", "TransformerArch", "MoESpec", "MLASpec", "VitArch", "CnnArch", "MlpArch"]

PosInt = Annotated[int, Field(ge=1, le=10**9)]
LayerCount = Annotated[int, Field(ge=1, le=10_000)]
"""Layers / blocks of a model: the deepest published models have a few hundred; 10,000 keeps a typo
(``layers: 1e9``) from building a billion-op graph."""
Prob = Annotated[float, Field(ge=0.0, lt=1.0)]


class MoESpec(Spec):
    """Mixture-of-experts FFN (Switch / GShard / Mixtral)."""

    experts: Annotated[int, Field(ge=2, le=100_000)]
    top_k: Annotated[int, Field(ge=1, le=1024)]
    capacity_factor: Annotated[float, Field(gt=0, le=100)] = 1.0
    every: Annotated[int, Field(ge=1, le=1000)] = 1
    """Layer i has an MoE FFN when (i + 1) % every == 0 (every=2: layers 1, 3, 5, … as in GShard and
    Llama 4 Maverick's ``interleave_moe_layer_step: 2``)."""
    first_dense: Annotated[int, Field(ge=0, le=10_000)] = 0
    """The first N layers keep a dense FFN of ``transformer.ffn_hidden`` (DeepSeek-V3
    ``first_k_dense_replace: 3``, DeepSeek-AI 2024 §4.2)."""
    ffn_hidden: PosInt | None = None
    """Width of each routed expert (HF ``moe_intermediate_size``; Llama 4 ``intermediate_size``); None =
    ``transformer.ffn_hidden``, which then is the width of the dense layers too (Mixtral)."""
    shared_experts: Annotated[int, Field(ge=0, le=1024)] = 0
    """Experts every token goes through beside its ``top_k`` routed ones (DeepSeekMoE, Dai et al. 2024
    §3.2; DeepSeek-V3 ``n_shared_experts: 1``; Llama 4's ``shared_expert``): one dense FFN of width
    ``shared_ffn_hidden``, tensor-parallel like a dense FFN, not spread by expert parallelism."""
    shared_ffn_hidden: PosInt | None = None
    """Width of the shared-expert FFN (Qwen2-MoE ``shared_expert_intermediate_size``); None =
    ``shared_experts`` × the routed expert width."""

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        if self.shared_ffn_hidden is not None and not self.shared_experts:
            raise ValueError("shared_ffn_hidden needs shared_experts ≥ 1")
        return self


class MLASpec(Spec):
    """Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024 §2.1; DeepSeek-V3 HF config.json):
    low-rank projections of the queries (h → ``q_lora_rank`` → heads·(nope + rope)) and of the keys and
    values (h → ``kv_lora_rank`` + rope → heads·(nope + v)), an RMSNorm on each latent, a rotary part
    of ``qk_rope_head_dim`` per query head and one shared by all heads for the keys. Training runs the
    non-absorbed form: heads × (nope + rope)-dim queries and keys, heads × ``v_head_dim`` values."""

    q_lora_rank: PosInt | None = None
    """Rank of the query compression (DeepSeek-V3: 1536); None = one h → heads·(nope + rope) matrix
    (DeepSeek-V2-Lite)."""
    kv_lora_rank: PosInt
    """Rank of the joint key/value compression (DeepSeek-V3: 512)."""
    qk_nope_head_dim: PosInt
    """Per-head query/key dims without rotary (DeepSeek-V3: 128)."""
    qk_rope_head_dim: PosInt
    """Per-head query/key dims with rotary (DeepSeek-V3: 64); even."""
    v_head_dim: PosInt
    """Per-head value dims (DeepSeek-V3: 128)."""

    @model_validator(mode="after")
    def _check(self) -> MLASpec:
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim ({self.qk_rope_head_dim}) must be even (rotary pairs)")
        return self

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class TransformerArch(Spec):
    """A stack of identical transformer layers (decoder, encoder or ViT encoder)."""

    layers: LayerCount
    hidden: PosInt
    heads: PosInt
    kv_heads: PosInt | None = None
    """Key/value heads (GQA, Ainslie et al. 2023); None = heads (multi-head attention)."""
    head_dim: PosInt | None = None
    """None = hidden / heads."""
    ffn_hidden: PosInt | None = None
    """FFN inner width; None = 4·hidden. For swiglu this is the width of each of gate / up."""
    vocab: PosInt | None = None
    """Vocabulary (already padded, e.g. Megatron's 51200); required for text models."""
    max_positions: PosInt | None = None
    """Rows of a learned position table; None = seq_len."""
    activation: Literal["gelu", "gelu_tanh", "swiglu", "relu", "relu2"] = "gelu"
    """The MLP's activation; ``relu2`` is squared ReLU, relu(x)² (So et al. 2021, Primer; Nemotron)."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    norm_position: Literal["pre", "post"] = "pre"
    """pre-LN (GPT-2 onwards) or post-LN (BERT)."""
    position: Literal["learned", "rotary", "none"] = "learned"
    rotary_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Share of each head's dims that rotary rotates (GPT-NeoX rotary_pct)."""
    tied_embeddings: bool = True
    """LM head shares the token embedding (counted once)."""
    biases: bool = True
    """Biases on the linear layers and norms (GPT-2, BERT); False for Llama-style models."""
    qkv_bias: bool | None = None
    """Bias on the QKV projection only; None = biases (Qwen2: biases False, qkv_bias True)."""
    token_types: Annotated[int, Field(ge=0, le=1024)] = 0
    """Segment-embedding rows (BERT: 2)."""
    parallel_residual: bool = False
    """x + attn(ln1(x)) + mlp(ln2(x)) (GPT-J / GPT-NeoX)."""
    causal: bool = True
    dropout: Prob = 0.0
    """Hidden / embedding dropout probability."""
    attention_dropout: Prob | None = None
    """Dropout on the attention probabilities; None = dropout."""
    flash_attention: bool = False
    """Fused attention (never materialises the seq × seq scores)."""
    fused_activation: bool = False
    """SwiGLU as one fused kernel that keeps only its input (gate and up) and recomputes silu(gate) in
    its backward (Megatron-Core's bias-SwiGLU fusion, Transformer Engine, Inductor): 2f saved per
    token instead of eager PyTorch's 3f. The stack sets it (``Stack.fused_activation``)."""
    fused_cross_entropy: bool = False
    """The loss as one fused kernel on the logits in their own dtype (flash-attn ``CrossEntropyLoss``):
    it keeps the logits and a per-row log-sum-exp, not fp32 log-probabilities, and its gradient is in
    the activation dtype. The stack sets it (``Stack.loss_kernel`` "fused")."""
    loss_chain: Literal["eager", "in-place"] | None = None
    """The loss as its framework's chain of kernels on logits upcast by a copy of their own, fp32 after the
    copy (graph/rules/lookup.py): "eager", PyTorch's ``F.cross_entropy(logits.float())`` uncompiled (36 B
    a logit at 16-bit activations); "in-place", Megatron's unfused ``vocab_parallel_cross_entropy`` (52 B);
    None, the generic single pass (16 B). The stack sets it (``Stack.loss_kernel`` "eager" / "in-place",
    16-bit activations only: at fp32 the upcast is no copy and the eager chain moves what the generic rule
    does; Megatron's passes over fp32 logits are not priced apart)."""
    metric_cross_entropies: Annotated[int, Field(ge=0, le=8)] = 0
    """Cross-entropies of the logits evaluated again after each micro-batch's backward, outside autograd,
    for the trainer's metrics (an op ``head/metrics``, forward only). The stack sets it
    (``Stack.train_metric_losses``)."""
    eager_norm_fp32: bool = False
    """RMSNorm as a chain of PyTorch ops in fp32, each its own kernel (Meta's reference Llama, torchtitan's
    2024 ``RMSNorm``, HF ``LlamaRMSNorm``): ×9 the fused kernel's traffic, and it keeps an fp32 copy of
    its input (graph/rules/norm.py). The stack sets it (``Stack.norm_kernel`` "eager-fp32"); LayerNorm:
    no effect (PyTorch's ``native_layer_norm`` is one kernel)."""
    eager_rotary_fp32: bool = False
    """Rotary embedding as complex fp32 PyTorch ops (``view_as_complex(x.float()) * freqs_cis``: Meta's
    reference Llama, torchtitan): three kernels per tensor, 20 B per element against the fused
    kernel's 4 (graph/rules/attention.py). The stack sets it (``Stack.rotary_kernel`` "eager-fp32")."""
    eager_rotary_matrix: bool = False
    """With ``eager_rotary_fp32``: IBM foundation-model-stack's form, each pair multiplied by an fp32 2×2
    rotation matrix and summed (36 B per element and phase against the complex form's 20;
    graph/rules/attention.py). The stack sets it (``Stack.rotary_kernel`` "eager-fp32-matrix")."""
    moe: MoESpec | None = None
    qk_norm: Literal["none", "rmsnorm", "l2"] = "none"
    """A norm over each head's dims of Q and K before rotary: ``rmsnorm`` with a weight of head_dim each
    (Qwen3, HF ``Qwen3Attention.q_norm`` / ``k_norm``), ``l2`` without a weight (Llama 4
    ``use_qk_norm``, HF ``Llama4TextL2Norm``)."""
    mla: MLASpec | None = None
    """Multi-head latent attention in place of the (GQA) QKV projection; kv_heads and head_dim are then
    not given."""
    mtp_modules: Annotated[int, Field(ge=0, le=16)] = 0
    """Multi-token prediction modules after the LM head (DeepSeek-V3 §2.2, ``num_nextn_predict_layers``):
    each a block ``mtp<k>`` with its own layer, 2h → h projection and norms, sharing the token embedding
    and the LM head, with a second loss. Their parameters count in ``param_count``."""
    head: Literal["lm", "mlm", "classifier", "none"] = "lm"
    """lm: final norm + LM head + loss; mlm: BERT's transform + tied decoder + loss; classifier:
    final norm + linear on the first token (ViT); none: no head."""

    @property
    def kv_heads_n(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim_n(self) -> int:
        """Q/K head dims (MLA: nope + rope)."""
        if self.mla is not None:
            return self.mla.qk_head_dim
        return self.head_dim or self.hidden // self.heads

    @property
    def v_head_dim_n(self) -> int:
        """Value head dims: head_dim, or MLA's v_head_dim."""
        return self.mla.v_head_dim if self.mla is not None else self.head_dim_n

    @property
    def moe_ffn_hidden_n(self) -> int | None:
        """Routed-expert width (None without MoE)."""
        return None if self.moe is None else self.moe.ffn_hidden or self.ffn_hidden_n

    @property
    def shared_ffn_hidden_n(self) -> int:
        """Shared-expert FFN width (0: none)."""
        m = self.moe
        if m is None or not m.shared_experts:
            return 0
        return m.shared_ffn_hidden or m.shared_experts * self.moe_ffn_hidden_n

    @property
    def ffn_hidden_n(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def qkv_bias_b(self) -> bool:
        return self.biases if self.qkv_bias is None else self.qkv_bias

    @property
    def attention_dropout_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @model_validator(mode="after")
    def _check(self) -> TransformerArch:
        if self.mla is not None:
            self._check_mla()
        elif self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) is not a multiple of heads ({self.heads}); give head_dim")
        if self.heads % self.kv_heads_n:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads_n})")
        rot = self.head_dim_n * self.rotary_fraction
        if self.position == "rotary" and self.mla is None and (rot != int(rot) or int(rot) % 2):
            raise ValueError(f"rotary_fraction × head_dim = {rot} must be an even integer")
        if self.head in ("lm", "mlm") and self.vocab is None:
            raise ValueError(f"head {self.head!r} needs vocab")
        if self.moe is not None and self.moe.first_dense >= self.layers:
            raise ValueError(f"moe.first_dense ({self.moe.first_dense}) leaves none of the {self.layers} layers MoE")
        if self.mtp_modules and (self.head != "lm" or self.norm_position != "pre" or self.parallel_residual):
            raise ValueError("mtp_modules needs a pre-LN decoder with an lm head")
        return self

    def _check_mla(self) -> None:
        if self.kv_heads is not None or self.head_dim is not None:
            raise ValueError("with mla, kv_heads and head_dim are not given (MLA sets the head dims)")
        if self.position != "rotary" or self.rotary_fraction != 1.0:
            raise ValueError("mla needs position 'rotary' (its rope part is mla.qk_rope_head_dim)")
        if self.norm_position != "pre" or self.parallel_residual or self.qk_norm != "none":
            raise ValueError("mla is built for a pre-LN decoder without qk_norm")


class VitArch(Spec):
    """Vision Transformer input and head (Dosovitskiy et al. 2021)."""

    patch_size: PosInt
    image_size: PosInt
    channels: PosInt = 3
    classes: PosInt = 1000
    class_token: bool = True

    @model_validator(mode="after")
    def _check(self) -> VitArch:
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size})")
        return self

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2 + (1 if self.class_token else 0)


class CnnArch(Spec):
    """A convolutional classifier: ResNet (He et al. 2016), VGG (Simonyan & Zisserman 2015),
    MobileNet v1 (Howard et al. 2017)."""

    arch: Literal["resnet", "vgg", "mobilenet"]
    depth: LayerCount | None = None
    """resnet: 18, 34 (basic blocks), 50, 101, 152 (bottleneck); vgg: 11, 13, 16, 19; mobilenet: None."""
    batch_norm: bool = True
    """vgg only (resnet and mobilenet always have it)."""
    width_multiplier: Annotated[float, Field(gt=0, le=4)] = 1.0
    """mobilenet α."""
    dropout: Prob = 0.5
    """vgg classifier dropout."""
    image_size: PosInt = 224
    channels: PosInt = 3
    classes: PosInt = 1000

    @model_validator(mode="after")
    def _check(self) -> CnnArch:
        allowed = {"resnet": {18, 34, 50, 101, 152}, "vgg": {11, 13, 16, 19}, "mobilenet": {None}}[self.arch]
        if self.depth not in allowed:
            raise ValueError(f"depth {self.depth!r} is not a {self.arch} depth; one of {sorted(allowed, key=str)}")
        return self


class MlpArch(Spec):
    """A multi-layer perceptron: widths[0] inputs → … → widths[-1] classes, cross-entropy loss."""

    widths: Annotated[tuple[PosInt, ...], Field(min_length=2, max_length=1000)]
    activation: Literal["relu", "gelu", "tanh", "sigmoid"] = "relu"
    bias: bool = True
    dropout: Prob = 0.0


_SECTIONS = {"transformer": ("transformer",), "vit": ("vit", "transformer"), "cnn": ("cnn",), "mlp": ("mlp",)}


@register_schema("model")
class ModelSpec(Spec):
    """One model of the library (what is trained)."""

    name: Annotated[str, Field(min_length=1, max_length=120)]
    family: Literal["transformer", "vit", "cnn", "mlp"]
    description: str = ""
    source: str | None = None
    """Where the architecture comes from (paper, table; model card)."""
    published_params: Annotated[float, Field(gt=0)] | None = None
    """The parameter count its authors publish (a reference, never used in a computation)."""
    seq_len: PosInt | None = None
    """Tokens per sample: required for text transformers; absent for vit (derived), cnn and mlp."""
    transformer: TransformerArch | None = None
    vit: VitArch | None = None
    cnn: CnnArch | None = None
    mlp: MlpArch | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        wanted = _SECTIONS[self.family]
        for section in ("transformer", "vit", "cnn", "mlp"):
            given = getattr(self, section) is not None
            if section in wanted and not given:
                raise ValueError(f"family {self.family!r} needs a {section!r} section")
            if section not in wanted and given:
                raise ValueError(f"section {section!r} does not belong to family {self.family!r}")
        if self.family == "transformer" and self.seq_len is None:
            raise ValueError("a transformer model needs seq_len")
        t = self.transformer
        if (self.family == "transformer" and t.position == "learned" and t.max_positions is not None
                and t.max_positions < self.seq_len):
            raise ValueError(f"seq_len ({self.seq_len}) exceeds the learned position table "
                             f"(transformer.max_positions = {t.max_positions})")
        if self.family != "transformer" and self.seq_len is not None:
            raise ValueError(f"seq_len is not a field of a {self.family} model")
        return self

    @property
    def is_sequence_model(self) -> bool:
        return self.family == "transformer"

    @property
    def tokens_per_sample(self) -> int | None:
        if self.family == "transformer":
            return self.seq_len
        if self.family == "vit":
            return self.vit.tokens
        return None

    def with_seq_len(self, seq_len: int) -> ModelSpec:
        """The same architecture at another sequence length (validated again; a SpecError if it
        does not fit, e.g. beyond a learned position table)."""
        if not self.is_sequence_model:
            raise SpecError.one(None, "seq_len", f"{self.family} model {self.name!r} has no sequence length")
        try:
            return ModelSpec.model_validate({**self.model_dump(exclude_none=True), "seq_len": seq_len})
        except ValidationError as err:
            raise spec_error_from_validation(err, None, prefix=self.name) from None
