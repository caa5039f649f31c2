"""The shared words of simtrain, as string enums (one spelling everywhere: specs, reports, traces)."""

from __future__ import annotations

from enum import Enum

__all__ = [
    "Axis", "Phase", "DType", "DeviceKind", "LinkKind", "Precision", "OptimizerKind",
    "Recompute", "PipelineSchedule", "Bottleneck", "OpClass", "Mark", "DTYPE_BYTES",
]


class _StrEnum(str, Enum):
    def __str__(self) -> str:  # so f-strings print the value, not "Axis.DP"
        return self.value


class Axis(_StrEnum):
    """Parallel axes, innermost first in the default rank order (tp, cp, ep, dp, pp)."""
    DP = "dp"
    TP = "tp"
    PP = "pp"
    CP = "cp"
    EP = "ep"


class Phase(_StrEnum):
    """Phases of a training step. agrad = activation gradient, wgrad = weight gradient."""
    FW = "fw"
    AGRAD = "agrad"
    WGRAD = "wgrad"
    OPTIM = "optim"
    RECOMPUTE = "recompute"


class DType(_StrEnum):
    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"
    """4-bit float (E2M1) with block scales (NVFP4: 16 values per fp8 scale; MXFP4: 32 per e8m0 scale)."""
    INT8 = "int8"
    INT64 = "int64"
    BOOL = "bool"


#: Storage bytes per element. tf32 is stored as fp32; it only changes the matmul rate.
DTYPE_BYTES: dict[DType, float] = {
    DType.FP64: 8, DType.FP32: 4, DType.TF32: 4, DType.BF16: 2, DType.FP16: 2,
    DType.FP8: 1, DType.FP4: 0.5, DType.INT8: 1, DType.INT64: 8, DType.BOOL: 1,
}


class DeviceKind(_StrEnum):
    GPU = "gpu"
    TPU = "tpu"
    FPGA = "fpga"
    WAFER = "wafer"
    CPU = "cpu"
    ASIC = "asic"


class LinkKind(_StrEnum):
    NVLINK = "nvlink"
    NVSWITCH = "nvswitch"
    PCIE = "pcie"
    INFINIBAND = "infiniband"
    ETHERNET = "ethernet"
    ICI = "ici"
    SWARMX = "swarmx"
    INFINITY_FABRIC = "infinity_fabric"
    NEURONLINK = "neuronlink"
    LOOPBACK = "loopback"


class Precision(_StrEnum):
    """Training precision regimes; 16- and 8-bit regimes keep fp32 master weights."""
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    MXFP8 = "mxfp8"
    FP4 = "fp4"


class OptimizerKind(_StrEnum):
    SGD = "sgd"
    MOMENTUM = "momentum"
    RMSPROP = "rmsprop"
    ADAM = "adam"
    ADAMW = "adamw"
    ADAFACTOR = "adafactor"


class Recompute(_StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"
    SELECTIVE_OP = "selective-op"


class PipelineSchedule(_StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"
    ZB_H1 = "zb-h1"
    DUALPIPE_V = "dualpipev"


class Bottleneck(_StrEnum):
    COMPUTE = "compute"
    MEMORY_BANDWIDTH = "memory_bandwidth"
    COMMUNICATION = "communication"
    DATA = "data"
    BUBBLE = "bubble"


class OpClass(_StrEnum):
    """Efficiency classes: each device has one efficiency curve per class."""
    MATMUL = "matmul"
    CONV = "conv"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    NORM = "norm"
    REDUCTION = "reduction"
    EMBEDDING = "embedding"
    MEMORY = "memory"


class Mark(_StrEnum):
    """How a spec number is backed (shared/reference/hardware.md): V primary, V2 secondary,
    D derived by a named formula, U unverified."""
    V = "V"
    V2 = "V2"
    D = "D"
    U = "U"
