"""How much of a per-step data-parallel sync a rank holding several model chunks leaves exposed.

A rank of an interleaved pipeline holds v model chunks, and Megatron-core syncs each on its own
(``ChunkWindows`` in parallel/schedule_orders.py has the source): a chunk's gradient reduce-scatter
starts when the chunk's last backward ends, so every chunk but the last to finish hides behind the
backward work the rank still has to do; chunk j + 1's parameter all-gather starts at chunk j's first
forward and is waited for only at its own. The shares of one sync run one after another on the
rank's data-parallel link. With one chunk per rank both rules are the bucketed overlap of the whole
sync behind the last backward / first forward task (:func:`bucketed_exposed_s`), exactly.

Every function takes floats or numpy arrays (one value per configuration): the estimate and the
vectorized search (search/vector_rules.py) call the same rule, so both give the same numbers.
"""

from __future__ import annotations

import numpy as np

from simtrain.parallel.schedule_orders import ChunkWindows

__all__ = ["bucketed_exposed_s", "share_buckets", "chunked_grad_exposed_s", "chunked_gather_exposed_s",
           "grad_sync_exposed_s", "gather_exposed_s"]


def bucketed_exposed_s(total_s, buckets, hide_s):
    """Exposed seconds of a sync cut into ``buckets`` that start as the compute behind it produces them
    (PyTorch DDP / Megatron-core gradient buckets): the compute hides all but the last bucket's share,
    up to ``hide_s``; never less than the last bucket."""
    last = total_s / buckets
    # one bucket hides nothing: 0, not hide_s × 0 (NaN and a RuntimeWarning where an underflowing
    # device made hide_s infinite; that point is reported infeasible by its step time either way)
    hidden = np.where(buckets > 1, hide_s, 0.0) * (buckets - 1) / buckets
    return np.maximum(last, total_s - hidden)


def share_buckets(total_bytes, bucket_bytes, shares: int):
    """Buckets of one of ``shares`` equal shares of a sync of ``total_bytes`` (at least one)."""
    return np.maximum(1, np.ceil(total_bytes / shares / bucket_bytes))


def chunked_grad_exposed_s(share_s, buckets, hide_s, leads_s):
    """Exposed seconds of a gradient sync made of ``len(leads_s) + 1`` equal shares of ``share_s``
    seconds (``buckets`` each): the share of an earlier chunk starts ``leads_s[k]`` seconds before the
    rank's last backward ends (earliest first) or when the link is free; the last chunk's share hides
    in buckets behind what is left of the last backward task (``hide_s``) once the link is free. What
    runs past the end of the backward is exposed."""
    free = -np.inf  # when the link is done with the earlier shares, relative to the end of the backward
    for lead in leads_s:
        free = np.maximum(free, -lead) + share_s
    final = bucketed_exposed_s(share_s, buckets, np.minimum(hide_s, np.maximum(0.0, -free)))
    return np.maximum(0.0, free) + final


def chunked_gather_exposed_s(share_s, buckets, first_task_s, windows_s):
    """Exposed seconds of a parameter all-gather made of ``len(windows_s) + 1`` equal shares: the first
    chunk's starts with the step and hides in buckets behind its first forward task (``first_task_s``);
    each later chunk's, ``(launch_s, need_s)`` seconds of the rank's compute into the step, is launched
    at ``launch_s``, runs when the link is free and is waited for at ``need_s``. Every wait delays the
    compute after it, so the waits add up."""
    stall = bucketed_exposed_s(share_s, buckets, first_task_s)
    free = share_s  # wall clock from the step's start
    for launch_s, need_s in windows_s:
        free = np.maximum(free, launch_s + stall) + share_s
        stall = np.maximum(stall, free - need_s)
    return stall


def grad_sync_exposed_s(total_s, total_bytes, bucket_bytes, fw_task_s, hide_s, windows: ChunkWindows):
    """:func:`chunked_grad_exposed_s` of a rank's gradient sync (``total_s`` seconds of ``total_bytes``
    in ``bucket_bytes`` buckets) with its chunk windows in seconds: forward tasks of ``fw_task_s``,
    backward tasks of ``hide_s`` (what each leaves of the link)."""
    shares = len(windows.grad_after) + 1
    leads = [f * fw_task_s + b * hide_s for f, b in windows.grad_after]
    return chunked_grad_exposed_s(total_s / shares, share_buckets(total_bytes, bucket_bytes, shares), hide_s, leads)


def gather_exposed_s(total_s, total_bytes, bucket_bytes, fw_task_s, bw_task_s, windows: ChunkWindows):
    """:func:`chunked_gather_exposed_s` of a rank's ZeRO-1/2 parameter all-gather with its chunk windows
    in seconds (forward tasks of ``fw_task_s``, backward tasks of ``bw_task_s``)."""
    shares = len(windows.gather) + 1
    seconds = [(lf * fw_task_s + lb * bw_task_s, nf * fw_task_s + nb * bw_task_s)
               for (lf, lb), (nf, nb) in windows.gather]
    return chunked_gather_exposed_s(total_s / shares, share_buckets(total_bytes, bucket_bytes, shares), fw_task_s,
                                    seconds)
