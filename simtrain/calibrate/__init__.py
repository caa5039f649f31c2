"""Calibration: measure real PyTorch microbenchmarks (measure.py), fit a device's efficiencies (fit.py).

The modules, by public verb:

* ``measure.py`` — ``st.measure``: the benches of this machine → :class:`Measurements`; the neighbour
  ranks of ``colocated=N``. The benches: ``timing.py`` (timing one callable), ``work_counts.py`` (the ops' work
  counts), ``bench_grids.py`` (the shapes each bench runs), ``bench_ops.py`` (the matrix-class benches
  and what every bench shares), ``bench_vector.py`` (vector-class and memory benches),
  ``bench_memory.py`` (CPU pairs: ``bench_fresh_pages.py`` fresh pages and the last-level cache,
  ``bench_conv_layout.py`` conv layout reorders, ``bench_rng.py`` dropout's draws, ``bench_cold_calls.py``
  an op inside a step), ``collectives_bench.py`` (collectives) and ``bench_rank_jitter.py`` (the
  ranks' jitter), each rank a child process (``child_env.py``). ``records.py``: the rows and their storage; ``machine.py``: the machine's facts and
  the Device a calibration starts from.
* ``fit.py`` — ``st.calibrate``: the calibrated Device; ``fit_residuals.py``: its residuals;
  ``fit_links.py``: its link fits; ``profiles.py``: its profile on disk; ``fit_compute.py``: the compute
  fit (``fit_param_names.py``, ``fit_theta.py``, ``fit_start.py``: its parameters, θ, its start
  points); ``predict.py``: the cost layer's time for one row.
* ``runs.py`` — ``st.calibrate_runs``: stack factors fitted to measured runs (``run_record.py``:
  ``st.RunRecord``, ``st.Calibration``; ``factors.py``: what each factor scales; ``memory_term.py``: the
  memory term; ``run_files.py``: ``st.load_run_records`` from CSV / JSONL).
* ``trace.py`` — a profiler trace's seconds per op class; ``trace_fit.py`` — ``st.calibrate_classes``
  and ``st.compare_ops``.
* ``step_timer.py`` — ``st.time_steps``: timing your own training loop.
* The optional layer for noisy machines: ``robust.py`` (confidence intervals, contention),
  ``sentinels.py`` (the sentinels between groups) and ``modes.py`` (the machine's modes between passes,
  the paired benches' ranges).

``st.calibrate(measurements)`` is the public verb. Importing this package binds the name
``simtrain.calibrate`` to the package itself, so the package is made callable and forwards to
:func:`simtrain.calibrate.fit.calibrate` — both spellings then work.
"""

from __future__ import annotations

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, measurements, base=None):
        from simtrain.calibrate.fit import calibrate
        return calibrate(measurements, base)


sys.modules[__name__].__class__ = _CallablePackage
