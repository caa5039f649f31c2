"""Benchmark: building model graphs (target: Llama-3-405B in < 1 s; issue 3, "Performance").

Builds the graph uncached (builder called directly) a few times and reports the best and median
wall time, then the rate of cached ``load_model`` look-ups (what every estimate pays), and the
machine it ran on. Run: ``.venv/bin/python benchmarks/bench_graph_build.py``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

from simtrain.graph.builders.transformer import build_transformer
from simtrain.graph.library import load_model, load_model_spec

TARGET_S = 1.0


def _time_build(name: str, repeats: int) -> list[float]:
    spec = load_model_spec(name)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model = build_transformer(spec)
        times.append(time.perf_counter() - t0)
    print(f"{name}: {len(model.ops)} ops, {len(model.blocks)} blocks, {model.param_count:,} parameters")
    return times


def _cached_rate(name: str, calls: int) -> float:
    load_model(name)
    t0 = time.perf_counter()
    for _ in range(calls):
        load_model(name)
    return calls / (time.perf_counter() - t0)


def main() -> int:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}")
    for name in ("llama3-405b", "gpt3-175b", "llama3-8b"):
        times = _time_build(name, repeats=5)
        best, median = min(times), statistics.median(times)
        verdict = "OK" if median < TARGET_S else "SLOW"
        print(f"  build (uncached): best {best * 1e3:.1f} ms, median {median * 1e3:.1f} ms "
              f"[target < {TARGET_S:.0f} s: {verdict}]")
    print(f"cached load_model('llama3-405b'): {_cached_rate('llama3-405b', 20000):,.0f} calls/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
