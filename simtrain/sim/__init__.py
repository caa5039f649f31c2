"""The discrete-event engine (simpy) over the same per-rank program as the estimate (docs/simulator.md)."""

from simtrain.sim.api import link_tiers, simulate
from simtrain.sim.dataloader import DataLoaderRun, simulate_data_loader
from simtrain.sim.engine import SimOptions, SimResult, run_program
from simtrain.sim.links import SharedLink
from simtrain.sim.trace import Flow, Timeline, TimelineEvent

__all__ = ["simulate", "run_program", "SimOptions", "SimResult", "Timeline", "TimelineEvent", "Flow",
           "SharedLink", "simulate_data_loader", "DataLoaderRun", "link_tiers"]
