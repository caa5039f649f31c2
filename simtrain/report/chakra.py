"""Chakra execution traces of a simulated step, one JSON file per pipeline rank, for ASTRA-sim.

Schema: MLCommons Chakra ET (``schema/protobuf/et_def.proto``, version 0.0.4): a ``GlobalMetadata``
record, then ``Node`` records with ``id``, ``name``, ``type`` (NodeType), ``ctrl_deps`` (issue order
on the same stream), ``data_deps`` (a producer whose output this node consumes),
``duration_micros`` and typed attributes (``is_cpu_op``, ``num_ops``, ``comm_type``, ``comm_size``,
``comm_src``, ``comm_dst``, ``comm_tag``). Written in protobuf's canonical JSON mapping (lowerCamelCase
field names, enums by name: ``MessageToJson`` of the same messages), so no protobuf dependency;
Chakra's tools read the binary ``.et`` form, which ``chakra_jsonizer`` round-trips to this one.

From the simulator's timeline: each forward / backward becomes a COMP_NODE (its FLOPs from the
per-rank program), each pipeline send a COMM_SEND_NODE on the sender and a matching COMM_RECV_NODE
(same ``comm_tag``) on the receiver, and the data-parallel gradient sync one COMM_COLL_NODE
(ALL_REDUCE) after the rank's last backward.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from simtrain.errors import SimtrainError

__all__ = ["to_chakra", "chakra_nodes", "NODE_TYPES", "COLLECTIVES", "SCHEMA_VERSION"]

SCHEMA_VERSION = "0.0.4"
#: et_def.proto NodeType values
NODE_TYPES = {"METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
              "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
#: et_def.proto CollectiveCommType values
COLLECTIVES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
               "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "BARRIER": 9}

_COMPUTE = re.compile(r"^(?P<phase>[FB]) mb(?P<mb>\d+)(?: c(?P<chunk>\d+))?")


def _attr(name: str, value) -> dict:
    key = "boolVal" if isinstance(value, bool) else "int64Val" if isinstance(value, int) else "stringVal"
    return {"name": name, key: str(value) if key == "int64Val" else value}  # int64 is a JSON string in proto3


class _RankTrace:
    """Nodes of one rank, with the last compute node (stream order) and producers by key."""

    def __init__(self, rank: int) -> None:
        self.rank, self.nodes, self.last_comp, self.by_key = rank, [], None, {}

    def add(self, name: str, kind: str, dur_s: float, attrs: list, data=(), ctrl=True) -> int:
        node_id = len(self.nodes)
        ctrl_deps = [self.last_comp] if ctrl and self.last_comp is not None else []
        self.nodes.append({"id": str(node_id), "name": name, "type": kind, "ctrlDeps": [str(d) for d in ctrl_deps],
                           "dataDeps": [str(d) for d in data if d is not None],
                           "durationMicros": str(round(dur_s * 1e6)), "attr": attrs})
        return node_id


def _tag(direction: str, mb: int, chunk: int, src: int) -> int:
    """One tag per transfer: sender and receiver compute the same number (ASTRA-sim matches on it)."""
    return ((mb * 64 + chunk) * 2 + (direction == "bw")) * 4096 + src


def chakra_nodes(timeline, program) -> dict[int, list[dict]]:
    """Per rank, the Chakra nodes of one step (see module docstring)."""
    events = sorted(getattr(timeline, "events", timeline), key=lambda e: (e.start_s, e.rank))
    pp, v = len(program.stages), program.layout.v
    ranks = {r: _RankTrace(r) for r in range(pp)}
    comps = [e for e in events if _COMPUTE.match(e.name)]
    if not comps:
        raise SimtrainError("the timeline has no forward / backward events to export")
    for e in comps:
        _compute_node(ranks, e, program, pp, v)
    for r, tr in ranks.items():
        dp = [t for t in program.stages[r].step_comm if t.axis == "dp"]
        if dp and program.layout.dp > 1:
            size = int(sum(t.bytes * t.count for t in dp))
            tr.add("dp all-reduce", "COMM_COLL_NODE", sum(t.total_s for t in dp),
                   [_attr("is_cpu_op", False), _attr("comm_type", COLLECTIVES["ALL_REDUCE"]), _attr("comm_size", size)],
                   data=[tr.last_comp], ctrl=False)
    return {r: tr.nodes for r, tr in ranks.items()}


def _boundary_bytes(program, chunk: int) -> int:
    """Bytes crossing the boundary after ``chunk``: its output activation forward, the gradient of
    that activation backward (the same size), from the pipeline send task of the chunk's stage."""
    stage = program.stages[chunk % len(program.stages)]
    return int(max((t.bytes for t in stage.comm if t.axis == "pp"), default=0))


