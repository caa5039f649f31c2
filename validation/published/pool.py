"""The FIT POOL: public end-to-end runs that shipped stack priors may be fitted to, as simtrain runs.

    python -m validation.published.pool          # every pool row translated, predicted with the shipped priors

``data/fit-pool.yaml`` is a verbatim copy of the project's fit pool (94 records transcribed from their
sources, each with its citation). This module translates each record faithfully into a
:class:`~validation.published.heldout.HeldoutRun` (the same row type as the held-out set, so both are
predicted by one code path): what the record states, the framework's documented default for the rest
(listed in the row's ``assumptions``). A record that cannot be translated without inventing a setting
that moves its time is left out with the reason (:func:`skipped`).

Besides the YAML, the pool takes the NVIDIA NeMo 24.07 rows of ``docs/heldout.md`` (rows 3–6): the
issue that opened the pool names them as part of it; and, since NeMo's published tables may be fitted to,
the other rows of the same table that translate (Llama 2 13B, Llama 3 8B, GPT-3 5B, Nemotron 8B and 22B;
the three predicted not to fit under the recipe defaults left out with reasons).

Sources (the unit of leave-one-source-out): ``mpt`` (llm-foundry on A100 80GB), ``torchtitan`` (FSDP2 on
64 A100 80GB), ``megascale`` (Megatron-LM baseline rows of MegaScale Table 2), ``mtnlg`` (Megatron-
DeepSpeed), ``bloom`` (Megatron-DeepSpeed), ``nemo`` (Megatron-Core, H100, fp8).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path

import yaml

from validation.published.heldout import HELDOUT_RUNS, HeldoutRun
from validation.published.heldout_rows import (
    LF_DEFAULT_MP,
    LF_EARLY_STOP,
    LF_FULL_RECOMPUTE,
    LF_PURE_MP,
    LF_ROCE,
    LF_SWEEP,
    NEMO_LEFT_OUT,
    NEMO_TABLE_ROWS,
    TT_EAGER_NORM,
    TT_FOREACH,
)

__all__ = ["POOL_PATH", "pool_records", "pool_runs", "skipped", "source_of", "translate", "NEMO_ROWS"]

POOL_PATH = Path(__file__).with_name("data") / "fit-pool.yaml"
NEMO_ROWS = tuple(r for r in HELDOUT_RUNS if r.name.startswith("NeMo ")) + NEMO_TABLE_ROWS
"""docs/heldout.md rows 3–6 (NeMo 24.07 performance summary, DGX-H100, FP8), in the pool by the issue that
opened it, and the table's other rows that translate (``NEMO_TABLE_ROWS``; the rule lets priors be fitted
to NeMo's published tables; the rest: ``NEMO_LEFT_OUT``)."""

_LF_TORCH_1_13 = frozenset({"mpt_a10080gb_bf16_70b_seq2048_64gpu_mb8_ga4",
                            "mpt_a10080gb_bf16_70b_seq2048_32gpu_mb2_ga16"})
"""The A100-80GB rows whose numbers the Oct 2023 re-run did not reproduce and carried over from the
earlier table (llm-foundry b2a43a147, "added back old numbers that I didn't reproduce": these two rows'
values equal those of the README before it), swept on that table's image, PyTorch 1.13.1 (sweep.sh
@ b2a43a147^): no early-stopping recomputation. Every other A100-80GB row differs from the earlier table
and was re-run by the Oct 2023 sweep.sh on ``mosaicml/pytorch:2.1.0``, where the non-reentrant checkpoint
(the yamls' ``activation_checkpointing_reentrant: false``) stops early (the llm-foundry preset)."""
_TT_DEFAULTS = ("torchtitan defaults: bf16 params / fp32 reduce, no torch.compile, no float8, SDPA flash "
                "attention, AdamW", "cluster network not stated: 8 x HDR 200 Gb/s per node", TT_FOREACH)
_MEGATRON_DEFAULTS = ("Megatron-LM defaults for what Table 2 does not print: micro-batch 1, distributed optimizer "
                      "off (ZeRO 0)",
                      "gradient all-reduce after the backward, not overlapped (the preset's dp_overlap off): "
                      "megatron/arguments.py @285068c8 has no overlap option, and MegaScale's Table 3 credits "
                      "'DP overlap' (+1.5 % MFU) to MegaScale over this baseline; in fp32, as @285068c8 forces "
                      "accumulate_allreduce_grads_in_fp32 for --bf16 (the preset's grad_reduce_fp32 'bf16', "
                      "since 2026-12-06; until then the row all-reduced bf16 gradients and this line read "
                      "'DP overlap on', which the preset never ran)",
                      "selective activation recompute with sequence parallelism: Megatron-LM's README at 285068c8 "
                      "calls selective recompute 'the default and recommended in almost all cases' and documents "
                      "--sequence-parallel; the run fitted in 80 GB, which with neither (59.5 GiB of activations "
                      "on stage 0, 117 GiB in all) it does not",
                      "precision bf16 (the record's 'assumed'); GPU memory 80 GB assumed",
                      "ByteDance RoCE fabric modelled as 8 x HDR 200 Gb/s per node",
                      "Table 1's GPT-175B (vocab 64000, 128 heads) modelled by gpt3-175b (vocab 51200, 96 "
                      "heads; the same matmul FLOPs but the vocabulary's ~1 %)")
