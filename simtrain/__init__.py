"""simtrain — how long will a training step take on this hardware, where does the time go, does it
fit, how many devices, which layout? An analytical cost model and a discrete-event simulator over
one set of declarative hardware specs, model graphs and cost rules.

    import simtrain as st
    cluster = st.load_cluster("dgx-a100-80gb", nodes=128)
    model = st.load_model("gpt3-175b")
    report = st.estimate(model, cluster, st.TrainConfig(global_batch_size=1536, tp=8, pp=8))

The front door is lazy: names resolve on first use so ``import simtrain`` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    # hardware
    "load_device": "simtrain.specs.library", "load_link": "simtrain.specs.library",
    "load_node": "simtrain.specs.library", "load_cluster": "simtrain.specs.library",
    "Device": "simtrain.specs.hardware", "Link": "simtrain.specs.hardware", "Node": "simtrain.specs.hardware",
    "Cluster": "simtrain.specs.hardware",
    # workloads and config
    "load_model": "simtrain.graph.library", "Model": "simtrain.graph.model", "Op": "simtrain.graph.op",
    "TrainConfig": "simtrain.specs.train", "DataPipeline": "simtrain.specs.train",
    "EvalConfig": "simtrain.specs.train", "load_job": "simtrain.specs.jobs",
    # verbs and results
    "estimate": "simtrain.estimator", "StepReport": "simtrain.report.step_report",
    "simulate": "simtrain.sim", "sweep": "simtrain.search", "plan": "simtrain.search",
    "pareto_front": "simtrain.search.plan",
    "estimate_heterogeneous": "simtrain.parallel.hetero",
    "measure": "simtrain.calibrate.measure", "calibrate": "simtrain.calibrate.fit",
    "RunRecord": "simtrain.calibrate.run_record", "calibrate_runs": "simtrain.calibrate.runs",
    "Calibration": "simtrain.calibrate.run_record", "load_calibration": "simtrain.calibrate.run_record",
    "calibrate_classes": "simtrain.calibrate.trace_fit", "load_run_records": "simtrain.calibrate.run_files",
    "compare_ops": "simtrain.calibrate.trace_fit",
    "time_steps": "simtrain.calibrate.step_timer", "StepTimes": "simtrain.calibrate.step_timer",
    "compare": "simtrain.report.compare",
    "simulate_run": "simtrain.sim.goodput",
    # framework configs in (Megatron-LM / NeMo arguments, torchtitan TOML, DeepSpeed JSON)
    "from_megatron": "simtrain.frameworks", "from_torchtitan": "simtrain.frameworks",
    "from_deepspeed": "simtrain.frameworks",
    # software stacks
    "Stack": "simtrain.specs.stack", "load_stack": "simtrain.specs.stack", "stack_names": "simtrain.specs.stack",
    # errors and words
    "SpecError": "simtrain.errors", "SimtrainError": "simtrain.errors", "MissingRuleError": "simtrain.errors",
    "Cost": "simtrain.cost.cost",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simtrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
