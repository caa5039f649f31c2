"""Pure cost functions shared by both engines."""

from simtrain.cost.cost import Cost

__all__ = ["Cost"]
