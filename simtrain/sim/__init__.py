"""The discrete-event engine (simpy) over the same per-rank program as the estimate."""

from simtrain.sim.engine import run_program, simulate
from simtrain.sim.trace import Timeline, TimelineEvent

__all__ = ["simulate", "run_program", "Timeline", "TimelineEvent"]
