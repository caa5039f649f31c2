"""st.simulate: a discrete-event simulation (simpy) of the same per-rank program the estimate composes.

The program (parallel/program.py) is expanded into tasks: for every micro-batch and every model chunk
(virtual stage k runs on pipeline rank k mod p) a forward task and a backward task, each holding
its rank for the chunk's seconds (compute + recompute + the collectives inside it, the blocking send
to the next rank at its end). Each rank is a process that runs its tasks in the schedule's static
order (parallel/schedule.py ``rank_order``: GPipe, 1F1B, Megatron-core's interleaved table), a task
starting once its input is there (forward: the previous chunk's forward; backward: the next chunk's
backward, or this chunk's own forward on the last chunk). Before its first forward a rank waits for
the exposed part of its overlapped parameter all-gather; after its last backward it runs the exposed
data-parallel sync and the optimizer step.

Nothing here contends that the closed form does not see, so the makespan equals the estimate's
exact evaluation of the same schedule (``pipeline_finish_s``); the simulation adds the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from simtrain.parallel.schedule import rank_order
from simtrain.sim.trace import Timeline, TimelineEvent

__all__ = ["simulate", "run_program", "SimResult"]


@dataclass(frozen=True)
class SimResult:
    pipeline_s: float
    step_s: float
    timeline: Timeline
    finish_s: tuple[float, ...] = ()
    """When each pipeline rank ended its last backward."""


def _chunk_times(stage, v: int) -> tuple[float, float, float]:
    """(forward, backward, send) seconds of one chunk for one micro-batch (the send is inside both)."""
    send = max((t.seconds for t in stage.comm if t.axis == "pp"), default=0.0)
    return stage.forward_s / v, stage.backward_s / v, send


class _Sim:
    def __init__(self, program, schedule) -> None:
        self.env = simpy.Environment()
        self.lay = program.layout
        self.stages = program.stages
        self.schedule = schedule
        self.p, self.v, self.m = self.lay.pp, self.lay.v, self.lay.micro_batches
        self.done: dict[tuple[str, int, int], simpy.Event] = {}
        self.events: list[TimelineEvent] = []
        self.finish = [0.0] * self.p

    def event(self, kind: str, chunk: int, mb: int) -> simpy.Event:
        key = (kind, chunk, mb)
        if key not in self.done:
            self.done[key] = self.env.event()
        return self.done[key]

    def _input(self, kind: str, chunk: int, mb: int) -> simpy.Event | None:
        if kind == "F":
            return self.event("F", chunk - 1, mb) if chunk > 0 else None
        return self.event("F", chunk, mb) if chunk == self.p * self.v - 1 else self.event("B", chunk + 1, mb)

    def rank(self, rank: int):
        fw, bw, send = _chunk_times(self.stages[rank], self.v)
        before = self.stages[rank].sync_before_s
        if before:
            self.events.append(TimelineEvent("dp param gather", rank, "dp_comm", 0.0, before, {}))
            yield self.env.timeout(before)
        last = self.p * self.v - 1
        for kind, chunk, mb in rank_order(rank, self.p, self.m, self.schedule, self.v):
            needed = self._input(kind, chunk, mb)
            if needed is not None:
                yield needed
            start, seconds = self.env.now, (fw if kind == "F" else bw)
            yield self.env.timeout(seconds)
            self.events.append(TimelineEvent(f"{kind} mb{mb} c{chunk}", rank, "compute", start, seconds,
                                             {"micro_batch": mb, "chunk": chunk, "phase": "fw" if kind == "F" else "bw"}))
            if send and (chunk < last if kind == "F" else chunk > 0):
                lane = "pp_send_fw" if kind == "F" else "pp_send_bw"
                self.events.append(TimelineEvent(f"send {kind.lower()}w c{chunk}", rank, lane, self.env.now - send,
                                                 send, {"micro_batch": mb}))
            self.event(kind, chunk, mb).succeed()
        self.finish[rank] = self.env.now

    def run(self) -> float:
        for r in range(self.p):
            self.env.process(self.rank(r))
        self.env.run()
        return max(self.finish)


def _finish(sim: _Sim) -> float:
    """Per rank: exposed data-parallel sync, then the optimizer step, after its last backward."""
    end = 0.0
    for rank, stage in enumerate(sim.stages):
        t = sim.finish[rank]
        sync = stage.sync_after_s
        if sync:
            sim.events.append(TimelineEvent("dp sync", rank, "dp_comm", t, sync, {}))
        sim.events.append(TimelineEvent("optimizer", rank, "compute", t + sync, stage.optimizer_s, {}))
        end = max(end, t + sync + stage.optimizer_s)
    return end


def run_program(program, schedule="1f1b") -> SimResult:
    sim = _Sim(program, schedule)
    pipeline_s = sim.run()
    step_s = _finish(sim)
    return SimResult(pipeline_s, step_s, Timeline(tuple(sorted(sim.events, key=lambda e: (e.start_s, e.rank)))),
                     tuple(sim.finish))


def simulate(model, cluster, cfg):
    """DES → StepReport with the same fields as st.estimate, plus ``report.timeline``."""
    from simtrain.errors import SimtrainError, SpecError
    from simtrain.estimator import build_program, compose, infeasible_report, prepare_model
    try:
        from simtrain.specs.stack import resolve_stack
        cfg = resolve_stack(cfg)
        model = prepare_model(model, cfg)
        program = build_program(model, cluster, cfg)
    except (SpecError, SimtrainError) as err:
        return infeasible_report(model, cluster, cfg, [str(err)], engine="simulate")
    if isinstance(program, list):
        return infeasible_report(model, cluster, cfg, program, engine="simulate")
    result = run_program(program, cfg.pipeline_schedule)
    report = compose(model, cluster, cfg, program, engine="simulate", finish_s=result.finish_s)
    object.__setattr__(report, "timeline", result.timeline)
    return report
