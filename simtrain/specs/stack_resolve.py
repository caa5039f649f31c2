"""A TrainConfig's stack, resolved once at the entry: the preset loaded (or, on a GPU with none named,
the fitted default), its interference folded for the device, and its defaults filled into the
TrainConfig fields the user did not set (an explicit field always wins)."""

from __future__ import annotations

from simtrain.specs.stack import DEFAULT_GPU_STACK, DEFAULT_STACK, Stack, load_stack

__all__ = ["stack_of", "named_stack", "resolve_stack"]


def stack_of(cfg) -> Stack:
    """The resolved Stack of a TrainConfig (a preset name is loaded; None is the reference stack)."""
    s = getattr(cfg, "stack", None)
    if s is None:
        return load_stack(DEFAULT_STACK)
    if isinstance(s, str):
        return load_stack(s)
    return s


_CONFIG_DEFAULTS = ("zero_stage", "dp_overlap", "fused_optimizer")


def named_stack(cfg, device=None) -> Stack:
    """The stack a TrainConfig runs on ``device`` before resolution: its own, or on a GPU with none named
    the fitted default (``DEFAULT_GPU_STACK``)."""
    if cfg.stack is None and device is not None and str(getattr(device.kind, "value", device.kind)) == "gpu":
        return load_stack(DEFAULT_GPU_STACK)
    return stack_of(cfg)


def resolve_stack(cfg, device=None):
    """``cfg`` with its stack loaded and the stack's defaults filled into the TrainConfig fields the
    user did not set (an explicit field always wins). With ``device``, the stack's interference is
    resolved for it: the SM share its collectives hold (``comm_sms``) is folded into
    ``comm_compute_slowdown`` (cost/realisation.py), so the layers below read one number. Resolved
    once at the entry of estimate / simulate; idempotent."""
    stack = named_stack(cfg, device)
    if device is not None and stack.comm_sms:
        from simtrain.cost.realisation import interference_slowdown
        stack = stack.model_copy(update={"comm_compute_slowdown": interference_slowdown(stack, device),
                                         "comm_sms": 0})
    update: dict = {}
    if cfg.stack is not stack:
        update["stack"] = stack
    for field in _CONFIG_DEFAULTS:
        value = getattr(stack, field)
        if value is not None and field not in cfg.model_fields_set and getattr(cfg, field) != value:
            update[field] = value
    if stack.attention_kernel != "default" and "flash_attention" not in cfg.model_fields_set:
        flash = stack.attention_kernel != "eager"
        if cfg.flash_attention != flash:
            update["flash_attention"] = flash
    return cfg.model_copy(update=update) if update else cfg
