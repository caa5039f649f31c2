"""Closed forms of checkpointing under exponential failures (the baseline the goodput simulation is
checked against): Young's and Daly's optimal intervals, Daly's expected wall time, checkpoint size.

Notation (Daly 2006): δ checkpoint save seconds, M job MTBF, R restart seconds (including the
reload), τ compute seconds between checkpoints, T_s compute seconds of the whole run.

* Young 1974 ("A first order approximation to the optimum checkpoint interval", CACM 17(9)):
  ``τ = sqrt(2·δ·M)``.
* Daly 2006 ("A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS
  22(3), §4): ``τ = sqrt(2δM)·[1 + ⅓·sqrt(δ/2M) + ⅑·(δ/2M)] − δ`` for δ < 2M, else ``τ = M``.
* Daly 2006 §3, expected wall time when a failure loses the work since the last completed save and
  a failure during the restart starts it over: ``T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ``.
"""

from __future__ import annotations

import math

__all__ = ["young_interval_s", "daly_interval_s", "daly_wall_s", "checkpoint_bytes_of"]


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young 1974: τ = sqrt(2·δ·M), compute seconds between checkpoints."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly 2006 §4: sqrt(2δM)·[1 + ⅓·sqrt(δ/2M) + ⅑·δ/2M] − δ for δ < 2M, else M."""
    if math.isinf(mtbf_s):
        return math.inf
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s


def daly_wall_s(solve_s: float, interval_s: float, checkpoint_s: float, recovery_s: float, mtbf_s: float) -> float:
    """Daly 2006 §3: T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ; without failures (M → ∞) T_s·(1 + δ/τ)."""
    segments = solve_s / interval_s
    if math.isinf(mtbf_s):
        return segments * (interval_s + checkpoint_s)
    return mtbf_s * math.exp(recovery_s / mtbf_s) * math.expm1((interval_s + checkpoint_s) / mtbf_s) * segments


def checkpoint_bytes_of(model, config) -> float:
    """Bytes of one full checkpoint of ``model`` trained with ``config``: per parameter the weights,
    the fp32 master copy (16-bit regimes) and the optimizer states; gradients are not saved (ZeRO,
    Rajbhandari et al. 2020 §3.1: 2 + 12 = 14 bytes per parameter for mixed-precision Adam)."""
    from simtrain.cost.optimizer import traits
    from simtrain.cost.precision import regime
    reg, opt = regime(config.precision), traits(config.optimizer)
    return float(model.param_count) * (reg.weight_bytes + reg.master_bytes + opt.states_per_param * reg.state_bytes)
