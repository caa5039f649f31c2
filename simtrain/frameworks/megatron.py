"""Megatron-LM / NeMo (Megatron-Core) training arguments → simtrain (:func:`from_megatron`).

Facts read from NVIDIA/Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22,
Megatron-Core 0.20.0): ``megatron/training/arguments.py`` (the argparse groups; the fields of
``TransformerConfig`` / ``ModelParallelConfig`` become ``--dashed-names`` through ``ArgumentGroupFactory``,
arguments.py:2373), ``megatron/core/model_parallel_config.py``, ``megatron/core/transformer/
transformer_config.py``, ``megatron/training/config/training_config.py`` and ``common_config.py``,
``megatron/core/distributed/distributed_data_parallel.py``. Line numbers in :data:`MEGATRON_SETTINGS`
are at that commit. NeMo 2.0 passes the same Megatron-Core settings, so a NeMo run written out as
Megatron arguments imports the same way.
"""

from __future__ import annotations

import re
import shlex

from simtrain.errors import SpecError
from simtrain.frameworks.base import Draft, Imported, Setting, as_float, as_int, ignored_reason
from simtrain.frameworks.megatron_rules import MEGATRON_MODEL, NOTED, resolve

__all__ = ["from_megatron", "MEGATRON_SETTINGS", "MEGATRON_MODEL"]

_MP = "megatron/core/model_parallel_config.py"
_TC = "megatron/core/transformer/transformer_config.py"
_A = "megatron/training/arguments.py"
_S = Setting

