"""Do two calibrations of this machine, run back to back, predict the same step times? (issue 12)

    python -m validation.lab.repeatability [--out DIR] [--measurements A.json B.json] [--grid full]
    python -m validation.lab.repeatability --pass-dir DIR --sets K --passes N

Measures the microbenchmark grid twice in a row (``st.measure``; or loads two saved sets), fits each
(``st.calibrate``), and predicts the step time of every zoo and unseen model with both profiles. The
spread between the two predictions is what a user re-running ``simtrain calibrate`` would see: the
target is every model within 5 %. Nothing is trained here; the profiles are compared with each
other, not with measured steps (``python -m validation`` does that).

With ``--pass-dir`` it times K × N single passes back to back, each saved there (``pass01.json`` …;
loaded where it exists), merges every N consecutive passes into one calibration as ``st.measure(passes=N)``
does (``robust.merge_passes``) and compares each calibration with the next; the report adds the
machine's speed per pass and bench (:func:`pass_speed`): how far the machine itself moves over the
K calibrations, which no estimator over one calibration's passes can take out. ``--interleave``
deals the passes out in turn instead (calibration i gets passes i, i + K, …): the calibrations then
span the same minutes, and what still differs between them is the calibration's own noise.

``--by-mode`` (passes timed with the dispatch sentinel, calibrate/modes.py): the machine's placement
modes are split once over every set's readings, and each set is fitted again re-centred on the fast
mode, on the slow mode, and on one stated mix (the share of slow readings over all sets): two sets that
met the modes in different proportions are then compared at the same proportion (:func:`by_mode`).
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
import string
import sys
from pathlib import Path

import torch

import simtrain as st
from simtrain.calibrate.fit import fit
from simtrain.calibrate.measure import measure
from simtrain.calibrate.modes import modal_measurements, placement_modes
from simtrain.calibrate.records import Measurements
from simtrain.calibrate.robust import merged_measurements
from validation.lab.attribution import attribution, attribution_lines
from validation.steps import predict_step
from validation.workloads import unseen_workloads, workloads

__all__ = ["built_models", "predictions", "spread", "row_shift", "pass_speed", "consecutive", "deal", "by_mode",
           "main", "TARGET"]

TARGET = 0.05
"""Largest relative difference between the two profiles' predictions of one model (issue 12)."""


def _measurements(path: Path | None, grid: str, threads: int, passes: int) -> Measurements:
    if path is not None and path.exists():
        return Measurements.load(path)
    m = measure("cpu", grid=grid, threads=threads, collectives=False, passes=passes,
                log=lambda msg: print(msg, flush=True))
    if path is not None:
        m.save(path)
    return m


def built_models(size: str = "medium") -> list[tuple]:
    """(workload, Model) of every zoo and unseen model, captured on the CPU."""
    out = []
    for w in workloads(size) + unseen_workloads(size):
        module, inputs, loss_fn = w.build("cpu", seed=0)
        out.append((w, st.Model.from_torch(copy.deepcopy(module), inputs, loss_fn, name=w.name)))
    return out


def predictions(devices: dict[str, object], size: str = "medium", models: list[tuple] | None = None) -> list[dict]:
    """Every zoo and unseen model's predicted step time under each device."""
    return [{"case": w.case, "unseen": w.unseen,
             "predicted_s": {k: predict_step(model, d, w.batch, w.optimizer).step_time_s for k, d in devices.items()}}
            for w, model in (models if models is not None else built_models(size))]


def spread(row: dict) -> float:
    """The largest difference between consecutive calibrations' predictions of one model, relative to
    the smaller of the two ((max − min) / min when there are two)."""
    v = list(row["predicted_s"].values())
    return max(abs(a - b) / min(a, b) for a, b in consecutive(v))


def consecutive(v: list) -> list[tuple]:
    """Neighbouring pairs of ``v``: the calibrations a user running ``simtrain calibrate`` twice would
    compare."""
    return list(zip(v[:-1], v[1:], strict=True))


