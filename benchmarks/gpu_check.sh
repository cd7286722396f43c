#!/usr/bin/env bash
# GPU check: the GPU tests (pytest -m gpu), then timings of evaluate (torch and onnxruntime),
# corruption generation and MaCS training steps; a short table at the end. About 10 minutes at most
# on one GPU.
#
#   bash benchmarks/gpu_check.sh            # from anywhere; runs the project from this tree
#
# Needs python3 with torch (CUDA build), timm, onnxruntime, typer, rich, scikit-learn, and pytest
# for the tests; no install (PYTHONPATH points at the tree). The tests are those marked `gpu`, run
# as PYTHONPATH=$PWD python3 -m pytest -m gpu FILES, where FILES are the test files that hold one:
# collecting only those needs nothing more than the list above (the CPU suite's reference libraries
# need not be there). Without pytest the tests are not run: the table says so and what to install,
# the timings still run, and the exit status is 1. onnxruntime without the CUDA provider is reported
# ("CPU build, CUDA provider unavailable") and its rows run on the CPU. No sample model in the tree:
# a random-init one is built.
# Environment: PYTHON (default python3), GPU_CHECK_BUDGET seconds (default 570),
# GPU_CHECK_OUT (where results.jsonl, table.txt and logs go; default $OUT or a temp dir).
# Exit status: 0 when every step succeeded, 1 otherwise (the table is printed either way).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-570}
WORK=$(mktemp -d -t gpu_check_work.XXXXXX)   # models and reports; removed at the end
trap 'rm -rf "$WORK"' EXIT
RESULTS_DIR=${GPU_CHECK_OUT:-${OUT:-$(mktemp -d -t gpu_check.XXXXXX)}}
mkdir -p "$RESULTS_DIR"
RESULTS=$RESULTS_DIR/results.jsonl
: > "$RESULTS"
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PY WORK RESULTS
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
START=$SECONDS
FAILED=0

# Record a row the way gpu_check.py does (names here are plain ASCII, no quotes).
row() { printf '{"row": "%s", "value": "%s", "note": "%s"}\n' "$1" "$2" "$3" >> "$RESULTS"; }

# step NAME LIMIT CMD...: run CMD under timeout (capped by what is left of the budget), log it, record failures.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - START)))
  if ((left < 20)); then
    row "$name" "skipped" "time budget of ${BUDGET}s used up"; echo "== $name: skipped (budget)"; return 0
  fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit}s)"
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" > "$RESULTS_DIR/$name.log" 2>&1 || rc=$?
  tail -n 40 "$RESULTS_DIR/$name.log"
  if ((rc == 124 || rc == 137)); then
    row "$name" "TIMEOUT" "stopped after ${limit}s; see $name.log"; FAILED=1
  elif ((rc != 0)); then
    row "$name" "FAILED (exit $rc)" "see $RESULTS_DIR/$name.log"; FAILED=1
  fi
  echo "== $name: exit $rc, $((SECONDS - t0))s"
}

# evaluate_cli LABEL MODEL DEVICE: the command users run, end to end (defaults: clean, noise+blur,
# 500-image sensitivity, 1000 bootstrap resamples, temperature fit), on the built-in test set.
evaluate_cli() {
  local label=$1 model=$2 device=$3 t0
  t0=$(date +%s.%N)
  "$PY" -m macs_audit evaluate "$model" --device "$device" --quiet -o "$WORK/report_$label.json"
  "$PY" - "$WORK/report_$label.json" "$t0" "$(date +%s.%N)" "$RESULTS" "$label" <<'EOF'
import json, sys
report, t0, t1, results, label = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
r = json.load(open(report))
m, rt = r["clean"]["metrics"], r["runtime"]
note = (f"{r['data']['n']} images, {rt['device']}, {r['model']['provider']}; acc {m['accuracy']:.4f}, "
        f"NLL {m['nll']:.4f}, robust acc {(r.get('robustness') or {}).get('robust_accuracy', float('nan')):.4f}")
with open(results, "a") as fh:
    fh.write(json.dumps({"row": f"evaluate CLI {label} (defaults, end to end)", "value": f"{t1 - t0:.1f} s", "note": note}) + "\n")
EOF
}

