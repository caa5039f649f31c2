"""The layout one rank program is built for: parallel degrees, virtual pipeline stages and the
micro-batching of a step (resolved once from the TrainConfig and the cluster: estimator.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    v: int
    micro_batches: int
    micro_batch: int

    def as_dict(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep,
                "virtual_stages": self.v, "micro_batches": self.micro_batches, "micro_batch_size": self.micro_batch}