def pass_speed(passes: list[Measurements]) -> dict[str, list[float]]:
    """Per bench (sentinels included) and pass, the median over the bench's benchmarks of the pass's
    time over that benchmark's median across all passes (benchmarks timed in every pass): 1.00 is the
    machine's typical speed over the whole run, 1.20 a pass in which that bench took 20 % longer.
    ``"all"`` is the same over every benchmark."""
    import statistics

    from simtrain.calibrate.robust import benchmark_key
    keyed = [{benchmark_key(r): r for r in m.rows} for m in passes]
    common = set(keyed[0]).intersection(*keyed[1:])
    typical = {k: statistics.median(p[k].median_s for p in keyed) for k in common}
    benches = {"all": sorted(common)}
    for k in sorted(common):
        benches.setdefault(k[0], []).append(k)
    return {bench: [statistics.median(p[k].median_s / typical[k] for k in keys if typical[k] > 0) for p in keyed]
            for bench, keys in benches.items() if any(typical[k] > 0 for k in keys)}


def row_shift(a: Measurements, b: Measurements) -> dict[str, tuple[int, float]]:
    """Per bench (sentinels included), the number of benchmarks both sets timed and the median of
    B's time over A's: whether the machine or the fit moved between the two calibrations (a shift
    shared by a whole bench is the machine; the fit would move only some parameters)."""
    import statistics

    from simtrain.calibrate.robust import benchmark_key
    theirs = {benchmark_key(r): r for r in b.rows}
    ratios: dict[str, list[float]] = {}
    for r in a.rows:
        other = theirs.get(benchmark_key(r))
        if other is not None and r.median_s > 0:
            ratios.setdefault(r.bench, []).append(other.median_s / r.median_s)
    return {k: (len(v), statistics.median(v)) for k, v in sorted(ratios.items())}


def _shift_lines(shift: dict[str, tuple[int, float]]) -> list[str]:
    if not shift:
        return []
    cells = ", ".join(f"{bench} {ratio:.2f} ({n})" for bench, (n, ratio) in shift.items())
    return ["Median time of calibration B's benchmarks over A's, per bench (benchmarks compared): " + cells
            + ". A shift shared by every bench is the machine moving between the sets, not the fit.", ""]


def _pair_lines(rows: list[dict], names: list[str]) -> list[str]:
    """Per pair of consecutive calibrations: largest and mean difference, models within the target."""
    if len(names) < 3:
        return []
    lines = ["| calibrations | largest difference | mean | models within target |", "|---|---:|---:|---:|"]
    for a, b in consecutive(names):
        d = [abs(r["predicted_s"][a] - r["predicted_s"][b]) / min(r["predicted_s"][a], r["predicted_s"][b])
             for r in rows]
        lines.append(f"| {a} → {b} | {100 * max(d):.1f} % | {100 * sum(d) / len(d):.1f} % | "
                     f"{sum(x <= TARGET for x in d)} of {len(d)} |")
    return [*lines, ""]


def _speed_lines(speed: dict[str, list[float]]) -> list[str]:
    if not speed:
        return []
    n = len(next(iter(speed.values())))
    lines = ["Machine speed per pass (`pass_speed`: a bench's time in that pass over its median over "
             "all passes; > 1 slower):", "",
             "| bench | " + " | ".join(str(i + 1) for i in range(n)) + " |", "|---|" + "---:|" * n]
    lines += [f"| {bench} | " + " | ".join(f"{x:.2f}" for x in v) + " |" for bench, v in speed.items()]
    return [*lines, ""]


def _modes_text(modes: list) -> str:
    return f"{modes[0]:.2f}x, {modes[1]} of {modes[2]}" if modes else "one mode"


def _markdown(rows: list[dict], meta: dict) -> str:
    worst = max(rows, key=spread)
    met = all(spread(r) <= TARGET for r in rows)
    names = list(rows[0]["predicted_s"])
    title = ("Calibrations from interleaved passes: how far does the calibration itself move?" if meta.get("interleave")
             else "Back-to-back calibrations: do they predict the same step times?")
    lines = [f"# {title} (issue 12)", "",
             f"- machine: {meta['machine']}; torch {torch.__version__}; {meta['threads']} threads; grid {meta['grid']}; "
             f"passes per calibration {meta['passes']}",
             f"- measured {meta['when']}; each set {', '.join(f'{s:.0f} s' for s in meta['seconds'])}; "
             f"1-minute load average before each: {', '.join(str(x) for x in meta['load'])}",
             f"- command: `{meta['command']}`",
             *(["- passes dealt out in turn (`--interleave`): every calibration spans the same minutes, so the "
                "machine's drift is shared and the differences are the calibration's own noise"]
               if meta.get("interleave") else []),
             *(["- memory modes (calibrate/modes.py: the copies past the cache, slow over fast pass; passes slow): "
                + ", ".join(f"{k} {_modes_text(v)}" for k, v in meta["modes"].items())] if meta.get("modes") else []), "",
             f"**Largest difference between two consecutive profiles' predictions: {100 * spread(worst):.1f} % "
             f"({worst['case']}); mean {100 * sum(map(spread, rows)) / len(rows):.1f} %. Target: every model "
             f"within {100 * TARGET:.0f} % — {'met' if met else 'not met'}.**", "",
             *_pair_lines(rows, names), *_shift_lines(meta.get("shift", {})), *_speed_lines(meta.get("speed", {})),
             "| model | unseen | " + " | ".join(f"calibration {n}" for n in names) + " | largest difference |",
             "|---|---|" + "---:|" * (len(names) + 1)]
    for r in rows:
        cells = " | ".join(f"{v * 1e3:.2f} ms" for v in r["predicted_s"].values())
        lines.append(f"| {r['case']} | {'yes' if r['unseen'] else ''} | {cells} | {100 * spread(r):.1f} % |")
    return "\n".join(lines) + "\n"


