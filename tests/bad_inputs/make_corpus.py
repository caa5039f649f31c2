"""Generate the bad-input corpus from the library's good files: ``python tests/bad_inputs/make_corpus.py``.

Writes ``generated/`` (mutated device / link / node / cluster / efficiency / model / job specs,
Hugging Face config JSONs and calibration files) and ``cases.json``: one entry per case, the generated
ones, the hand-written files in ``hand/`` (each states its expectation in its first lines) and
command lines. Deterministic: the same library and this script give byte-identical output
(tests/unit/test_bad_input_corpus.py checks that two runs agree). The committed files stay valid bad
inputs when the library changes; rerun this script to refresh them from the current seeds.

A case is ``{"id", "argv", "field", "message", "isolate"}``: ``argv`` is a ``simtrain`` command line
in which ``{corpus}`` stands for this folder and ``{repo}`` for the repository; ``field`` is a list of
field paths of which one must be named in the error (empty: the file is named instead); ``message``
is text the error must contain (may be empty); ``isolate`` runs the case in a subprocess (a case
that could hang if a guard regressed). Every case must exit 2, print no traceback, and never echo
:data:`CANARY`, which every generated file carries in a comment or an ignored field.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = HERE / "generated"
HAND = HERE / "hand"
CANARY = "CANARY-7c1e0b55-do-not-echo"

SEEDS = {  # corpus prefix -> good library file
    "device": "hardware_specs/devices/h100-sxm5-80gb.yaml",
    "device-wafer": "hardware_specs/devices/wse-3.yaml",
    "link": "hardware_specs/links/nvlink4.yaml",
    "node": "hardware_specs/nodes/dgx-h100.yaml",
    "cluster": "hardware_specs/clusters/dgx-h100.yaml",
    "efficiency": "hardware_specs/efficiency/gpu.yaml",
    "model": "workloads/models/llama3-8b.yaml",
    "model-cnn": "workloads/models/resnet50.yaml",
    "job": "workloads/jobs/default.yaml",
}
HF_SEEDS = {"hf-llama": "tests/data/hf/llama3-8b.json", "hf-gpt2": "tests/data/hf/gpt2.json",
            "hf-mixtral": "tests/data/hf/mixtral-8x7b.json", "hf-bert": "tests/data/hf/bert-large-uncased.json"}
REFERENCES = {"node": ["device", "fabric.link", "host.pcie_link"], "cluster": ["node", "network.nic_link"],
              "job": ["model", "cluster"]}
FREE_TEXT = {"description", "notes", "note", "vendor", "cpu_model", "source", "generation"}
# A quantity value (``{value, source}``) replaced in turn by each of these: all wrong for every dimension.
BAD_QUANTITIES = [-5, float("nan"), float("inf"), True, "80 gb", "12 KB", "abc", [1, 2], {"x": 1}, None,
                  "-3 TB/s", "1e999"]
BAD_INTS = [-1, "abc", [3], float("nan"), {"n": 1}]  # 2.5 fits float fields: see hand/float-*
BAD_FLOATS = ["abc", -1.5, float("nan"), [0.5]]
BAD_ENUMS = ["no-such-choice", 7]
MAX_LEAF_CASES = 24  # bad-value cases per seed document
HF_VALUES = (("negative", -8), ("zero", 0), ("float", 2.5), ("string", "abc"), ("bool", True), ("list", [1]),
             ("huge", 10**30))


def _walk(doc, path=()):
    """(path, value) of every leaf and every ``{value, source}`` quantity, in document order."""
    if isinstance(doc, dict) and "value" in doc and "source" in doc:
        yield path, doc
        return
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _walk(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _walk(v, path + (i,))
    else:
        yield path, doc


def _dotted(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _set(doc, path, value):
    doc = copy.deepcopy(doc)
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _ancestors(path) -> list[str]:
    """The dotted path and every enclosing one: a cross-field check names the enclosing spec."""
    return [_dotted(path[:n]) for n in range(len(path), 0, -1)]


def _leaf_mutations(doc, kind):
    """(slug, mutated doc, fields) for one bad value per leaf, rotating through the bad values."""
    turn = {"q": 0, "i": 0, "f": 0, "e": 0}

    def pick(kind, values):
        turn[kind] += 1
        return values[(turn[kind] - 1) % len(values)]

    for path, value in _walk(doc):
        if not path or path == ("spec",) or path[-1] in FREE_TEXT or path[-1] == "name" and len(path) > 1:
            continue
        if isinstance(value, dict):  # a quantity with its source
            bad = pick("q", BAD_QUANTITIES)
            yield "value", _set(doc, path + ("value",), bad), _ancestors(path + ("value",))
        elif isinstance(value, bool):
            yield "bool", _set(doc, path, "maybe"), _ancestors(path)
        elif isinstance(value, int):
            yield "int", _set(doc, path, pick("i", BAD_INTS)), _ancestors(path)
        elif isinstance(value, float) or isinstance(value, str) and _is_number(value):  # YAML 1.1 reads 2.0e9 as text
            yield "float", _set(doc, path, pick("f", BAD_FLOATS)), _ancestors(path)
        elif isinstance(value, str) and path in (("name",), ("host_link",)):
            if kind in ("device", "link", "node", "cluster"):  # library names: lowercase, no spaces
                yield "name", _set(doc, path, "Not A Name!"), _ancestors(path)
        elif isinstance(value, str) and _dotted(path) not in REFERENCES.get(kind, []):
            yield "enum", _set(doc, path, pick("e", BAD_ENUMS)), _ancestors(path)


def _required(kind: str) -> list[str]:
    from simtrain.specs.library import _schema
    return [k for k, f in _schema(kind).model_fields.items() if f.is_required()]


def _spec_cases(prefix: str, seed: str) -> list[dict]:
    doc = yaml.safe_load((REPO / seed).read_text(encoding="utf-8"))
    kind = doc["spec"]
    cases = []
    for key in _required(kind):
        if key in doc:
            cases.append((f"missing-{key}", {k: v for k, v in doc.items() if k != key}, [key], "required"))
    cases.append(("unknown-top-key", {**doc, "colour": "red"}, ["colour"], "unknown key"))
    for key, value in doc.items():
        if isinstance(value, dict) and key not in ("peak_flops_per_s", "extra") and "value" not in value:
            cases.append((f"unknown-key-in-{key}", _set(doc, (key, "colour"), "red"), [f"{key}.colour"], ""))
    leaves = list(_leaf_mutations(doc, kind))
    step = max(1, -(-len(leaves) // MAX_LEAF_CASES))  # an even spread over the document, at most MAX_LEAF_CASES
    for i, (slug, mutated, fields) in list(enumerate(leaves))[::step]:
        cases.append((f"{slug}-{i:02d}-{fields[0].replace('[', '.').replace(']', '')}", mutated, fields, ""))
    for ref in REFERENCES.get(kind, []):
        path = tuple(ref.split("."))
        for slug, target, why in (("unknown", "no-such-thing", "no "), ("absolute", "/etc/passwd", "absolute path"),
                                  ("dotdot", "../../../../etc/passwd.yaml", "'..'"),
                                  ("dotdot-inner", "sub/../../x.yaml", "'..'")):
            cases.append((f"ref-{slug}-{ref}", _set(doc, path, target), [ref], why))
    cases.append(("spec-unknown-kind", {**doc, "spec": "gpu"}, ["spec"], "got 'gpu'"))
    cases.append(("spec-missing", {k: v for k, v in doc.items() if k != "spec"}, ["spec"], "not a spec file"))
    cases.append(("spec-wrong-kind", {**doc, "spec": "link" if kind != "link" else "device"}, [], ""))
    out = []
    for slug, body, field, message in cases:
        name = f"{prefix}--{slug}.yaml"
        text = f"# {CANARY}\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)
        out.append((name, text, field, message))
    text = (REPO / seed).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    key_line = next(i for i, line in enumerate(lines) if re.match(r"[a-z_]+:", line) and not line.startswith("spec:"))
    key = lines[key_line].split(":")[0]
    out += [(f"{prefix}--text-duplicate-key.yaml", f"# {CANARY}\n" + text + lines[key_line], [], f"duplicate key '{key}'"),
            (f"{prefix}--text-truncated.yaml", f"# {CANARY}\n" + text[: len(text) // 2] + "\n  - [unclosed\n", [], ""),
            (f"{prefix}--text-tab-indent.yaml", f"# {CANARY}\n" + text.replace("\n", "\n\t", 3), [], "broken YAML"),
            (f"{prefix}--text-as-list.yaml", f"# {CANARY}\n" + "".join("- " + line for line in lines[:5]), [],
             "not a spec file")]
    return [_entry(name, text, ["check", "{corpus}/generated/" + name], field, message) for name, text, field, message in out]


def _entry(name, text, argv, field, message, isolate=False):
    return {"id": name.rsplit(".", 1)[0], "file_name": name, "text": text, "argv": argv, "field": field,
            "message": message, "isolate": isolate}


FULL_HF = ("hf-llama", "hf-gpt2")  # every bad value; the other seeds get three of them
HF_REQUIRED = {"hidden_size": "hidden", "num_hidden_layers": "layers", "num_attention_heads": "heads",
               "vocab_size": "vocab", "n_embd": "hidden", "n_layer": "layers", "n_head": "heads"}


def _hf_cases(prefix: str, seed: str) -> list[dict]:
    doc = json.loads((REPO / seed).read_text(encoding="utf-8"))
    doc["canary_note"] = CANARY  # an ignored field: must never be echoed
    cases = []
    for key, concept in HF_REQUIRED.items():
        if key in doc:
            canonical = next(k for k, c in HF_REQUIRED.items() if c == concept)
            cases.append((f"missing-{key}", {k: v for k, v in doc.items() if k != key}, [key, canonical], "required"))
            for slug, bad in HF_VALUES if prefix in FULL_HF else HF_VALUES[2:5]:
                cases.append((f"{key}-{slug}", {**doc, key: bad}, [key, f"transformer.{concept}"], ""))
    act = "hidden_act" if "hidden_act" in doc else "activation_function"
    cases += [("unknown-model-type", {k: v for k, v in doc.items() if k != "architectures"} | {"model_type": "nope"},
               ["model_type"], "unknown model_type"),
              ("activation-unknown", {**doc, act: "wiggle"}, ["hidden_act"], ""),
              ("attn-implementation-bad", {**doc, "attn_implementation": "warp"}, ["attn_implementation"], ""),
              ("dropout-string", {**doc, "attention_dropout": "lots", "attn_pdrop": "lots",
                                  "attention_probs_dropout_prob": "lots"}, ["transformer.attention_dropout"], "")]
    out = []
    for slug, body, field, message in cases:
        name = f"{prefix}--{slug}.json"
        out.append(_entry(name, json.dumps(body, indent=1) + "\n", ["model", "show", "{corpus}/generated/" + name],
                          field, message))
    text = json.dumps(doc, indent=1)
    for slug, bad, message in (("truncated", text[: len(text) // 2], "broken JSON"),
                               ("duplicate-key", text[:-2] + f',\n "model_type": "{doc.get("model_type")}"\n}}',
                                "duplicate key"),
                               ("nan", text[:-2] + ',\n "initializer_range": NaN\n}', "NaN"),
                               ("top-level-list", "[" + text + "]", "expected a JSON object"),
                               ("deep-nesting", '{"a": ' + "[" * 500 + "]" * 500 + ', "c": "' + CANARY + '"}',
                                "nested")):
        name = f"{prefix}--text-{slug}.json"
        out.append(_entry(name, bad + "\n", ["model", "show", "{corpus}/generated/" + name], [], message))
    return out


def _calibration_cases() -> list[dict]:
    good = {"spec": "calibration", "factors": {"compute": 0.5}, "uncertainty": {}, "loo_error": None, "records": [],
            "stack": None, "device": None, "source": "st.calibrate_runs"}
    cases = [("factor-negative", _set(good, ("factors", "compute"), -0.5), ["factors"], ""),
             ("factor-nan", _set(good, ("factors", "compute"), float("nan")), ["factors"], ""),
             ("factor-string", _set(good, ("factors", "compute"), "fast"), ["factors"], ""),
             ("factor-unknown", _set(good, ("factors", "warp_drive"), 2.0), ["factors"], ""),
             ("factor-huge", _set(good, ("factors", "compute"), 1e9), ["factors"], ""),
             ("factors-list", _set(good, ("factors",), [0.5]), ["factors"], ""),
             ("unknown-key", {**good, "colour": "red"}, ["colour"], ""),
             ("no-header", {k: v for k, v in good.items() if k != "spec"}, ["spec"], "not a calibration file"),
             ("device-header", {**good, "spec": "device"}, ["spec"], "not a calibration file")]
    out = []
    for slug, body, field, message in cases:
        name = f"calibration--{slug}.yaml"
        out.append(_entry(name, f"# {CANARY}\n" + yaml.safe_dump(body, sort_keys=False),
                          ["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--calibration",
                           "{corpus}/generated/" + name], field, message))
    return out


_BASE = ["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "1"]
CLI_LINES = [  # (id, argv, fields, message)
    ("cli-tp-zero", _BASE + ["--tp", "0"], ["--tp"], ""),
    ("cli-tp-negative", _BASE + ["--tp", "-2"], ["--tp"], ""),
    ("cli-tp-float", _BASE + ["--tp", "2.5"], [], "--tp"),
    ("cli-global-batch-zero", _BASE + ["--global-batch-size", "0"], ["--global-batch-size"], ""),
    ("cli-micro-batch-text", _BASE + ["--micro-batch-size", "two"], [], "--micro-batch-size"),
    ("cli-precision-unknown", _BASE + ["--precision", "fp7"], ["--precision"], ""),
    ("cli-optimizer-unknown", _BASE + ["--optimizer", "lion9"], ["--optimizer"], ""),
    ("cli-zero-stage-4", _BASE + ["--zero-stage", "4"], ["--zero-stage"], ""),
    ("cli-schedule-unknown", _BASE + ["--pipeline-schedule", "zigzag"], ["--pipeline-schedule"], ""),
    ("cli-recompute-unknown", _BASE + ["--recompute", "sometimes"], ["--recompute"], ""),
    ("cli-stack-unknown", _BASE + ["--stack", "no-such-stack"], ["--stack"], ""),
    ("cli-seq-len-zero", _BASE + ["--seq-len", "0"], ["--seq-len"], ""),
    ("cli-virtual-stages-zero", _BASE + ["--virtual-stages", "0"], ["--virtual-stages"], ""),
    ("cli-nodes-zero", ["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "0"], ["nodes", "--nodes"], ""),
    ("cli-nodes-text", ["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "many"], [], "--nodes"),
    ("cli-model-unknown", ["estimate", "--model", "gpt-17", "--hardware", "dgx-a100-80gb"], ["model"], "no model named"),
    ("cli-hardware-unknown", ["estimate", "--model", "gpt2", "--hardware", "dgx-z9000"], ["--hardware"],
     "no cluster or device named"),
    ("cli-flag-precision-is-the-culprit", ["estimate", "workloads/jobs/default.yaml", "--precision", "fp7"],
     ["--precision"], "fp8"),
    ("cli-flag-tp-zero-is-the-culprit", ["estimate", "workloads/jobs/default.yaml", "--tp", "0"], ["--tp"], ""),
    ("cli-device-file-with-nodes", ["estimate", "--model", "gpt2", "--hardware",
                                    "hardware_specs/devices/h100-sxm5-80gb.yaml", "--nodes", "2"], ["--hardware"],
     "needs a cluster spec"),
    ("cli-device-name-with-nodes", ["estimate", "--model", "gpt2", "--hardware", "h100-sxm5-80gb", "--nodes", "4"],
     ["--hardware"], "clusters with it: dgx-h100"),
    ("cli-model-bad-name", ["estimate", "--model", "gpt 2!", "--hardware", "dgx-a100-80gb"], ["model"], ""),
    ("cli-model-nul", ["estimate", "--model", "gpt2\x00.yaml", "--hardware", "dgx-a100-80gb"], ["model"], "NUL"),
    ("cli-model-etc-passwd", ["estimate", "--model", "/etc/passwd", "--hardware", "dgx-a100-80gb"], [],
     "not a spec file"),
    ("cli-hardware-dotdot", ["estimate", "--model", "gpt2", "--hardware", "../../../../../../etc/hostname"], [], ""),
    ("cli-model-only", ["estimate", "--model", "gpt2"], ["job"], ""),
    ("cli-job-unknown", ["estimate", "no-such-job"], ["job"], "no job named"),
    ("cli-job-is-a-model", ["estimate", "{repo}/workloads/models/gpt2.yaml"], ["spec"], "expected a job spec"),
    ("cli-calibration-missing", _BASE + ["--calibration", "{corpus}/no-such-file.yaml"], [], "file not found"),
    ("cli-calibration-is-a-dir", _BASE + ["--calibration", "{corpus}"], [], "directory"),
    ("cli-check-no-file", ["check"], [], "FILE"),
    ("cli-check-missing", ["check", "{corpus}/no-such-file.yaml"], [], "file not found"),
    ("cli-check-dev-zero", ["check", "/dev/zero"], [], "character device"),
    ("cli-check-directory", ["check", "{corpus}"], [], "directory"),
    ("cli-model-show-dev-zero", ["model", "show", "/dev/zero"], [], "character device"),
    ("cli-model-show-hf-dir-without-config", ["model", "show", "{corpus}/hand/"], [], "directory"),
    ("cli-model-show-json-dir-without-config", ["model", "show", "{corpus}/hand/fixture-dir.json"], [], "not found"),
    ("cli-model-show-seq-len-zero", ["model", "show", "gpt2", "--seq-len", "0"], ["seq_len"], ""),
    # issue 41: outputs, grids, counts and extremes on the other verbs
    ("hostile-gantt-suffix", ["simulate", *_BASE[1:], "--tp", "1", "--gantt", "{corpus}/step.unknownsuffix"],
     ["--gantt"], "suffix"),
    ("hostile-gantt-directory", ["simulate", *_BASE[1:], "--tp", "1", "--gantt", "{corpus}"], ["--gantt"], "directory"),
    ("hostile-trace-suffix", ["simulate", *_BASE[1:], "--tp", "1", "--trace", "{corpus}/trace.txt"], ["--trace"],
     ".json"),
    ("hostile-sweep-out-directory", ["sweep", *_BASE[1:], "--grid", "tp=1,2", "--out", "{corpus}"], ["--out"],
     "directory"),
    ("hostile-sweep-out-suffix", ["sweep", *_BASE[1:], "--grid", "tp=1,2", "--out", "{corpus}/rows.xlsx"], ["--out"],
     ".parquet or .csv"),
    ("hostile-compare-csv-suffix", ["compare", "gpt2", "dgx-h100", "--csv", "{corpus}/table.txt"], ["--csv"], ""),
    ("hostile-plot-out-directory", ["plot", "roofline", *_BASE[1:], "--out", "{corpus}"], ["--out"], "directory"),
    ("hostile-grid-int-overflow", ["sweep", *_BASE[1:], "--grid", "global-batch-size=99999999999999999999"],
     ["grid.global_batch_size"], "64-bit"),
    ("hostile-grid-repeat", ["sweep", *_BASE[1:], "--grid", "tp=1,2,1"], ["grid.tp"], "more than once"),
    ("hostile-grid-too-big", ["sweep", *_BASE[1:], "--grid", "tp=" + ",".join(map(str, range(1, 3001))),
                              "--grid", "micro-batch-size=" + ",".join(map(str, range(1, 3001)))], ["grid"],
     "9,000,000 points"),
    ("hostile-top-zero", ["sweep", *_BASE[1:], "--grid", "tp=1,2", "--top", "0"], ["--top"], "must be ≥ 1"),
    ("hostile-top-negative", ["sweep", *_BASE[1:], "--grid", "tp=1,2", "--top", "-1"], ["--top"], "must be ≥ 1"),
    ("hostile-nodes-huge", ["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "10000000"],
     ["nodes"], "10,000,000 nodes"),
    ("hostile-global-batch-huge", _BASE + ["--global-batch-size", "99999999999999999999"], ["--global-batch-size"], ""),
    ("hostile-from-unknown-framework", _BASE + ["--from", "megatorn", "--tp 2"], ["--from"], "did you mean"),
    ("hostile-from-megatron-bad-value", _BASE + ["--from", "megatron", "--tensor-model-parallel-size two"],
     ["--tensor-model-parallel-size"], ""),
    ("hostile-runs-missing", ["calibrate", "--out", "{corpus}/never.yaml", "--runs", "{corpus}/no-such-runs.csv"],
     [], "not found"),
]


def _hand_cases() -> list[dict]:
    out = []
    for path in sorted(HAND.iterdir()):
        if path.name.startswith("fixture-"):  # files the cases refer to, not cases themselves
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        field = re.search(r"^# expect-field:(.*)$", text, re.M)
        message = re.search(r"^# expect-in-message:(.*)$", text, re.M)
        argv = re.search(r"^# argv:(.*)$", text, re.M)
        isolate = re.search(r"^# isolate: *yes", text, re.M) is not None
        assert field and message, f"{path.name} lacks its expect-field / expect-in-message header"
        fields = [f.strip() for f in field.group(1).split("|") if f.strip()]
        cmd = argv.group(1).split() if argv else ["check"]
        out.append({"id": "hand--" + path.stem, "argv": [*cmd, "{corpus}/hand/" + path.name], "field": fields,
                    "message": message.group(1).strip(), "isolate": isolate})
    return out


def build() -> tuple[dict[str, str], list[dict]]:
    """({generated file name: text}, cases) — nothing written."""
    files, cases = {}, []
    generated = [c for prefix, seed in SEEDS.items() for c in _spec_cases(prefix, seed)]
    generated += [c for prefix, seed in HF_SEEDS.items() for c in _hf_cases(prefix, seed)]
    generated += _calibration_cases()
    for c in generated:
        files[c.pop("file_name")] = c.pop("text")
        cases.append(c)
    cases += [{"id": i, "argv": argv, "field": field, "message": msg, "isolate": False}
              for i, argv, field, msg in CLI_LINES]
    cases += _hand_cases()
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return files, cases


def main() -> int:
    files, cases = build()
    OUT.mkdir(exist_ok=True)
    for old in OUT.iterdir():
        if old.name not in files:
            old.unlink()
    for name, text in files.items():
        (OUT / name).write_text(text, encoding="utf-8")
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")
    print(f"{len(files)} generated files, {len(cases)} cases -> {HERE}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
