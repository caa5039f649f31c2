"""Capture the ATen operators of one training step (forward, loss, backward) of an nn.Module.

Three hooks run together (all public or documented-private torch APIs):

* a ``TorchFunctionMode`` records every top-level torch call (``F.linear``, ``Tensor.__add__``) of
  the forward and loss as a :class:`CallRecord`, and tags each autograd node the call created
  (``node.metadata``) with the call's index — that is how backward work finds its forward op;
* a ``TorchDispatchMode`` records every ATen operator as an :class:`AtenEvent`, in the forward under
  the open call, in the backward under the call that tagged the running autograd node
  (``torch._C._current_autograd_node()``); AccumulateGrad's operators mark the final parameter
  gradients (the sinks that split agrad from wgrad, see :mod:`simtrain.graph.capture.phase`);
* ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves; storages are
  deduplicated (first sighting wins), parameters and buffers are excluded (saved by reference:
  model state, not activation memory).

Composite functions in :data:`TRANSPARENT_CALLS` (``F.multi_head_attention_forward``) are not one
call: their body runs with the mode still active, so ``nn.MultiheadAttention`` is captured as what it
runs — the in-projection GEMM, the attention core (``bmm`` / softmax / ``bmm``, or SDPA when no
weights are returned) and the out-projection GEMM — not as one attention op with its projections.
A torch-function mode is popped while its handler runs, so the handler pushes itself back and lets
the function's own ``has_torch_function`` check answer False once (the body then runs instead of
dispatching to the mode again); the inner torch calls then reach the mode as calls of their own.

Module paths come from global forward pre/post hooks over the root's ``named_modules()``.
Parameter gradients and buffers (batch-norm running statistics) are restored afterwards and the CPU
RNG is forked, so capturing leaves the module as it was.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from simtrain.graph.capture.events import AtenEvent, CallRecord, SavedRecord, TensorMeta

__all__ = ["Capture", "Recorder", "CallMode", "AtenMode", "storage_key", "TRANSPARENT_CALLS"]

#: composite torch functions recorded as their inner calls (see the module docstring)
TRANSPARENT_CALLS = frozenset({"multi_head_attention_forward"})

_TAG = "simtrain_call"
_NODE = "simtrain_node"
_PARAM_ONLY = "simtrain_param_only"
_BATCH = "simtrain_batch"
_SIZED_OPS = frozenset({"expand", "repeat", "zeros", "ones", "empty", "full", "rand", "randn", "randint",
                        "empty_strided", "new_zeros", "new_ones", "new_empty", "new_full", "new_empty_strided"})
_ARGNAMES: dict[Any, tuple[str, ...]] = {}


def storage_key(t: torch.Tensor) -> int:
    """Identity of a tensor's storage (the StorageImpl address: works for real, meta and fake
    tensors; unique among live storages, and every storage compared here is kept alive)."""
    try:
        return t.untyped_storage()._cdata
    except Exception:  # sparse / nested tensors have no single storage
        return 0


def _storage_elems(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes() // max(t.element_size(), 1)
    except Exception:
        return 0


@dataclass
class Capture:
    """Everything one captured step produced (torch-free records)."""

    events: list[AtenEvent] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    saved: dict[int, SavedRecord] = field(default_factory=dict)
    params: dict[int, tuple[str, int, tuple[int, ...]]] = field(default_factory=dict)
    """storage key → (first name, numel, shape) of every unique parameter."""
    sinks: set[int] = field(default_factory=set)
    """Value numbers of the final parameter gradients (inputs of AccumulateGrad's ops)."""
    batch_size: int = 1
    fake: bool = False


class Recorder:
    """Shared state of the three hooks."""

    def __init__(self, cap: Capture, param_keys: set[int], buffer_keys: set[int]) -> None:
        self.cap, self.param_keys, self.buffer_keys = cap, param_keys, buffer_keys
        self.phase = "fw"
        self.call: int | None = None
        self.modules: list[str] = []
        self.loss = False
        self._ids: dict[int, tuple[weakref.ref, TensorMeta]] = {}
        self._producer_of_storage: dict[int, tuple[int, int]] = {}
        self._event_of_vn: dict[int, int] = {}
        self._keep: list[torch.Tensor] = []
        self._busy_calls: set[int] = set()
        self._nodes: list = []
        self._fw_outs: list[tuple[weakref.ref, bool]] = []
        self._next_vn = 0

    # --- tensor identity ---------------------------------------------------------------------
    def _new_meta(self, t: torch.Tensor, batch: bool) -> TensorMeta:
        key = storage_key(t)
        m = TensorMeta(self._next_vn, tuple(int(d) for d in t.shape), str(t.dtype).replace("torch.", ""),
                       t.element_size(), t.is_floating_point(), key, _storage_elems(t),
                       key in self.param_keys, key in self.buffer_keys, batch)
        self._next_vn += 1
        self._ids[id(t)] = (weakref.ref(t), m)
        return m

    def meta(self, t: torch.Tensor, batch: bool = False) -> TensorMeta:
        """The value number of a live tensor, registering it (as external) on first sight. An
        external tensor whose dim 0 is the batch size (a loss target closed over by ``loss_fn``)
        counts as batch-derived."""
        hit = self._ids.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]
        if not batch and t.dim() > 0 and int(t.shape[0]) == self.cap.batch_size:
            key = storage_key(t)
            batch = key not in self.param_keys and key not in self.buffer_keys
        return self._new_meta(t, batch)

    def _conv(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return self.meta(v)
        if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
            return [self.meta(x) if isinstance(x, torch.Tensor) else x for x in v]
        return v

    # --- events ------------------------------------------------------------------------------
    def on_event(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        names = _ARGNAMES.get(func)
        if names is None:
            names = _ARGNAMES[func] = tuple(a.name for a in func._schema.arguments)
        named = {names[i] if i < len(names) else f"arg{i}": self._conv(v) for i, v in enumerate(args)}
        named.update({k: self._conv(v) for k, v in kwargs.items()})
        idx = len(self.cap.events)
        ev = AtenEvent(idx, func._schema.name.split("::")[-1], func._overloadname, self.phase,
                       self.call, named, ())
        ins = ev.inputs
        batch = any(m.batch for m in ins) or self._sized_like_batch(ev.name, out)
        in_storages = {m.storage for m in ins}
        flat, _ = tree_flatten(out)
        metas = []
        for j, t in enumerate(x for x in flat if isinstance(x, torch.Tensor) or x is None):
            if t is None:
                metas.append(None)
                continue
            m = self._new_meta(t, batch)
            self._event_of_vn[m.vn] = idx
            if self.phase == "fw":
                self._fw_outs.append((weakref.ref(t), batch))
            if m.storage in in_storages:
                ev.aliases_input = True
            else:
                self._producer_of_storage[m.storage] = (idx, j)
            metas.append(m)
        ev.outs = tuple(metas)
        if self.phase == "bw":
            self._attribute_backward(ev)
        elif self.call is not None:
            self._busy_calls.add(self.call)
        self.cap.events.append(ev)

    def _sized_like_batch(self, name: str, out: Any) -> bool:
        """A tensor created or broadcast with a leading dimension of the batch size scales with
        the batch even though no input does (``cls.expand(B, -1, -1)``, ``torch.zeros(B, ...)``)."""
        if self.phase != "fw" or name not in _SIZED_OPS or not isinstance(out, torch.Tensor):
            return False
        return out.dim() > 0 and int(out.shape[0]) == self.cap.batch_size

    def _attribute_backward(self, ev: AtenEvent) -> None:
        node = torch._C._current_autograd_node()
        if node is not None:
            ev.node = node.name()
            md = node.metadata
            ev.call = md.get(_TAG)
            if _NODE not in md:
                md[_NODE] = len(self._nodes)
                self._nodes.append(node)
            ev.node_key = md[_NODE]
            flag = md.get(_BATCH)  # None: no forward output of this node was seen alive
            ev.node_weightlike = flag is False or (flag is None and _param_only(node, self.param_keys))
            if "AccumulateGrad" in ev.node:
                var = getattr(node, "variable", None)
                if var is not None and storage_key(var) in self.param_keys:
                    ev.accumulate_into_param = True
                    self.cap.sinks.update(m.vn for m in ev.inputs)
        if ev.call is None:  # engine-side work (input buffers, the seed gradient): follow the data
            for m in ev.inputs:
                src = self._event_of_vn.get(m.vn)
                if src is not None and self.cap.events[src].call is not None:
                    ev.call = self.cap.events[src].call
                    break

    # --- saved tensors -----------------------------------------------------------------------
    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if key in self.cap.saved or key in self.param_keys or key in self.buffer_keys or key == 0:
            return t
        m = self.meta(t)
        nbytes = t.untyped_storage().nbytes()
        self.cap.saved[key] = SavedRecord(self.call, key, nbytes, m.dtype, m.floating,
                                          self._producer_of_storage.get(key), m.batch, m.numel, m.itemsize)
        self._keep.append(t)  # hold the storage so its address is not reused during the capture
        return t

    # --- calls -------------------------------------------------------------------------------
    def module_path(self) -> str:
        if self.modules:
            return self.modules[-1]
        return "loss" if self.loss else ""

    def open_call(self, func: Any, args: tuple, kwargs: dict) -> tuple[int, int | None]:
        prev = self.call
        idx = len(self.cap.calls)
        name = getattr(func, "__name__", None) or type(func).__name__
        self.cap.calls.append(CallRecord(idx, str(name), self.module_path()))
        self.call = idx
        return idx, prev

    def close_call(self, idx: int, prev: int | None, args: tuple, kwargs: dict, out: Any) -> None:
        self.call = prev
        rec = self.cap.calls[idx]
        if idx not in self._busy_calls:
            return
        flat_in, _ = tree_flatten((args, kwargs))
        rec.in_metas = tuple(self.meta(t) for t in flat_in if isinstance(t, torch.Tensor))
        flat_out, _ = tree_flatten(out)
        outs = [t for t in flat_out if isinstance(t, torch.Tensor)]
        rec.out_metas = tuple(self.meta(t) for t in outs)
        for k, v in kwargs.items():
            if isinstance(v, (bool, int, float, str)):
                rec.attrs[k] = v
        _tag_nodes(outs, idx)
        # Mark each node by whether its forward output derives from the inputs: structure alone
        # cannot tell (an embedding's node has no edge for its integer indices).
        seen = [(ref(), batch) for ref, batch in self._fw_outs]
        seen += [(t, m.batch) for t, m in zip(outs, rec.out_metas, strict=True)]
        for t, batch in seen:
            if t is not None and t.grad_fn is not None:
                md = t.grad_fn.metadata
                md[_BATCH] = md.get(_BATCH, False) or batch
        self._fw_outs.clear()



def _param_only(root, param_keys: set[int]) -> bool:
    """Whether autograd node ``root`` computed a function of parameters alone: every input edge
    leads to a parameter's AccumulateGrad (a None edge is an input without grad — data or a
    constant — so it disqualifies). Iterative post-order, memoised in ``node.metadata``."""
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        md = node.metadata
        if _PARAM_ONLY in md:
            continue
        if md.get(_BATCH, False):  # its forward output derives from the inputs (see close_call)
            md[_PARAM_ONLY] = False
            continue
        if "AccumulateGrad" in node.name():
            var = getattr(node, "variable", None)
            md[_PARAM_ONLY] = var is not None and storage_key(var) in param_keys
            continue
        nexts = [f for f, _ in node.next_functions]
        if not expanded:
            if not nexts or any(f is None for f in nexts):
                md[_PARAM_ONLY] = False
                continue
            stack.append((node, True))
            stack.extend((f, False) for f in nexts if _PARAM_ONLY not in f.metadata)
            continue
        md[_PARAM_ONLY] = all(f.metadata.get(_PARAM_ONLY, False) for f in nexts)
    return root.metadata[_PARAM_ONLY]


def _tag_nodes(outs: list[torch.Tensor], idx: int) -> None:
    """Tag every autograd node reachable from ``outs`` not tagged by an earlier call."""
    stack = [t.grad_fn for t in outs if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        md = node.metadata
        if _TAG in md:
            continue
        md[_TAG] = idx
        stack.extend(f for f, _ in node.next_functions if f is not None)


class CallMode(TorchFunctionMode):
    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in TRANSPARENT_CALLS and hasattr(func, "__globals__"):
            with self, _body_runs_once(func):
                return func(*args, **kwargs)
        idx, prev = self.rec.open_call(func, args, kwargs)
        out = None
        try:
            out = func(*args, **kwargs)
        finally:
            self.rec.close_call(idx, prev, args, kwargs, out)
        return out


@contextmanager
def _body_runs_once(func):
    """Make ``func``'s first ``has_torch_function`` check (its own, at its top) answer False, so its
    body runs under the re-pushed mode instead of dispatching back to it; later checks are real."""
    scope = func.__globals__
    real = scope.get("has_torch_function")
    if real is None:
        yield
        return
    state = {"first": True}

    def once(args):
        if state["first"]:
            state["first"] = False
            return False
        return real(args)

    scope["has_torch_function"] = once
    try:
        yield
    finally:
        scope["has_torch_function"] = real


class AtenMode(TorchDispatchMode):
    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace == "aten":
            self.rec.on_event(func, args, kwargs, out)
        return out
