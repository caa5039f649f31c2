"""Published reference cases, transcribed from the papers (values as printed).

* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (SC'21), Table 1: A100-80GB (Selene: DGX A100, 8 × HDR 200 Gb/s per node), seq 2048,
  vocab 51200, mixed precision (fp16), full activation recomputation; achieved TFLOP/s per GPU by
  their formula F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), which includes the recomputed forward.
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 5:
  iteration seconds with full recomputation and with sequence parallelism + selective recomputation,
  A100-80GB, seq 2048, vocab 51200, data-parallel degree 1.

Table 1's run settings that the table does not print (micro-batch size, interleaved schedule and its
layers per virtual stage, data-parallel implementation) are those of the authors' reproduction script,
NVIDIA/Megatron-LM ``examples/sc21/run_table_1.sh`` (its README: "scripts that were used to produce
the results in the Megatron paper"): MBS 16/16/16/8/4/2/2/1/1/1, ``--num-layers-per-virtual-pipeline-
stage`` 5/5/3/1 on the 76B/145B/310B/530B rows, ``DDP=torch`` (PyTorch DDP: bucketed all-reduce
overlapped with the backward pass) on the four pp = 1 rows and ``DDP=local`` (all-reduce after the
backward pass) on the others. Table 5 prints its micro-batch size and uses the plain 1F1B schedule.
Both use fp16 mixed precision with Adam and the rank order tp innermost, then dp, then pp.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MegatronRow", "KorthikantiRow", "MEGATRON_TABLE1", "KORTHIKANTI_TABLE5", "megatron_flops_per_step"]


@dataclass(frozen=True)
class MegatronRow:
    model: str
    params_b: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    tflops_per_gpu: float
    micro_batch: int
    """``MBS`` of run_table_1.sh."""
    layers_per_virtual_stage: int
    """``--num-layers-per-virtual-pipeline-stage`` of run_table_1.sh; 0 = plain (non-interleaved) 1F1B."""
    torch_ddp: bool
    """``DDP=torch`` (gradient all-reduce overlapped with the backward pass) vs ``DDP=local`` (after it)."""

    @property
    def virtual_stages(self) -> int:
        if not self.layers_per_virtual_stage:
            return 1
        return self.layers // self.pp // self.layers_per_virtual_stage


@dataclass(frozen=True)
class KorthikantiRow:
    model: str
    tp: int
    pp: int
    gpus: int
    batch: int
    micro_batch: int
    full_recompute_s: float
    sp_selective_s: float


MEGATRON_TABLE1 = (
    MegatronRow("megatron-1.7b", 1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 16, 0, True),
    MegatronRow("megatron-3.6b", 3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 16, 0, True),
    MegatronRow("megatron-7.5b", 7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 16, 0, True),
    MegatronRow("megatron-18.4b", 18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 0, True),
    MegatronRow("megatron-39.1b", 39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 0, False),
    MegatronRow("megatron-76.1b", 76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 5, False),
    MegatronRow("megatron-145.6b", 145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 5, False),
    MegatronRow("megatron-310.1b", 310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 3, False),
    MegatronRow("megatron-529.6b", 529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 1, False),
    MegatronRow("megatron-1t", 1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 0, False),
)

KORTHIKANTI_TABLE5 = (
    KorthikantiRow("korthikanti-22b", 8, 1, 8, 4, 4, 1.42, 1.10),
    KorthikantiRow("korthikanti-175b", 8, 8, 64, 64, 1, 18.13, 13.75),
    KorthikantiRow("korthikanti-530b", 8, 35, 280, 280, 1, 49.05, 37.83),
    KorthikantiRow("korthikanti-1t", 8, 64, 512, 512, 1, 94.42, 71.49),
)

SEQ_LEN, VOCAB = 2048, 51200


def megatron_flops_per_step(row: MegatronRow, seq: int = SEQ_LEN, vocab: int = VOCAB) -> float:
    """Narayanan et al. 2021 eq. (3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs per iteration."""
    b, layers, h = row.batch, row.layers, row.hidden
    return 96.0 * b * seq * layers * h * h * (1 + seq / (6.0 * h) + vocab / (16.0 * layers * h))
