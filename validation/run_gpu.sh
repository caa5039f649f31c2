#!/usr/bin/env bash
# The validation suite on CUDA as one prepared command, for a machine with an NVIDIA GPU.
#
#   bash validation/run_gpu.sh [OUT_DIR]          (default validation/results)
#
# Runs, from the repository root, with the repository's virtual environment when there is one:
#   1. a check that torch sees a GPU (exits 3 otherwise: nothing is written);
#   2. python -m validation --device cuda --out OUT_DIR  — st.measure("cuda") on the full grid (GEMM,
#      attention, copies, h2d/d2h, NCCL collectives where 2+ GPUs exist), st.calibrate, then the zoo
#      at its standard sizes (fp32, true fp32: TF32 off), FLOPs, saved bytes and peak memory versus
#      torch.cuda.max_memory_allocated; the DataLoader cases run on the host CPU. DDP is not run on
#      CUDA (needs two GPUs for NCCL);
#   3. python -m validation.components.gpu_check --out OUT_DIR  — GEMM (bf16, fp8), fused attention
#      (SDPA flash and cuDNN), HBM and NCCL all-reduce microbenchmarks against the shipped device
#      profile of this GPU (hardware_specs/devices/*.yaml), ~2 min on one H200; writes
#      OUT_DIR/components-<gpu>.{json,md}. Set GPU_CHECK_ARGS="--quick" for a first try.
# Steps 2 and 3 both run even when one fails; the script exits non-zero if either did.
# Writes OUT_DIR/<gpu>.{json,md,png} (<gpu> = a slug of the GPU name, e.g. nvidia-h200) and the
# measurements it calibrated from, OUT_DIR/measurements-cuda-full-t<threads>.json (reused on a rerun).
# Set VALIDATION_ARGS for more options (e.g. VALIDATION_ARGS="--models gpt,resnet18 --repeats 10").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-validation/results}"
PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; elif ! command -v python3 >/dev/null; then PY=python; fi
# SUITE_TIMEOUT_S / CHECK_TIMEOUT_S: stop a step after that many seconds (a leased machine's time is
# short; the step's log so far, and the measurements the suite saves first, stay)
SUITE_LIMIT=(); CHECK_LIMIT=()
if [ -n "${SUITE_TIMEOUT_S:-}" ]; then SUITE_LIMIT=(timeout "$SUITE_TIMEOUT_S"); fi
if [ -n "${CHECK_TIMEOUT_S:-}" ]; then CHECK_LIMIT=(timeout "$CHECK_TIMEOUT_S"); fi
"$PY" - <<'PY' || exit 3
import sys
import torch
if not torch.cuda.is_available():
    print("run_gpu.sh: torch.cuda.is_available() is False: no GPU here", file=sys.stderr)
    sys.exit(1)
print(f"GPU: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}")
PY
export PYTHONUNBUFFERED=1
# true fp32 matmuls and convolutions, so the prediction's precision="fp32" is what runs
# fp32 steps run true fp32: the suite turns TF32 off itself (the NVIDIA_TF32_OVERRIDE=0 of before also
# turned the calibration's tf32 rows into fp32 ones, mislabelled)
status=0
# shellcheck disable=SC2086
"${SUITE_LIMIT[@]}" "$PY" -m validation --device cuda --out "$OUT" ${VALIDATION_ARGS:-} || { rc=$?; status=$rc
    echo "run_gpu.sh: the validation suite failed (exit $rc); running the component check anyway" >&2; }
# shellcheck disable=SC2086
"${CHECK_LIMIT[@]}" env -u NVIDIA_TF32_OVERRIDE "$PY" -m validation.components.gpu_check --out "$OUT" ${GPU_CHECK_ARGS:-} || { rc=$?; status=$((status ? status : rc))
    echo "run_gpu.sh: the component check failed (exit $rc)" >&2; }
exit "$status"
