"""DeepSpeed config JSON → simtrain (:func:`from_deepspeed`).

Facts read from deepspeedai/DeepSpeed at commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641 (2026-08-22,
version 0.19.6): the "DeepSpeed Configuration JSON" page (``docs/_pages/config-json.md``, line numbers
at that commit) and, where the code's default differs from the page or the page gives none,
``deepspeed/runtime/constants.py``, ``deepspeed/runtime/zero/config.py`` and ``deepspeed/runtime/
config.py`` (the batch-size relation, ``_set_batch_related_parameters``). DeepSpeed's world size is the
number of data-parallel ranks. Values of ``"auto"`` (filled in by the Hugging Face Trainer) are
treated as absent and listed in ``ignored``.
"""

from __future__ import annotations

import json

from simtrain.frameworks.base import (
    Draft,
    Imported,
    Setting,
    as_bool,
    as_float,
    as_int,
    ignored_reason,
    read_source,
)

__all__ = ["from_deepspeed", "DEEPSPEED_SETTINGS"]

_D = "docs/_pages/config-json.md"
_Z = "deepspeed/runtime/zero/config.py"
_S = Setting

DEEPSPEED_SETTINGS: tuple[Setting, ...] = (
    _S("train_batch_size", "global_batch_size", "as is; absent → micro × accumulation × world_size", "none",
       f"{_D}:12; relation deepspeed/runtime/config.py:942", "int"),
    _S("train_micro_batch_size_per_gpu", "micro_batch_size", "as is; absent → train_batch_size / world_size / "
       "accumulation", "train_batch_size / world_size / accumulation", f"{_D}:19", "int"),
    _S("gradient_accumulation_steps", "dp", "with both batch sizes: dp = train / (micro × accumulation)",
       "1 (derived when both batch sizes are given)", f"{_D}:25; deepspeed/runtime/config.py:955", "int", 1),
    _S("fp16.enabled", "precision", "true → fp16", "false (fp32 when neither fp16 nor bf16)",
       f"{_D}:282; deepspeed/runtime/constants.py:179", "bool", False),
    _S("bf16.enabled", "precision", "true → bf16 (the older section name bfloat16 too)", "false",
       "deepspeed/runtime/constants.py:138", "bool", False),
    _S("communication_data_type", "stack.grad_reduce_fp32", "fp32 → True; fp16 / bf16 → False",
       "None: the gradient's dtype (False)", f"{_D}:223", "str"),
    _S("gradient_clipping", "grad_clipping", "> 0 → True", "1.0", f"{_D}:444; deepspeed/runtime/constants.py:261",
       "float", 1.0),
    _S("zero_optimization.stage", "zero_stage", "as is", "0", f"{_D}:492; {_Z}:95", "int", 0),
    _S("zero_optimization.overlap_comm", "dp_overlap", "as is",
       f"stage 3: true, else false ({_Z}:385; the docs table says false)", f"{_D}:510; {_Z}:138", "bool"),
    _S("zero_optimization.reduce_bucket_size", "dp_bucket_bytes", "elements × bytes per reduced gradient "
       "(4 in fp32 or with communication_data_type fp32, else 2)", "5e8 elements", f"{_D}:522; {_Z}:113", "int",
       500_000_000),
    _S("zero_optimization.stage3_prefetch_bucket_size", "stack.fsdp_prefetch_layers",
       "0 → 0 (gathered on demand); > 0 → the preset's 1 layer ahead", f"5e7 ({_Z}:215; the docs table says 5e8)",
       f"{_D}:576; {_Z}:215", "int", 50_000_000),
    _S("activation_checkpointing", "recompute", "section present → 'full' (DeepSpeed's checkpointing API "
       "wraps whole layers; the model's code calls it)", "absent → 'none'", f"{_D}:1320", "section"),
    _S("optimizer.type", "optimizer", "Adam → adamw (adam → with adam_w_mode false), AdamW / Lamb / OneBitAdam / "
       "ZeroOneAdam / OneBitLamb → adamw, SGD → momentum (sgd without momentum), RMSprop → rmsprop",
       "none: the client's optimizer (TrainConfig's adamw)", f"{_D}:42", "str"),
    _S("optimizer.params.adam_w_mode", "optimizer", "with Adam: false → adam", "true", f"{_D}:62", "bool", True),
    _S("optimizer.params.torch_adam", "optimizer_impl", "false → fused (DeepSpeed FusedAdam), true → foreach "
       "(torch.optim.Adam)", "false", f"{_D}:62", "bool", False),
    _S("optimizer.params.momentum", "optimizer", "with SGD: > 0 → momentum, else sgd", "0 (torch.optim.SGD)",
       "torch.optim.SGD", "float", 0.0),
)

