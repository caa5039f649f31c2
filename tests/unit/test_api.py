"""The public API contract (DESIGN.md): every exported name resolves, and the verbs are callables."""

import simtrain as st


def test_every_exported_name_resolves():
    for name in st.__all__:
        assert getattr(st, name) is not None, name


def test_verbs_are_callable_even_after_their_modules_are_imported():
    import simtrain.calibrate.fit  # noqa: F401  (binds simtrain.calibrate to the package)
    import simtrain.estimator  # noqa: F401
    for verb in ("estimate", "sweep", "plan", "measure", "calibrate", "load_device", "load_cluster", "load_model"):
        assert callable(getattr(st, verb)), verb


def test_contract_names_present():
    for name in ("load_device", "load_cluster", "Cluster", "load_model", "Model", "TrainConfig", "estimate",
                 "sweep", "plan", "measure", "calibrate", "StepReport"):
        assert name in st.__all__