def by_mode(sets: dict[str, Measurements], models: list[tuple]) -> tuple[dict | None, dict[str, list[dict]]]:
    """The placement modes split over every set's dispatch readings (None: one mode, nothing else), and
    per profile ("mix" at the share of slow readings over all sets, "fast", "slow") every model's
    prediction under each set re-centred on it (``modes.modal_measurements``)."""
    modes = placement_modes([r for m in sets.values() for r in m.rows])
    if modes is None:
        return None, {}
    out = {}
    for name, share in (("mix", modes.slow_fraction), ("fast", 0.0), ("slow", 1.0)):
        devices = {k: fit(modal_measurements(m, modes, share)).device for k, m in sets.items()}
        out[name] = predictions(devices, models=models)
    own = {k: (lambda p: (p.slow_readings, p.readings) if p else None)(placement_modes(m.rows)) for k, m in sets.items()}
    return {**modes.to_dict(), "per_set_slow": {k: list(v) if v else None for k, v in own.items()}}, out


def _by_mode_lines(info: dict, profiles: dict[str, list[dict]]) -> list[str]:
    per = ", ".join(f"{k} {v[0]} of {v[1]}" if v else f"{k} one mode" for k, v in info["per_set_slow"].items())
    lines = ["## At a stated mix of the placement modes (`--by-mode`)", "",
             f"The dispatch sentinel read {info['fast_s'] * 1e6:.2f} µs in the fast mode and "
             f"{info['slow_s'] * 1e6:.2f} µs in the slow one ({info['ratio']:.2f}x); slow readings per set: {per}. "
             f"Each set re-fitted on its groups' passes in each mode (calibrate/modes.py), and at the mix of all sets "
             f"({100 * info['slow_fraction']:.0f} % slow):", "",
             "| profile | largest difference | mean | within 5 % |", "|---|---:|---:|---:|"]
    for name, rows in profiles.items():
        worst = max(rows, key=spread)
        lines.append(f"| {name} | {100 * spread(worst):.1f} % ({worst['case']}) | "
                     f"{100 * sum(map(spread, rows)) / len(rows):.1f} % | "
                     f"{sum(spread(r) <= TARGET for r in rows)} of {len(rows)} |")
    return [*lines, ""]


def deal(singles: list, sets: int, interleave: bool = False) -> list[list]:
    """``singles`` (a multiple of ``sets`` passes, in the order timed) split into ``sets`` calibrations:
    runs of consecutive passes, or with ``interleave`` dealt out in turn (calibration i gets passes
    i, i + sets, …)."""
    if sets < 1 or len(singles) % sets:
        raise ValueError(f"{len(singles)} passes do not split into {sets} calibrations")
    if interleave:
        return [singles[i::sets] for i in range(sets)]
    n = len(singles) // sets
    return [singles[i:i + n] for i in range(0, len(singles), n)]


def _passes(folder: Path, count: int, grid: str, threads: int) -> list[Measurements]:
    """``count`` single passes over the grid, back to back: ``folder/passNN.json`` loaded where it
    exists, else measured (``st.measure(passes=1)``) and saved there."""
    folder.mkdir(parents=True, exist_ok=True)
    return [_measurements(folder / f"pass{i + 1:02d}.json", grid, threads, 1) for i in range(count)]


