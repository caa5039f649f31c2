"""Layouts of the vectorized estimate: each distinct layout of a grid validated once, with the scalar
checks (TrainConfig's own field and config-wide checks, ``layout_problems``, the partition into
pipeline chunks, the sweep's node-count check), so that a rejected point carries the scalar reason."""

from __future__ import annotations

from simtrain.errors import SimtrainError, SpecError

__all__ = ["layout_of", "layout_of_point"]


def layout_of_point(model, cluster, base: dict, fields: dict):
    """Validation of a point the vector path does not cover: the whole TrainConfig built."""
    from simtrain.specs.train import TrainConfig
    try:
        cfg = TrainConfig.build(None, **{**base, **{k: v for k, v in fields.items() if k != "nodes"}})
    except (SpecError, SimtrainError, ValueError) as err:
        return None, str(err)
    return layout_of(model, cluster, cfg, {}, fields.get("nodes"), {})


def _field_value(axis: str, value):
    """(value as TrainConfig stores it, None) or (None, reason): the field's own validation (type,
    bounds), which pydantic runs per field before the config-wide checks."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from simtrain.specs.train import TrainConfig
    info = TrainConfig.model_fields[axis]
    try:
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        return TypeAdapter(kind).validate_python(value), None
    except ValidationError as err:
        return None, f"{axis}: {err.errors()[0]['msg']} (got {value!r})"


def layout_of(model, cluster, base_cfg, fields: dict, nodes, checked: dict):
    """(numbers, None) for a layout that can run — (cluster, dp, cfg) — else (None, reason). The
    config-wide checks are TrainConfig's own (``_local_problems``, run by its validator) on the base
    config with the layout's fields, each validated once per value (``checked``)."""
    from simtrain.parallel.partition import partition_blocks
    from simtrain.specs.train import layout_problems, resolve_dp
    update = {}
    for axis, value in fields.items():
        key = (axis, type(value), value)
        if key not in checked:
            checked[key] = _field_value(axis, value)
        update[axis], reason = checked[key]
        if reason:
            return None, reason
    target = cluster
    if nodes is not None:  # the sweep's own check of a node count, once per value
        from simtrain.search.sweep_rows import target_cluster
        key = ("nodes", type(nodes), nodes)
        if key not in checked:
            try:
                checked[key] = target_cluster(cluster, {"nodes": nodes}), None
            except (SpecError, SimtrainError, ValueError, TypeError) as err:
                checked[key] = None, str(err)
        target, reason = checked[key]
        if reason:
            return None, reason
    cfg = base_cfg.model_copy(update=update)
    problems = cfg._local_problems() or layout_problems(cfg, target.devices_count, model)
    if problems:
        return None, "; ".join(problems)
    chunks = cfg.pp * cfg.virtual_stages
    if partition_blocks(model, chunks) is None:
        return None, f"the model's {len(model.blocks)} blocks cannot fill pp × virtual_stages = {chunks} pipeline chunks"
    dp, _ = resolve_dp(cfg, target.devices_count)
    return (target, dp, cfg), None
