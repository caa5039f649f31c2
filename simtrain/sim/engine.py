"""The discrete-event engine (simpy) of one training step over the per-rank program.

Symmetry reduction (exact): every rank of one pipeline stage — its dp × tp × cp (× ep) peers — runs
the same program on the same schedule, so one representative per stage is simulated: a process per
pipeline rank, p processes whatever the data-parallel degree (DESIGN.md "one cost layer, two
engines"). Each process runs its tasks in the schedule's static order (parallel/schedule.py
``rank_order``: GPipe, 1F1B, Megatron-core's interleaved table), a task starting once its rank is
free and its input has arrived (forward: the previous chunk's forward; backward: the next chunk's
backward, or this chunk's own forward on the last chunk). A task is the recipe of sim/recipe.py:
compute, the exposed part of its collectives on their streams, the pipeline send at its tail, and
the hidden part of its collectives beside it. Before its first forward a rank runs the exposed
part of its parameter all-gather (the rest behind that forward); behind its last backward the
gradient-reduction buckets, after it the exposed rest, then the optimizer step. A rank with several
chunks runs a share of the hidden sync beside each chunk's last backward and from each chunk's
gather launch instead (parallel/chunk_sync.py, recipe.sync_extras).

Two ways to run a task: when links cannot contend (``contention=False``: every rank's every axis
has its own link, which is what the closed form assumes) a task is one simpy timeout whose slices
are laid out arithmetically — O(1) events per task, so cost is linear in stages × micro-batches ×
chunks; with ``contention=True`` every comm segment is a flow on the rank's physical link for its
axis (sim/links.py, processor sharing: "fabric" inside a node, "network" NIC across nodes) and
every stream a simpy Resource, so collectives that meet on a link slow each other down.

Device memory is a simpy Container per rank: the static part (weights, gradients, optimizer state,
buffers: parallel/memory_plan.py) at the start, one chunk's activations put at each forward and
taken at the end of its backward; the run's peak level is reported per rank.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import simpy

from simtrain.glossary import PipelineSchedule
from simtrain.parallel.schedule import (
    SPLIT_BACKWARD,
    frees_activations,
    in_flight_microbatches,
    is_backward,
    is_forward,
    rank_order,
    stage_chunks,
)
from simtrain.sim.links import SharedLink
from simtrain.sim.recipe import Segment, stage_recipes, step_sync, sync_extras
from simtrain.sim.trace import Flow, Timeline, TimelineEvent

__all__ = ["SimOptions", "SimResult", "run_program"]


@dataclass(frozen=True)
class SimOptions:
    granularity: str = "chunk"
    """"chunk": a task's compute is one slice; "layer": cut per layer, exposed collectives between;
    "op": one slice per op of the task's chunk (``chunk_ops``), exposed collectives after them."""
    contention: bool = False
    """Collectives that share a physical link share its bandwidth (processor sharing)."""
    speed: tuple[float, ...] | None = None
    """Per pipeline rank: compute speed factor (1 nominal, 0.8 = compute takes 1/0.8 as long)."""
    trace: bool = True
    """Record the timeline's events (off: only the finish times and memory peaks)."""
    tiers: tuple[tuple[str, str], ...] = ()
    """(axis, physical link tier) pairs, used with ``contention`` (sim/api.py ``link_tiers``)."""
    bucket_bytes: float = 25 * 2**20
    """Gradient-reduction bucket (TrainConfig.dp_bucket_bytes): how the hidden sync is cut into events."""
    chunk_ops: tuple = ()
    """With granularity "op": per global model chunk, its ops in execution order as (name, forward s,
    backward + recomputation s) per micro-batch on one rank (sim/api.py ``chunk_ops``)."""


@dataclass(frozen=True)
class SimResult:
    pipeline_s: float
    step_s: float
    timeline: Timeline
    finish_s: tuple[float, ...] = ()
    """When each pipeline rank ended its last backward."""
    end_s: tuple[float, ...] = ()
    """When each pipeline rank ended its step (sync and optimizer included)."""
    steps_s: tuple[float, ...] = ()
    """Seconds of each simulated step (one unless asked for more)."""
    evals_s: tuple[float, ...] = ()
    """Seconds of each simulated evaluation."""