def _sets(args) -> tuple[list[Measurements], list[float], list[float], dict]:
    """The calibrations to compare, their seconds, the load before each, and the per-pass speed."""
    if args.pass_dir is not None:
        singles = _passes(args.pass_dir, args.sets * args.passes, args.grid, args.threads)
        chunks = deal(singles, args.sets, args.interleave)
        return ([merged_measurements(c) for c in chunks], [sum(m.wall_s for m in c) for c in chunks],
                [c[0].settings.get("loadavg_1min_start", float("nan")) for c in chunks], pass_speed(singles))
    sets = [_measurements(path, args.grid, args.threads, args.passes) for path in args.measurements or (None, None)]
    # each set's own record, so a set loaded from its file reports when and how it was measured
    return (sets, [m.wall_s for m in sets], [m.settings.get("loadavg_1min_start", float("nan")) for m in sets], {})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("simtrain-validation"))
    p.add_argument("--measurements", type=Path, nargs=2, metavar=("A", "B"), default=None,
                   help="two measurement files: loaded where they exist, else measured and saved there")
    p.add_argument("--pass-dir", type=Path, default=None,
                   help="time --sets x --passes single passes, each saved here (loaded where it exists)")
    p.add_argument("--sets", type=int, default=2, help="with --pass-dir: calibrations to compare, each with the next")
    p.add_argument("--interleave", action="store_true",
                   help="with --pass-dir: calibration i takes passes i, i + sets, … instead of a run of consecutive "
                        "ones, so all of them span the same minutes and share the machine's drift: their difference "
                        "is the calibration's own sampling noise")
    p.add_argument("--grid", default="full")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--passes", type=int, default=1, help="passes over the grid per calibration (st.measure)")
    p.add_argument("--by-mode", action="store_true",
                   help="also compare the sets re-fitted per placement mode and at one stated mix of the modes "
                        "(calibrate/modes.py; needs passes timed with the dispatch sentinel)")
    p.add_argument("--attribute", action="store_true",
                   help="also swap each fitted quantity of the second profile into the first and report which "
                        "ones move the predictions (validation/lab/attribution.py)")
    args = p.parse_args(argv)
    if not 2 <= args.sets <= len(string.ascii_uppercase) or args.passes < 1:
        p.error(f"--sets must be 2 to {len(string.ascii_uppercase)} and --passes at least 1")
    if args.pass_dir is None and (args.interleave or args.sets != 2):
        p.error("--sets and --interleave need --pass-dir")
    sets, seconds, load, speed = _sets(args)
    torch.set_num_threads(args.threads)
    cals = {string.ascii_uppercase[i]: fit(m) for i, m in enumerate(sets)}
    devices = {k: c.device for k, c in cals.items()}
    models = built_models()
    rows = predictions(devices, models=models)
    meta = {"machine": f"{sets[0].machine.cpu_model} ({sets[0].machine.cpu_cores} cores)", "threads": args.threads,
            "passes": [m.settings.get("passes", 1) for m in sets],
            "grid": args.grid, "when": sets[0].machine.date, "seconds": seconds, "load": load,
            "shift": row_shift(*sets) if len(sets) == 2 else {}, "speed": speed, "interleave": args.interleave,
            "command": shlex.join(["python", "-m", "validation.lab.repeatability", *sys.argv[1:]]),
            "modes": {k: c.fit_info.get("memory_modes", []) for k, c in cals.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "repeatability.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    modes, profiles = by_mode(dict(zip(cals, sets, strict=True)), models) if args.by_mode else (None, {})
    if modes is not None:
        (args.out / "repeatability-by-mode.json").write_text(json.dumps({"modes": modes, "profiles": profiles}, indent=1))
    extra = attribution(models, devices["A"], devices["B"]) if args.attribute else None
    (args.out / "repeatability.md").write_text(
        _markdown(rows, meta) + ("\n" + "\n".join(_by_mode_lines(modes, profiles)) if modes is not None else "")
        + ("\n" + "\n".join(attribution_lines(extra)) if extra else ""))
    if extra:
        (args.out / "attribution.json").write_text(json.dumps(extra, indent=1))
    for r in rows:
        print(f"{r['case']:24s} " + " ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in r["predicted_s"].items())
              + f"  {100 * spread(r):5.1f} %")
    print(f"largest difference {100 * max(map(spread, rows)):.1f} % (target {100 * TARGET:.0f} %)")
    for name, prof in profiles.items():
        print(f"{name} profile: largest difference {100 * max(map(spread, prof)):.1f} %")
    if args.by_mode and modes is None:
        print("--by-mode: one placement mode (or no dispatch sentinel in these passes): nothing to split")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
