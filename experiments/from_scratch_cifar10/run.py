"""CE against MaCS trained from scratch on CIFAR-10: the paper's own setting.

The sample model's architecture (macs_resnet9_c10) from its seeded random initialisation, trained with
the sample model's schedule (`finetune --from-scratch`: 16 epochs of 256, SGD lr 0.2, 2 warm-up epochs,
cosine to 0, weight decay 5e-4) by the fine-tuning loop, for CE and for MaCS with the shipped defaults
(the calibrated preset's loss weights), seeds 0-2, the same budget. The validation split is the
class-stratified 10% of the training data that `finetune` holds out; the temperature is fitted there,
nothing is chosen on the test set.

Each run checkpoints every CHECKPOINT_EVERY steps under runs/from_scratch_cifar10/ (not committed) and
resumes from it when started again; a finished run writes results/runs/NAME.json and is skipped after.

    RUN="nice -n 15 python experiments/from_scratch_cifar10/run.py"
    $RUN train --data-dir DATA --runs ce_s0,ce_s1,ce_s2 --threads 1 &      # one lane per core
    $RUN train --data-dir DATA --runs macs_s0,macs_s1,macs_s2 --threads 1 &
    python experiments/from_scratch_cifar10/run.py table   # results/table.md from what has finished

DATA holds cifar10_train.npz and cifar10_test.npz (x uint8 N x 32 x 32 x 3, y labels). Scoring reuses
experiments/finetune_cifar10/run.py's functions (the audit's loop and views, its CIFAR-10-C subset).
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import statistics
import time
from pathlib import Path

import timm
import torch

from macs_audit.data.sources import load_source
from macs_audit.finetune.loop import finetune
from macs_audit.finetune.options import FinetuneOptions
from macs_audit.finetune.scratch import random_initialisation
from macs_audit.models import architectures  # noqa: F401  (registers macs_resnet9_c10)
from macs_audit.models.config import CIFAR10_MEAN, CIFAR10_STD

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
WORK = ROOT / "runs" / "from_scratch_cifar10"
ARCH = "macs_resnet9_c10"
CHECKPOINT_EVERY = 25  # optimizer steps (an epoch is 175): a stop loses at most this much of one run
RUNS = [f"{objective}_s{seed}" for seed in (0, 1, 2) for objective in ("ce", "macs")]

_spec = importlib.util.spec_from_file_location("finetune_experiment", HERE.parent / "finetune_cifar10" / "run.py")
scoring = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scoring)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def run_options(name: str) -> FinetuneOptions:
    objective, seed = name.rsplit("_s", 1)
    base = FinetuneOptions(objective=objective, seed=int(seed), mean=CIFAR10_MEAN, std=CIFAR10_STD, device="cpu")
    return base.with_from_scratch()  # MaCS keeps the calibrated preset's loss weights (the defaults)


def prepared_corruptions() -> None:
    """The finetune experiment's CIFAR-10-C subset, made once (a lock: two lanes may reach it together)."""
    scoring.WORK.mkdir(parents=True, exist_ok=True)
    with open(scoring.WORK / "cifar10c_subset.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        scoring.prepare()


def train(name: str) -> None:
    path = RESULTS / "runs" / f"{name}.json"
    if path.exists():
        return
    options = run_options(name)
    model = timm.create_model(ARCH, num_classes=10)
    random_initialisation(model, ARCH, 10, options.seed)
    checkpoint = WORK / name / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    options = FinetuneOptions.from_dict({**options.to_dict(), "checkpoint_every": CHECKPOINT_EVERY})
    last = [0.0]

    def progress(description, done, total, terms=None):
        if time.time() - last[0] > 120:
            last[0] = time.time()
            shown = " ".join(f"{k} {v:.4g}" for k, v in (terms or {}).items())
            log(f"  {name} {description} {done}/{total} {shown}")

    started = time.time()
    log(f"{name}: start{' (resuming)' if checkpoint.exists() else ''}")
    result = finetune(
        model, load_source(scoring.DATA / "cifar10_train.npz"), options, progress, checkpoint, checkpoint.exists()
    )
    seconds = round(time.time() - started)
    prepared_corruptions()
    metrics = scoring.test_metrics(result.model, options)
    scoring.save_json(
        path,
        {
            "name": name,
            "options": options.to_dict(),
            "history": result.history,
            "seconds_this_process": seconds,
            "resumed_from_step": result.resumed_from_step,
            **metrics,
            **scoring.selection_metrics(result.model, options),
        },
    )
    c = metrics["clean"]
    log(f"{name}: test acc {c['accuracy']:.4f} ece {c['ece']:.4f} nll {c['nll']:.4f} T {metrics['temperature']:.3f}")


def mean_std(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    values = [v * scale for v in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def table() -> str:
    rows = [
        "| objective | seeds | accuracy % | ECE % | NLL | ECE % after T | NLL after T | T | noise+blur acc. % "
        "| CIFAR-10-C acc. % (19x5) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for objective in ("ce", "macs"):
        runs = [json.loads(p.read_text()) for p in sorted((RESULTS / "runs").glob(f"{objective}_s*.json"))]
        if not runs:
            rows.append(f"| {objective} | 0 | (not finished) | | | | | | | |")
            continue
        cells = [
            mean_std([r["clean"]["accuracy"] for r in runs], 100),
            mean_std([r["clean"]["ece"] for r in runs], 100),
            mean_std([r["clean"]["nll"] for r in runs], 1, 4),
            mean_std([r["clean_after_t"]["ece"] for r in runs], 100),
            mean_std([r["clean_after_t"]["nll"] for r in runs], 1, 4),
            mean_std([r["temperature"] for r in runs], 1, 3),
            mean_std([r["robust"]["accuracy"] for r in runs], 100),
            mean_std([r["cifar10c"]["mean_19x5"] for r in runs], 100),
        ]
        seeds = ",".join(r["name"].rsplit("_s", 1)[1] for r in runs)
        rows.append(f"| {objective} | {len(runs)} ({seeds}) | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=("train", "table"))
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated run names (OBJECTIVE_sSEED)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    scoring.DATA = args.data_dir
    if args.phase == "train":
        for name in args.runs.split(","):
            if name not in RUNS:
                raise SystemExit(f"unknown run {name!r}; one of {', '.join(RUNS)}")
            train(name)
    (RESULTS).mkdir(parents=True, exist_ok=True)
    scoring.write_text(RESULTS / "table.md", table())


if __name__ == "__main__":
    main()
