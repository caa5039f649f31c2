"""Benchmark grids: which shapes each microbenchmark runs at, per size of run and device.

``tiny`` is for tests (seconds), ``quick`` for ``simtrain calibrate --quick`` (about a minute on two
CPU cores), ``full`` for a calibration worth keeping (minutes). Shapes mix aligned (powers of two) and
unaligned (odd, prime-ish) dims and span small ops, where launch overhead and under-filled cores
dominate, to large ones near the ceiling, so both ends of each efficiency curve are constrained.
Convolutions also span what real networks run besides large square layers: small feature maps
(2×2, 4×4), stride-2 downsampling (3×3 and 1×1 projections, whose input gradient is a transposed
conv), grouped and depthwise layers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simtrain.calibrate.timing import TimingPlan

__all__ = ["GRID_NAMES", "Grid", "grid_for"]

GRID_NAMES = ("tiny", "quick", "full")


@dataclass(frozen=True)
class Grid:
    """Shapes per benchmark. Tuples are (m, n, k), (batch, m, n, k), (N, C, H, W, K, R, S, stride, pad,
    groups), (batch, heads, seq, head_dim), (rows, cols), (vocab, dim, tokens), (tensors, numel)."""

    name: str
    plan: TimingPlan
    gemm: tuple[tuple[int, int, int], ...]
    bmm: tuple[tuple[int, int, int, int], ...]
    conv: tuple[tuple[int, ...], ...]
    attention: tuple[tuple[int, int, int, int], ...]
    elementwise_numel: tuple[int, ...]
    elementwise_ops: tuple[str, ...]
    rows_cols: tuple[tuple[int, int], ...]
    batchnorm: tuple[tuple[int, int, int, int], ...]
    embedding: tuple[tuple[int, int, int], ...]
    copy_numel: tuple[int, ...]
    optimizer: tuple[tuple[int, int], ...]
    h2d_bytes: tuple[int, ...]
    collective_bytes: tuple[int, ...]
    collective_world_sizes: tuple[int, ...]
    collective_ops: tuple[str, ...]
    backward: bool = True
    first_touch_numel: tuple[int, ...] = ()
    maxpool: tuple[tuple[int, ...], ...] = ()
    """(N, C, H, W, kernel, stride, pad) of the max-pooling bench (forward and backward)."""
    rng_numel: tuple[int, ...] = ()
    """Elements per call of the random-draw bench (calibrate/bench_memory.py; CPU)."""
    step_state_numel: tuple[int, ...] = ()
    """fp32 elements of the relu calls timed cold and warm (calibrate/bench_memory.py; CPU), besides
    the tiny matmul that gives the fixed cost: sizes whose streams the cold rate is read from."""
    conv_layout: tuple[tuple[int, ...], ...] = ()
    """Conv shapes (as ``conv``) timed over NCHW and channels-last activations (calibrate/bench_memory.py;
    CPU): large maps, where the layout reorders are a visible share of the time."""


_ALL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
_EW_OPS = ("add", "mul", "relu", "gelu", "silu")

_TINY = Grid(
    name="tiny", plan=TimingPlan(warmup=1, repeats=3, min_sample_s=5e-4, max_total_s=0.05),
    gemm=((64, 64, 64), (255, 255, 255), (512, 512, 512)), bmm=((8, 64, 64, 64),),
    conv=((2, 16, 16, 16, 16, 3, 3, 1, 1, 1), (2, 32, 16, 16, 32, 3, 3, 1, 1, 32)),
    attention=((1, 2, 64, 32),), elementwise_numel=(4096, 1 << 20), elementwise_ops=("add", "gelu"),
    rows_cols=((64, 256),), batchnorm=((4, 16, 16, 16),), embedding=((1000, 64, 256),),
    copy_numel=(1 << 12, 1 << 16, 1 << 20, 1 << 22), optimizer=((4, 1 << 14),), h2d_bytes=(1 << 20,),
    collective_bytes=(1 << 12, 1 << 20), collective_world_sizes=(2,), collective_ops=("all_reduce",),
    first_touch_numel=(12 << 20,), maxpool=((2, 16, 16, 16, 2, 2, 0),), rng_numel=(1 << 16,),
    conv_layout=((2, 64, 28, 28, 64, 1, 1, 1, 0, 1),), step_state_numel=(1 << 16,),
)

_QUICK = Grid(
    name="quick", plan=TimingPlan(warmup=2, repeats=7, min_sample_s=4e-3, max_total_s=0.5),
    gemm=((64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
          (127, 127, 127), (255, 511, 129), (1000, 1000, 1000), (2048, 256, 512), (64, 1024, 1024),
          (4096, 64, 64), (96, 768, 3072)),
    bmm=((32, 64, 64, 64), (16, 128, 128, 64), (8, 256, 256, 256)),
    conv=((8, 64, 28, 28, 64, 3, 3, 1, 1, 1), (8, 64, 28, 28, 256, 1, 1, 1, 0, 1),
          (8, 128, 28, 28, 128, 3, 3, 1, 1, 128), (8, 64, 28, 28, 64, 3, 3, 1, 1, 4),
          (4, 3, 64, 64, 32, 7, 7, 2, 3, 1), (8, 64, 32, 32, 128, 3, 3, 2, 1, 1),
          (8, 128, 16, 16, 256, 1, 1, 2, 0, 1), (8, 256, 4, 4, 256, 3, 3, 1, 1, 1),
          (16, 128, 8, 8, 128, 3, 3, 1, 1, 128)),
    attention=((2, 4, 128, 64), (1, 8, 512, 64), (4, 4, 256, 32)),
    elementwise_numel=(4096, 1 << 18, 1 << 22), elementwise_ops=_EW_OPS,
    rows_cols=((256, 768), (2048, 1024)), batchnorm=((8, 64, 28, 28),),
    embedding=((32000, 256, 2048), (1000, 64, 128)),
    copy_numel=(1 << 10, 1 << 14, 1 << 18, 1 << 21, 1 << 23, 1 << 25), optimizer=((32, 1 << 15),),
    h2d_bytes=(1 << 16, 1 << 20, 1 << 24, 1 << 27),
    collective_bytes=(1 << 10, 1 << 14, 1 << 18, 1 << 22), collective_world_sizes=(2,),
    collective_ops=_ALL_COLLECTIVES, first_touch_numel=(12 << 20, 24 << 20),
    maxpool=((8, 64, 32, 32, 2, 2, 0), (8, 64, 56, 56, 3, 2, 1), (16, 128, 16, 16, 2, 2, 0), (8, 32, 8, 8, 2, 2, 0)),
    rng_numel=(1 << 18, 1 << 20, 1 << 22), step_state_numel=(1 << 18, 1 << 20),
    # ResNet-50's conv2_x 1×1 reduce and 3×3 (He et al. 2016, Table 1); dense only (bench_memory.py)
    conv_layout=((8, 256, 56, 56, 64, 1, 1, 1, 0, 1), (8, 64, 56, 56, 64, 3, 3, 1, 1, 1)),
)

_FULL = replace(
    _QUICK, name="full", plan=TimingPlan(warmup=3, repeats=15, min_sample_s=5e-3, max_total_s=1.0),
    gemm=_QUICK.gemm + ((32, 32, 32), (2048, 2048, 2048), (1536, 1536, 1536), (511, 511, 511),
                        (1023, 1023, 1023), (333, 777, 555), (4096, 1024, 256), (512, 4096, 512),
                        (1, 4096, 4096), (16, 4096, 1024), (8192, 128, 128), (384, 384, 2048),
                        # short reductions: a small batch's weight gradient (k = batch)
                        (256, 784, 8), (1024, 1024, 16)),
    bmm=_QUICK.bmm + ((64, 32, 32, 32), (4, 512, 512, 128), (12, 128, 64, 128)),
    conv=_QUICK.conv + ((16, 128, 14, 14, 128, 3, 3, 1, 1, 1), (16, 256, 14, 14, 512, 1, 1, 2, 0, 1),
                        (16, 32, 56, 56, 32, 3, 3, 1, 1, 32), (2, 256, 7, 7, 256, 3, 3, 1, 1, 1),
                        (16, 96, 28, 28, 96, 3, 3, 1, 1, 2), (16, 512, 2, 2, 512, 3, 3, 1, 1, 1),
                        (8, 32, 32, 32, 32, 3, 3, 2, 1, 32), (16, 64, 16, 16, 64, 1, 1, 1, 0, 1),
                        (8, 16, 8, 8, 16, 3, 3, 1, 1, 1), (8, 128, 8, 8, 128, 3, 3, 1, 1, 32),
                        (16, 64, 8, 8, 128, 3, 3, 2, 1, 1), (4, 384, 3, 3, 384, 3, 3, 1, 1, 1),
                        # the CIFAR ResNets' stages (He et al. 2016, §4.2: 16 / 32 / 64 filters on 32² /
                        # 16² / 8² maps): dense 3×3 at 32 channels, between the rows above
                        (8, 32, 16, 16, 32, 3, 3, 1, 1, 1), (8, 16, 32, 32, 16, 3, 3, 1, 1, 1),
                        (8, 32, 32, 32, 64, 3, 3, 2, 1, 1),
                        # depthwise 3×3 on the maps of MobileNet's later stages (Howard et al. 2017,
                        # Table 1: 14² and 7² at 224 px; 8² and 4² at 32 px), their own kernel
                        # (cost/compute.py DEPTHWISE_CONV_KIND), strided and not
                        # (+ the quick grid's 8² one)
                        (16, 256, 14, 14, 256, 3, 3, 1, 1, 256), (16, 512, 7, 7, 512, 3, 3, 1, 1, 512),
                        (16, 256, 4, 4, 256, 3, 3, 1, 1, 256), (16, 64, 16, 16, 64, 3, 3, 2, 1, 64)),
    attention=_QUICK.attention + ((1, 8, 1024, 64), (8, 8, 64, 64), (1, 12, 256, 128)),
    elementwise_numel=(1024, 16384, 1 << 18, 1 << 20, 1 << 22, 1 << 24),
    rows_cols=((64, 256), (256, 768), (2048, 1024), (8192, 4096)),
    batchnorm=((8, 64, 28, 28), (32, 128, 14, 14), (2, 16, 8, 8)),
    embedding=((32000, 256, 2048), (1000, 64, 128), (50000, 768, 4096)),
    # every 4× from 1 KiB, and 2× around a last-level cache's size (8 to 128 MiB moved), where the
    # fit places the effective cache capacity (fit_compute._CACHE)
    copy_numel=tuple(sorted({1 << p for p in range(8, 27, 2)} | {1 << 21, 1 << 23})),
    optimizer=((32, 1 << 15), (8, 1 << 19), (256, 1024), (4, 1024)),
    collective_bytes=tuple(1 << p for p in range(8, 25, 2)), collective_world_sizes=(2, 4),
    # + ResNet-50's conv3_x 1×1 reduce and expand
    conv_layout=_QUICK.conv_layout + ((8, 512, 28, 28, 128, 1, 1, 1, 0, 1), (8, 128, 28, 28, 512, 1, 1, 1, 0, 1)),
)


def _scale_for_cuda(g: Grid) -> Grid:
    """GPUs need far larger ops to approach their ceiling: add big GEMMs, attention and copies."""
    return replace(
        g, gemm=g.gemm + ((4096, 4096, 4096), (8192, 8192, 8192), (8191, 8191, 8191), (16384, 4096, 4096)),
        # convolutions large enough to leave the host's issue time behind (on an H200 every conv of
        # the CPU grid ran in the host's 15–50 µs per call): ResNet's 224 px stages at batch 8 and 32
        # (He et al. 2016, Table 1: 56² × 64 … 7² × 512), its 7×7 stem, a bottleneck 1×1, and a
        # depthwise and a grouped 3×3 at MobileNet / ResNeXt widths
        conv=g.conv + ((8, 64, 56, 56, 64, 3, 3, 1, 1, 1), (32, 64, 56, 56, 64, 3, 3, 1, 1, 1),
                       (32, 128, 28, 28, 128, 3, 3, 1, 1, 1), (32, 256, 14, 14, 256, 3, 3, 1, 1, 1),
                       (32, 512, 7, 7, 512, 3, 3, 1, 1, 1), (8, 3, 224, 224, 64, 7, 7, 2, 3, 1),
                       (32, 256, 56, 56, 64, 1, 1, 1, 0, 1), (32, 256, 28, 28, 256, 3, 3, 1, 1, 256),
                       (32, 256, 28, 28, 256, 3, 3, 1, 1, 32)),
        attention=g.attention + ((4, 16, 2048, 128), (1, 32, 4096, 128), (8, 12, 197, 64)),
        elementwise_numel=g.elementwise_numel + (1 << 26, 1 << 28),
        copy_numel=g.copy_numel + (1 << 27, 1 << 29), optimizer=g.optimizer + ((64, 1 << 22),),
        collective_bytes=g.collective_bytes + (1 << 26, 1 << 28))


def grid_for(name: str, device: str) -> Grid:
    """The named grid, enlarged for CUDA (except ``tiny``)."""
    grids = {"tiny": _TINY, "quick": _QUICK, "full": _FULL}
    if name not in grids:
        raise ValueError(f"grid must be one of {', '.join(GRID_NAMES)}, got {name!r}")
    g = grids[name]
    return _scale_for_cuda(g) if (device == "cuda" and name != "tiny") else g