_MTNLG_DEFAULTS = ("Megatron-DeepSpeed: deepspeed preset, ZeRO-1, micro-batch 1 (Smith et al. 2022 §3.2), "
                   "full activation checkpointing, no FlashAttention (2021), DP reduce after the last "
                   "micro-batch (dp_overlap off)", "MT-NLG 530B (105 layers, h 20480, 128 heads) modelled by "
                   "korthikanti-530b (same shape; vocab 51200 for 50257)",
                   "Selene DGX A100 nodes: 8 x HDR 200 Gb/s (the dgx-a100-80gb cluster)")


@lru_cache(maxsize=1)
def pool_records(path: str | None = None) -> tuple[dict, ...]:
    """The pool's records as parsed (safe YAML)."""
    text = Path(path or POOL_PATH).read_text(encoding="utf-8")
    return tuple(yaml.safe_load(text))


def source_of(record_id: str) -> str:
    """The source (paper, repository) a record comes from: its id's prefix, ``megascale2024`` → megascale."""
    head = record_id.split("_", 1)[0]
    return "megascale" if head.startswith("megascale") else head



def _mpt(rec: dict) -> HeldoutRun | str:
    p, m, h = rec["parallel"], rec["model"], rec["hardware"]
    gpus = int(h["num_gpus"])
    recompute = "full" if str(p["recompute"]).startswith("full") else "none"
    seq = int(m["seq_len"])
    assumptions = (LF_SWEEP, LF_ROCE)
    knobs: tuple = ()
    if p.get("fsdp_mixed_precision") == "DEFAULT":
        assumptions += (LF_DEFAULT_MP,)
    elif p.get("fsdp_mixed_precision") == "PURE":
        assumptions += (LF_PURE_MP,)
        knobs = (("grad_reduce_fp32", False),)
    if recompute == "full" and rec["id"] in _LF_TORCH_1_13:
        assumptions += (LF_FULL_RECOMPUTE,)
        knobs += (("recompute_early_stop", False),)
    elif recompute == "full":
        assumptions += (LF_EARLY_STOP,)
    return HeldoutRun(
        rec["id"], m["name"], "dgx-a100-80gb", gpus // 8, "llm-foundry", int(p["global_batch"]),
        int(p["micro_batch"]), seq, "bf16", "tokens/s/GPU", float(rec["measured"]["tokens_per_s_per_gpu"]),
        "README column 'Throughput (T/s/GPU)'; step = GBS·seq/(T/s/GPU · GPUs)", rec["source"]["citation"],
        recompute=recompute, assumptions=assumptions, stack_knobs=knobs)


_TT_MODELS = {"Llama 3.1-8B": "llama3-8b", "Llama 3.1-70B": "llama3-70b", "Llama 2-13B": "llama2-13b",
              "Llama 2-70B": "llama2-70b"}


_TT_EAGER_NORM_MODELS = ("Llama 3.1-70B", "Llama 2-70B")
"""The models whose torchtitan config set ``norm_type = "rmsnorm"`` when the numbers were published
(torchtitan's eager fp32 RMSNorm); the 8B and 13B configs set ``fused_rmsnorm``."""


