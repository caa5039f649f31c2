"""Pipeline schedules as data and in closed form (Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", §2.2; Huang et al. 2019 GPipe).

With p stages, m micro-batches per step, v model chunks per stage and per-micro-batch stage times
t_f (forward) and t_b (backward):

* GPipe and 1F1B: step = (m + p − 1)·(t_f + t_b); bubble fraction (p − 1)/(m + p − 1) of the step
  (= (p − 1)/m of the ideal time). With unequal stages the slowest stage paces the steady state:
  step = Σ_s (t_f,s + t_b,s) + (m − 1)·max_s (t_f,s + t_b,s).
* interleaved 1F1B: each stage runs v chunks of 1/v the work, the bubble shrinks v-fold:
  step = m·t + (p − 1)·t / v with t = t_f + t_b of one stage (all its chunks).
* micro-batches whose activations a stage holds at once: GPipe m; 1F1B min(p − s, m) on stage s;
  interleaved p·(1 + (p − 1)/(p·v)) on the first stage (Korthikanti et al. 2022 §4.2.3), capped by m·v/v.
"""

from __future__ import annotations

from simtrain.glossary import PipelineSchedule

__all__ = ["pipeline_time_s", "bubble_fraction", "in_flight_microbatches", "schedule_order"]


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Fraction of the step the pipeline idles: (p − 1)/v / (m + (p − 1)/v)."""
    warm = (p - 1) / v
    return warm / (m + warm)


def pipeline_time_s(stage_times_s: list[float], m: int, schedule: PipelineSchedule, v: int = 1) -> float:
    """Step time of the pipeline given each stage's fw + bw seconds per micro-batch (all its chunks)."""
    p = len(stage_times_s)
    if p == 1:
        return m * stage_times_s[0]
    slowest = max(stage_times_s)
    if schedule is PipelineSchedule.INTERLEAVED:
        return m * slowest + (p - 1) * (sum(stage_times_s) / p) / v
    return sum(stage_times_s) + (m - 1) * slowest


def in_flight_microbatches(stage: int, p: int, m: int, schedule: PipelineSchedule, v: int = 1) -> float:
    """Micro-batches' worth of (whole-stage) activations stage ``stage`` holds at its peak."""
    if schedule is PipelineSchedule.GPIPE or p == 1:
        return float(m if p > 1 else 1)
    if schedule is PipelineSchedule.INTERLEAVED:
        peak = (p - stage) + (p - 1 - stage) / v if stage else p * (1 + (p - 1) / (p * v))
        return float(min(peak, m))
    return float(min(p - stage, m))


def schedule_order(stage: int, p: int, m: int, schedule: PipelineSchedule) -> list[tuple[str, int]]:
    """The order in which ``stage`` runs forward ('F', mb) and backward ('B', mb) work (non-interleaved).

    1F1B: p − stage − 1 warm-up forwards, then alternate one forward / one backward, then drain.
    GPipe: all forwards, then all backwards. Both engines use this order.
    """
    if schedule is PipelineSchedule.GPIPE or p == 1:
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(p - stage - 1, m)
    order = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order