class _Memory:
    """Device memory of one rank as a simpy Container; the peak level is kept as it rises."""

    def __init__(self, env: simpy.Environment, static_bytes: float, per_task_bytes: float) -> None:
        self.box = simpy.Container(env, capacity=float("inf"), init=max(0.0, static_bytes))
        self.per_task, self.peak = per_task_bytes, max(0.0, static_bytes)

    def alloc(self) -> None:
        if self.per_task > 0:
            self.box.put(self.per_task)
            self.peak = max(self.peak, self.box.level)

    def free(self) -> None:
        if self.per_task > 0:
            self.box.get(min(self.per_task, self.box.level))


class _Pipeline:
    def __init__(self, program, schedule, opts: SimOptions, memories=None) -> None:
        lay = program.layout
        self.env, self.opts, self.schedule = simpy.Environment(), opts, PipelineSchedule(schedule)
        self.p, self.v, self.m, self.stages = lay.pp, lay.v, lay.micro_batches, program.stages
        self.last = self.p * self.v - 1
        split = self.schedule in SPLIT_BACKWARD and self.p > 1
        self.recipes = [stage_recipes(st, self.v, opts.granularity,
                                      {c: opts.chunk_ops[c] for c in stage_chunks(r, self.p, self.v, self.schedule)
                                       if c < len(opts.chunk_ops)}, split)
                        for r, st in enumerate(self.stages)]
        self.syncs = [step_sync(st, opts.bucket_bytes) for st in self.stages]
        # hidden sync segments by task index, built once: _beside caches its fitted groups by their identity
        self.extras = [sync_extras(sync, rank_order(r, self.p, self.m, self.schedule, self.v))
                       for r, sync in enumerate(self.syncs)]
        self.speed = tuple(opts.speed) if opts.speed else (1.0,) * self.p
        self.waiters: dict[tuple[str, int, int], simpy.Event] = {}
        self._reset(self.m, "")
        self.events: list[TimelineEvent] = []
        self.flows: list[Flow] = []
        self.sent: dict[tuple[str, int, int], tuple[int, float]] = {}
        self.finish, self.end = [0.0] * self.p, [0.0] * self.p
        self.tiers = dict(opts.tiers)
        self.links: dict[tuple[int, str], SharedLink] = {}
        self.streams: dict[tuple[int, str], simpy.Resource] = {}
        self.memory = [self._memory(r, memories) for r in range(self.p)]
        self._fitted: dict[tuple[int, str, int], list[tuple[Segment, ...]]] = {}

    def _memory(self, r: int, memories) -> _Memory:
        if not memories:
            return _Memory(self.env, 0.0, 0.0)
        mem = memories[r]
        in_flight = in_flight_microbatches(r, self.p, self.m, self.schedule, self.v) or 1.0
        per_task = mem.activations_bytes / in_flight / self.v
        return _Memory(self.env, mem.total_bytes - mem.activations_bytes, per_task)

    # --- bookkeeping ---------------------------------------------------------------------------
    def _reset(self, micro_batches: int, prefix: str) -> None:
        """Fresh completion records for a pass of ``micro_batches`` (a step, or an evaluation)."""
        self.stride, self.prefix = micro_batches, prefix
        self.f_end: list[float | None] = [None] * ((self.last + 1) * micro_batches)
        self.b_end: list[float | None] = [None] * ((self.last + 1) * micro_batches)

    def _record(self, name: str, r: int, lane: str, start: float, dur: float, args=None) -> None:
        if self.opts.trace and dur > 0:
            self.events.append(TimelineEvent(name, r, lane, start, dur) if args is None
                               else TimelineEvent(name, r, lane, start, dur, args))

    def _input(self, kind: str, c: int, mb: int) -> tuple[str, int, int] | None:
        """The completion a task waits for: ("F" | "B", chunk, micro-batch) — a W its own chunk's I."""
        if is_forward(kind):
            return ("F", c - 1, mb) if c > 0 else None
        if kind == "W":
            return ("B", c, mb)
        return ("F", c, mb) if c == self.last else ("B", c + 1, mb)

    def _ended(self, key) -> float | None:
        kind, c, mb = key
        return (self.f_end if kind == "F" else self.b_end)[c * self.stride + mb]

    def _wait_for(self, key) -> simpy.Event | None:
        if key is None or self._ended(key) is not None:
            return None
        ev = self.waiters[key] = self.env.event()
        return ev

    def _done(self, kind: str, c: int, mb: int) -> None:
        if not (is_forward(kind) or is_backward(kind)):
            return  # a weight pass: nothing waits for it
        kind = "F" if is_forward(kind) else "B"
        (self.f_end if kind == "F" else self.b_end)[c * self.stride + mb] = self.env.now
        ev = self.waiters.pop((kind, c, mb), None)
        if ev is not None:
            ev.succeed()

    def _flow_in(self, r: int, kind: str, c: int, mb: int, key) -> None:
        """The arrow from the send that fed this task (when the input came from another rank)."""
        want = "F" if is_forward(kind) else "B"
        if not self.opts.trace or key is None or key[0] != want or kind == "W":
            return
        src = self.sent.pop(key, None)
        if src is not None:
            lane = "pp fw send" if want == "F" else "pp bw send"
            self.flows.append(Flow(f"{kind} mb{mb} c{key[1]}→c{c}", src[0], lane, src[1], r, "compute", self.env.now))

    # --- one task --------------------------------------------------------------------------------
    def _real_send(self, kind: str, c: int) -> bool:
        return c < self.last if is_forward(kind) else c > 0

    def _nominal_s(self, r: int, kind: str) -> float:
        """Uncontended seconds of the blocking part of a task (send included) on rank r."""
        rec, speed = self.recipes[r][kind], self.speed[r]
        d = sum(seg.seconds / speed if seg.axis is None else seg.seconds for seg in rec.blocking)
        return d + (rec.send.seconds if rec.send is not None else 0.0)

    def _beside(self, r: int, kind: str, extra: tuple[Segment, ...]) -> list[tuple[Segment, ...]]:
        """The task's hidden segments, one group per lane, each fitted into the task's own duration:
        the estimate prices the hidden part as free (e.g. a share of the tp collectives hidden inside
        async-TP GEMMs, whatever their length), so what would outlast the task is taken as hidden
        inside its kernels and only what fits beside the task runs on the stream."""
        key = (r, kind, id(extra))  # extra is one of the rank's long-lived StepSync tuples, or ()
        hit = self._fitted.get(key)
        if hit is None:
            hit = self._fitted[key] = self._fit(r, kind, extra)
        return hit

    def _fit(self, r: int, kind: str, extra: tuple[Segment, ...]) -> list[tuple[Segment, ...]]:
        groups = []
        for group in (self.recipes[r][kind].hidden, extra):
            for lane in sorted({s.lane for s in group}):
                groups.append(tuple(s for s in group if s.lane == lane))
        if not groups:
            return groups
        room = self._nominal_s(r, kind)
        out = []
        for g in groups:
            total = sum(s.seconds for s in g)
            out.append(g if total <= room else tuple(replace(s, seconds=s.seconds * room / total) for s in g))
        return out

    def _recipe(self, r: int, kind: str, c: int):
        """The task's recipe: its chunk's own (op granularity) or the stage's."""
        return self.recipes[r].get((kind, c)) or self.recipes[r][kind]

    def _layout(self, r: int, kind: str, c: int, mb: int, extra: tuple[Segment, ...]) -> float:
        """Slices of a task when nothing contends, laid out from now; returns its duration."""
        rec, speed = self._recipe(r, kind, c), self.speed[r]
        t0 = t = self.env.now
        tag = f"{self.prefix}{kind} mb{mb} c{c}"
        for seg in rec.blocking:
            d = seg.seconds / speed if seg.axis is None else seg.seconds
            self._record(seg.name.format(task=tag), r, seg.lane, t, d)
            t += d
        if rec.send is not None:
            if self._real_send(kind, c) and self.opts.trace:
                self.sent[("F" if is_forward(kind) else "B", c, mb)] = (r, t)
                self._record(rec.send.name.format(dir=kind[0].lower() + "w", chunk=c), r, rec.send.lane, t,
                             rec.send.seconds, {"micro_batch": mb, "bytes": rec.send.bytes})
            t += rec.send.seconds
        end = t
        for group in self._beside(r, kind, extra) if (rec.hidden or extra) else ():
            h = t0
            for s in group:
                self._record(s.name, r, s.lane, h, s.seconds)
                h += s.seconds
            end = max(end, h)
        return end - t0

    def _stream(self, r: int, lane: str) -> simpy.Resource:
        res = self.streams.get((r, lane))
        if res is None:
            res = self.streams[(r, lane)] = simpy.Resource(self.env, capacity=1)
        return res

    def _link(self, r: int, axis: str) -> SharedLink:
        tier = self.tiers.get(axis, axis)
        link = self.links.get((r, tier))
        if link is None:
            link = self.links[(r, tier)] = SharedLink(self.env, f"rank {r} {tier}")
        return link

    def _segment(self, r: int, seg: Segment, name: str, args=None):
        """Run one segment as events: compute holds the rank; comm is a flow on its stream and link."""
        if seg.axis is None:
            start = self.env.now
            yield self.env.timeout(seg.seconds / self.speed[r])
            self._record(name, r, seg.lane, start, self.env.now - start, args)
            return
        with self._stream(r, seg.lane).request() as req:
            yield req
            start = self.env.now
            yield self._link(r, seg.axis).transfer(seg.seconds, name)
            self._record(name, r, seg.lane, start, self.env.now - start, args)

    def _background(self, r: int, segs: tuple[Segment, ...]):
        for s in segs:
            yield from self._segment(r, s, s.name)

    def _task_events(self, r: int, kind: str, c: int, mb: int, extra: tuple[Segment, ...]):
        rec = self._recipe(r, kind, c)
        tag = f"{self.prefix}{kind} mb{mb} c{c}"
        side = [self.env.process(self._background(r, g)) for g in self._beside(r, kind, extra)]
        for seg in rec.blocking:
            yield from self._segment(r, seg, seg.name.format(task=tag))
        if rec.send is not None:
            real = self._real_send(kind, c)
            if real and self.opts.trace:
                self.sent[("F" if is_forward(kind) else "B", c, mb)] = (r, self.env.now)
            name = rec.send.name.format(dir=kind[0].lower() + "w", chunk=c)
            if real:
                yield from self._segment(r, rec.send, name, {"micro_batch": mb, "bytes": rec.send.bytes})
            else:  # the estimate counts the send in every task: the time passes, nothing is sent
                yield self.env.timeout(rec.send.seconds)
        for proc in side:
            if not proc.triggered:
                yield proc

    # --- one rank ---------------------------------------------------------------------------------
    def _serial(self, r: int, segs: tuple[Segment, ...]):
        if self.opts.contention:
            yield from self._background(r, segs)
            return
        t = self.env.now
        for s in segs:
            self._record(s.name, r, s.lane, t, s.seconds)
            t += s.seconds
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)

    def _task(self, r: int, kind: str, c: int, mb: int, extra: tuple[Segment, ...]):
        key = self._input(kind, c, mb)
        dep = self._wait_for(key)
        if dep is not None:
            yield dep
        self._flow_in(r, kind, c, mb, key)
        if self.opts.contention:
            yield from self._task_events(r, kind, c, mb, extra)
        else:
            yield self.env.timeout(self._layout(r, kind, c, mb, extra))

    def rank(self, r: int):
        """One training step of pipeline rank r: sync, its tasks in schedule order, sync, optimizer."""
        sync = self.syncs[r]
        yield from self._serial(r, sync.before)
        order = rank_order(r, self.p, self.m, self.schedule, self.v)
        mem, extras = self.memory[r], self.extras[r]
        for i, (kind, c, mb) in enumerate(order):
            extra = extras.get(i, ())
            if is_forward(kind):
                mem.alloc()
            yield from self._task(r, kind, c, mb, extra)
            if frees_activations(kind):
                mem.free()
            self._done(kind, c, mb)
        self.finish[r] = self.env.now
        yield from self._serial(r, sync.after)
        start, opt = self.env.now, self.stages[r].optimizer_s / self.speed[r]
        self._record(f"{self.prefix}optimizer", r, "compute", start, opt)
        yield self.env.timeout(opt)
        self.end[r] = self.env.now

    def evaluate(self, r: int, micro_batches: int):
        """Forward-only evaluation: rank r runs its chunks' forwards micro-batch by micro-batch (each
        waits for the previous chunk's, always earlier in that order: no deadlock); nothing is kept."""
        for mb in range(micro_batches):
            for k in range(self.v):
                yield from self._task(r, "F", k * self.p + r, mb, ())
                self._done("F", k * self.p + r, mb)

    def _all(self, make) -> simpy.Event:
        return self.env.all_of([self.env.process(make(r)) for r in range(self.p)])

    def coordinator(self, steps: int, eval_every: int | None, eval_micro_batches: int):
        """Steps back to back, each ending on every rank (the gradient-norm all-reduce and the
        optimizer make a step a barrier); evaluation after every ``eval_every``-th step."""
        for k in range(steps):
            self._reset(self.m, f"s{k} " if steps > 1 else "")
            start = self.env.now
            yield self._all(self.rank)
            if k == 0:
                self.first = (tuple(self.finish), tuple(self.end))
            self.step_s.append(self.env.now - start)
            if eval_every and (k + 1) % eval_every == 0:
                self._reset(eval_micro_batches, f"s{k} eval ")
                start = self.env.now
                yield self._all(lambda r: self.evaluate(r, eval_micro_batches))
                self.eval_s.append(self.env.now - start)
        self.completed = True

    def run(self, steps: int = 1, eval_every: int | None = None, eval_micro_batches: int = 0) -> None:
        self.step_s, self.eval_s, self.completed = [], [], False
        self.env.process(self.coordinator(steps, eval_every, eval_micro_batches))
        self.env.run()
        if not self.completed:
            from simtrain.errors import SimtrainError
            raise SimtrainError(f"pipeline schedule {self.schedule.value} deadlocks (p={self.p}, m={self.m}, v={self.v})")


