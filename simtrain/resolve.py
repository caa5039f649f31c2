"""Inputs resolved once, at the entry of every engine (``st.estimate``, ``st.simulate``,
``build_program``; the vectorized path per point): the stack merged into the TrainConfig, the
precision regime, the cluster with emulated precision applied, the model with the stack's kernels, and
the device's effective efficiency profile. Everything below reads them from the :class:`Resolved`
record and the program built from it, and never looks the stack or the profile up again
(``tests/unit/test_resolve_once.py`` holds that)."""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.cost.compute import device_efficiency
from simtrain.cost.emulation import emulated_cluster
from simtrain.cost.precision import Regime, regime
from simtrain.graph.model import Model
from simtrain.graph.rules.lookup import LOSS_CHAINS
from simtrain.specs.efficiency import Efficiency
from simtrain.specs.hardware import Cluster
from simtrain.specs.stack import Stack
from simtrain.specs.stack_resolve import resolve_stack, stack_of
from simtrain.specs.train import TrainConfig

__all__ = ["Resolved", "resolve", "prepare_model"]


@dataclass(frozen=True)
class Resolved:
    """One engine call's inputs, resolved."""

    model: Model
    """At the config's sequence length, with the stack's activation, attention and loss kernels."""
    cluster: Cluster
    """With the precision emulation the config asks for applied to its device."""
    cfg: TrainConfig
    """The stack merged in: ``cfg.stack`` is the resolved :class:`Stack` (its defaults in the
    TrainConfig fields the user did not set, its SM share folded into its interference)."""
    regime: Regime
    efficiency: Efficiency
    """The device's effective profile (its own block or its kind's default; dataflow on a
    layer-pipelined FPGA; after calibration, which scales the device the cluster carries)."""

    @property
    def stack(self) -> Stack:
        return self.cfg.stack


def resolve(model: Model, cluster: Cluster, cfg: TrainConfig) -> Resolved:
    """The one resolution of an engine call (idempotent on resolved inputs)."""
    cfg = resolve_stack(cfg, cluster.device)
    reg = regime(cfg.precision)
    cluster = emulated_cluster(cluster, reg.matmul_dtype, cfg.emulate_precision)
    model = prepare_model(model, cfg, cfg.stack)
    return Resolved(model, cluster, cfg, reg, device_efficiency(cluster.device))


def prepare_model(model: Model, cfg: TrainConfig, stack: Stack | None = None) -> Model:
    """The model at cfg's sequence length, with cfg's attention kernel choice (fused "flash" or
    materialised) when the config sets one and the stack's activation, loss, norm and rotary kernels
    (fused SwiGLU or eager; fused cross-entropy, PyTorch's or Megatron's chain of kernels, or upcast; fused or
    eager fp32 RMSNorm and rotary) and the cross-entropies its trainer evaluates again for metrics:
    rebuilt from its architecture spec (cached). ``stack``: the resolved stack when the caller has it
    (:func:`resolve`); else the config's is read."""
    stack = stack if stack is not None else stack_of(cfg)
    model = model.with_seq_len(cfg.seq_len)
    spec = model.arch
    arch = getattr(spec, "transformer", None)
    if arch is None:
        return model
    update = {}
    if cfg.flash_attention is not None and arch.flash_attention != cfg.flash_attention:
        update["flash_attention"] = cfg.flash_attention
    fused = stack.fused_activation and arch.activation == "swiglu"
    if arch.fused_activation != fused:
        update["fused_activation"] = fused
    fused_loss = stack.loss_kernel == "fused"
    if arch.fused_cross_entropy != fused_loss:
        update["fused_cross_entropy"] = fused_loss
    # PyTorch's eager loss and Megatron's upcast 16-bit logits with a copy kernel and run a chain of kernels
    # in fp32; fp32 logits they take as they are (one pass's traffic: the generic rule)
    chained = stack.loss_kernel in LOSS_CHAINS and regime(cfg.precision).act_bytes < 4
    chain = stack.loss_kernel if chained else None
    if arch.loss_chain != chain:
        update["loss_chain"] = chain
    if arch.metric_cross_entropies != stack.train_metric_losses:
        update["metric_cross_entropies"] = stack.train_metric_losses
    eager = {"eager_norm_fp32": stack.norm_kernel == "eager-fp32",
             "eager_rotary_fp32": stack.rotary_kernel in ("eager-fp32", "eager-fp32-matrix"),
             "eager_rotary_matrix": stack.rotary_kernel == "eager-fp32-matrix"}
    update.update({k: v for k, v in eager.items() if getattr(arch, k) != v})
    if not update:
        return model
    from simtrain.graph.model import build_model
    new_spec = spec.model_copy(update={"transformer": arch.model_copy(update=update)})
    if cfg.seq_len is not None and hasattr(new_spec, "with_seq_len") and new_spec.is_sequence_model:
        new_spec = new_spec.with_seq_len(cfg.seq_len)
    return build_model(new_spec)
