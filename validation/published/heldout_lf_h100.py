"""HELD-OUT: llm-foundry's whole H100 bf16 benchmark table, predicted with the llm-foundry preset.

    python -m validation.published.heldout_lf_h100

``docs/heldout.md`` carries two rows of this table (MPT-7B on 8 GPUs, MPT-30B on 32); this module
predicts all 52 (760M to 70B, sequence 512 to 65,536, 8 to 64 GPUs, with and without activation
checkpointing), transcribed in ``data/llm-foundry-h100-bf16.yaml``. The llm-foundry preset's knobs were
fitted on the same benchmark's A100 rows (the fit pool); none of these H100 rows was fitted to or
tuned against, so the table measures how the A100 fit transfers to H100. A row is translated as the
held-out table's llm-foundry rows are (``heldout_rows``): the sweep's defaults, Composer FSDP
``FULL_SHARD`` with mixed precision ``DEFAULT``, the Oct 2023 sweep's PyTorch 2.1 (early-stopping
checkpoint), and the dgx-h100 cluster for the unstated fabric. ``tests/golden/test_heldout_lf_h100.py``
checks that the table is whole and well-formed, never its accuracy.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import yaml

from validation.published.heldout import HeldoutResult, HeldoutRun, one_shot_groups, run_heldout
from validation.published.heldout_rows import LF_DEFAULT_MP, LF_EARLY_STOP

__all__ = ["DATA_PATH", "SOURCE", "table_runs", "summary", "main"]

DATA_PATH = Path(__file__).with_name("data") / "llm-foundry-h100-bf16.yaml"
SOURCE = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md @ 061f2c7ce64e655100286584a7629e2a09f827ba, "
          "table 'H100 80GB BF16'")
_ASSUME = ("sweep defaults (submit_benchmarks.py): attn_impl triton, low-precision LayerNorm, FSDP FULL_SHARD, "
           "limit_all_gathers, Composer DecoupledAdamW", LF_DEFAULT_MP,
           "H100 fabric not stated: the dgx-h100 cluster (8 x NDR 400 Gb/s per node) beyond one node")


def table_runs(path: Path = DATA_PATH) -> tuple[HeldoutRun, ...]:
    """Every row of the table as a held-out run (safe YAML; the file is the project's own transcription)."""
    rows = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = []
    for row in rows:
        gpus, ac = int(row["gpus"]), bool(row["activation_checkpointing"])
        name = f"{row['model']} seq {row['seq_len']} {gpus}xH100{' AC' if ac else ''}"
        out.append(HeldoutRun(
            name, row["model"], "dgx-h100", gpus // 8, "llm-foundry", int(row["global_batch"]),
            int(row["micro_batch"]), int(row["seq_len"]), "bf16", "tokens/s/GPU", float(row["tokens_per_s_per_gpu"]),
            "README column 'Throughput (T/s/GPU)'; step = GBS·seq/(T/s/GPU · GPUs)", SOURCE,
            recompute="full" if ac else "none", assumptions=_ASSUME + ((LF_EARLY_STOP,) if ac else ())))
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


def main() -> None:
    results = run_heldout(table_runs())
    print(f"{'run':<32} {'published':>9} {'predicted':>9} {'error':>8} {'p.MFU':>6} {'fits':>4}")
    for r in results:
        print(f"{r.run.name:<32} {r.published_metric:>9.0f} {r.predicted_metric:>9.0f} {100 * r.error:>+7.1f}% "
              f"{100 * r.mfu:>5.1f}% {'yes' if r.feasible else 'NO':>4}")
    s = summary(results)
    print(f"\n{s['rows']} rows: MAPE {100 * s['mape']:.1f}%, mean {100 * s['mean']:+.1f}%, worst "
          f"{100 * s['worst']:+.1f}%; with checkpointing {100 * s['mean_ac']:+.1f}%, without "
          f"{100 * s['mean_no_ac']:+.1f}%; {s['too_fast_15']} rows more than 15 % too fast")
    for group, entries in one_shot_groups(results).items():
        mapes = [statistics.mean(abs(e) for e in errs) for _, _, errs in entries]
        worst = max((abs(e) for _, _, errs in entries for e in errs), default=float("nan"))
        print(f"one-shot {group}: calibrated on each row alone, the others' MAPE median "
              f"{100 * statistics.median(mapes):.1f}% (best {100 * min(mapes):.1f}%, worst {100 * max(mapes):.1f}%), "
              f"worst single row {100 * worst:.1f}%")


if __name__ == "__main__":
    main()
