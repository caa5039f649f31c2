"""The validation suite: reference PyTorch models (:mod:`validation.zoo`), published reference
cases (:mod:`validation.published`), and runs that compare simtrain's predictions with them
(``python -m validation``). One-off investigations of this project's own machines, run by hand and
not part of the suite, are apart in :mod:`validation.lab`."""
