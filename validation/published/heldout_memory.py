"""HELD-OUT memory: published peak memory of whole training runs, predicted zero-shot.

    python -m validation.published.heldout_memory

Like ``heldout.py`` for step times: each row is a public run whose peak memory per GPU is printed by
its source, predicted with the stack preset of its framework and never fitted to or tuned against
(``tests/golden/test_heldout_memory.py`` checks only that the table is well-formed). A row carries what
its source states; the framework's defaults of the stated commit fill the rest (``assumptions``).

The peak's kind matters: torchtitan logs ``memory: X GiB`` from ``torch.cuda.memory_stats()``'s
``reserved_bytes.all.peak`` (``torchtitan/metrics.py`` @9dec370, ``max_reserved_gib``), so its column
is compared with ``MemoryReport.reserved_bytes``. Only memory is compared: the runs' H100s are the
96 GB HBM2e, 500 W parts, a device without a profile here, so their throughput is not a row of the
time table. Capacity does not enter a reserved prediction.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import simtrain as st
from validation.published.heldout import stack_of_run

__all__ = ["MemoryRow", "MEMORY_ROWS", "MemoryResult", "predict_row", "run_heldout_memory", "main"]

GIB = 2**30

_TT_H100 = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torch 1963fc8, torchtitan 9dec370, "
            "2024-12), {table}")
_TT_ASSUME = ("torchtitan defaults at 9dec370 (train_configs/llama3_8b.toml): seq 8192, selective AC option "
              "'op' (recompute='selective-op'), bf16 parameters with fp32 reduction, AdamW, eager loss "
              "(F.cross_entropy on the fp32 logits; the loss compile is commented out)",
              "Llama 3.1 8B modelled by llama3-8b (same shape; the 3.1 RoPE scaling changes no tensor size)",
              "Grand Teton hosts (8 H100 on NVLink, 400 Gb/s RDMA per GPU) modelled by dgx-h100; memory only")
_TT_EAGER_NORM = (("norm_kernel", "eager-fp32"),)
"""train_configs/llama3_8b.toml @9dec370: norm_type = "rmsnorm", torchtitan's own eager fp32 RMSNorm
(torchtitan/models/norms.py); the compiled rows' norm is Inductor's fused kernel (the preset's)."""


@dataclass(frozen=True)
class MemoryRow:
    name: str
    model: str
    cluster: str
    nodes: int
    stack: str
    global_batch_size: int
    micro_batch_size: int
    seq_len: int
    recompute: str
    published_gib: float
    kind: str
    """Which peak the source prints: "reserved" (torch.cuda max_memory_reserved) or "allocated"."""
    source: str
    assumptions: tuple[str, ...] = ()
    precision: str = "bf16"
    stack_knobs: tuple[tuple[str, object], ...] = ()
    """Stack knobs the run's configuration sets beside its preset."""


MEMORY_ROWS = (
    MemoryRow("torchtitan Llama3.1-8B FSDP 8xH100", "llama3-8b", "dgx-h100", 1, "fsdp2", 16, 2, 8192,
              "selective-op", 82.4, "reserved", _TT_H100.format(table="Table 1, row FSDP"), _TT_ASSUME,
              stack_knobs=_TT_EAGER_NORM),
    MemoryRow("torchtitan Llama3.1-8B FSDP+compile 8xH100", "llama3-8b", "dgx-h100", 1, "fsdp2-compile", 16, 2,
              8192, "selective-op", 77.0, "reserved", _TT_H100.format(table="Table 1, row FSDP + torch.compile"),
              _TT_ASSUME),
    MemoryRow("torchtitan Llama3.1-8B FSDP 128xH100", "llama3-8b", "dgx-h100", 16, "fsdp2", 256, 2, 8192,
              "selective-op", 67.0, "reserved", _TT_H100.format(table="Table 3, row FSDP"), _TT_ASSUME,
              stack_knobs=_TT_EAGER_NORM),
    MemoryRow("torchtitan Llama3.1-8B FSDP+compile 128xH100", "llama3-8b", "dgx-h100", 16, "fsdp2-compile", 256, 2,
              8192, "selective-op", 62.0, "reserved", _TT_H100.format(table="Table 3, row FSDP + torch.compile"),
              _TT_ASSUME),
)
"""The bf16 rows of torchtitan's end-2024 H100 benchmark. Its Float8, async-TP and 3D/4D rows are left
out: torchao's Float8 training saves its own cast tensors (not modelled per recipe here) and the 405B
rows run Float8 with asynchronous TP."""


@dataclass(frozen=True)
class MemoryResult:
    row: MemoryRow
    predicted_gib: float
    report: st.StepReport

    @property
    def error(self) -> float:
        """predicted / published − 1 (negative: simtrain predicts less memory than the run took)."""
        return self.predicted_gib / self.row.published_gib - 1.0


def predict_row(row: MemoryRow) -> MemoryResult:
    cfg = st.TrainConfig(global_batch_size=row.global_batch_size, micro_batch_size=row.micro_batch_size,
                         seq_len=row.seq_len, precision=row.precision, optimizer="adamw", recompute=row.recompute,
                         stack=stack_of_run(row))
    r = st.estimate(st.load_model(row.model), st.load_cluster(row.cluster, nodes=row.nodes), cfg)
    m = r.memory
    peak = m.reserved_bytes if row.kind == "reserved" else m.total_bytes
    return MemoryResult(row, peak / GIB, r)


def run_heldout_memory() -> list[MemoryResult]:
    return [predict_row(row) for row in MEMORY_ROWS]


def main() -> None:
    results = run_heldout_memory()
    print(f"{'run':<46} {'stack':<14} {'kind':<9} {'published':>10} {'predicted':>10} {'error':>8}  largest term")
    for res in results:
        term, size = res.report.memory.largest_term()
        print(f"{res.row.name:<46} {res.row.stack:<14} {res.row.kind:<9} {res.row.published_gib:9.1f}G "
              f"{res.predicted_gib:9.1f}G {100 * res.error:+7.1f}%  {term} {size / GIB:.1f} GiB")
    print(f"memory MAPE {100 * statistics.fmean(abs(r.error) for r in results):.1f}% "
          f"(worst {100 * max((r.error for r in results), key=abs):+.1f}%), {len(results)} rows")


if __name__ == "__main__":
    main()
