"""Lab scripts: investigations of this project's own machines, not part of the validation suite.

Each module here is a one-off study of one (often shared, noisy) machine, run by hand with
``python -m validation.lab.<name>``; ``python -m validation`` imports none of them, and none of them
is needed to use or validate simtrain. Their findings are recorded in ``validation/results/`` and
``docs/own-device.md``; the scripts are kept runnable (and their logic tested) so that a recorded
result can be re-run and checked:

* :mod:`validation.lab.repeatability`: do two calibrations of this machine, run back to back,
  predict the same step times?
* :mod:`validation.lab.attribution`: which fitted quantities carry two calibrations' difference
  (``repeatability --attribute``).
* :mod:`validation.lab.dataloader_stalls`: measured DataLoader stalls against the simulator and the
  closed form.
* :mod:`validation.lab.trace_transfer`: does a profiler trace of one model calibrate per-class
  factors that improve another?
* :mod:`validation.lab.small_models`: small models a new user trains first (0.3–4 ms steps), timed in
  fresh processes and predicted from this machine's profile.
"""
