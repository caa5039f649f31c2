"""ATen operator rules: what one captured ATen call costs (FLOPs by phase, bytes, the GEMM it is).

:mod:`~simtrain.graph.aten.registry` holds the registry; the rule modules (matrix, memory, vector)
register themselves on import, and importing this package imports them all.
"""

from simtrain.graph.aten import matrix, memory, vector  # noqa: F401,I001  (registers the rules)
from simtrain.graph.aten.matrix import conv_macs, sdpa_backward_flops, sdpa_forward_flops
from simtrain.graph.aten.registry import (
           CLASS_RANK,
           IO,
           AtenCost,
           GemmAxis,
           Part,
           evaluate,
           register,
           registered,
           rule_for,
)

__all__ = ["CLASS_RANK", "IO", "AtenCost", "GemmAxis", "Part", "evaluate", "register", "registered", "rule_for",
           "conv_macs", "sdpa_backward_flops", "sdpa_forward_flops"]
