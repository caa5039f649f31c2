"""The CUDA microbenchmarks of ``gpu_check``: torch is imported inside the functions, so importing this
module needs neither torch's CUDA build nor a GPU. Every function takes a ``gpu_plan.Plan`` and returns
(measurements, skipped), skipped being ``{"component", "reason"}`` records.

Timing: CUDA events around ``inner`` back-to-back calls (sized so a trial lasts ~25 ms), after warm-up;
the median of ``plan.trials`` trials per call, spread = (max - min) / median.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from validation.components import model
from validation.components.gpu_plan import (
    ALLREDUCE_ENV,
    BACKEND_KERNEL,
    HEAD_DIM,
    STREAM_ELEMENTS,
    Measurement,
    Plan,
    spread,
)

__all__ = ["gpu_facts", "time_cuda", "gemm_fn", "measure_gemm", "measure_attention", "measure_hbm", "measure_allreduce"]

DEVICE = "cuda"
"""Where the tensors live (a test runs the code paths on "cpu" with a stand-in for CUDA events)."""
TRIAL_S = 0.025
BIG_COPY_BYTES = 1 << 30
WARM_UP_S = 1.0
ALLREDUCE_TIMEOUT_S = 180.0


def gpu_facts() -> dict | None:
    """GPU name, count, memory, torch / CUDA / cuDNN versions; None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"gpu_name": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(),
            "total_memory_bytes": int(props.total_memory), "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}


def time_cuda(fn, trials: int, warmup: int = 3, inner: int | None = None) -> tuple[float, float]:
    """(median seconds per call, relative spread) over ``trials`` event-timed trials of ``inner`` calls."""
    import torch
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if inner is None:
        start.record()
        fn()
        end.record()
        end.synchronize()
        inner = max(1, min(1000, int(TRIAL_S / max(start.elapsed_time(end) / 1e3, 1e-7))))
    times = []
    for _ in range(trials):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return spread(times)


def _warm_up(seconds: float) -> None:
    """Large bf16 GEMMs until the clocks have ramped."""
    import torch
    if seconds <= 0:
        return
    a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------
# GEMM
# ----------------------------------------------------------------------------------------------
def gemm_fn(dtype: str, m: int, n: int, k: int, zeros: bool = False, fast_accum: bool = False):
    """One bf16 ``matmul`` or fp8 ``_scaled_mm`` of m×k by k×n, inputs random normal (or zeros);
    ``fast_accum``: fp8 with cuBLASLt's fast accumulation (no periodic promotion of the partial sums to
    fp32), as Transformer Engine runs its forward GEMMs."""
    import torch
    make = torch.zeros if zeros else torch.randn
    if dtype == "bf16":
        a = make(m, k, device=DEVICE, dtype=torch.bfloat16)
        b = make(k, n, device=DEVICE, dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b)
    if not (hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")):
        raise RuntimeError("torch has no _scaled_mm / float8_e4m3fn")
    a8 = make(m, k, device=DEVICE).to(torch.float8_e4m3fn)
    b8 = make(n, k, device=DEVICE).to(torch.float8_e4m3fn).t()  # column-major (k, n), as cuBLASLt wants
    one = torch.ones((), device=DEVICE, dtype=torch.float32)
    fn = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,  # noqa: E731
                                  use_fast_accum=fast_accum)
    fn()
    return fn


def measure_gemm(plan: Plan) -> tuple[list[Measurement], list[dict]]:
    import torch
    _warm_up(WARM_UP_S)
    out, skipped = [], []
    fp8_ok = torch.cuda.get_device_capability(0) >= (8, 9)
    for dtype, m, n, k in plan.gemm:
        label = f"{m}x{n}x{k}"
        if dtype == "fp8" and not fp8_ok:
            skipped.append({"component": "gemm-fp8", "reason": f"{label}: compute capability < 8.9 (no fp8)"})
            continue
        try:
            fn = gemm_fn(dtype, m, n, k)
            t, s = time_cuda(fn, plan.trials)
        except (RuntimeError, TypeError) as exc:
            skipped.append({"component": f"gemm-{dtype}", "reason": f"{label}: {type(exc).__name__}: {exc}"[:300]})
            continue
        finally:
            fn = None
            torch.cuda.empty_cache()
        out.append(Measurement(f"gemm-{dtype}", label, {"dtype": dtype, "m": m, "n": n, "k": k},
                               2.0 * m * n * k / t / 1e12, s, "TFLOP/s"))
    return out, skipped


# ----------------------------------------------------------------------------------------------
# Fused attention
# ----------------------------------------------------------------------------------------------
def _backends():
    from torch.nn.attention import SDPBackend
    out = {"flash": SDPBackend.FLASH_ATTENTION}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out["cudnn"] = SDPBackend.CUDNN_ATTENTION
    return out


