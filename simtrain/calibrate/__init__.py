"""Calibration: measure real PyTorch microbenchmarks (measure.py), fit a device's efficiencies (fit.py).

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
