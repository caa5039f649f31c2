"""Op rules: one pure function per op kind, in a registry (see :mod:`.registry`).

``make_op(kind, name, block, **params)`` builds the :class:`~simtrain.graph.op.Op` of one operator
from its per-sample shape parameters. Conventions shared by every rule:

* counts are per sample and in elements (the precision regime turns them into bytes); bytes that do
  not follow the activation dtype (1-byte masks, int64 indices, fp32 statistics) are
  ``fixed_*_bytes`` / ``saved.fixed_bytes``;
* one FMA = 2 FLOPs; matrix ops count their products only (FlopCounterMode's convention), fused
  composites (attention, MoE experts) count their matmuls only, element-wise ops count one FLOP per
  arithmetic operation of their formula (tables in :mod:`.pointwise` and :mod:`.norm`);
* ``saved`` is what PyTorch's autograd keeps for the op's backward;
* an unknown kind raises :class:`~simtrain.errors.MissingRuleError`.
"""

from simtrain.graph.rules import attention, conv, dense, lookup, moe, norm, pointwise  # noqa: F401  (register)
from simtrain.graph.rules.attention import attention_flops, causal_fraction
from simtrain.graph.rules.conv import conv_out_size
from simtrain.graph.rules.registry import get_rule, make_op, registered_kinds, rule

__all__ = ["rule", "make_op", "get_rule", "registered_kinds", "attention_flops", "causal_fraction",
           "conv_out_size"]