MEGATRON_SETTINGS: tuple[Setting, ...] = (
    _S("--tensor-model-parallel-size", "tp", "as is", "1", f"{_MP}:55", "int", 1),
    _S("--pipeline-model-parallel-size", "pp", "as is", "1", f"{_MP}:83", "int", 1),
    _S("--context-parallel-size", "cp", "as is", "1", f"{_MP}:100", "int", 1),
    _S("--expert-model-parallel-size", "ep", "as is", "1", f"{_MP}:127", "int", 1),
    _S("--num-layers-per-virtual-pipeline-stage", "virtual_stages, pipeline_schedule",
       "virtual_stages = num-layers / pp / this (needs --num-layers); > 1 → interleaved-1f1b",
       "None: no interleaving", f"{_A}:3114, derived at :974"),
    _S("--num-virtual-stages-per-pipeline-rank", "virtual_stages, pipeline_schedule",
       "as is; > 1 → interleaved-1f1b", "None: no interleaving", f"{_A}:3116"),
    _S("--virtual-pipeline-model-parallel-size", "virtual_stages, pipeline_schedule",
       "older releases' spelling of the above: as is; > 1 → interleaved-1f1b", "None: no interleaving",
       f"older arguments.py; no longer an argument at this commit ({_A}:2306)"),
    _S("--decoder-first-pipeline-num-layers", "first_stage_layers", "as is", "None: an even split", f"{_A}:3095"),
    _S("--decoder-last-pipeline-num-layers", "last_stage_layers", "as is", "None: an even split", f"{_A}:3099"),
    _S("--sequence-parallel", "sequence_parallel", "on; Megatron turns it off when tp = 1", "off",
       f"{_MP}:94; off with tp = 1 at {_A}:1434", "flag", False),
    _S("--micro-batch-size", "micro_batch_size", "as is", "none: required",
       f"megatron/training/config/training_config.py:11, asserted at {_A}:693"),
    _S("--global-batch-size", "global_batch_size", "as is",
       "micro-batch-size × data-parallel size (needs world_size=)", f"training_config.py:15, derived at {_A}:703"),
    _S("--seq-length", "seq_len", "as is", "None: the model's own", f"{_A}:3305"),
    _S("--recompute-activations", "recompute", "→ 'selective'", "off", f"{_A}:2869, applied at :607", "flag", False),
    _S("--recompute-granularity", "recompute", "full → 'full', selective → 'selective'", "None → 'none'",
       f"{_TC}:532", "str"),
    _S("--recompute-method", "recompute_num_layers",
       "block → the first --recompute-num-layers layers of each stage; uniform → every layer (None)",
       "None (required with full)", f"{_TC}:543, checked at :1913", "str"),
    _S("--recompute-num-layers", "recompute_num_layers", "with block: as is", "None (required with full)",
       f"{_TC}:551, checked at :1919"),
    _S("--recompute-modules", "recompute_modules",
       "core_attn, mlp, layernorm, moe as is; the others listed in ignored", "['core_attn'] (simtrain's None)",
       f"{_TC}:560", "list"),
    _S("--use-distributed-optimizer", "zero_stage", "→ 1 (optimizer states sharded over dp × cp)", "off → 0",
       f"{_A}:3156", "flag", False),
    _S("--use-torch-fsdp2", "zero_stage", "→ 3", "off", "megatron/training/config/common_config.py:95", "flag", False),
    _S("--use-megatron-fsdp", "zero_stage", "→ the stage of --data-parallel-sharding-strategy", "off",
       "megatron/training/config/common_config.py:92", "flag", False),
    _S("--data-parallel-sharding-strategy", "zero_stage",
       "with --use-megatron-fsdp: no_shard 0, optim 1, optim_grads 2, optim_grads_params 3", "optim_grads_params",
       f"{_A}:3190", "str", "optim_grads_params"),
    _S("--overlap-grad-reduce", "dp_overlap", "as is", "off", f"{_A}:3121", "flag", False),
    _S("--overlap-param-gather", "dp_overlap",
       "folded into dp_overlap, which also hides the ZeRO-1/2 parameter all-gather (Megatron requires "
       f"--overlap-grad-reduce with it, {_A}:1028)", "off", f"{_A}:3148", "flag", False),
    _S("--ddp-bucket-size", "dp_bucket_bytes", "parameters × bytes per reduced gradient (4 reduced in fp32, else 2)",
       "max(40,000,000, 1,000,000 × dp) parameters (dp from world_size=, else 40,000,000)",
       f"{_A}:3125; megatron/core/distributed/distributed_data_parallel.py:134"),
    _S("--bf16", "precision", "→ bf16", "off: fp32 when neither --bf16 nor --fp16", f"{_MP}:180", "flag", False),
    _S("--fp16", "precision", "→ fp16", "off", f"{_MP}:177", "flag", False),
    _S("--fp8-format", "precision", "e4m3 / hybrid → fp8", "None", f"{_TC}:587", "str"),
    _S("--fp8-recipe", "stack.fp8_recipe", "delayed, tensorwise as is; blockwise, mxfp8 → rowwise", "delayed",
       f"{_TC}:594", "str", "delayed"),
    _S("--fp8-param-gather", "stack.fp8_allgather, stack.fp8_params",
       "as is; with fp8 also the fp8 GEMMs' weights stored in fp8 (1 B per parameter)", "off", f"{_A}:2016",
       "flag", False),
    _S("--grad-reduce-in-bf16", "stack.grad_reduce_fp32, stack.grad_buffer_16bit",
       "on → grad_reduce_fp32 False and the gradient buffer (main_grad) in bf16, grad_buffer_16bit True "
       "(core/distributed/param_and_grad_buffer.py:924); off → 'bf16', Megatron's own rule: fp32 with --bf16 "
       "(forced), the 16-bit dtype with --fp16", "off",
       f"{_A}:3053, applied at :1213", "flag", False),
    _S("--accumulate-allreduce-grads-in-fp32", "stack.grad_reduce_fp32, stack.grad_buffer_16bit",
       "on → True, and the gradient buffer (main_grad) in fp32 (grad_buffer_16bit False)",
       "off (forced on for bf16)", f"{_A}:3069; megatron/training/training.py:2635", "flag", False),
    _S("--optimizer", "optimizer",
       "adam → adamw (Megatron's Adam decouples weight decay), sgd → momentum (--sgd-momentum 0.9)", "adam",
       f"{_A}:2913", "str", "adam"),
    _S("--clip-grad", "grad_clipping", "> 0 → True", "1.0", f"{_A}:2615", "float", 1.0),
    _S("--tp-comm-overlap", "stack.tp_comm_overlap",
       "on → the megatron-core preset's share; off → 0 (the backward's input-gradient collective still "
       "hides: tp_dgrad_comm_async)", "off", f"{_MP}:265", "flag", False),
    _S("--no-overlap-p2p-communication", "stack.pp_comm_overlap", "on → 0", "off: p2p overlapped (interleaved)",
       f"{_A}:3118", "flag", False),
    _S("--attention-backend", "stack.attention_kernel",
       "flash → fa2, fused → cudnn, unfused / local → eager, auto → the preset's", "auto", f"{_TC}:151", "str", "auto"),
    _S("--use-flash-attn", "stack.attention_kernel", "→ fa2", "off", f"{_A}:2910", "flag", False),
    _S("--use-mcore-models", "stack", "→ megatron-core",
       "Megatron-Core models (default since Megatron-LM 9ad1a56f82, 2024-05-25)", f"{_A}:2949", "flag", False),
    _S("--use-legacy-models", "stack", "→ megatron-lm", "off",
       "arguments.py from 9ad1a56f82 (2024-05-25) to 39ec5ebeb4 (2026-05-06), which removed it", "flag", False),
    _S("--moe-expert-capacity-factor", "moe_load_imbalance",
       "max(1, factor): the capacity caps the busiest expert at factor × the mean load",
       "None: no cap (simtrain's 1.0, balanced)", f"{_TC}:917", "float"),
)

