"""The communication model the sharded program uses: one object per (cluster, layout), asking
the collective algorithms (cost/collectives.py) for each group's logical topology
(parallel/topology.py). Memoised by message size, since a program asks the same sizes many times."""

from __future__ import annotations

__all__ = ["ClusterComm", "comm_for"]

_POOL: dict[tuple, ClusterComm] = {}
_POOL_MAX = 256


def comm_for(cluster, layout, cfg, efficiency) -> ClusterComm:
    """A shared ClusterComm per (cluster object, layout, rank order, sequence parallelism): its
    memoised collective times then serve every estimate of a sweep over that layout."""
    key = (id(cluster), layout, cfg.rank_order, cfg.sequence_parallel)
    comm = _POOL.get(key)
    if comm is None or comm.cluster is not cluster:  # id reuse after a cluster was freed
        if len(_POOL) >= _POOL_MAX:
            _POOL.clear()
        comm = _POOL[key] = ClusterComm(cluster, layout, cfg, efficiency)
    return comm


class ClusterComm:
    """Seconds of the collectives each parallel group issues on ``cluster`` under ``layout``."""

    def __init__(self, cluster, layout, cfg, efficiency) -> None:
        """``efficiency``: the device's resolved profile (resolve.py)."""
        self.cluster, self.layout, self.cfg = cluster, layout, cfg
        self.eff = efficiency
        self._topo: dict[str, object] = {}
        self._cache: dict[tuple, float] = {}

    def topology(self, axis: str):
        """The logical topology the ``axis`` group sees (built on first use: a one-device job has none)."""
        topo = self._topo.get(axis)
        if topo is None:
            from simtrain.parallel.topology import group_topology
            topo = self._topo[axis] = group_topology(self.cluster, self.layout, axis, self.cfg.rank_order)
        return topo

    def _collective(self, axis: str, kind: str, nbytes: float) -> float:
        key = (axis, kind, nbytes)
        t = self._cache.get(key)
        if t is None:
            from simtrain.cost.collectives import collective_time
            t = collective_time(kind, nbytes, self.topology(axis), efficiency=self.eff).seconds
            self._cache[key] = t
        return t

    def tp_allreduce_s(self, nbytes: float, gather_bytes: float | None = None) -> float:
        """One row-parallel op's collectives: with sequence parallelism the all-gather of the next
        column-parallel input (``gather_bytes``, default ``nbytes``) and the reduce-scatter of the output;
        without, an all-reduce of ``nbytes``."""
        if self.cfg.sequence_parallel:
            gathered = nbytes if gather_bytes is None else gather_bytes
            return self._collective("tp", "allgather", gathered) + self._collective("tp", "reducescatter", nbytes)
        return self._collective("tp", "allreduce", nbytes)

    def cp_send_s(self, nbytes: float) -> float:
        return self._collective("cp", "sendrecv", nbytes)

    def ep_alltoall_s(self, nbytes: float) -> float:
        return self._collective("ep", "alltoall", nbytes)

    def pp_send_s(self, nbytes: float, stage: int) -> float:
        """Send between adjacent stages over the tier they share (fabric inside a node, else a NIC)."""
        key = ("pp", "send", nbytes)
        t = self._cache.get(key)
        if t is None:
            from simtrain.parallel.topology import p2p_time, pipeline_send_tier
            tier = pipeline_send_tier(self.cluster, self.layout, self.cfg.rank_order)
            t = self._cache[key] = p2p_time(nbytes, self.cluster, tier, efficiency=self.eff).seconds
        return t

    def dp_s(self, kind: str, nbytes: float) -> float:
        return self._collective("dp", kind, nbytes)
