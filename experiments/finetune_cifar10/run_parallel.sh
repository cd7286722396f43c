#!/bin/bash
# run.py's phases over two one-thread processes (2 CPU cores), logs in runs/finetune_cifar10/.
# Every run is single-threaded, seeded and independent, so how the runs are split over the
# processes does not change any result (the committed ones were split a little differently).
#   experiments/finetune_cifar10/run_parallel.sh DATA_DIR    (cifar10_train.npz, cifar10_test.npz; see run.py)
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DATA_DIR" >&2; exit 2; fi
DATA_DIR=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
RUN=(python experiments/finetune_cifar10/run.py --threads 1 --sweep-epochs 0.5 --final-epochs 1 --data-dir "$DATA_DIR")
LOGS=runs/finetune_cifar10
mkdir -p "$LOGS"

# both_then_wait "A ARGS" "B ARGS": two run.py processes side by side; fails if either fails.
both_then_wait() {
    "${RUN[@]}" $1 >> "$LOGS/a.log" 2>&1 & local a=$!
    "${RUN[@]}" $2 >> "$LOGS/b.log" 2>&1 & local b=$!
    wait "$a" && wait "$b"
}

"${RUN[@]}" prepare
"${RUN[@]}" start
# the sweep, then the MaCS finals (they need the chosen defaults); the baselines need no sweep
both_then_wait "sweep --runs ce_sweep,macs_d1_m0.1_c1,macs_d1_m0_c1,macs_d1_m0.1_c0,macs_d0.5_m0.1_c1,macs_d2_m0.1_c1" \
               "sweep --runs macs_d1_m0.3_c1,macs_d1_m0.03_c1,macs_d1_m0.1_c3,macs_d1_m0.1_c10,macs_d2_m0.3_c3"
both_then_wait "final --runs macs_s0,macs_s1,ce_s0,focal_s0,label-smoothing_s0,mixup_s0,ce_s1" \
               "final --runs macs_s2,ce_s2,focal_s1,label-smoothing_s1,mixup_s1,focal_s2,label-smoothing_s2,mixup_s2"
"${RUN[@]}" table
