"""Result records are JSON-safe as they are (issue 40 item 2): a StepReport's mappings are read-only
dicts that json.dumps, pickle and pandas take without conversion."""

import dataclasses
import json
import pickle

import pytest

import simtrain as st
from simtrain.frozen import FrozenDict


def test_a_step_reports_every_field_dumps_as_json_and_its_mappings_stay_read_only():
    r = st.estimate("gpt2", st.load_cluster("dgx-h100", nodes=1), {"global_batch_size": 64, "seq_len": 1024})
    assert r.feasible
    for f in dataclasses.fields(r):
        value = getattr(r, f.name)
        if f.name in ("memory", "comm", "top_ops", "timeline", "data_loader"):
            continue  # records with their own to_dict
        json.dumps(value)
    for mapping in (r.time_breakdown_s, r.layout, r.compute_by_class_s):
        assert isinstance(mapping, dict)
        with pytest.raises(TypeError, match="read-only"):
            mapping["x"] = 1.0
        with pytest.raises(TypeError):
            mapping.update(x=1.0)
    assert pickle.loads(pickle.dumps(r.time_breakdown_s)) == r.time_breakdown_s
    assert json.loads(json.dumps(r.to_dict()))["step_time_s"] == pytest.approx(r.step_time_s)


def test_frozen_dict_copies_and_reprs():
    import copy
    d = FrozenDict({"a": 1.0})
    assert copy.deepcopy(d) == d and type(copy.copy(d)) is FrozenDict and "FrozenDict" in repr(d)
