"""``simtrain estimate JOB.yaml`` or ``simtrain estimate --model M --hardware H [config flags]``;
``simtrain`` alone runs workloads/jobs/default.yaml."""

from __future__ import annotations

import argparse
import re

from simtrain.cli._json import dumps
from simtrain.cli._types import positive_int
from simtrain.search.choose import LAYOUT_FIELDS, choose_layout
from simtrain.specs.library import WORKLOADS_DIR

__all__ = ["register", "run", "run_default", "load_job_inputs", "chosen_line", "with_chosen"]

_CONFIG_FLAGS = {  # flag → (type, TrainConfig field)
    "global-batch-size": int, "micro-batch-size": int, "seq-len": int, "precision": str, "optimizer": str,
    "dp": int, "tp": int, "pp": int, "cp": int, "ep": int, "zero-stage": int, "pipeline-schedule": str,
    "virtual-stages": int, "recompute": str, "stack": str,
}


def register(sub) -> None:
    p = sub.add_parser("estimate", help="analytical step time, memory, MFU and bottleneck of a job")
    add_job_arguments(p)
    p.set_defaults(func=run)


def add_job_arguments(p: argparse.ArgumentParser, json: bool = True) -> None:
    """The job's arguments; ``json`` False for a verb that writes files only (``--json`` then refused)."""
    p.add_argument("job", nargs="?", help="job file (workloads/jobs/*.yaml or a path)")
    p.add_argument("--model", help="model name or path (instead of a job file)")
    p.add_argument("--hardware", "--cluster", dest="hardware", help="cluster or device name or path")
    p.add_argument("--nodes", type=positive_int, help="override the cluster's node count")
    p.add_argument("--tokens", type=float, help="tokens to train for time-to-train")
    if json:
        p.add_argument("--json", action="store_true", help="print the report as JSON")
    choices = _choices()
    for flag, typ in _CONFIG_FLAGS.items():
        p.add_argument(f"--{flag}", type=typ, dest=flag.replace("-", "_"), choices=choices.get(flag))
    p.add_argument("--sequence-parallel", action="store_true", default=None)
    p.add_argument("--emulate-precision", action="store_true", default=None,
                   help="cost a precision the device has no matrix units for at the nearest one it has "
                        "(TrainConfig.emulate_precision)")
    p.add_argument("--calibration", help="a calibration file (st.Calibration.to_yaml) applied to the cluster")
    p.add_argument("--from", nargs=2, dest="from_framework", metavar=("FRAMEWORK", "CONFIG"),
                   help="the config in a framework's own terms: megatron 'ARGS' (an argument string), "
                        "torchtitan FILE.toml or deepspeed FILE.json; config flags given beside it win")


def _choices() -> dict[str, list[str]]:
    """The values each enum flag takes (argparse lists them in --help and in its error); --stack also
    takes a stack file, and its own error lists the presets."""
    from simtrain.glossary import OptimizerKind, PipelineSchedule, Precision, Recompute
    return {"precision": [str(x) for x in Precision], "optimizer": [str(x) for x in OptimizerKind],
            "pipeline-schedule": [str(x) for x in PipelineSchedule], "recompute": [str(x) for x in Recompute]}


def _overrides(args) -> dict:
    out = {f.replace("-", "_"): getattr(args, f.replace("-", "_")) for f in _CONFIG_FLAGS}
    out["sequence_parallel"] = args.sequence_parallel
    out["emulate_precision"] = getattr(args, "emulate_precision", None)
    return {k: v for k, v in out.items() if v is not None}


def _cluster(name: str, nodes: int | None):
    from simtrain.inputs import hardware_cluster
    return hardware_cluster(name, nodes, arg="--hardware")


