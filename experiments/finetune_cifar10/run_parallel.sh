#!/bin/bash
# The whole study of docs/finetune-experiment.md over two one-thread processes (2 CPU cores), logs in
# runs/finetune_cifar10/. Every run is single-threaded, seeded and independent, so how the runs are split
# over the processes does not change any result (the committed ones were split differently).
#   experiments/finetune_cifar10/run_parallel.sh DATA_DIR    (cifar10_train.npz, cifar10_test.npz; see run.py)
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DATA_DIR" >&2; exit 2; fi
DATA_DIR=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
RUN=(python experiments/finetune_cifar10/run.py --threads 1 --sweep-epochs 0.5 --final-epochs 1 --data-dir "$DATA_DIR")
MAP=(python experiments/finetune_cifar10/tradeoff.py)
LOGS=runs/finetune_cifar10
mkdir -p "$LOGS"

# both_then_wait "A COMMAND" "B COMMAND": two processes side by side; fails if either fails.
both_then_wait() {
    $1 >> "$LOGS/a.log" 2>&1 & local a=$!
    $2 >> "$LOGS/b.log" 2>&1 & local b=$!
    wait "$a" && wait "$b"
}

"${RUN[@]}" prepare
"${RUN[@]}" start
# The first sweep (it chose Delta and lambda_m), then the trade-off map on the validation split, which
# chose lambda_c and the rest of the defaults and presets (alternate runs to each process), its report and
# figure.
both_then_wait "${RUN[*]} sweep --runs ce_sweep,macs_d1_m0.1_c1,macs_d1_m0_c1,macs_d1_m0.1_c0,macs_d0.5_m0.1_c1,macs_d2_m0.1_c1" \
               "${RUN[*]} sweep --runs macs_d1_m0.3_c1,macs_d1_m0.03_c1,macs_d1_m0.1_c3,macs_d1_m0.1_c10,macs_d2_m0.3_c3"
RUNS=$("${MAP[@]}" list)
A=$(echo "$RUNS" | awk 'NR % 2 == 1' | paste -sd, -)
B=$(echo "$RUNS" | awk 'NR % 2 == 0' | paste -sd, -)
both_then_wait "${MAP[*]} run --threads 1 --data-dir $DATA_DIR --runs $A" \
               "${MAP[*]} run --threads 1 --data-dir $DATA_DIR --runs $B"
"${MAP[@]}" report
# The test-set comparison: the shipped defaults and the baselines, 3 seeds each; the robust preset
# (3 epochs), seeds 0 and 1 (macs-robust_s2 is in run.py's list, not in the committed results).
both_then_wait "${RUN[*]} final --runs macs_s0,macs_s1,macs_s2,ce_s0,ce_s1,ce_s2,focal_s0,focal_s1,focal_s2" \
               "${RUN[*]} final --runs label-smoothing_s0,label-smoothing_s1,label-smoothing_s2,mixup_s0,mixup_s1,mixup_s2,macs-robust_s0,macs-robust_s1"
"${RUN[@]}" table
