"""The records of a long-run simulation (goodput.py): what it takes (``RunPlan``) and what it returns —
the result of one run, a scan of checkpoint intervals, their closed-form counterparts (young_daly.py)
and their text summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from simtrain.cost.variability import Variability, expected_slowdown
from simtrain.report.format import format_count, format_percent, format_seconds, format_si, render_table
from simtrain.sim.young_daly import daly_interval_s, daly_wall_s, young_interval_s

__all__ = ["RunPlan", "RunEvent", "RunResult", "IntervalScan", "LOST_KEYS"]


@dataclass(frozen=True)
class RunPlan:
    """Everything a long run needs, resolved to SI numbers (see ``goodput.plan_run``)."""

    steps: int
    base_step_s: float
    devices: int
    tokens_per_step: float | None
    job_mtbf_s: float
    checkpoint_s: float
    reload_s: float
    restart_s: float
    failure_times_s: tuple[float, ...] | None = None
    variability: Variability | None = None
    expected_step_s: float = field(init=False)

    def __post_init__(self) -> None:
        var = self.variability
        slow = 1.0 if var is None or var.trivial else expected_slowdown(var, self.devices)
        object.__setattr__(self, "expected_step_s", self.base_step_s * slow)

    @property
    def recovery_s(self) -> float:
        return self.restart_s + self.reload_s

    def interval_steps(self, interval_s: float) -> int:
        """Compute seconds between checkpoints → whole steps (at least 1, at most the run)."""
        if math.isinf(interval_s):
            return self.steps
        return int(min(self.steps, max(1, round(interval_s / self.expected_step_s))))


#: where the wall time that is not useful compute went
LOST_KEYS = ("checkpoint", "restart", "recompute", "straggler")


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run: ``kind`` is checkpoint | failure | restarted | done; ``step`` is the
    last durable step at that moment."""

    time_s: float
    kind: str
    step: int


def _closed_forms(plan: RunPlan, interval_steps: int) -> tuple[float, float, float]:
    """(Young τ, Daly τ, Daly expected wall) for this plan at ``interval_steps``."""
    tau = interval_steps * plan.expected_step_s
    wall = daly_wall_s(plan.steps * plan.expected_step_s, tau, plan.checkpoint_s, plan.recovery_s, plan.job_mtbf_s)
    return (young_interval_s(plan.checkpoint_s, plan.job_mtbf_s),
            daly_interval_s(plan.checkpoint_s, plan.job_mtbf_s), wall)


