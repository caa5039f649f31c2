"""simtrain.specs.reading: the safe reader under every spec, config and calibration file."""

from __future__ import annotations

import time

import pytest

from simtrain.errors import SpecError, clip_quoted
from simtrain.specs import reading
from simtrain.specs.library import read_spec_document, resolve_reference, validate_document

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))


def test_alias_bomb_fails_fast():
    start = time.perf_counter()
    with pytest.raises(SpecError, match="aliases are expanded"):
        reading.parse_yaml(BOMB, "bomb.yaml")
    assert time.perf_counter() - start < 1.0


def test_aliases_within_the_bound_still_work():
    doc, lines = reading.parse_yaml("base: &b {value: 1 us, source: t}\nx: *b\ny: {<<: *b, value: 2 us}\n", "f")
    assert doc["x"] == {"value": "1 us", "source": "t"} and doc["y"]["value"] == "2 us"
    assert lines["y.value"] == 3 and lines["x"] == 2


def test_duplicate_key_names_key_and_both_lines():
    with pytest.raises(SpecError) as info:
        reading.parse_yaml("spec: link\nname: a\nkind: nvlink\nname: b\n", "f.yaml")
    assert str(info.value) == "f.yaml: <document>: duplicate key 'name' on line 4 (first given on line 2)"


def test_size_cap_is_a_module_constant(tmp_path, monkeypatch):
    path = tmp_path / "x.yaml"
    path.write_text("spec: link\n" + "# pad\n" * 100)
    monkeypatch.setattr(reading, "MAX_SPEC_BYTES", 64)
    with pytest.raises(SpecError, match="larger than 64 bytes"):
        reading.read_text(path)
    assert reading.read_text(path, limit=10_000).startswith("spec: link")


def test_json_reader_refuses_duplicates_nan_and_depth(tmp_path):
    path = tmp_path / "c.json"
    for text, reason in (('{"a": 1, "a": 2}', "duplicate key 'a'"), ('{"a": NaN}', "NaN is not allowed"),
                         ('{"a": ' + "[" * 100 + "]" * 100 + "}", "nested more than 64"),
                         ('{"a": "x\\"}', "broken JSON (line 1")):
        path.write_text(text)
        with pytest.raises(SpecError, match=reason.replace("(", r"\(")):
            reading.read_json_file(path)
    path.write_text('{"a": [1, {"b": "]"}]}')
    assert reading.read_json_file(path) == {"a": [1, {"b": "]"}]}


def test_clip_and_clip_quoted():
    assert reading.clip("gpu") == "'gpu'"
    assert len(reading.clip("x" * 1000)) <= reading.CLIP_CHARS + 2
    assert len(reading.clip(list(range(10_000)))) <= reading.CLIP_CHARS + 8
    assert clip_quoted("got 'gpu'; 'spec' must be one of a, b, c, d, e, f, g, h, i, j, k, l, m") == \
        "got 'gpu'; 'spec' must be one of a, b, c, d, e, f, g, h, i, j, k, l, m"
    assert "y" * 41 not in clip_quoted("unit '" + "y" * 100 + "' is unknown")


def test_references_from_python_dicts_are_the_callers_own_paths(tmp_path):
    """Without a referring file (a mapping validated from Python) a path is used as given."""
    assert resolve_reference("device", "/abs/x.yaml", None) == "/abs/x.yaml"
    assert resolve_reference("device", "h100-sxm5-80gb", tmp_path / "node.yaml") == "h100-sxm5-80gb"
    with pytest.raises(SpecError, match="absolute path"):
        resolve_reference("device", "/abs/x.yaml", tmp_path / "node.yaml")
    assert resolve_reference("device", "d/x.yaml", tmp_path / "node.yaml") == str((tmp_path / "d" / "x.yaml").resolve())


def test_field_errors_carry_their_line(tmp_path):
    path = tmp_path / "link.yaml"
    path.write_text("spec: link\nname: l\nkind: nvlink\n\nbandwidth_per_direction_bytes_per_s: {value: -1 GB/s, "
                    "source: test}\nlatency_s: {value: 1 us, source: test}\n")
    kind, body = read_spec_document(path)
    with pytest.raises(SpecError) as info:
        validate_document(kind, body, str(path))
    (issue,) = info.value.issues
    assert (issue.field, issue.line) == ("bandwidth_per_direction_bytes_per_s.value", 5)
    assert str(issue).endswith("(line 5)")
