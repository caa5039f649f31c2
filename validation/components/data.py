"""Component measurements used to derive the device efficiency profiles, transcribed from
/work/shared/reference/components.md (public sources; none measured by this project).

Every point names its components.md row (``row``), the source key of components.md §6 (``source``)
and the mark there (V primary, V2 secondary, U uncertain, D derived). ``fit`` says whether the point
enters the fit of its parameter or is only compared against the result (the reason is in ``note``).
Units: TFLOP/s, TB/s and GB/s as printed; sizes in bytes (nccl-tests sizes are powers of two).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GemmPoint", "AttentionPoint", "BusbwPoint", "StreamPoint", "GEMM", "ATTENTION", "BUSBW", "STREAM",
           "DATA_DEVICE", "KIB", "MIB", "GIB"]

KIB, MIB, GIB = 1024, 1024 ** 2, 1024 ** 3

DATA_DEVICE = {
    "a100-sxm4-80gb": "a100-sxm4-80gb",
    "a100-sxm4-40gb": "a100-sxm4-80gb",  # §7: no A100-40GB component data; same GA100 die, clocks, NVSwitch
    "h100-sxm5-80gb": "h100-sxm5-80gb",
    "h200-sxm-141gb": "h200-sxm-141gb",
}
"""The device whose measurements stand for each profiled device."""


@dataclass(frozen=True)
class GemmPoint:
    device: str
    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    row: str
    source: str
    mark: str
    fit: bool = True
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k} {self.dtype}"


@dataclass(frozen=True)
class AttentionPoint:
    device: str
    kernel: str
    phase: str  # "fw", "bw" or "fwbw" (fwd+bwd throughput over 3.5 x the forward FLOPs)
    causal: bool
    head_dim: int
    seq: int
    tflops: float
    row: str
    source: str
    mark: str
    fit: bool = True
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kernel} {self.phase} D{self.head_dim} S{self.seq} {'causal' if self.causal else 'non-causal'}"


@dataclass(frozen=True)
class BusbwPoint:
    device: str
    kind: str  # nccl-tests collective
    size_bytes: int
    busbw_gbps: float
    algorithm: str  # "nvls" (NCCL default on NVSwitch gen 3) or "ring" (NVLS off, or a non-all-reduce op)
    row: str
    source: str
    mark: str
    fit: bool = True
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} {self.algorithm} {_size(self.size_bytes)} [{self.source}]"


@dataclass(frozen=True)
class StreamPoint:
    device: str
    kernel: str  # BabelStream kernel
    arrays_moved: int  # arrays read + written per element (copy 2, triad 3, dot 2)
    tbps: float
    row: str
    source: str
    mark: str
    fit: bool = True


def _size(b: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b} B"


# ----------------------------------------------------------------------------------------------
# §1 GEMM (TFLOP/s). M x N x K as printed; the model's GEMM is C[m, n] += A[m, k] B[k, n].
# ----------------------------------------------------------------------------------------------
def _squares(device, dtype, values, row, source, mark, fit=True, note=""):
    return [GemmPoint(device, dtype, s, s, s, v, row, source, mark, fit, note)
            for s, v in values if v is not None]


_A100, _H100, _H200 = "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb"
_FP8_NOTE = "fp8: cuBLASLt fp8 ceiling (~70 %) is below bf16 MAMF (80 %); the profile has one matmul curve"

GEMM: tuple[GemmPoint, ...] = tuple([
    GemmPoint(_A100, "bf16", 1024, 10240, 5120, 271.2, "1a A100 MAMF best shape", "MLE-ACC", "V",
              note="sets the matmul ceiling"),
    GemmPoint(_A100, "bf16", 6912, 16384, 2048, 267.9, "1a A100 older run", "MAG", "V2"),
    *_squares(_A100, "fp16", [(1024, 119.4), (2048, 221.8), (4096, 228.0), (8192, 253.7), (16384, 256.5)],
              "1b A100 square sweep", "AZ-A100", "V"),
    GemmPoint(_A100, "fp16", 6144, 12288, 12288, 250.8, "1c transformer shape", "AZ-A100", "V"),
    GemmPoint(_A100, "fp16", 1024, 2145, 1024, 132.8, "1c odd N", "AZ-A100", "V"),
    GemmPoint(_A100, "fp16", 802816, 192, 768, 157.8, "1c tall-skinny", "AZ-A100", "V", fit=False,
              note="at the roofline ridge (154 FLOP/B): compute and HBM both bind; the model's max() cannot"),
    GemmPoint(_H100, "bf16", 2048, 2048, 13312, 794.5, "1a H100 MAMF best shape", "MLE-ACC", "V",
              note="sets the matmul ceiling"),
    GemmPoint(_H100, "bf16", 6144, 17920, 2816, 792.1, "1a H100 older run", "MAG", "V2"),
    GemmPoint(_H100, "bf16", 4224, 8192, 2048, 780.0, "1a H100 max-autotune CUTLASS", "CHILLEE", "V2"),
    *_squares(_H100, "bf16", [(1024, 176.6), (2048, 676.6), (4096, 788.7), (8192, 797.5), (10240, 719.7)],
              "1b H100 bf16 torch.matmul", "ZZC79", "U"),
    *_squares(_H100, "fp16", [(1024, 179.1), (2048, 645.1), (4096, 760.0), (8192, 736.2), (10240, 668.4)],
              "1b H100 fp16 same run", "ZZC79", "U"),
    *_squares(_H100, "bf16", [(4096, 783.0), (8192, 735.0)], "1b H100 cuBLAS (pyptx)", "PYPTX", "U"),
    *_squares(_H100, "fp8", [(1024, 274.1), (2048, 1011.3), (4096, 1216.9), (8192, 1290.1), (16384, 1377.3),
                             (32768, 1382.2)], "1b H100 fp8 cuBLASLt", "AZ-H100", "V", fit=False, note=_FP8_NOTE),
    GemmPoint(_H100, "fp8", 6144, 12288, 12288, 1351.4, "1c transformer shape", "AZ-H100", "V", False, _FP8_NOTE),
    GemmPoint(_H100, "fp8", 1024, 2145, 1024, 410.7, "1c odd N", "AZ-H100", "V", False, _FP8_NOTE),
    GemmPoint(_H100, "fp8", 802816, 192, 768, 663.8, "1c tall-skinny", "AZ-H100", "V", False, _FP8_NOTE),
    *_squares(_H200, "fp8", [(1024, 290.8), (2048, 1013.4), (4096, 1249.1), (8192, 1300.6), (16384, 1366.3),
                             (32768, 1349.5)], "1b H200 fp8 cuBLASLt", "AZ-H200", "V", fit=False, note=_FP8_NOTE),
    GemmPoint(_H200, "fp8", 6144, 12288, 12288, 1318.0, "1c transformer shape", "AZ-H200", "V", False, _FP8_NOTE),
    GemmPoint(_H200, "fp8", 1024, 2145, 1024, 407.9, "1c odd N", "AZ-H200", "V", False, _FP8_NOTE),
    GemmPoint(_H200, "fp8", 802816, 192, 768, 717.5, "1c tall-skinny", "AZ-H200", "V", False, _FP8_NOTE),
])

# ----------------------------------------------------------------------------------------------
# §2 fused attention (TFLOP/s on the FLOPs the kernel executes; fwd 4·B·S²·H·D, halved when causal)
# ----------------------------------------------------------------------------------------------
_SEQS = (512, 1024, 2048, 4096, 8192, 16384)


def _curve(device, kernel, phase, causal, values, row, source, mark, head_dim=128, fit=True, note=""):
    return [AttentionPoint(device, kernel, phase, causal, head_dim, s, v, row, source, mark, fit, note)
            for s, v in zip(_SEQS, values, strict=True) if v is not None]


_FA3FIG = "2a H100 FA3-paper figure, D=128"
_CAUSAL_U = "causal label inferred from the values (components.md 2a: U)"
ATTENTION: tuple[AttentionPoint, ...] = tuple([
    # FA3 paper D=128 (the 512 fwd non-causal cell is 467-497 U: its middle, not fitted)
    *_curve(_H100, "fa3", "fw", False, [482, 565, 625, 638, 646, 648], _FA3FIG, "FA3-FIG", "V2"),
    *_curve(_H100, "fa3", "fw", True, [292, 423, 521, 579, 602, 616], _FA3FIG, "FA3-FIG", "V2", note=_CAUSAL_U),
    *_curve(_H100, "fa3", "bw", False, [316, 424, 501, 542, 559, 561], _FA3FIG, "FA3-FIG", "V2", note=_CAUSAL_U),
    *_curve(_H100, "fa2", "fw", False, [None, 350, 362, 368, 370, 370], _FA3FIG, "FA3-FIG", "V2",
            note="16k cell 370 or 395 U: 370 taken (the 8k value)"),
    *_curve(_H100, "fa2", "fw", True, [191, 260, 298, 319, 333, 335], _FA3FIG, "FA3-FIG", "V2", note=_CAUSAL_U),
    *_curve(_H100, "fa2", "bw", False, [214, 260, 291, 310, 318, 322], _FA3FIG, "FA3-FIG", "V2", note=_CAUSAL_U),
    *_curve(_H100, "cudnn", "fw", False, [None, 574, 617, 609, 600, 595], _FA3FIG, "FA3-FIG", "V2"),
    *_curve(_H100, "cudnn", "fw", True, [315, 410, 484, 518, 529, 539], _FA3FIG, "FA3-FIG", "V2", note=_CAUSAL_U),
    *_curve(_H100, "cudnn", "bw", False, [305, 408, 465, 499, 518, 516], _FA3FIG, "FA3-FIG", "V2", note=_CAUSAL_U),
    # cross-checks on other Hopper runs (not fitted)
    AttentionPoint(_H100, "fa3", "fw", False, 128, 8192, 659, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa3", "bw", False, 128, 8192, 554, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa3", "fw", True, 128, 8192, 630, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa3", "bw", True, 128, 8192, 532, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa2", "fw", False, 128, 8192, 370, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa2", "bw", False, 128, 8192, 291, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa2", "fw", True, 128, 8192, 284, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    AttentionPoint(_H100, "fa2", "bw", True, 128, 8192, 287, "2b FA PR 1791", "FA-1791", "V", False, "H100 model U"),
    *_curve(_H100, "fa3", "fw", False, [430, 517, 566, 590, 614, 621], "2b pytorch/benchmark 2391", "PTB-2391", "V",
            fit=False, note="H=16, D=128; causal flag not stated"),
    # Triton tutorial FA2 forward (llm-foundry's Triton path): the only Triton data
    *_curve(_H100, "triton", "fw", False, [329, 390, 434, 458, 471, 477], "2b pytorch/benchmark 2391", "PTB-2391",
            "V", note="causal flag not stated; taken as non-causal (U)"),
    # PyTorch SDPA (flash backend = FA2) forward, D=128, H=8, S=1k..16k: "287-304"
    AttentionPoint(_H100, "sdpa", "fw", False, 128, 1024, 287, "2b pytorch/benchmark 2296", "PTB-2296", "V",
                   note="range 287-304 over S=1k..16k; low end taken at 1k (U)"),
    AttentionPoint(_H100, "sdpa", "fw", False, 128, 16384, 304, "2b pytorch/benchmark 2296", "PTB-2296", "V",
                   note="range 287-304 over S=1k..16k; high end taken at 16k (U)"),
    # fwd+bwd points from Azure's flash-attn benchmark (B=2, S=8192; causal flag U: taken non-causal)
    AttentionPoint(_H100, "fa2", "fwbw", False, 128, 8192, 327.9, "2b Azure FA2 fwd+bwd", "AZ-H100", "V", False),
    AttentionPoint(_H200, "fa2", "fwbw", False, 128, 8192, 329.3, "2b Azure FA2 fwd+bwd", "AZ-H200", "V", False,
                   "0.4 % above H100's 327.9: the H200 kernels run as on H100"),
    AttentionPoint(_A100, "fa2", "fwbw", False, 64, 8192, 179.5, "2b Azure FA2 fwd+bwd", "AZ-A100", "V",
                   note="sets the A100 FA2 backward ceiling given the forward one"),
])

FA2_A100_FW_CEILING = 0.73
"""A100 FlashAttention-2: top of the paper's "50-73 % of peak" headline ([FA2-ABS], V2), the forward
pass at long sequences (the paper's forward runs above its backward); which config reaches it is U."""

# ----------------------------------------------------------------------------------------------
# §3 HBM streaming (BabelStream CUDA, default arrays: 2^25 doubles = 268 MB per array)
# ----------------------------------------------------------------------------------------------
BABELSTREAM_ARRAY_BYTES = 2 ** 25 * 8
STREAM: tuple[StreamPoint, ...] = (
    StreamPoint(_A100, "copy", 2, 1.61, "3 BabelStream", "AZ-A100", "V", fit=False),
    StreamPoint(_A100, "triad", 3, 1.70, "3 BabelStream", "AZ-A100", "V"),
    StreamPoint(_A100, "dot", 2, 1.75, "3 BabelStream", "AZ-A100", "V", fit=False),
    StreamPoint(_H100, "copy", 2, 2.90, "3 BabelStream", "AZ-H100", "V", fit=False),
    StreamPoint(_H100, "mul", 2, 2.90, "3 BabelStream", "AZ-H100", "V", fit=False),
    StreamPoint(_H100, "triad", 3, 2.97, "3 BabelStream", "AZ-H100", "V"),
    StreamPoint(_H100, "dot", 2, 3.18, "3 BabelStream", "AZ-H100", "V", fit=False),
    StreamPoint(_H200, "copy", 2, 4.01, "3 BabelStream", "AZ-H200", "V", fit=False),
    StreamPoint(_H200, "triad", 3, 4.15, "3 BabelStream", "AZ-H200", "V"),
    StreamPoint(_H200, "dot", 2, 4.48, "3 BabelStream", "AZ-H200", "V", fit=False),
)

# ----------------------------------------------------------------------------------------------
# §4 NCCL on one 8-GPU NVSwitch node (busbw GB/s)
# ----------------------------------------------------------------------------------------------
_SIZES_4A = (32 * KIB, MIB, 16 * MIB, 128 * MIB, GIB)


def _sweep(device, values, last, algorithm, source, mark, fit=True, note=""):
    """A §4a sweep; only sizes >= 16 MiB (training collectives) enter the fit (derive.RAMP_MIN_BYTES)."""
    sizes = (*_SIZES_4A, last[0])
    return [BusbwPoint(device, "all_reduce", s, v, algorithm, "4a all-reduce sweep", source, mark,
                       fit and s >= 16 * MIB, note) for s, v in zip(sizes, (*values, last[1]), strict=True)]


_NVLS = "NVLS all-reduce (NVLink SHARP); the model's node topology runs ring/tree: shape only (see derive.py)"
BUSBW: tuple[BusbwPoint, ...] = tuple([
    *_sweep(_A100, (1.37, 36.2, 109.2, 174.2, 228.1), (8 * GIB, 231.6), "ring", "AZ-A100", "V"),
    *_sweep(_A100, (1.31, 18.0, 106.2, 176.9, 229.0), (16 * GIB, 234.9), "ring", "MLE-NET", "V"),
    *_sweep(_H100, (1.71, 43.7, 234.5, 400.6, 466.4), (8 * GIB, 478.9), "nvls", "AZ-H100", "V", note=_NVLS),
    *_sweep(_H200, (1.84, 53.0, 240.4, 412.5, 467.6), (8 * GIB, 480.0), "nvls", "AZ-H200", "V", note=_NVLS),
    *_sweep(_H200, (1.44, 39.9, 219.9, 401.9, 463.6), (16 * GIB, 482.3), "nvls", "MLE-NET", "V", fit=False,
            note="torch.distributed bench, NCCL 2.27.7: " + _NVLS),
    # §4b: ring (NVLS off) and the non-all-reduce collectives, which run ring on NVSwitch
    BusbwPoint(_H200, "all_reduce", 16 * GIB, 367.2, "ring", "4b NCCL_NVLS_ENABLE=0", "MLE-NET", "V"),
    BusbwPoint(_H200, "all_gather", 16 * GIB, 361.4, "ring", "4b all-gather", "MLE-NET", "V"),
    BusbwPoint(_H200, "reduce_scatter", 16 * GIB, 362.9, "ring", "4b reduce-scatter", "MLE-NET", "V"),
    BusbwPoint(_H100, "all_reduce", 16 * GIB, 370.0, "ring", "4b maintainer: ring and non-all-reduce ops ~370",
               "NT-212", "V", note="size 'large' (> 256 MB); 16 GiB used"),
    BusbwPoint(_H100, "all_gather", 16 * GIB, 370.0, "ring", "4b maintainer: ring and non-all-reduce ops ~370",
               "NT-212", "V", note="size 'large' (> 256 MB); 16 GiB used"),
])