_ROWS = {s.name: s for s in MEGATRON_SETTINGS}
_OPTION = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_.-]*")
_NUMBER = re.compile(r"-\d[\d.eE+-]*")


def from_megatron(args, *, world_size: int | None = None) -> Imported:
    """A Megatron-LM / NeMo argument list (list of str, or one string split like a shell) → :class:`Imported`.

    ``world_size``: GPUs of the run, needed only when ``--global-batch-size`` is absent (Megatron's
    default is micro-batch × data-parallel size) or to size the default DDP bucket. Unknown arguments
    are listed in ``ignored``; a value that does not parse raises SpecError naming the argument."""
    draft = Draft("megatron")
    options = _options(_tokens(args), draft)
    given: dict[str, object] = {}
    for name, values in options.items():
        if name in _ROWS:
            given[name] = _value(draft, name, _ROWS[name].kind, values)
        elif name in MEGATRON_MODEL:
            key, kind = MEGATRON_MODEL[name]
            draft.model[key] = _value(draft, name, kind, values)
            draft.ignore(name, "model shape: not a TrainConfig field (reported in Imported.model)")
        else:
            draft.ignore(name, ignored_reason(name, NOTED, list(_ROWS) + list(MEGATRON_MODEL)))
    stack = resolve(draft, given, _ROWS, world_size)
    return draft.freeze(stack, MEGATRON_SETTINGS, given)


def _tokens(args) -> list[str]:
    """The argument tokens: a string is split like a shell (comments and line continuations allowed);
    a list element that holds an option and its value ("--fp8-format hybrid") is split too."""
    try:
        if isinstance(args, str):
            return shlex.split(args.replace("\\\n", " "), comments=True)
        if isinstance(args, (list, tuple)) and all(isinstance(a, str) for a in args):
            out: list[str] = []
            for a in args:
                out += shlex.split(a) if a.startswith("--") and any(c.isspace() for c in a) else [a]
            return out
    except ValueError as err:
        raise SpecError.one(None, "<arguments>", f"cannot split the arguments like a shell: {err}") from None
    raise SpecError.one(None, "<arguments>", f"expected a list of str or one string, got {type(args).__name__}")


def _options(tokens: list[str], draft: Draft) -> dict[str, list[str]]:
    """``--name value ...`` / ``--name=value`` / ``--flag`` → {name: values}; the last occurrence wins
    (as in argparse). Words before the first ``--option`` (the command, with its own single-dash
    options: ``python -u pretrain_gpt.py``) are ignored."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    command: list[str] = []
    for tok in tokens:
        dashed = tok.startswith("-") and not _NUMBER.fullmatch(tok)
        if dashed and (current is not None or not command or tok.startswith("--")):
            name, eq, value = tok.partition("=")
            if not _OPTION.fullmatch(name):
                raise draft.error(tok[:40], "unknown argument syntax: Megatron-LM arguments are --name, "
                                            "--name value or --name=value")
            out.pop(name, None)
            out[name] = [value] if eq else []
            current = name
        elif current is None:
            command.append(tok)
        else:
            out[current].append(tok)
    if command:
        draft.ignore(" ".join(command)[:60], "the command before the first argument")
    return out


def _value(draft: Draft, name: str, kind: str, values: list[str]):
    """One argument's value parsed by its kind; a wrong count or form raises SpecError naming it."""
    if kind == "flag":
        if values:
            raise draft.error(name, f"takes no value, got {' '.join(values)[:40]!r}")
        return True
    if kind == "list":
        if not values:
            raise draft.error(name, "needs at least one value")
        return list(values)
    if len(values) != 1:
        raise draft.error(name, f"needs one value, got {len(values)}")
    if kind == "int":
        return as_int(draft, name, values[0])
    if kind == "float":
        return as_float(draft, name, values[0])
    return values[0]
