"""Model graphs: op records, rules, builders and importers."""

from simtrain.graph.model import Model, UnmodelledOp
from simtrain.graph.op import AttentionInfo, Gemm, MoEInfo, Op, PhaseCounts, Saved

__all__ = ["Model", "UnmodelledOp", "Op", "PhaseCounts", "Gemm", "AttentionInfo", "MoEInfo", "Saved"]
