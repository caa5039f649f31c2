"""st.plan: how many devices, and which layout, to train ``tokens`` tokens before a deadline.

Searches node counts (powers of two up to ``max_nodes``) × tensor-parallel degree (divisors of the
node's device count that divide the heads) × pipeline degree × micro-batch × ZeRO stage × recompute
policy, estimates each layout, keeps those that fit and finish by ``deadline_s``, and ranks them by
device-hours (cost), then by time. Returns a DataFrame; an empty one means nothing meets the deadline
within ``max_nodes`` (the widest searched layouts are in ``DataFrame.attrs["closest"]``).
"""

from __future__ import annotations

from simtrain.search.sweep import evaluate_point

__all__ = ["plan"]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _candidates(model, cluster, global_batch: int, max_nodes: int, seq_len) -> list[dict]:
    facts = model.layout_facts()
    heads, blocks = facts.get("heads") or 1, facts.get("blocks") or 1
    per_node = cluster.node.devices_count
    out = []
    nodes = 1
    while nodes <= max_nodes:
        devices = nodes * per_node
        for tp in _divisors(per_node, per_node):
            if heads % tp:
                continue
            for pp in [p for p in (1, 2, 4, 8, 16, 32, 64) if p <= blocks and devices % (tp * p) == 0]:
                dp = devices // (tp * pp)
                if global_batch % dp:
                    continue
                for mb in (1, 2, 4):
                    if (global_batch // dp) % mb:
                        continue
                    for zero in (0, 1):
                        for rec in ("none", "selective", "full"):
                            out.append({"nodes": nodes, "tp": tp, "pp": pp, "dp": dp, "micro_batch_size": mb,
                                        "zero_stage": zero, "recompute": rec})
        nodes *= 2
    return out


def plan(model, hardware, tokens: float, deadline_s: float, *, global_batch_size: int = 1024,
         seq_len: int | None = None, precision: str = "bf16", max_nodes: int = 512, top: int = 20):
    """Ranked feasible layouts and cluster sizes (see module docstring)."""
    import pandas as pd

    from simtrain.specs.library import load_cluster
    from simtrain.specs.train import TrainConfig
    cluster = load_cluster(hardware) if isinstance(hardware, str) else hardware
    base = TrainConfig(global_batch_size=global_batch_size, seq_len=seq_len, precision=precision)
    model = model.with_seq_len(seq_len)
    rows = [evaluate_point(model, cluster, base, p) for p in
            _candidates(model, cluster, global_batch_size, max_nodes, seq_len)]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    tokens_per_step = global_batch_size * model.tokens_per_sample
    df["time_to_train_s"] = tokens / tokens_per_step * df["step_time_s"]
    df["devices"] = df["nodes"] * cluster.node.devices_count
    df["device_hours"] = df["devices"] * df["time_to_train_s"] / 3600.0
    ok = df[(df["feasible"]) & (df["time_to_train_s"] <= deadline_s)]
    ranked = ok.sort_values(["device_hours", "time_to_train_s"]).head(top).reset_index(drop=True)
    ranked.attrs["closest"] = df[df["feasible"]].sort_values("time_to_train_s").head(5)
    return ranked
