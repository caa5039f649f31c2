"""The units ZeRO-3 / FSDP gathers and reduces on a pipeline stage: which weights each all-gather and
reduce-scatter carries.

PyTorch FSDP wraps each transformer block as a unit; a framework that also wraps the whole model
(``Stack.fsdp_root_unit``: torchtitan's ``parallelize_llama`` calls ``fully_shard`` on every block and
then on the model; Composer and fms-fsdp wrap per block under a root FSDP module) leaves what no block
holds — embeddings, final norm, head — to that root. FSDP does not reshard the root after the forward
(FSDP2 ``FSDPState._lazy_init``: "For the root, do not reshard after forward since for training, the
parameters would be freed and all-gathered immediately"; FSDP1 ``_post_forward_reshard`` keeps the
root's flat parameter), so the root is gathered once per micro-batch, before its first block, and
reduced with the first block's gradients after the backward's last op. Without a root unit a stage's
gathered weights are taken in equal units, one per block (ZeRO-3 engines that fetch per module).
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.cost.memory import zero_degree
from simtrain.cost.op_cost import shard_factors
from simtrain.parallel.model_index import REPEATED_BLOCK, model_index

__all__ = ["FsdpUnits", "block_gather_elements", "fsdp_units"]


@dataclass(frozen=True)
class FsdpUnits:
    """How a stage's gathered weights split into FSDP units."""

    layers: int
    """Units gathered one after another and prefetched ahead (the blocks; every block of the stage
    when the stack has no root unit). 0 when the root holds the whole stage."""
    root_share: float = 0.0
    """Share of the stage's gathered weights in its root unit: gathered before anything can hide it,
    kept through the backward, reduced after it. 0: no root unit on this stage."""


def block_gather_elements(model, blocks, lay, sequence_parallel: bool) -> list[float]:
    """Weight elements this rank gathers for each of ``blocks`` under ZeRO-3: its tensor / expert share
    (``shard_factors``) of every weight ZeRO shards over the block's dp · cp group (experts whose
    expert-data-parallel group is one rank are whole already and need no gather)."""
    idx = model_index(model)
    sharded = {False: zero_degree(lay.dp, lay.cp) > 1, True: zero_degree(lay.dp, lay.cp, lay.ep, expert=True) > 1}
    return [sum(idx.reps[s].param_count * shard_factors(idx.reps[s], lay.tp, sequence_parallel, lay.ep).weights * n
                for s, n in idx.block_items[b] if sharded[idx.reps[s].tp_split == "expert"])
            for b in blocks]


def fsdp_units(model, blocks, cfg, lay, per_block: list[float] | None = None) -> FsdpUnits:
    """The stage's FSDP units: with the stack's root unit (ZeRO-3 only), the repeated blocks as layers
    and the rest of the stage's gathered weights as the root's share; otherwise every block one unit.
    ``per_block``: :func:`block_gather_elements` of ``blocks`` where the caller has it."""
    blocks = tuple(blocks)
    if not cfg.stack.fsdp_root_unit or cfg.zero_stage < 3:
        return FsdpUnits(max(1, len(blocks)))
    if per_block is None:
        per_block = block_gather_elements(model, blocks, lay, cfg.sequence_parallel)
    total = sum(per_block)
    if total <= 0:
        return FsdpUnits(max(1, len(blocks)))
    layer_ids = [i for i, b in enumerate(blocks) if REPEATED_BLOCK.match(b)]
    root = total - sum(per_block[i] for i in layer_ids)
    return FsdpUnits(len(layer_ids), root / total if root > 0 else 0.0)
