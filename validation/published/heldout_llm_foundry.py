"""HELD-OUT: llm-foundry's whole H100 bf16 and A100 40GB benchmark tables, predicted with the llm-foundry preset.

    python -m validation.published.heldout_llm_foundry [--table h100-bf16 | a100-40gb]

``docs/heldout.md`` carries three rows of these tables (MPT-7B on 8 H100s, MPT-30B on 32, MPT-13B on 64
A100-40GB); this module predicts every row of both, transcribed in ``data/llm-foundry-*.yaml``: 52 on
H100 (760M to 70B, sequence 512 to 65,536, 8 to 64 GPUs) and 78 on A100 40GB (125M to 70B, 8 to 128
GPUs). The llm-foundry preset's knobs were fitted on the same benchmark's A100-80GB rows (the fit pool);
none of these rows was fitted to or tuned against, so the tables measure how that fit transfers to
another GPU and another memory size. A row is translated as the held-out table's llm-foundry rows are
(``heldout_rows``): the sweep's defaults and Composer FSDP ``FULL_SHARD``; on H100 mixed precision
``DEFAULT`` and the Oct 2023 sweep's PyTorch 2.1 (early-stopping checkpoint), on A100 40GB ``PURE`` and
the earlier tables' PyTorch 1.13.1 (the whole block recomputed). ``tests/golden/test_heldout_llm_foundry.py``
checks that the tables are whole and well-formed, never their accuracy.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from validation.published.heldout import HeldoutResult, HeldoutRun, one_shot_groups, run_heldout
from validation.published.heldout_rows import (
    LF_DEF,
    LF_DEFAULT_MP,
    LF_EARLY_STOP,
    LF_FULL_RECOMPUTE,
    LF_H100_NET,
    LF_PURE_1_13_KNOBS,
    LF_PURE_MP,
    LF_README,
    LF_ROCE,
    LF_SWEEP,
)

__all__ = ["Table", "TABLES", "table_runs", "summary", "main"]

_DATA = Path(__file__).with_name("data")


@dataclass(frozen=True)
class Table:
    path: Path
    cluster: str
    source: str
    assumptions: tuple[str, ...]
    checkpoint_note: str
    """What the table's torch did with activation checkpointing (the early stop or not)."""
    stack_knobs: tuple[tuple[str, object], ...] = ()


TABLES = {
    "h100-bf16": Table(_DATA / "llm-foundry-h100-bf16.yaml", "dgx-h100", LF_README + "table 'H100 80GB BF16'",
                       (LF_SWEEP, LF_DEFAULT_MP, LF_H100_NET), LF_EARLY_STOP),
    "a100-40gb": Table(_DATA / "llm-foundry-a100-40gb.yaml", "dgx-a100-40gb",
                       LF_README + "table 'A100 40GB with 1600 Gbps node-node interconnect (RoCE)'",
                       (LF_SWEEP, LF_PURE_MP, LF_ROCE), LF_FULL_RECOMPUTE, LF_PURE_1_13_KNOBS),
}


def table_runs(name: str = "h100-bf16") -> tuple[HeldoutRun, ...]:
    """Every row of a table as a held-out run (safe YAML; the file is the project's own transcription)."""
    table = TABLES[name]
    gpu = table.cluster.removeprefix("dgx-").upper()
    out = []
    for row in yaml.safe_load(table.path.read_text(encoding="utf-8")):
        gpus, ac = int(row["gpus"]), bool(row["activation_checkpointing"])
        label = f"{row['model']} seq {row['seq_len']} {gpus}x{gpu} mb {row['micro_batch']}{' AC' if ac else ''}"
        out.append(HeldoutRun(
            label, row["model"], table.cluster, gpus // 8, "llm-foundry", int(row["global_batch"]),
            int(row["micro_batch"]), int(row["seq_len"]), "bf16", "tokens/s/GPU", float(row["tokens_per_s_per_gpu"]),
            LF_DEF, table.source,
            recompute="full" if ac else "none", stack_knobs=table.stack_knobs,
            assumptions=table.assumptions + ((table.checkpoint_note,) if ac else ())))
    return tuple(out)


def summary(results: list[HeldoutResult]) -> dict[str, float]:
    """MAPE, mean signed error, the with / without checkpointing split and the count of rows more than
    15 % too fast (fractions and counts)."""
    errs = [r.error for r in results]
    ac = [r.error for r in results if r.run.recompute == "full"]
    no = [r.error for r in results if r.run.recompute != "full"]
    return {"rows": len(errs), "mape": statistics.mean(abs(e) for e in errs), "mean": statistics.mean(errs),
            "worst": max(errs, key=abs), "mean_ac": statistics.mean(ac) if ac else float("nan"),
            "mean_no_ac": statistics.mean(no) if no else float("nan"),
            "too_fast_15": sum(e < -0.15 for e in errs)}


def _report(name: str) -> None:
    results = run_heldout(table_runs(name))
    print(f"== {name}: {TABLES[name].source}")
    print(f"{'run':<40} {'published':>9} {'predicted':>9} {'error':>8} {'p.MFU':>6} {'fits':>4}")
    for r in results:
        print(f"{r.run.name:<40} {r.published_metric:>9.0f} {r.predicted_metric:>9.0f} {100 * r.error:>+7.1f}% "
              f"{100 * r.mfu:>5.1f}% {'yes' if r.feasible else 'NO':>4}")
    s = summary(results)
    print(f"{s['rows']} rows: MAPE {100 * s['mape']:.1f}%, mean {100 * s['mean']:+.1f}%, worst "
          f"{100 * s['worst']:+.1f}%; with checkpointing {100 * s['mean_ac']:+.1f}%, without "
          f"{100 * s['mean_no_ac']:+.1f}%; {s['too_fast_15']} rows more than 15 % too fast; "
          f"{sum(not r.feasible for r in results)} predicted not to fit (all ran)")
    for group, entries in one_shot_groups(results).items():
        mapes = [statistics.mean(abs(e) for e in errs) for _, _, errs in entries]
        worst = max((abs(e) for _, _, errs in entries for e in errs), default=float("nan"))
        print(f"one-shot {group}: calibrated on each row alone, the others' MAPE median "
              f"{100 * statistics.median(mapes):.1f}% (best {100 * min(mapes):.1f}%, worst {100 * max(mapes):.1f}%), "
              f"worst single row {100 * worst:.1f}%\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=sorted(TABLES), action="append", help="one table (default: both)")
    for name in ap.parse_args(argv).table or sorted(TABLES, reverse=True):
        _report(name)


if __name__ == "__main__":
    main()
