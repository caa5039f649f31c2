"""Chakra ET export: node types, attributes and the dependency structure of a tiny 2-stage pipeline."""

from __future__ import annotations

import json

import pytest

import simtrain as st
from simtrain.report.chakra import COLLECTIVES, NODE_TYPES, to_chakra

CFG = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=128, pp=2)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("chakra")
    paths = to_chakra("gpt2", st.load_cluster("dgx-h100", nodes=1), CFG, out)
    assert [p.name for p in paths] == ["chakra.0.json", "chakra.1.json"]
    return [json.loads(p.read_text()) for p in paths]


def _attrs(node) -> dict:
    return {a["name"]: next(v for k, v in a.items() if k != "name") for a in node["attr"]}


def test_metadata_and_node_fields(traces):
    for rank, doc in enumerate(traces):
        meta = _attrs(doc["globalMetadata"])
        assert doc["globalMetadata"]["version"] == "0.0.4" and meta["rank"] == str(rank)
        ids = [n["id"] for n in doc["nodes"]]
        assert ids == [str(i) for i in range(len(ids))]  # dense ids, each dep points at an earlier node
        for n in doc["nodes"]:
            assert n["type"] in NODE_TYPES and set(n) == {"id", "name", "type", "ctrlDeps", "dataDeps",
                                                          "durationMicros", "attr"}
            assert all(int(d) < int(n["id"]) for d in n["ctrlDeps"] + n["dataDeps"])


def test_two_stage_structure(traces):
    # 8 samples / dp 4 / micro-batch 1 = 2 micro-batches; each rank: 2 F + 2 B compute nodes
    r0, r1 = ({n["name"]: n for n in doc["nodes"]} for doc in traces)
    for r in (r0, r1):
        assert sum(n["type"] == "COMP_NODE" for n in r.values()) == 4
    # stage 0 sends each forward output and receives each gradient; stage 1 the reverse
    assert {k for k, n in r0.items() if n["type"] == "COMM_SEND_NODE"} == {"send fw mb0 c0", "send fw mb1 c0"}
    assert {k for k, n in r1.items() if n["type"] == "COMM_RECV_NODE"} == {"recv fw mb0 c1", "recv fw mb1 c1"}
    send, recv = _attrs(r0["send fw mb1 c0"]), _attrs(r1["recv fw mb1 c1"])
    assert (send["comm_src"], send["comm_dst"]) == ("0", "1") and send["comm_tag"] == recv["comm_tag"]
    # the boundary activation: seq 128 × hidden 768 × 2 bytes (bf16) per sample
    assert send["comm_size"] == recv["comm_size"] == str(128 * 768 * 2)
    # the send waits on the forward that made its data; rank 1's forward on the receive
    assert r0["send fw mb1 c0"]["dataDeps"] == [r0["F mb1 c0"]["id"]]
    assert r1["recv fw mb1 c1"]["id"] in r1["F mb1 c1"]["dataDeps"]
    # a backward needs its own forward's activations (and, on stage 0, the received gradient)
    assert r0["F mb0 c0"]["id"] in r0["B mb0 c0"]["dataDeps"]
    assert r0["recv bw mb0 c0"]["id"] in r0["B mb0 c0"]["dataDeps"]


def test_flops_and_the_gradient_all_reduce(traces):
    r0 = {n["name"]: n for n in traces[0]["nodes"]}
    fw, bw = int(_attrs(r0["F mb0 c0"])["num_ops"]), int(_attrs(r0["B mb0 c0"])["num_ops"])
    assert fw > 0 and bw == pytest.approx(2 * fw, rel=0.05)  # backward ≈ 2 × forward (Megatron-LM count)
    coll = r0["dp all-reduce"]
    a = _attrs(coll)
    assert coll["type"] == "COMM_COLL_NODE" and a["comm_type"] == str(COLLECTIVES["ALL_REDUCE"])
    last_b = max((n for n in r0.values() if n["name"].startswith("B ")), key=lambda n: int(n["id"]))
    assert coll["dataDeps"] == [last_b["id"]] and int(a["comm_size"]) > 0