def run_program(program, schedule="1f1b", options: SimOptions | None = None, memories=None, *, steps: int = 1,
                eval_every: int | None = None, eval_micro_batches: int = 0) -> SimResult:
    """Simulate ``steps`` steps of ``program`` (a RankProgram) under ``schedule`` (with a forward-only
    evaluation of ``eval_micro_batches`` micro-batches per replica after every ``eval_every``-th);
    ``memories``: the per-stage MemoryReports (parallel/memory_plan.py) that seed the device-memory
    containers. Finish and end times are the first step's."""
    opts = options or SimOptions()
    if opts.speed is not None and len(opts.speed) != program.layout.pp:
        from simtrain.errors import SpecError
        raise SpecError.one(None, "speed", f"needs one factor per pipeline rank ({program.layout.pp}), "
                                           f"got {len(opts.speed)}")
    sim = _Pipeline(program, schedule, opts, memories)
    sim.run(steps, eval_every, eval_micro_batches)
    events = tuple(sorted(sim.events, key=lambda e: (e.start_s, e.rank))) if opts.trace else ()
    links = {link.name: link.max_concurrent for link in sim.links.values()}
    timeline = Timeline(events, tuple(sim.flows), tuple(m.peak for m in sim.memory), links)
    finish, end = sim.first
    return SimResult(max(finish), max(end), timeline, finish, end, tuple(sim.step_s), tuple(sim.eval_s))
