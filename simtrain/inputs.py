"""Resolve the verbs' arguments once, at the entry: a library name, a path or an object for the model,
the hardware and the config; anything else is a :class:`SimtrainError` naming the argument.

``estimate``, ``simulate``, ``sweep``, ``plan`` and ``compare`` call these first, so the layers below
only ever see a :class:`Model`, a :class:`Cluster` and a :class:`TrainConfig`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from simtrain.errors import SimtrainError, SpecError

__all__ = ["as_model", "as_cluster", "as_config", "hardware_cluster"]


def _kind_name(value) -> str:
    return type(value).__name__


def as_model(value, arg: str = "model"):
    """A :class:`Model` from a Model, a library name or a model YAML path."""
    from simtrain.graph.library import load_model
    from simtrain.graph.model import Model
    if isinstance(value, Model):
        return value
    if isinstance(value, (str, os.PathLike)):
        return load_model(value)
    hint = " (a Hugging Face config dict: st.Model.from_hf_config(d))" if isinstance(value, Mapping) else ""
    raise SimtrainError(f"{arg}: expected a Model, a library name or a path, got {_kind_name(value)}{hint}")


def as_cluster(value, arg: str = "cluster", nodes: int | None = None):
    """A :class:`Cluster` from a Cluster, a Device (one device, no network), or a cluster / device
    library name or path (see :func:`hardware_cluster`)."""
    from simtrain.specs.hardware import Cluster, Device
    if isinstance(value, Cluster):
        return value if nodes is None else value.with_nodes(nodes)
    if isinstance(value, Device):
        if nodes not in (None, 1):
            raise SimtrainError(f"{arg}: a single Device has no nodes to scale to {nodes}; pass a cluster")
        return Cluster.single(value)
    if isinstance(value, (str, os.PathLike)):
        return hardware_cluster(value, nodes, arg)
    raise SimtrainError(f"{arg}: expected a Cluster, a Device, a library name or a path, got {_kind_name(value)}")


def hardware_cluster(name: str | os.PathLike, nodes: int | None = None, arg: str = "hardware"):
    """A cluster by cluster name or path; a device name gives one device with no network. ``nodes``
    only applies to a cluster: with a device name it is an error that says which clusters use it."""
    from simtrain.specs.hardware import Cluster
    from simtrain.specs.library import library_names, load_cluster, load_device
    from simtrain.specs.reading import clip
    from simtrain.specs.references import looks_like_path
    text = os.fspath(name)
    if text in library_names("device"):
        if nodes not in (None, 1):
            users = _clusters_with_device(text)
            hint = f"; clusters with it: {', '.join(users)}" if users else ""
            raise SpecError.one(None, arg, f"{text!r} is a device, and nodes={nodes} needs a cluster{hint}")
        return Cluster.single(load_device(text))
    if looks_like_path(text) and _file_kind(text) == "device":
        return hardware_cluster_of_device_file(text, nodes, arg)
    if not looks_like_path(text) and text not in library_names("cluster"):
        from simtrain.specs.references import did_you_mean
        hint = did_you_mean(text, library_names("cluster") + library_names("device"))
        raise SpecError.one(None, arg, f"no cluster or device named {clip(text)} ({hint + '; ' if hint else ''}clusters: "
                            f"{', '.join(library_names('cluster'))}; devices: {', '.join(library_names('device'))})")
    return load_cluster(text, nodes=nodes)


def _file_kind(path: str) -> str | None:
    """The ``spec:`` kind of a spec file, or None when it is not one (the loader then says why)."""
    from pathlib import Path

    from simtrain.specs.library import read_spec_document
    try:
        return read_spec_document(Path(path))[0]
    except SpecError:
        return None


def hardware_cluster_of_device_file(path: str, nodes: int | None, arg: str):
    """A device spec file as hardware: one device, no network (``nodes`` needs a cluster)."""
    from simtrain.specs.hardware import Cluster
    from simtrain.specs.library import load_device
    if nodes not in (None, 1):
        raise SpecError.one(path, arg, f"a device spec, and nodes={nodes} needs a cluster spec")
    return Cluster.single(load_device(path))


def _clusters_with_device(device: str) -> list[str]:
    from simtrain.specs.library import library_names, load_cluster
    out = []
    for name in library_names("cluster"):
        try:
            if load_cluster(name).device.name == device:
                out.append(name)
        except SpecError:  # a broken library file must not hide the real error
            continue
    return out


def as_config(value, arg: str = "cfg"):
    """A :class:`TrainConfig` from a TrainConfig or a mapping of its fields."""
    from simtrain.specs.train import TrainConfig
    if isinstance(value, TrainConfig):
        return value
    if isinstance(value, Mapping):
        return TrainConfig.build(None, **dict(value))
    raise SimtrainError(f"{arg}: expected a TrainConfig or a dict of its fields, got {_kind_name(value)}")
