"""st.simulate: a discrete-event simulation (simpy) of the same per-rank program the estimate composes.

The program (parallel/program.py) is expanded into tasks: for every micro-batch and every model chunk
(virtual stage k runs on pipeline rank k mod p) a forward task and a backward task, each holding
its rank's compute for the chunk's seconds (compute + recompute + the collectives inside it), and a
send task per chunk boundary on the link between the two ranks, one direction each way. A task
starts when its inputs are there (forward: the previous chunk's forward and its send; backward: the
next chunk's backward and its send, or this chunk's own forward on the last chunk) and its rank is
free; ranks pick ready work backward-first, earliest micro-batch first (the 1F1B rule). After its
last backward each rank runs the exposed data-parallel sync and the optimizer step.

With no contention the makespan equals the closed form ((m + p − 1)·(t_f + t_b) for equal stages);
where they differ (uneven stages, link contention, interleaving) the simulation is the exact one.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from simtrain.sim.trace import Timeline, TimelineEvent

__all__ = ["simulate", "run_program", "SimResult"]

_BACKWARD, _FORWARD = 0, 1  # PriorityResource: lower runs first


@dataclass(frozen=True)
class SimResult:
    pipeline_s: float
    step_s: float
    timeline: Timeline


def _chunk_times(stage, v: int) -> tuple[float, float, float]:
    """(forward, backward, send) seconds of one chunk for one micro-batch."""
    fw = stage.fw_s + stage.exposed_comm_s("fw")
    bw = stage.bw_s + stage.recompute_s + stage.exposed_comm_s("bw") + stage.exposed_comm_s("recompute")
    send = max((t.seconds for t in stage.comm if t.axis == "pp"), default=0.0)
    return fw / v, bw / v, send


class _Sim:
    def __init__(self, program) -> None:
        self.env = simpy.Environment()
        self.lay = program.layout
        self.stages = program.stages
        self.p, self.v, self.m = self.lay.pp, self.lay.v, self.lay.micro_batches
        self.ranks = [simpy.PriorityResource(self.env, capacity=1) for _ in range(self.p)]
        self.links = {(k, d): simpy.Resource(self.env, capacity=1) for k in range(self.p) for d in ("fw", "bw")}
        self.done: dict[tuple[str, int, int], simpy.Event] = {}
        self.events: list[TimelineEvent] = []
        self.last_backward = [0.0] * self.p

    def event(self, kind: str, chunk: int, mb: int) -> simpy.Event:
        key = (kind, chunk, mb)
        if key not in self.done:
            self.done[key] = self.env.event()
        return self.done[key]

    def _send(self, src_rank: int, direction: str, seconds: float, name: str, mb: int):
        with self.links[(src_rank, direction)].request() as req:
            yield req
            start = self.env.now
            yield self.env.timeout(seconds)
            self.events.append(TimelineEvent(name, src_rank, f"pp_send_{direction}", start, seconds, {"micro_batch": mb}))

    def task(self, kind: str, chunk: int, mb: int):
        chunks = self.p * self.v
        rank = chunk % self.p
        fw, bw, send = _chunk_times(self.stages[rank], self.v)
        if kind == "F" and chunk > 0:
            yield self.event("F", chunk - 1, mb)
            yield self.env.process(self._send((chunk - 1) % self.p, "fw", send, f"send fw c{chunk - 1}", mb))
        if kind == "B":
            if chunk < chunks - 1:
                yield self.event("B", chunk + 1, mb)
                yield self.env.process(self._send((chunk + 1) % self.p, "bw", send, f"send bw c{chunk + 1}", mb))
            else:
                yield self.event("F", chunk, mb)
        prio = (_BACKWARD if kind == "B" else _FORWARD, mb, -chunk if kind == "B" else chunk)
        with self.ranks[rank].request(priority=prio) as req:
            yield req
            start, seconds = self.env.now, (fw if kind == "F" else bw)
            yield self.env.timeout(seconds)
        self.events.append(TimelineEvent(f"{kind} mb{mb} c{chunk}", rank, "compute", start, seconds,
                                         {"micro_batch": mb, "chunk": chunk, "phase": "fw" if kind == "F" else "bw"}))
        if kind == "B":
            self.last_backward[rank] = max(self.last_backward[rank], self.env.now)
        self.event(kind, chunk, mb).succeed()

    def run(self) -> float:
        for mb in range(self.m):
            for chunk in range(self.p * self.v):
                self.env.process(self.task("F", chunk, mb))
                self.env.process(self.task("B", chunk, mb))
        self.env.run()
        return max(self.last_backward)


def _finish(sim: _Sim) -> float:
    """Per rank: exposed data-parallel sync, then the optimizer step, after its last backward."""
    end = 0.0
    for rank, stage in enumerate(sim.stages):
        t = sim.last_backward[rank]
        sync = sum(c.exposed_s for c in stage.step_comm)
        if sync:
            sim.events.append(TimelineEvent("dp sync", rank, "dp_comm", t, sync, {}))
        sim.events.append(TimelineEvent("optimizer", rank, "compute", t + sync, stage.optimizer_s, {}))
        end = max(end, t + sync + stage.optimizer_s)
    return end


def run_program(program) -> SimResult:
    sim = _Sim(program)
    pipeline_s = sim.run()
    step_s = _finish(sim)
    return SimResult(pipeline_s, step_s, Timeline(tuple(sorted(sim.events, key=lambda e: (e.start_s, e.rank)))))


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
    result = run_program(program)
    report = compose(model, cluster, cfg, program, engine="simulate", pipeline_s=result.pipeline_s)
    object.__setattr__(report, "timeline", result.timeline)
    return report
