"""Fuzzing spec documents: whatever a user writes, the only error that escapes is SpecError.

Valid library documents (a device, a link, a node, a cluster, an efficiency profile, a job) are
mutated (keys dropped, values replaced by other types or random unit strings, unknown keys inserted,
nested several levels deep) and validated; the same goes for random YAML text and unit strings.
"""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from simtrain.cli.check import check_file
from simtrain.errors import SpecError
from simtrain.specs.library import HARDWARE_DIR, read_spec_document, validate_document
from simtrain.units import Dimension, UnitError, parse_quantity

REPO = HARDWARE_DIR.parent
SEEDS = {
    "device": HARDWARE_DIR / "devices" / "h100-sxm5-80gb.yaml",
    "device-wafer": HARDWARE_DIR / "devices" / "wse-3.yaml",
    "link": HARDWARE_DIR / "links" / "nvlink4.yaml",
    "node": HARDWARE_DIR / "nodes" / "tpu-v4-host.yaml",
    "cluster": HARDWARE_DIR / "clusters" / "tpu-v4-pod.yaml",
    "efficiency": HARDWARE_DIR / "efficiency" / "gpu.yaml",
}
DOCS = {k: yaml.safe_load(p.read_text()) for k, p in SEEDS.items()}
DOCS["job"] = {"spec": "job", "name": "fuzz", "model": "gpt2", "cluster": "dgx-a100-80gb", "nodes": 2,
               "config": {"global_batch_size": 64, "micro_batch_size": 2, "tp": 4, "pp": 2, "seq_len": 1024}}

UNITS = ["", "B", "GiB", "GB", "gb", "Gb", "KB", "kB", "TB/s", "Gb/s", "Gbps", "GB/h", "TFLOP/s", "TFLOPS",
         "TFLOPs", "TOPS", "us", "µs", "ms", "ns", "s", "min", "h", "W", "kW", "GHz", "$/h", "PiB", "EiB", "/s",
         "GiB / s", "x", "%"]
numbers = hs.one_of(hs.integers(min_value=-10**30, max_value=10**30), hs.floats(allow_nan=True, allow_infinity=True))
unit_strings = hs.builds(lambda n, u: f"{n} {u}", numbers, hs.sampled_from(UNITS))
scalars = hs.one_of(hs.none(), hs.booleans(), numbers, hs.text(max_size=12), unit_strings,
                    hs.sampled_from(["nvlink4", "a100-sxm4-80gb", "dgx-h100", "torus", "gpu", "V", "bf16",
                                     "../x.yaml", "/dev/null", "a" * 300, "x\x00y"]))
values = hs.recursive(scalars, lambda inner: hs.one_of(hs.lists(inner, max_size=3),
                                                       hs.dictionaries(hs.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _paths(doc, prefix=()):
    """Every (path, container) position in a nested document."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


@hs.composite
def mutated_docs(draw):
    kind = draw(hs.sampled_from(sorted(DOCS)))
    doc = copy.deepcopy(DOCS[kind])
    for _ in range(draw(hs.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(doc) if p]  # never the root itself
        path = draw(hs.sampled_from(paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        action = draw(hs.sampled_from(["drop", "replace", "insert", "unit"]))
        if action == "drop":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(values)
        elif action == "unit":
            parent[key] = draw(unit_strings)
        elif isinstance(parent, dict):
            parent[draw(hs.text(min_size=1, max_size=10))] = draw(values)
        else:
            parent.insert(key, draw(values))
    return doc


_TMP = Path(tempfile.mkdtemp(prefix="simtrain-fuzz-"))
atexit.register(shutil.rmtree, _TMP, True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_docs())
def test_mutated_documents_raise_only_spec_error(doc):
    path = _TMP / "doc.yaml"
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return  # not representable as YAML: no user could write it
    path.write_text(text, encoding="utf-8")
    try:
        check_file(path)
    except SpecError as err:
        assert err.issues and all(i.file for i in err.issues)
        assert "Traceback" not in str(err)


@settings(max_examples=150, deadline=None)
@given(mutated_docs())
def test_validate_document_in_memory(doc):
    """The same documents straight into the schemas (no YAML round trip: Python values YAML can't hold)."""
    kind = doc.get("spec") if isinstance(doc.get("spec"), str) else "device"
    if kind not in ("device", "link", "node", "cluster", "efficiency", "job"):
        kind = "device"
    body = {k: v for k, v in doc.items() if k != "spec"}
    try:
        validate_document(kind, body, "fuzz.yaml")
    except SpecError as err:
        assert err.issues and all(i.file for i in err.issues)  # a referenced file keeps its own name


@settings(max_examples=150, deadline=None)
@given(hs.text(max_size=200))
def test_random_yaml_text_raises_only_spec_error(text):
    path = _TMP / "text.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        kind, body = read_spec_document(path)
        validate_document(kind, body, str(path))
    except SpecError as err:
        assert err.issues


@settings(max_examples=300, deadline=None)
@given(hs.one_of(hs.text(max_size=20), unit_strings, numbers, hs.booleans(), hs.none()),
       hs.sampled_from(list(Dimension)))
def test_parse_quantity_raises_only_unit_error(value, dim):
    try:
        out = parse_quantity(value, dim)
    except UnitError:
        return
    assert isinstance(out, float) and out == out and abs(out) != float("inf")
