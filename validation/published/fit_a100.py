"""Fit the A100-80GB efficiency profile to the published calibration set (one profile for every row).

    python -m validation.published.fit_a100

Parameters: the matmul and attention ceilings (fraction of the 312 TFLOP/s peak), the achievable HBM
fraction and the achievable link fraction; least squares on log(predicted / published) over
Narayanan et al. 2021 Table 1 (10 rows) and Korthikanti et al. 2022 Table 5 (8 values). Prints the
fitted block for hardware_specs/devices/a100-sxm4-80gb.yaml and the per-row errors it gives.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

import simtrain as st
from simtrain.cost.compute import device_efficiency
from validation.published.run import run_all, summary

__all__ = ["fit", "device_with"]

MAMF = 267.9 / 312.0
"""Max achievable matmul FLOP/s of an A100 SXM over its peak (hardware.md §1c, [MAMF]): no kernel
class may be fitted above it."""

PARAMS = ("matmul_peak_fraction", "attention_peak_fraction", "memory_bandwidth_fraction", "link_bandwidth_fraction")


def device_with(base, x) -> st.Device:
    """``base`` with the four fitted efficiency parameters replaced."""
    eff = device_efficiency(base)
    compute = dict(eff.compute)
    compute["matmul"] = compute["matmul"].model_copy(update={"peak_fraction": float(x[0])})
    compute["attention"] = compute["attention"].model_copy(update={"peak_fraction": float(x[1])})
    new = eff.model_copy(update={"compute": compute, "memory_bandwidth_fraction": float(x[2]),
                                 "link_bandwidth_fraction": float(x[3]),
                                 "source": "fit: validation/published/fit_a100.py"})
    return base.model_copy(update={"efficiency": new})


def _residuals(x, base) -> np.ndarray:
    results = run_all(device_with(base, x))
    return np.array([math.log(r.predicted / r.published) for rs in results.values() for r in rs])


def fit(base_name: str = "a100-sxm4-80gb"):
    base = st.load_device(base_name)
    eff = device_efficiency(base)
    x0 = [eff.compute["matmul"].peak_fraction, eff.compute["attention"].peak_fraction,
          eff.memory_bandwidth_fraction, eff.link_bandwidth_fraction]
    lo, hi = [0.3, 0.2, 0.3, 0.3], [MAMF, MAMF, 1.0, 1.0]
    x0 = np.clip(x0, np.array(lo) + 1e-6, np.array(hi) - 1e-6)
    sol = least_squares(_residuals, x0, args=(base,), bounds=(lo, hi),
                        diff_step=0.02, max_nfev=60)
    return sol, device_with(base, sol.x)


def main() -> None:
    sol, dev = fit()
    print("fitted:", dict(zip(PARAMS, np.round(sol.x, 4))), "cost", round(float(sol.cost), 5))
    for name, results in run_all(dev).items():
        mape, worst = summary(results)
        print(f"{name}: MAPE {100 * mape:.2f}% worst {100 * worst:.2f}%")
        for r in results:
            print(f"  {r.case:<44} {r.published:>9.2f} {r.predicted:>9.2f} {100 * r.error:+6.1f}%")


if __name__ == "__main__":
    main()