def _torchtitan(rec: dict) -> HeldoutRun | str:
    p, m = rec["parallel"], rec["model"]
    ac = str(p["recompute"])
    extra = {}
    assumptions = _TT_DEFAULTS
    if ac == "full":
        extra = {"recompute": "full"}
    elif ac == "selective op":
        extra = {"recompute": "selective-op"}
        assumptions += ("'selective op' AC: torchtitan's per-op policy (recompute='selective-op': matmul outputs "
                        "saved except every second one, attention output saved, the rest recomputed)",)
    elif ac.startswith("selective"):
        extra = {"recompute": "full", "recompute_num_layers": int(m["layers"]) // 2}
        assumptions += (f"'{ac}' AC: torchtitan's selective layer AC with its example option '2' (every 2nd "
                        "block wrapped in a checkpoint, the others keep their activations), modelled as full "
                        "recomputation of half the layers (recompute_num_layers = layers / 2)",)
    knobs: tuple = ()
    if m["family"] in _TT_EAGER_NORM_MODELS:
        knobs = (("norm_kernel", "eager-fp32"),)
        assumptions += (TT_EAGER_NORM,)
    return HeldoutRun(
        rec["id"], _TT_MODELS[m["family"]], "dgx-a100-80gb", 8, "fsdp2", int(p["global_batch"]),
        int(p["local_batch"]), int(m["seq_len"]), "bf16", "tokens/s/GPU",
        float(rec["measured"]["tokens_per_s_per_gpu"]),
        "torchtitan 'wps' per rank; step = GBS·seq/(wps·GPUs)", rec["source"]["citation"],
        assumptions=assumptions, stack_knobs=knobs, optimizer_impl="foreach", **extra)


def _megascale(rec: dict) -> HeldoutRun | str:
    p = rec["parallel"]
    if "MegaScale" in str(p.get("framework", "")):
        return ("MegaScale's own rows change the algorithm (parallel transformer block, sliding-window "
                "attention, LAMB): not this model's GPT-175B")
    if "iteration_time_s" not in rec["measured"]:
        return "MFU only, with no FLOP convention stated: no step time"
    gpus = int(rec["hardware"]["num_gpus"])
    return HeldoutRun(
        rec["id"], "gpt3-175b", "dgx-a100-80gb", gpus // 8, "megatron-lm", int(p["global_batch"]), 1, 2048,
        "bf16", "s/iter", float(rec["measured"]["iteration_time_s"]), "Table 2 iteration time (s)",
        rec["source"]["citation"], tp=int(p["tp"]), pp=int(p["pp"]), zero_stage=0,
        pipeline_schedule="interleaved-1f1b", virtual_stages=int(p["virtual_stages"]), sequence_parallel=True,
        recompute="selective", assumptions=_MEGATRON_DEFAULTS)


def _mtnlg(rec: dict) -> HeldoutRun | str:
    p = rec["parallel"]
    gpus = int(rec["hardware"]["num_gpus"])
    return HeldoutRun(
        rec["id"], "korthikanti-530b", "dgx-a100-80gb", gpus // 8, "deepspeed", int(p["global_batch"]), 1, 2048,
        "bf16", "s/iter", float(rec["measured"]["iteration_time_s"]), "iteration time (s) as printed",
        rec["source"]["citation"], tp=int(p["tp"]), pp=int(p["pp"]), zero_stage=1, recompute="full",
        flash_attention=False, dp_overlap=False, assumptions=_MTNLG_DEFAULTS)


def _bloom(rec: dict) -> HeldoutRun | str:
    row = next(r for r in HELDOUT_RUNS if r.model == "bloom-176b")
    return dataclasses.replace(row, name=rec["id"], published=float(rec["measured"]["iteration_time_s"]))


def _opt(rec: dict) -> HeldoutRun | str:
    return ("layout not stated: 992 GPUs with TP 8 and a 2M-token batch leave a DP of 124 that no micro-batch "
            "of the stated batch divides")


_TRANSLATORS = {"mpt": _mpt, "torchtitan": _torchtitan, "megascale": _megascale, "mtnlg": _mtnlg,
                "bloom": _bloom, "opt": _opt}


def translate(rec: dict) -> HeldoutRun | str:
    """A pool record as a run, or why it is left out."""
    if not rec.get("verified", False):
        return "the record is marked unverified against its source"
    return _TRANSLATORS[source_of(rec["id"])](rec)


def pool_runs(path: str | None = None) -> tuple[tuple[str, HeldoutRun], ...]:
    """(source, run) for every translated pool record, then the NeMo rows (source ``nemo``)."""
    out = [(source_of(rec["id"]), run) for rec in pool_records(path)
           if isinstance(run := translate(rec), HeldoutRun)]
    return tuple(out) + tuple(("nemo", r) for r in NEMO_ROWS)


def skipped(path: str | None = None) -> tuple[tuple[str, str], ...]:
    """(record id, reason) of every pool record left out."""
    return tuple((rec["id"], why) for rec in pool_records(path) if isinstance(why := translate(rec), str))


def main() -> None:
    from validation.published.heldout import estimate_row
    rows = pool_runs()
    print(f"{len(rows)} pool rows translated; {len(skipped())} left out")
    for source, run in rows:
        res = estimate_row(run)
        print(f"{source:<11} {run.name[:58]:<58} {run.stack:<13} pub {res.published_step_s:9.3f} s  "
              f"pred {res.predicted_step_s:9.3f} s  {100 * res.error:+6.1f}%  MFU {100 * res.mfu:5.1f}%"
              f"{'' if res.feasible else '  (no fit)'}")
    for rid, why in skipped():
        print(f"left out: {rid}: {why}")
    for row, why in NEMO_LEFT_OUT:
        print(f"left out: NeMo 24.07 {row}: {why}")


if __name__ == "__main__":
    main()