export -f evaluate_cli  # timeout runs programs, not functions: each evaluate step is a child bash

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"

step info 60 "$PY" benchmarks/gpu_check.py info "$RESULTS"
step prepare 120 "$PY" benchmarks/gpu_check.py prepare "$RESULTS" "$WORK"
# The GPU tests, by pytest; their summary line (and any skip reasons) as a row of the table.
mapfile -t GPU_TESTS < <(grep -rl --include='test_*.py' 'mark\.gpu' tests | sort)
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  row "tests (pytest -m gpu)" "NOT RUN" "pytest is not installed for $PY: install it (pip install pytest), then run again"
  echo "== tests: not run: pytest is not installed for $PY (pip install pytest)"; FAILED=1
elif ((${#GPU_TESTS[@]} == 0)); then
  row "tests (pytest -m gpu)" "NOT RUN" "no test file under tests/ holds a test marked gpu"; FAILED=1
else
  step tests 240 "$PY" -m pytest -m gpu -o addopts= -q -rs -p no:cacheprovider "${GPU_TESTS[@]}"
  if [[ -f $RESULTS_DIR/tests.log ]]; then
    summary=$(grep -E '(passed|failed|skipped|error|deselected|no tests ran)' "$RESULTS_DIR/tests.log" | tail -n 1 | tr -d '"\\=' | sed 's/^ *//; s/ *$//' || true)
    skips=$(grep '^SKIPPED' "$RESULTS_DIR/tests.log" | sed 's/^SKIPPED \[[0-9]*\] [^ ]* //' | sort -u | paste -sd';' - | sed 's/;/; /g' | tr -d '"\\' || true)
    row "tests (pytest -m gpu, ${#GPU_TESTS[@]} files)" "${summary:-?}" "${skips:+skips: $skips}"
  fi
fi

HAS_CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
ORT_CUDA=$("$PY" -c 'import onnxruntime as o, torch; print(int("CUDAExecutionProvider" in o.get_available_providers() and torch.cuda.is_available()))' 2>/dev/null || echo 0)
if [[ $HAS_CUDA == 1 ]]; then
  step evaluate_torch_cuda 120 bash -c 'set -euo pipefail; evaluate_cli "$@"' _ "torch cuda" "$WORK/model.safetensors" cuda
else
  row "evaluate CLI torch cuda" "skipped" "no CUDA device"
fi
if [[ -f $WORK/model.onnx ]]; then
  if [[ $ORT_CUDA == 1 ]]; then
    step evaluate_onnx_cuda 120 bash -c 'set -euo pipefail; evaluate_cli "$@"' _ "onnxruntime cuda" "$WORK/model.onnx" cuda
  else
    row "evaluate CLI onnxruntime cuda" "skipped" "onnxruntime: CPU build, CUDA provider unavailable (or no GPU)"
    step evaluate_onnx_cpu 120 bash -c 'set -euo pipefail; evaluate_cli "$@"' _ "onnxruntime cpu" "$WORK/model.onnx" cpu
  fi
fi
step throughput 150 "$PY" benchmarks/gpu_check.py throughput "$RESULTS" "$WORK"
step corruptions 180 "$PY" benchmarks/gpu_check.py corruptions "$RESULTS"
step train 120 "$PY" benchmarks/gpu_check.py train "$RESULTS"
if [[ $HAS_CUDA == 1 ]]; then
  step cifar_c 150 "$PY" benchmarks/gpu_check.py cifar_c "$RESULTS" "$WORK"
  step imagenet_grid 330 "$PY" benchmarks/gpu_check.py imagenet_grid "$RESULTS" "$WORK"
fi

row "total" "$((SECONDS - START)) s" "budget ${BUDGET}s; logs in $RESULTS_DIR"
"$PY" benchmarks/gpu_check.py table "$RESULTS" | tee "$RESULTS_DIR/table.txt"
exit "$FAILED"
