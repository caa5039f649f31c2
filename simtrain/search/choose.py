"""The layout a command picks when the user gives none: the fastest runnable one that fits.

``simtrain estimate --model llama3-8b --hardware dgx-h100`` names a model and a cluster and nothing
else; taking the whole 128-node cluster with one sample per replica answers nothing ("dp=1024 does
not divide global_batch_size=8"). :func:`choose_layout` instead searches what ``st.plan`` searches
(search/plan_space.py: tp over the node's divisors the heads allow, pp up to the blocks, cp for long
sequences, ep for experts, dp, micro-batch, virtual stages, SP; ZeRO 0–3 and recompute none /
selective / full unless the user set them) with the vectorized estimate, and keeps:

* with ``size_nodes`` (a cluster named without a node count): the smallest node count — powers of
  two up to the cluster's own — on which some layout fits in memory (the job sized for the model, not
  the cluster taken whole);
* on that cluster, the layout with the shortest step (the global batch is fixed, so also the highest
  throughput); ties go to the simpler one (less parallelism, less recomputation).

What the user set (a config field, a node count) is kept; the rest is what the search found.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simtrain.search.plan_space import SETTINGS, layout_rows

__all__ = ["Chosen", "choose_layout", "LAYOUT_FIELDS"]

#: the TrainConfig fields the search chooses (the user setting any of them fixes the layout)
LAYOUT_FIELDS = ("dp", "tp", "pp", "cp", "ep", "micro_batch_size", "virtual_stages", "pipeline_schedule",
                 "sequence_parallel")
_COLUMNS = ("nodes", "tp", "pp", "cp", "ep", "dp", "micro_batch_size", "virtual_stages", "sequence_parallel")


@dataclasses.dataclass(frozen=True)
class Chosen:
    """The chosen layout: its cluster and config, and how it was found."""

    cluster: object
    cfg: object
    fields: dict
    """The layout's TrainConfig fields (and ``nodes``) the search set."""
    searched: int
    """Candidate layouts costed."""
    fitting: int
    """Of those, how many fit in memory on the chosen node count."""

    def describe(self) -> str:
        f = self.fields
        parts = [f"{f['nodes']} node{'s' if f['nodes'] != 1 else ''} × {self.cluster.node.devices_count} "
                 f"{self.cluster.device.name}" if "nodes" in f else f"{self.cluster.devices_count} devices",
                 f"tp={f['tp']} pp={f['pp']} dp={f['dp']}"]
        parts += [f"{k}={f[k]}" for k in ("cp", "ep") if f.get(k, 1) > 1]
        parts.append(f"micro-batch {f['micro_batch_size']}")
        if f.get("virtual_stages", 1) > 1:
            parts.append(f"{f['virtual_stages']} virtual stages (interleaved 1F1B)")
        if f.get("sequence_parallel"):
            parts.append("sequence parallel")
        parts += [f"ZeRO-{self.cfg.zero_stage}", f"recompute {self.cfg.recompute}",
                  f"global batch {self.cfg.global_batch_size}"]
        return (f"layout chosen by simtrain: {', '.join(parts)} — the fastest of {self.fitting:,} layouts that fit "
                f"({self.searched:,} searched); pass --tp/--pp/--dp/--micro-batch-size (or --nodes) to fix one")


def _node_ladder(cluster, size_nodes: bool) -> list[int]:
    most = cluster.nodes_count if cluster.network is not None else 1
    if not size_nodes:
        return [most]
    ladder, n = [], 1
    while n < most:
        ladder.append(n)
        n *= 2
    return [*ladder, most]


def choose_layout(model, cluster, cfg, *, size_nodes: bool = False, max_pp: int = 16) -> Chosen | None:
    """The chosen layout (module docstring), or None when no searched layout fits in memory."""
    from simtrain.search.vector import estimate_codes
    prepared = model.with_seq_len(cfg.seq_len)
    nodes = _node_ladder(cluster, size_nodes)
    rows = layout_rows(prepared.layout_facts(), cluster.node.devices_count, nodes, cfg.global_batch_size,
                       cfg.seq_len or prepared.layout_facts().get("seq_len"), max_pp)
    if not len(rows):
        return None
    given = cfg.model_fields_set
    settings = [(z, r) for z in ([cfg.zero_stage] if "zero_stage" in given else SETTINGS["zero_stage"])
                for r in ([str(cfg.recompute)] if "recompute" in given else SETTINGS["recompute"])]
    codes, uniques = {}, {}
    for j, name in enumerate(_COLUMNS):
        values, inv = np.unique(rows[:, j], return_inverse=True)
        uniques[name] = [bool(x) if name == "sequence_parallel" else int(x) for x in values]
        codes[name] = np.repeat(inv.reshape(-1).astype(np.int32), len(settings))
    for j, name in enumerate(("zero_stage", "recompute")):
        uniques[name] = list(dict.fromkeys(s[j] for s in settings))
        codes[name] = np.tile(np.array([uniques[name].index(s[j]) for s in settings], dtype=np.int32), len(rows))
    codes["pipeline_schedule"] = (codes["virtual_stages"] != uniques["virtual_stages"].index(1)).astype(np.int32) \
        if 1 in uniques["virtual_stages"] else np.ones(len(codes["nodes"]), dtype=np.int32)
    uniques["pipeline_schedule"] = [str(cfg.pipeline_schedule) if "pipeline_schedule" in given else "1f1b",
                                    "interleaved-1f1b"]
    res = estimate_codes(model, cluster, cfg, codes, uniques, frame=False)
    fits = res["valid"] & res["feasible"] & np.isfinite(res["step_time_s"])
    if not fits.any():
        return None
    node_of = np.asarray(uniques["nodes"])[codes["nodes"]]
    smallest = node_of[fits].min()
    pool = np.flatnonzero(fits & (node_of == smallest))
    # fastest step; then less parallelism and recomputation (the order of the tie-break keys)
    value = lambda name: np.asarray(uniques[name], dtype=object)[codes[name][pool]]  # noqa: E731
    rec = np.array([SETTINGS["recompute"].index(r) for r in value("recompute")])
    order = np.lexsort((value("zero_stage").astype(int), rec, value("virtual_stages").astype(int),
                        value("pp").astype(int), value("tp").astype(int), res["step_time_s"][pool]))
    best = int(pool[order[0]])
    fields = {name: uniques[name][codes[name][best]] for name in (*_COLUMNS, "zero_stage", "recompute",
                                                                   "pipeline_schedule")}
    target = cluster.with_nodes(int(fields["nodes"])) if cluster.network is not None else cluster
    update = {k: v for k, v in fields.items() if k != "nodes"}
    from simtrain.specs.train import TrainConfig
    chosen_cfg = TrainConfig.build(None, **{**cfg.model_dump(exclude_unset=True), **update})
    shown = fields if size_nodes else {k: v for k, v in fields.items() if k != "nodes"}
    return Chosen(target, chosen_cfg, shown, int(len(rows) * len(settings)),
                  int((fits & (node_of == smallest)).sum()))