@dataclass(frozen=True)
class RunResult:
    """One simulated run (:func:`simtrain.sim.goodput.simulate_run`). Seconds are wall-clock;
    ``wall_s == useful_s + sum(lost_s.values())`` up to rounding."""

    plan: RunPlan
    checkpoint_interval_steps: int
    wall_s: float
    useful_s: float
    """steps × base step time: the compute a failure-free, straggler-free run would spend."""
    lost_s: Mapping[str, float]
    """checkpoint (completed saves), restart (restart + reload, including restarts cut short),
    recompute (work since the last durable checkpoint, lost at failures), straggler (slowest-device
    excess over the base step, on the steps that were kept)."""
    failures_count: int
    checkpoints_count: int
    events: tuple[RunEvent, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lost_s", MappingProxyType({k: float(self.lost_s[k]) for k in LOST_KEYS}))

    @property
    def goodput(self) -> float:
        """Useful training time / wall time (the "effective training time" ratio)."""
        return self.useful_s / self.wall_s

    @property
    def tokens(self) -> float | None:
        tps = self.plan.tokens_per_step
        return None if tps is None else self.plan.steps * tps

    @property
    def effective_tokens_per_s(self) -> float | None:
        return None if self.tokens is None else self.tokens / self.wall_s

    @property
    def time_to_train_s(self) -> float:
        return self.wall_s

    @property
    def interval_s(self) -> float:
        """Expected compute seconds between checkpoints at the chosen interval."""
        return self.checkpoint_interval_steps * self.plan.expected_step_s

    @property
    def young_interval_s(self) -> float:
        return _closed_forms(self.plan, self.checkpoint_interval_steps)[0]

    @property
    def daly_interval_s(self) -> float:
        return _closed_forms(self.plan, self.checkpoint_interval_steps)[1]

    @property
    def expected_wall_s(self) -> float:
        """Daly's closed-form expected wall time at this interval (step time with the expected slowdown)."""
        return _closed_forms(self.plan, self.checkpoint_interval_steps)[2]

    @property
    def expected_goodput(self) -> float:
        return self.useful_s / self.expected_wall_s

    def log(self) -> list[tuple[str, float, int]]:
        """(kind, time, durable step) in time order — what event-log tests assert."""
        return [(e.kind, e.time_s, e.step) for e in self.events]

    def to_dict(self) -> dict:
        p = self.plan
        return {"steps": p.steps, "tokens": self.tokens, "devices": p.devices, "base_step_s": p.base_step_s,
                "expected_step_s": p.expected_step_s, "job_mtbf_s": p.job_mtbf_s, "checkpoint_s": p.checkpoint_s,
                "reload_s": p.reload_s, "restart_s": p.restart_s,
                "checkpoint_interval_steps": self.checkpoint_interval_steps, "interval_s": self.interval_s,
                "young_interval_s": self.young_interval_s, "daly_interval_s": self.daly_interval_s,
                "wall_s": self.wall_s, "expected_wall_s": self.expected_wall_s, "useful_s": self.useful_s,
                "lost_s": dict(self.lost_s), "goodput": self.goodput, "expected_goodput": self.expected_goodput,
                "effective_tokens_per_s": self.effective_tokens_per_s, "failures": self.failures_count,
                "checkpoints": self.checkpoints_count, "seed": self.seed}

    def summary(self) -> str:
        """A two-column table: inputs, intervals, time to train, goodput and where the rest went."""
        p, tokens = self.plan, self.tokens
        rows = [
            ("devices", format_count(p.devices)),
            ("steps" + ("" if tokens is None else " (tokens)"),
             format_count(p.steps) + ("" if tokens is None else f" ({format_si(tokens, ' tokens')})")),
            ("step time: base / expected with stragglers", f"{format_seconds(p.base_step_s)} / "
                                                           f"{format_seconds(p.expected_step_s)}"),
            ("job MTBF", format_seconds(p.job_mtbf_s)),
            ("checkpoint save / reload / restart", f"{format_seconds(p.checkpoint_s)} / "
                                                   f"{format_seconds(p.reload_s)} / {format_seconds(p.restart_s)}"),
            ("interval: Young / Daly (closed form)", f"{format_seconds(self.young_interval_s)} / "
                                                     f"{format_seconds(self.daly_interval_s)}"),
            ("interval used", f"{format_count(self.checkpoint_interval_steps)} steps "
                              f"({format_seconds(self.interval_s)})"),
            ("failures / checkpoints", f"{format_count(self.failures_count)} / {format_count(self.checkpoints_count)}"),
            ("time to train: simulated / Daly expected", f"{format_seconds(self.wall_s)} / "
                                                         f"{format_seconds(self.expected_wall_s)}"),
            ("goodput: simulated / Daly expected", f"{format_percent(self.goodput, 2)} / "
                                                   f"{format_percent(self.expected_goodput, 2)}"),
        ]
        rows += [(f"lost to {k}", f"{format_seconds(v)} ({format_percent(v / self.wall_s, 2)})")
                 for k, v in self.lost_s.items()]
        if tokens is not None:
            rows.append(("effective throughput", format_si(self.effective_tokens_per_s, " tokens/s")))
        return render_table(("quantity", "value"), rows)


@dataclass(frozen=True)
class IntervalScan:
    """Simulated goodput (mean of ``replicas`` seeds) at each checkpoint interval of a grid."""

    plan: RunPlan
    intervals_steps: tuple[int, ...]
    goodput: tuple[float, ...]
    daly_interval_steps: int
    young_interval_steps: int
    replicas: int
    seed: int = 0

    @property
    def best_interval_steps(self) -> int:
        """The simulated optimum: the grid interval with the highest mean goodput (first on ties)."""
        return self.intervals_steps[max(range(len(self.goodput)), key=lambda i: (self.goodput[i], -i))]

    @property
    def best_goodput(self) -> float:
        return max(self.goodput)

    @property
    def daly_goodput(self) -> float:
        """Simulated goodput at Daly's interval."""
        return self.goodput[self.intervals_steps.index(self.daly_interval_steps)]

    @property
    def ratio(self) -> float:
        """Simulated optimum / Daly's interval."""
        return self.best_interval_steps / self.daly_interval_steps

    @property
    def fitted_interval_steps(self) -> float:
        """The optimum between grid points: the vertex of the parabola through the best point and
        its two neighbours in (ln K, goodput) — goodput is flat near the optimum (1/τ and τ terms),
        so the grid argmax alone moves in whole grid steps. The argmax itself at the grid's edge."""
        i = self.intervals_steps.index(self.best_interval_steps)
        if i == 0 or i == len(self.intervals_steps) - 1:
            return float(self.best_interval_steps)
        (x0, x1, x2), (y0, y1, y2) = (math.log(k) for k in self.intervals_steps[i - 1:i + 2]), self.goodput[i - 1:i + 2]
        # vertex of the parabola through three points (Press et al., Numerical Recipes 3rd ed., eq. 10.3.1)
        num = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
        den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
        if den == 0:  # three collinear points: no curvature to place a vertex
            return float(self.best_interval_steps)
        vertex = x1 - 0.5 * num / den
        return math.exp(vertex)

    def summary(self) -> str:
        step, best = self.plan.expected_step_s, self.best_interval_steps
        marks = (("Young", self.young_interval_steps), ("Daly", self.daly_interval_steps), ("simulated optimum", best))
        rows = [(format_count(k), format_seconds(k * step), format_percent(g, 3),
                 ", ".join(name for name, kk in marks if kk == k))
                for k, g in zip(self.intervals_steps, self.goodput, strict=True)]
        return render_table(("interval (steps)", "interval", f"goodput (mean of {self.replicas})", ""), rows,
                            right=(0, 1, 2))
