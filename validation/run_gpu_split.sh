#!/usr/bin/env bash
# The GPU suite split for a leased machine whose minutes are few: measure and time on the GPU, fit and
# predict anywhere later (the fit of a CUDA measurement set takes minutes of one CPU core and no GPU).
#
#   bash validation/run_gpu_split.sh OUT_DIR          on the GPU machine, ~4 min on one H200
#   python -m validation.step_times predict OUT_DIR/steps-cuda.json \
#       --measurements OUT_DIR/measurements-cuda.json --out OUT_DIR/steps-cuda.md   anywhere
#
# Writes OUT_DIR/measurements-cuda.json (st.measure("cuda"), full grid), OUT_DIR/steps-cuda.json
# (validation.step_times: every zoo and unseen model's step at the standard sizes, true fp32, with the
# overhead chains) and, unless CHECK=0, the component check's OUT_DIR/components-<gpu>.{json,md}.
# MEASURE_TIMEOUT_S / STEPS_TIMEOUT_S / CHECK_TIMEOUT_S bound each step (defaults 240 / 150 / 120).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: run_gpu_split.sh OUT_DIR}"
mkdir -p "$OUT"
PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
export PYTHONUNBUFFERED=1
status=0
timeout "${MEASURE_TIMEOUT_S:-240}" "$PY" - "$OUT" <<'PY' || status=$?
import sys
import time

import simtrain as st

start = time.perf_counter()
st.measure("cuda", grid="full", out=f"{sys.argv[1]}/measurements-cuda.json",
           log=lambda m: print(f"[{time.perf_counter() - start:6.1f} s] {m}", flush=True))
PY
timeout "${STEPS_TIMEOUT_S:-150}" "$PY" -m validation.step_times time --device cuda --out "$OUT/steps-cuda.json" \
    || status=$((status ? status : $?))
if [ "${CHECK:-1}" != 0 ]; then
    # shellcheck disable=SC2086
    timeout "${CHECK_TIMEOUT_S:-120}" "$PY" -m validation.components.gpu_check --out "$OUT" ${GPU_CHECK_ARGS:-} \
        || status=$((status ? status : $?))
fi
exit "$status"