_ROWS = {s.name: s for s in DEEPSPEED_SETTINGS}
NOTED: dict[str, str] = {
    "zero_optimization.offload_optimizer": "optimizer offload to CPU / NVMe is not modelled: states stay on the device",
    "zero_optimization.offload_param": "parameter offload to CPU / NVMe is not modelled: parameters stay on the device",
    "zero_optimization.contiguous_gradients": "fragmentation: simtrain's allocator reserve is a stack knob",
    "zero_optimization.allgather_bucket_size": "simtrain cuts the ZeRO-1/2 parameter all-gather in dp_bucket_bytes",
    "zero_optimization.stage3_max_live_parameters": "ZeRO-3 release thresholds are not modelled (every layer "
                                                    "is released after use)",
    "zero_optimization.stage3_max_reuse_distance": "ZeRO-3 release thresholds are not modelled",
    "zero_optimization.stage3_param_persistence_threshold": "small parameters are sharded like the rest",
    "activation_checkpointing.partition_activations": "partitioning checkpoints over TP ranks is not modelled",
    "activation_checkpointing.cpu_checkpointing": "checkpoint offload to the CPU is not modelled",
}
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "lamb": "adamw", "onebitadam": "adamw", "zerooneadam": "adamw",
               "onebitlamb": "adamw", "rmsprop": "rmsprop", "sgd": "sgd"}
_AUTO = "'auto': filled in by the Hugging Face Trainer; give the value to have it read"


def from_deepspeed(config, *, world_size: int | None = None) -> Imported:
    """A DeepSpeed config (JSON text, a dict or a path) → :class:`Imported`.

    ``world_size``: data-parallel ranks; needed when the config gives fewer than two of
    train_batch_size / train_micro_batch_size_per_gpu / gradient_accumulation_steps in the combinations
    DeepSpeed completes from the world size (deepspeed/runtime/config.py:942)."""
    doc, file = _load(config)
    draft = Draft("deepspeed", file)
    given: dict = {}
    for key, value in _flatten(doc):
        key = "bf16." + key[9:] if key.startswith("bfloat16.") else key
        if value == "auto":
            draft.ignore(key, _AUTO)
        elif key in _ROWS:
            given[key] = _parse(draft, _ROWS[key], value)
        elif not key.startswith("activation_checkpointing."):
            draft.ignore(key, ignored_reason(key, NOTED, list(_ROWS)))
    if isinstance(doc.get("activation_checkpointing"), dict):
        given["activation_checkpointing"] = True
        for key in doc["activation_checkpointing"]:
            name = f"activation_checkpointing.{key}"
            draft.ignore(name, NOTED.get(name, "a detail of DeepSpeed's checkpointing API, no cost of its own"))
    _Rules(draft, given, world_size).apply()
    return draft.freeze("deepspeed", DEEPSPEED_SETTINGS, given)


