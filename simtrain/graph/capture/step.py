"""One training step under the capture hooks of :mod:`simtrain.graph.capture.capture`: inputs and
batch size, real or fake tensors, module paths, the loss, the backward, and putting the module back
as it was (gradients, buffers, RNG)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from simtrain.graph.capture.capture import AtenMode, CallMode, Capture, Recorder, storage_key

__all__ = ["capture_step"]


# --- the step -----------------------------------------------------------------------------------

def _split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def _batch_size(args: tuple, kwargs: dict) -> int:
    from simtrain.errors import SpecError
    flat, _ = tree_flatten((args, kwargs))
    first = next((t for t in flat if isinstance(t, torch.Tensor)), None)
    if first is None or first.dim() == 0:
        raise SpecError.one(None, "example_inputs", "needs a tensor whose dim 0 is the batch")
    return int(first.shape[0])


def _default_loss(out: Any) -> torch.Tensor:
    """Sum of every floating output: its backward is a broadcast of ones (no loss arithmetic)."""
    from simtrain.errors import SpecError
    flat, _ = tree_flatten(out)
    terms = [t.sum() for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not terms:
        raise SpecError.one(None, "loss_fn", "the module returned no floating tensor that requires grad; "
                            "pass loss_fn")
    loss = terms[0]
    for t in terms[1:]:
        loss = loss + t
    return loss


class _StateGuard:
    """Save the module's parameter gradients and buffers; put them back after the capture."""

    def __init__(self, module: torch.nn.Module, real: bool) -> None:
        self.params = list({id(p): p for p in module.parameters()}.values())
        self.grads = [p.grad for p in self.params]
        self.buffers = [(b, b.detach().clone()) for b in module.buffers()] if real else []
        if real:
            for p in self.params:
                p.grad = None

    def restore(self) -> None:
        with torch.no_grad():
            for p, g in zip(self.params, self.grads, strict=True):
                p.grad = g
            for b, saved in self.buffers:
                b.copy_(saved)


def _fake_like(t: torch.Tensor, grad: bool) -> torch.Tensor:
    dev = "cpu" if t.device.type == "meta" else t.device
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=dev).requires_grad_(grad)


def _fake_state(module: torch.nn.Module, args: tuple, kwargs: dict):
    """Fake copies (no memory) of the parameters, buffers and inputs; tied parameters stay tied."""
    uniq: dict[int, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        state[name] = uniq.setdefault(id(p), _fake_like(p, p.requires_grad))
    for name, b in module.named_buffers(remove_duplicate=False):
        state[name] = uniq.setdefault(id(b), _fake_like(b, False))

    def conv(x):
        return _fake_like(x, False) if isinstance(x, torch.Tensor) else x
    return state, tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}


def _module_hooks(rec: Recorder, module: torch.nn.Module):
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names = {id(m): path for path, m in module.named_modules()}

    def pre(mod, _inputs):
        path = names.get(id(mod))
        if path is None:  # a module outside the root (a loss module) or built on the fly
            parent = rec.module_path()
            path = "loss" if rec.loss else (f"{parent}.{type(mod).__name__.lower()}" if parent
                                            else type(mod).__name__.lower())
        rec.modules.append(path)

    def post(mod, _inputs, _out):
        if rec.modules:
            rec.modules.pop()
    return register_module_forward_pre_hook(pre), register_module_forward_hook(post)


def _prepare(module: torch.nn.Module, args: tuple, kwargs: dict, fake: bool, stack: ExitStack):
    """(run, {id: (name, param)}, buffers, args, kwargs) for a real or a fake capture."""
    if not fake:
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        params = {id(p): (n, p) for n, p in reversed(list(module.named_parameters(remove_duplicate=False)))}
        return module, params, list(module.buffers()), args, kwargs
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call
    stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
    state, args, kwargs = _fake_state(module, args, kwargs)
    pnames = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    params = {id(state[n]): (n, state[n]) for n in reversed(pnames)}
    buffers = [state[n] for n, _ in module.named_buffers(remove_duplicate=False)]

    def run(*a, **k):
        return functional_call(module, state, a, k, tie_weights=False, strict=False)
    return run, params, buffers, args, kwargs


def capture_step(module: torch.nn.Module, example_inputs: Any, loss_fn=None, *,
                 fake: bool | None = None) -> Capture:
    """Run one forward + loss + backward of ``module`` under the capture hooks.

    ``fake`` None picks fake tensors (no memory, no arithmetic) when any parameter or input is on
    the meta device, else real tensors on their device. Fake capture cannot run data-dependent
    operators (``nonzero``, MoE routing by value); it raises a SpecError saying so.
    """
    from simtrain.errors import SpecError
    args, kwargs = _split_inputs(example_inputs)
    batch = _batch_size(args, kwargs)
    if fake is None:
        flat_in = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        fake = any(t.device.type == "meta" for t in [*module.parameters(), *module.buffers(), *flat_in])
    cap = Capture(batch_size=batch, fake=fake)
    with ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        stack.callback(_StateGuard(module, real=not fake).restore)
        run, params, buffers, args, kwargs = _prepare(module, args, kwargs, fake, stack)
        rec = Recorder(cap, {storage_key(p) for _, p in params.values()}, {storage_key(b) for b in buffers})
        for name, p in params.values():
            cap.params[storage_key(p)] = (name, p.numel(), tuple(p.shape))
        for x in tree_flatten((args, kwargs))[0]:
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == batch:
                rec.meta(x, batch=True)
        for h in _module_hooks(rec, module):
            stack.callback(h.remove)
        try:
            _run_step(rec, run, args, kwargs, loss_fn)
        except SpecError:
            raise
        except Exception as exc:
            if not fake:
                raise
            raise SpecError.one(None, "example_inputs", f"fake-tensor capture failed ({type(exc).__name__}: "
                                f"{exc}); capture with real tensors (fake=False)") from exc
    return cap


def _run_step(rec: Recorder, run, args: tuple, kwargs: dict, loss_fn) -> None:
    from simtrain.errors import SpecError
    with AtenMode(rec):
        with CallMode(rec), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            out = run(*args, **kwargs)
            rec.modules.clear()
            rec.loss = True
            loss = loss_fn(out) if loss_fn is not None else _default_loss(out)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            raise SpecError.one(None, "loss_fn", "must return a one-element tensor that requires grad")
        rec.phase, rec.call = "bw", None
        loss.backward()
