"""Where ``simtrain validate`` writes, and the key of its measurement cache.

Output: ``--out DIR`` when given; else ``./simtrain-validation/`` under the current directory, unless
that directory lies inside the source checkout or the installed package (running from the repository
root would otherwise write into the source tree), in which case a user directory,
``$XDG_CACHE_HOME/simtrain/validation`` (default ``~/.cache/simtrain/validation``). The committed
results (``validation/results/``) are written only when named explicitly with ``--out``.

Cache: the suite saves its microbenchmark measurements beside the report and reuses them on the next
run. A measurement is only valid for the machine, the libraries and the benchmark code that made it,
so the cache file's name carries :func:`cache_key` — a hash of the simtrain and torch versions, a
machine fingerprint (CPU model, cores, host hash, GPU name and count, CUDA version) and the source of
``simtrain/calibrate/`` — and a change of any of them misses the cache instead of reusing stale numbers.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["COMMITTED_RESULTS", "default_out_dir", "cache_key", "machine_fingerprint", "cached_measurements_path"]

COMMITTED_RESULTS = Path(__file__).resolve().parent / "results"
_CACHE_NAME = "simtrain-validation"


def _inside(path: Path, root: Path | None) -> bool:
    if root is None:
        return False
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _protected_roots() -> list[Path]:
    """The source checkout (when simtrain runs from one), the installed simtrain and validation packages."""
    import simtrain
    from simtrain._data import source_checkout
    roots = [Path(simtrain.__file__).resolve().parent, Path(__file__).resolve().parent]
    checkout = source_checkout()
    return roots + ([checkout] if checkout is not None else [])


def default_out_dir(cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """``cwd/simtrain-validation`` unless ``cwd`` is inside a protected root; then the user cache dir."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    env = os.environ if env is None else env
    here = cwd / _CACHE_NAME
    if not any(_inside(here, r) for r in _protected_roots()):
        return here
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "simtrain" / "validation"


def machine_fingerprint(device: str) -> dict[str, object]:
    """The facts a measurement depends on beyond its settings (no timing, no thread count)."""
    import torch

    import simtrain
    from simtrain.calibrate.machine import machine_facts
    f = machine_facts(device, 1)
    return {"simtrain": simtrain.__version__, "torch": torch.__version__, "cpu_model": f.cpu_model,
            "cpu_cores": f.cpu_cores, "host": f.hostname_hash, "gpu": f.gpu_name, "gpu_count": f.gpu_count,
            "cuda": f.cuda_version}


def _code_hash() -> str:
    import simtrain.calibrate as cal
    h = hashlib.sha256()
    for p in sorted(Path(cal.__file__).resolve().parent.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def cache_key(device: str, fingerprint: dict | None = None, code_hash: str | None = None) -> str:
    """16 hex digits over the fingerprint and the benchmark code (see the module docstring)."""
    fp = machine_fingerprint(device) if fingerprint is None else fingerprint
    text = repr(sorted(fp.items())) + (code_hash if code_hash is not None else _code_hash())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_measurements_path(out_dir: Path, device: str, grid: str, threads: int, key: str | None = None) -> Path:
    return Path(out_dir) / f"measurements-{device}-{grid}-t{threads}-{key or cache_key(device)}.json"