def _attention_case(backend, seq: int, causal: bool, trials: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """((fwd s, spread), (bwd s, spread)) of SDPA on B·S = 16k tokens, H·D = 2048, D = 128, bf16."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    shape = (model.ATTENTION_TOKENS // seq, model.ATTENTION_WIDTH // HEAD_DIM, seq, HEAD_DIM)
    q, k, v = (torch.randn(shape, device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    with sdpa_kernel(backend):
        with torch.no_grad():
            fw = time_cuda(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), trials)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        do = torch.randn_like(o)
        bw = time_cuda(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), trials)
    return fw, bw


def measure_attention(plan: Plan) -> tuple[list[Measurement], list[dict]]:
    try:
        backends = _backends()
    except ImportError as exc:
        return [], [{"component": "attention", "reason": f"torch.nn.attention unavailable: {exc}"}]
    out, skipped = [], []
    if "cudnn" not in backends:
        skipped.append({"component": "attention-cudnn", "reason": "this torch has no SDPBackend.CUDNN_ATTENTION"})
    for name, backend in backends.items():
        comp = f"attention-{name}"
        for i, (seq, causal) in enumerate((s, c) for s in plan.attention_seqs for c in (False, True)):
            try:
                fw, bw = _attention_case(backend, seq, causal, plan.trials)
            except RuntimeError as exc:
                reason = f"{type(exc).__name__}: {exc}"[:300]
                skipped.append({"component": comp, "reason": f"backend unusable: {reason}" if i == 0 else
                                f"S{seq} {'causal' if causal else 'non-causal'}: {reason}"})
                if i == 0:
                    break
                continue
            f = model.attention_fw_flops(seq, causal)
            for phase, (t, s), flops in (("fw", fw, f), ("bw", bw, 2.5 * f)):
                params = {"backend": name, "kernel": BACKEND_KERNEL[name], "phase": phase, "causal": causal,
                          "seq": seq, "batch": model.ATTENTION_TOKENS // seq, "heads": model.ATTENTION_WIDTH // HEAD_DIM}
                label = f"S{seq} {'causal' if causal else 'non-causal'} {phase}"
                out.append(Measurement(comp, label, params, flops / t / 1e12, s, "TFLOP/s"))
    return out, skipped


# ----------------------------------------------------------------------------------------------
# HBM
# ----------------------------------------------------------------------------------------------
def _babelstream(trials: int) -> list[Measurement]:
    """copy (2 arrays moved), triad a = b + s·c (3) and a·b + c (4) on 2^25-element fp64 arrays."""
    import torch
    a, b, c, d = (torch.rand(STREAM_ELEMENTS, device=DEVICE, dtype=torch.float64) for _ in range(4))
    array = STREAM_ELEMENTS * 8
    cases = (("copy", 2, lambda: a.copy_(b)), ("triad", 3, lambda: torch.add(b, c, alpha=0.4, out=a)),
             ("a*b+c", 4, lambda: torch.addcmul(c, a, b, out=d)))
    out = []
    for kernel, arrays, fn in cases:
        t, s = time_cuda(fn, trials)
        params = {"kernel": kernel, "array_bytes": array, "bytes_moved": arrays * array, "babelstream": True}
        out.append(Measurement("hbm", f"{kernel} 2^25 fp64, {arrays} arrays", params, arrays * array / t / 1e9, s,
                               "GB/s"))
    return out


def measure_hbm(plan: Plan) -> tuple[list[Measurement], list[dict]]:
    """BabelStream-sized kernels and a 1 GiB device-to-device copy (GB/s of bytes read + written)."""
    import torch
    out = _babelstream(plan.trials)
    size = BIG_COPY_BYTES
    src, dst = (torch.empty(size, device=DEVICE, dtype=torch.uint8) for _ in range(2))
    t, s = time_cuda(lambda: dst.copy_(src), plan.trials)
    params = {"kernel": "copy", "array_bytes": size, "bytes_moved": 2 * size, "babelstream": False}
    out.append(Measurement("hbm", f"copy {size / (1 << 30):g} GiB device-to-device", params, 2 * size / t / 1e9, s,
                           "GB/s"))
    return out, []


# ----------------------------------------------------------------------------------------------
# All-reduce (spawned NCCL processes)
# ----------------------------------------------------------------------------------------------
def _allreduce_worker(rank: int, world: int, port: int, sizes: list[int], trials: int, path: str) -> None:
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    rows = []
    for size in sizes:
        x = torch.zeros(size // 4, device="cuda", dtype=torch.float32)
        inner = max(2, min(50, (256 << 20) // size))  # the same on every rank: the loops must match
        dist.barrier()
        times = []
        for _ in range(trials):
            t, _ = time_cuda(lambda: dist.all_reduce(x), 1, warmup=2, inner=inner)  # noqa: B023
            times.append(t)
        worst = torch.tensor(times, device="cuda")
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # the slowest rank's time, as nccl-tests
        rows.append({"size_bytes": size, **dict(zip(("t", "spread"), spread(worst.tolist()), strict=True))})
    if rank == 0:
        Path(path).write_text(json.dumps(rows), encoding="utf-8")
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(world: int, sizes: list[int], trials: int, env: dict[str, str]) -> list[dict]:
    import torch.multiprocessing as mp
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "allreduce.json")
        try:
            ctx = mp.start_processes(_allreduce_worker, args=(world, _free_port(), sizes, trials, path),
                                     nprocs=world, join=False, start_method="spawn")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        deadline = time.monotonic() + ALLREDUCE_TIMEOUT_S
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.terminate()
                raise TimeoutError(f"all-reduce workers still running after {ALLREDUCE_TIMEOUT_S:.0f} s")
        return json.loads(Path(path).read_text(encoding="utf-8"))


def measure_allreduce(plan: Plan) -> tuple[list[Measurement], list[dict]]:
    import torch
    world = min(torch.cuda.device_count(), 8)
    if world < 2:
        return [], [{"component": "allreduce", "reason": f"{world} GPU visible: NCCL all-reduce needs >= 2"}]
    out, skipped = [], []
    for variant, env in ALLREDUCE_ENV.items():
        comp = f"allreduce-{variant}"
        try:
            rows = _spawn(world, list(plan.allreduce_sizes), plan.trials, env)
        except Exception as exc:  # a hung or failed NCCL run must not hide the other variant
            skipped.append({"component": comp, "reason": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        for r in rows:
            size = r["size_bytes"]
            busbw = size / r["t"] * 2.0 * (world - 1) / world / 1e9
            params = {"size_bytes": size, "world": world, "nccl_env": env}
            out.append(Measurement(comp, f"{size / (1 << 20):g} MiB x{world}", params, busbw, r["spread"], "GB/s"))
    return out, skipped
