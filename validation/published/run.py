"""Predict every published row with simtrain, zero-shot, and report the error (``python -m validation.published.run``).

Zero-shot: the shipped component-derived A100 profile and the ``megatron-lm`` stack preset, nothing
fitted to these tables. ``python -m validation.published.transfer`` adds the one-shot calibration."""

from __future__ import annotations

import math
from dataclasses import dataclass

import simtrain as st
from validation.published.cases import (
    KORTHIKANTI_TABLE5,
    MEGATRON_TABLE1,
    SEQ_LEN,
    KorthikantiRow,
    MegatronRow,
    megatron_flops_per_step,
)

__all__ = ["CaseResult", "run_megatron", "run_korthikanti", "run_all", "summary", "CLUSTER"]

CLUSTER = "dgx-a100-80gb"


@dataclass(frozen=True)
class CaseResult:
    case: str
    unit: str
    published: float
    predicted: float
    feasible: bool

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


def _cluster(gpus: int, device=None):
    cluster = st.load_cluster(CLUSTER, nodes=max(1, gpus // 8))
    if device is None:
        return cluster
    node = cluster.node.model_copy(update={"device": device})
    return cluster.model_copy(update={"node": node})


STACK = "megatron-lm"
"""The code that produced both tables (simtrain/specs/stacks/megatron-lm.yaml)."""


def megatron_config(row: MegatronRow) -> st.TrainConfig:
    """Table 1's row as the authors' reproduction script ran it (cases.py)."""
    v = row.virtual_stages
    return st.TrainConfig(global_batch_size=row.batch, micro_batch_size=row.micro_batch, seq_len=SEQ_LEN,
                          precision="fp16", optimizer="adam", tp=row.tp, pp=row.pp, recompute="full",
                          pipeline_schedule="interleaved-1f1b" if v > 1 else "1f1b", virtual_stages=v,
                          dp_overlap=row.torch_ddp, stack=STACK)


def korthikanti_config(row: KorthikantiRow, selective: bool) -> st.TrainConfig:
    return st.TrainConfig(global_batch_size=row.batch, micro_batch_size=row.micro_batch, seq_len=SEQ_LEN,
                          precision="fp16", optimizer="adam", tp=row.tp, pp=row.pp, stack=STACK,
                          recompute="selective" if selective else "full", sequence_parallel=selective)


def run_megatron(device=None) -> list[CaseResult]:
    out = []
    for row in MEGATRON_TABLE1:
        r = st.estimate(st.load_model(row.model), _cluster(row.gpus, device), megatron_config(row))
        tflops = megatron_flops_per_step(row) / (r.step_time_s * row.gpus) / 1e12
        out.append(CaseResult(f"Narayanan21 T1 {row.params_b}B", "TFLOP/s/GPU", row.tflops_per_gpu, tflops, r.feasible))
    return out


def run_korthikanti(device=None) -> list[CaseResult]:
    out = []
    for row in KORTHIKANTI_TABLE5:
        model, cluster = st.load_model(row.model), _cluster(row.gpus, device)
        for selective, published in ((False, row.full_recompute_s), (True, row.sp_selective_s)):
            r = st.estimate(model, cluster, korthikanti_config(row, selective))
            label = "SP+selective" if selective else "full recompute"
            out.append(CaseResult(f"Korthikanti22 T5 {row.model.split('-')[1]} {label}", "s/iter",
                                  published, r.step_time_s, r.feasible))
    return out


def run_all(device=None) -> dict[str, list[CaseResult]]:
    return {"megatron": run_megatron(device), "korthikanti": run_korthikanti(device)}


def summary(results: list[CaseResult]) -> tuple[float, float]:
    """(MAPE, worst absolute error), as fractions."""
    errs = [abs(r.error) for r in results if math.isfinite(r.error)]
    return sum(errs) / len(errs), max(errs)


def main() -> None:
    for name, results in run_all().items():
        print(f"\n{name}")
        print(f"{'case':<44} {'published':>10} {'simtrain':>10} {'error':>8}")
        for r in results:
            print(f"{r.case:<44} {r.published:>10.2f} {r.predicted:>10.2f} {100 * r.error:>+7.1f}%")
        mape, worst = summary(results)
        print(f"MAPE {100 * mape:.2f}%   worst {100 * worst:.2f}%")


if __name__ == "__main__":
    main()