def _load(config) -> tuple[dict, str | None]:
    if isinstance(config, dict):
        return config, None
    text, file = read_source(config, (".json",), lambda s: s.lstrip()[:1] in ("{", "["))
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise Draft("deepspeed", file).error("<json>", f"not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise Draft("deepspeed", file).error("<json>", f"a DeepSpeed config is a JSON object, got {type(doc).__name__}")
    return doc, file


def _flatten(doc: dict, prefix: str = ""):
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in ("activation_checkpointing",):
            yield from _flatten(value, name + ".")
        elif name != "activation_checkpointing":
            yield name, value


def _parse(draft: Draft, row: Setting, value):
    if row.kind == "int":
        return as_int(draft, row.name, value)
    if row.kind == "float":
        return as_float(draft, row.name, value)
    if row.kind == "bool":
        return as_bool(draft, row.name, value)
    if not isinstance(value, str):
        raise draft.error(row.name, f"expected a string, got {str(value)[:40]!r}")
    return value


class _Rules:
    """The rules behind :data:`DEEPSPEED_SETTINGS`; :meth:`get` records a default it falls back on."""

    def __init__(self, draft: Draft, given: dict, world_size) -> None:
        self.draft, self.given, self.world = draft, given, world_size
        self.c, self.knobs = draft.config, draft.knobs

    def get(self, name: str):
        if name in self.given:
            return self.given[name]
        self.draft.defaulted(name)
        return _ROWS[name].value

    def apply(self) -> None:
        self._batch()
        self._precision()
        self._zero()
        self._optimizer()
        self.c["recompute"] = "full" if self.get("activation_checkpointing") else "none"
        self.c["grad_clipping"] = self.get("gradient_clipping") > 0

    def _world(self, missing: str) -> int:
        w = self.world
        if w is None:
            raise self.draft.error(missing, "absent, and DeepSpeed derives it from the world size: pass world_size= "
                                            "(data-parallel GPUs)")
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise self.draft.error("world_size", f"expected a positive number of GPUs, got {str(w)[:40]!r}")
        return w

    def _batch(self) -> None:
        train, micro = self.given.get("train_batch_size"), self.given.get("train_micro_batch_size_per_gpu")
        acc = self.given.get("gradient_accumulation_steps")
        if train is None and micro is None:
            raise self.draft.error("train_batch_size", "give train_batch_size or train_micro_batch_size_per_gpu "
                                                       "(deepspeed/runtime/config.py:980)")
        if train is not None and micro is not None:
            acc = acc if acc is not None else self._derived_acc(train, micro)
            if acc is not None:
                self._dp(train, micro, acc)
        else:
            acc = acc if acc is not None else self.get("gradient_accumulation_steps")
            world = self._world("train_batch_size" if train is None else "train_micro_batch_size_per_gpu")
            train, micro = (micro * acc * world, micro) if train is None else (train, train // (world * acc))
            self._dp(train, micro, acc, world)
        self.c.update(global_batch_size=train, micro_batch_size=micro)

    def _derived_acc(self, train: int, micro: int) -> int | None:
        return None if self.world is None else train // (micro * self._world("gradient_accumulation_steps"))

    def _dp(self, train: int, micro: int, acc: int, world: int | None = None) -> None:
        """dp = train / (micro × accumulation), checked as DeepSpeed's _batch_assertion does."""
        if micro < 1 or acc < 1 or train % (micro * acc):
            raise self.draft.error("train_batch_size", f"{train} ≠ micro {micro} × accumulation {acc} × world size "
                                                       "(deepspeed/runtime/config.py:937)")
        dp = train // (micro * acc)
        given = world if world is not None else self.world
        if given is not None and dp != given:
            raise self.draft.error("train_batch_size", f"{train} ≠ micro {micro} × accumulation {acc} × world size "
                                                       f"{given} (deepspeed/runtime/config.py:937)")
        self.c["dp"] = dp

    def _precision(self) -> None:
        fp16, bf16 = self.get("fp16.enabled"), self.get("bf16.enabled")
        if fp16 and bf16:
            raise self.draft.error("bf16.enabled", "cannot be combined with fp16.enabled")
        self.c["precision"] = "fp16" if fp16 else "bf16" if bf16 else "fp32"
        comm = self.get("communication_data_type")
        if comm not in (None, "fp32", "fp16", "bf16"):
            raise self.draft.error("communication_data_type", f"must be fp16, bf16 or fp32, got {comm[:40]!r}")
        self.knobs["grad_reduce_fp32"] = comm == "fp32"

    def _zero(self) -> None:
        stage = self.get("zero_optimization.stage")
        if stage not in (0, 1, 2, 3):
            raise self.draft.error("zero_optimization.stage", f"must be 0, 1, 2 or 3, got {stage}")
        self.c["zero_stage"] = stage
        overlap = self.get("zero_optimization.overlap_comm")
        self.c["dp_overlap"] = stage == 3 if overlap is None else overlap
        wide = self.c["precision"] == "fp32" or self.knobs["grad_reduce_fp32"]
        self.c["dp_bucket_bytes"] = float(self.get("zero_optimization.reduce_bucket_size") * (4 if wide else 2))
        if stage == 3 and self.get("zero_optimization.stage3_prefetch_bucket_size") == 0:
            self.knobs["fsdp_prefetch_layers"] = 0

    def _optimizer(self) -> None:
        kind = self.given.get("optimizer.type")
        if kind is None:
            return
        name = _OPTIMIZERS.get(kind.lower())
        if name is None:
            raise self.draft.error("optimizer.type", f"no simtrain optimizer for {kind[:40]!r} "
                                                     "(Adam, AdamW, Lamb, 1-bit Adam / Lamb, 0/1 Adam, SGD, RMSprop)")
        if kind.lower() == "adam" and not self.get("optimizer.params.adam_w_mode"):
            name = "adam"
        if name == "sgd" and self.get("optimizer.params.momentum") > 0:
            name = "momentum"
        self.c["optimizer"] = name
        if kind.lower() in ("adam", "adamw"):
            self.c["optimizer_impl"] = "foreach" if self.get("optimizer.params.torch_adam") else "fused"