def load_job_inputs(args, choose: bool = False):
    """(model, cluster, config, tokens) from a job file and/or flags. With ``choose`` (the verbs that
    cost one job), a job that sets no layout field gets the fastest layout that fits
    (search/choose.py) — and, when its cluster was named without a node count, the smallest node count
    that fits it; ``args.chosen`` then holds the :class:`~simtrain.search.choose.Chosen` (else None)."""
    from simtrain.errors import SpecError
    from simtrain.graph.library import load_model
    from simtrain.specs.jobs import job_path, job_reference, load_job
    overrides = _overrides(args)
    if args.job:
        job, file = load_job(args.job), job_path(args.job)
        cfg_fields = {**job.config.model_dump(exclude_unset=True), **overrides}
        model = load_model(args.model or job_reference(file, "model", job.model))
        cluster = _cluster(args.hardware or job_reference(file, "cluster", job.cluster), args.nodes or job.nodes)
        tokens = args.tokens or job.tokens
    else:
        if not args.model or not args.hardware:
            raise SpecError.one(None, "job", "give a job file, or both --model and --hardware")
        model, cluster, tokens = load_model(args.model), _cluster(args.hardware, args.nodes), args.tokens
        cfg_fields = {"global_batch_size": DEFAULT_GLOBAL_BATCH, **overrides}
    if getattr(args, "calibration", None):
        from simtrain.calibrate.run_record import load_calibration
        cluster = load_calibration(args.calibration).apply(cluster)
    if getattr(args, "from_framework", None):
        cfg_fields = {**cfg_fields, **_imported_fields(args.from_framework, model, cluster), **overrides}
    args.batch_defaulted = False
    if choose and not args.job and "global_batch_size" not in overrides and \
            not any(k in {**cfg_fields, **overrides} for k in LAYOUT_FIELDS if k != "global_batch_size"):
        # simtrain picks the layout: a batch of ~1M tokens a step (8 samples would leave a pipeline empty)
        seq = cfg_fields.get("seq_len") or model.tokens_per_sample or 1
        samples = min(CHOSEN_BATCH_MAX_SAMPLES, max(DEFAULT_GLOBAL_BATCH, CHOSEN_BATCH_TOKENS // seq))
        cfg_fields = {**cfg_fields, "global_batch_size": samples}
        args.batch_defaulted = True
    cfg = _config(args.job, cfg_fields, overrides)
    args.chosen = None
    if choose and not any(k in cfg.model_fields_set for k in LAYOUT_FIELDS):
        sized = args.nodes is None and not (args.job and job.nodes)
        args.chosen = choose_layout(model, cluster, cfg, size_nodes=sized)
        if args.chosen is not None:
            cluster, cfg = args.chosen.cluster, args.chosen.cfg
    return model, cluster, cfg, tokens


_FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
#: the global batch of a job given by flags without --global-batch-size (the chosen-layout line shows it)
DEFAULT_GLOBAL_BATCH = 8
#: tokens a step when simtrain also picks the layout and no batch is given (GPT-3 and Llama 2 / 3
#: trained with 2–16M tokens a step; ~1M keeps a small job's step short and a pipeline busy)
CHOSEN_BATCH_TOKENS = 1 << 20
#: at most this many samples (short sequences): GPT-3 took 1,536 a step; a million one-token samples
#: would only make the layout search walk a pipeline of millions of micro-batches
CHOSEN_BATCH_MAX_SAMPLES = 4096


def _imported_fields(spec: list[str], model, cluster) -> dict:
    """TrainConfig fields (and the stack) of ``--from FRAMEWORK CONFIG``; what it ignored and where its
    model shape disagrees with ``--model`` go to stderr."""
    import sys

    import simtrain.frameworks as frameworks
    from simtrain.errors import SpecError
    name, source = spec
    if name not in _FRAMEWORKS:
        from simtrain.specs.references import did_you_mean
        hint = did_you_mean(name, list(_FRAMEWORKS))
        raise SpecError.one(None, "--from", f"unknown framework {name!r} ({hint + '; ' if hint else ''}one of "
                            f"{', '.join(_FRAMEWORKS)})")
    imported = getattr(frameworks, f"from_{name}")(source, world_size=cluster.devices_count)
    for line in imported.model_mismatches(model):
        print(f"simtrain: warning: --from {name}: {line}", file=sys.stderr)
    shape = {k.replace("-", "_") for k in imported.model}  # checked against --model above, not ignored
    ignored = [s for s, _ in imported.ignored if s.lstrip("-").replace("-", "_") not in shape]
    if ignored:
        print(f"simtrain: note: --from {name}: not modelled, ignored: {', '.join(ignored)}", file=sys.stderr)
    return {**imported.config, "stack": imported.stack_value()}


def _config(job: str | None, fields: dict, overrides: dict):
    """The TrainConfig; a bad value given as a flag is blamed on the flag, not on the job file."""
    from simtrain.errors import SpecError, SpecIssue
    from simtrain.specs.train import TrainConfig
    try:
        return TrainConfig.build(job, **fields)
    except SpecError as err:
        def flag(name: str) -> str:
            return f"--{name.replace('_', '-')}"

        def culprit(issue):
            top = issue.field.split(".")[0]
            if top in overrides:
                return SpecIssue(None, flag(top), issue.reason)
            # a cross-field problem names its fields in the reason ("stack 'x' is not a preset")
            named = [k for k in overrides if re.search(rf"\b{k}\b", issue.reason)]
            return SpecIssue(None, " / ".join(map(flag, named)), issue.reason) if named and not top else issue
        raise SpecError([culprit(i) for i in err.issues]) from None


def run(args) -> int:
    from simtrain.estimator import estimate
    from simtrain.report.text import render_report
    model, cluster, cfg, tokens = load_job_inputs(args, choose=True)
    report = estimate(model, cluster, cfg)
    if args.json:
        print(dumps(with_chosen(report.to_dict(), args.chosen)))
    else:
        print(chosen_line(args.chosen, args.batch_defaulted) + render_report(report, tokens=tokens))
    return 0 if report.feasible else 1


def chosen_line(chosen, batch_defaulted: bool = False) -> str:
    """The line that marks a layout as chosen by simtrain ('' when the user gave one)."""
    if chosen is None:
        return ""
    note = (f" (global batch: ~1M tokens a step by default, at most {CHOSEN_BATCH_MAX_SAMPLES:,} samples; "
            "--global-batch-size to set it)") if batch_defaulted else ""
    return chosen.describe() + note + "\n\n"


def with_chosen(d: dict, chosen) -> dict:
    """A report's JSON with ``chosen_layout`` (the fields the search set, or null)."""
    return {**d, "chosen_layout": None if chosen is None else chosen.fields}


def run_default(args) -> int:
    ns = argparse.Namespace(job=str(WORKLOADS_DIR / "jobs" / "default.yaml"), model=None, hardware=None,
                            nodes=None, tokens=None, json=False, sequence_parallel=None, calibration=None,
                            emulate_precision=None, from_framework=None,
                            **{f.replace("-", "_"): None for f in _CONFIG_FLAGS})
    return run(ns)