def _compute_node(ranks, e, program, pp: int, v: int) -> None:
    m = _COMPUTE.match(e.name)
    phase, mb, chunk = m["phase"], int(m["mb"]), int(m["chunk"] or e.rank)
    tr, stage = ranks[e.rank], program.stages[e.rank]
    fw = phase == "F"
    first, last = chunk == 0, chunk == pp * v - 1
    recv = None
    if (fw and not first) or (not fw and not last):
        src = (e.rank - 1) % pp if fw else (e.rank + 1) % pp
        tag = _tag("fw" if fw else "bw", mb, chunk - 1 if fw else chunk + 1, src)
        recv = tr.add(f"recv {'fw' if fw else 'bw'} mb{mb} c{chunk}", "COMM_RECV_NODE", 0.0,
                      [_attr("is_cpu_op", False), _attr("comm_src", src), _attr("comm_dst", e.rank),
                       _attr("comm_size", _boundary_bytes(program, chunk - 1 if fw else chunk)),
                       _attr("comm_tag", tag)], ctrl=False)
    flops = (stage.fw_flops if fw else stage.bw_flops + stage.recompute_flops) / v
    own_fw = None if fw else tr.by_key.get(("F", mb, chunk))
    node = tr.add(e.name, "COMP_NODE", e.end_s - e.start_s,
                  [_attr("is_cpu_op", False), _attr("num_ops", int(flops))], data=[recv, own_fw])
    tr.last_comp, tr.by_key[(phase, mb, chunk)] = node, node
    if (fw and not last) or (not fw and not first):
        dst = (e.rank + 1) % pp if fw else (e.rank - 1) % pp
        tr.add(f"send {'fw' if fw else 'bw'} mb{mb} c{chunk}", "COMM_SEND_NODE", 0.0,
               [_attr("is_cpu_op", False), _attr("comm_src", e.rank), _attr("comm_dst", dst),
                _attr("comm_size", _boundary_bytes(program, chunk if fw else chunk - 1)),
                _attr("comm_tag", _tag("fw" if fw else "bw", mb, chunk, e.rank))],
               data=[node], ctrl=False)


def to_chakra(model, cluster, cfg, out_dir) -> list[Path]:
    """Simulate one step of the job and write ``out_dir/chakra.<rank>.json`` per pipeline rank (the
    ranks of one data-parallel replica; the others run the same program). Returns the paths."""
    from simtrain.estimator import build_program
    from simtrain.inputs import as_cluster, as_config, as_model
    from simtrain.outputs import check_output_path
    from simtrain.sim import simulate
    out = check_output_path(out_dir, "out_dir", folder=True)  # before anything is simulated
    model, cluster, cfg = as_model(model), as_cluster(cluster), as_config(cfg)
    program = build_program(model, cluster, cfg)  # resolves as st.simulate does
    if isinstance(program, list):
        raise SimtrainError("no per-rank program to export: " + "; ".join(program))
    report = simulate(model, cluster, cfg)
    nodes = chakra_nodes(report.timeline, program)
    paths = []
    for rank, rank_nodes in nodes.items():
        doc = {"globalMetadata": {"version": SCHEMA_VERSION, "attr": [
                   _attr("producer", "simtrain"), _attr("model", model.name), _attr("cluster", cluster.name),
                   _attr("rank", rank)]},
               "nodes": rank_nodes}
        path = out / f"chakra.{rank}.json"
        path.write_text(json.dumps(doc, indent=1))
        paths.append(path)
    return paths
