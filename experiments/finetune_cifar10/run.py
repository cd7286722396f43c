"""MaCS against the baselines on real CIFAR-10, starting from the cross-entropy sample model.

Phases (each run writes its own result file and is skipped when it exists, so a stop loses at most
one epoch of one run; fine-tuning checkpoints live in runs/finetune_cifar10/ and are resumed):

  prepare  cache the CIFAR-10-C subset (1,000 stratified test images, 19 corruptions x 5
           severities; C_EVAL of them are scored)
  start    the start model, and temperature scaling of it (T fitted on the validation split)
  sweep    MaCS (Delta, lambda_m, lambda_c) configurations with a short budget, which chose Delta and
           lambda_m (lambda_c and the rest: the trade-off map of tradeoff.py); the choice was the
           lowest mean of clean and noise+blur NLL on the validation split
  final    CE, focal, label smoothing, mixup, MaCS (the shipped defaults) and MaCS --preset robust:
           same budget (the preset's own epochs), seeds 0-2; every run scored on the whole CIFAR-10
           test set with and without the temperature `finetune` folds in (fitted on the validation split)
  table    the markdown tables in results/

The validation split is the class-stratified 10% (5,000 images) of the training data that
`finetune` holds out by default; the start model (sample_models/train_sample.py) never trained on
it, so it ranks configurations honestly. Every choice (MaCS defaults, temperatures) is made on it;
the test set is only reported on.

    python experiments/finetune_cifar10/run.py all --data-dir DATA --final-epochs 1 --sweep-epochs 0.5 --threads 1
    # or the independent parts in two processes:
    python experiments/finetune_cifar10/run.py final --data-dir DATA --runs ce_s0,focal_s0,label-smoothing_s0,mixup_s0
    (experiments/finetune_cifar10/run_parallel.sh DATA: the split used for the committed results)

DATA is a folder holding cifar10_train.npz and cifar10_test.npz: arrays x (uint8, N x 32 x 32 x 3) and
y (labels), the 50,000 training and 10,000 test images of the CIFAR-10 python batches.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from macs_audit.atomic import write_text
from macs_audit.auditing import Loop, evaluate_view
from macs_audit.calibrators.temperature import optimal_temperature
from macs_audit.data.sources import load_source, unlabeled_source
from macs_audit.data.splits import stratified_subset
from macs_audit.finetune.loop import TrainingPredictor, finetune, load_train_data
from macs_audit.finetune.options import FinetuneOptions
from macs_audit.metrics import accumulators
from macs_audit.models.export import save_safetensors
from macs_audit.models.predictor import load_predictor
from macs_audit.views.perturbation_params import ROBUST_VIEW
from macs_audit.views.view import CLEAN, View, perturbation

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
WORK = ROOT / "runs" / "finetune_cifar10"  # checkpoints, weights, cached corrupted images (not committed)
START = ROOT / "sample_models" / "resnet9_c10_ce.safetensors"
DATA = Path()  # the --data-dir folder (cifar10_train.npz, cifar10_test.npz), set once by main()
C_SUBSET = 1000  # CIFAR-10-C images prepared; C_EVAL of them (stratified) are scored per model
C_EVAL = 500

# The same budget and optimiser for every objective; only the loss differs.
BUDGET = dict(batch_size=128, optimizer="sgd", lr=0.02, weight_decay=5e-4, warmup=0.1, val_fraction=0.1, split_seed=0)
# (Delta, lambda_m, lambda_c); the first is the method reference's starting default.
SWEEP = [
    (1.0, 0.1, 1.0),
    (1.0, 0.0, 1.0),
    (1.0, 0.1, 0.0),
    (0.5, 0.1, 1.0),
    (2.0, 0.1, 1.0),
    (1.0, 0.3, 1.0),
    (1.0, 0.03, 1.0),
    (1.0, 0.1, 3.0),
    (1.0, 0.1, 10.0),
    (2.0, 0.3, 3.0),
]
OBJECTIVES = ("macs", "ce", "focal", "label-smoothing", "mixup", "macs-robust")  # macs-robust: --preset robust
FINAL = [(objective, seed) for seed in (0, 1, 2) for objective in OBJECTIVES]


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def save_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def start_model():
    predictor = load_predictor(START, device="cpu")
    return predictor.model.train(), predictor.config


def base_options(cfg, **kw) -> FinetuneOptions:
    return FinetuneOptions(
        **BUDGET, input_size=tuple(cfg.input_size), mean=tuple(cfg.mean), std=tuple(cfg.std), device="cpu", **kw
    )


# ------------------------------------------------------------------------------------------ data
@functools.lru_cache(maxsize=None)
def test_data():
    """The whole CIFAR-10 test set, uint8 NHWC: reported on, never selected on. Read once."""
    test = np.load(DATA / "cifar10_test.npz")
    return test["x"], test["y"].astype(np.int64)


def validation_data(options):
    """The validation split `finetune` holds out of the training data (the start model never saw it)."""
    return _validation_split(options.val_fraction, options.split_seed)


@functools.lru_cache(maxsize=None)
def _validation_split(val_fraction: float, split_seed: int):
    data = load_train_data(
        load_source(DATA / "cifar10_train.npz"), FinetuneOptions(val_fraction=val_fraction, split_seed=split_seed)
    )
    return data.val.images(np.arange(len(data.val))), data.val.labels


def prepare() -> None:
    from macs_audit.views.corruptions.apply import batch_seed, corrupt
    from macs_audit.views.corruptions.table import CORRUPTIONS

    path = WORK / "cifar10c_subset.npz"
    if path.exists():
        return
    x, y = test_data()
    pick = stratified_subset(y, C_SUBSET, seed=0)
    clean = torch.from_numpy(np.ascontiguousarray(x[pick]))  # uint8 NHWC
    images = np.empty((len(CORRUPTIONS), 5, len(pick), 32, 32, 3), dtype=np.uint8)
    for ci, name in enumerate(CORRUPTIONS):
        for severity in range(1, 6):
            images[ci, severity - 1] = corrupt(clean, name, severity, seed=batch_seed(0, name, severity, 0)).numpy()
        log(f"prepared {name}")
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "cifar10c_subset.tmp.npz", "wb") as fh:
        np.savez(fh, images=images, labels=y[pick], positions=pick, names=np.array(CORRUPTIONS))
    (WORK / "cifar10c_subset.tmp.npz").rename(path)


# ------------------------------------------------------------------------------------ evaluation
def predicted_logits(model, x, options, view: View = CLEAN, batch_size: int | None = None) -> np.ndarray:
    """The model's logits of uint8 NHWC images `x` through `view`, by the audit's loop (evaluate_view) in
    batches of `batch_size` (default options.eval_batch_size), as fine-tuning's validation reads them."""
    source = unlabeled_source("images", "npz", x)
    _, out = evaluate_view(
        TrainingPredictor(model, options, 10),
        source,
        10,
        Loop(batch_size or options.eval_batch_size),
        view=view,
        keep_logits=True,
        accumulate=False,
    )
    return out


def robust_logits(model, x, options, batch_size: int = 500) -> np.ndarray:
    """The audit's robust-accuracy view (blur 0.7 then noise 0.08, seed 0), with the audit's own view
    function and batching (500), so the noise is the bytes `evaluate` would draw for these images."""
    return predicted_logits(model, x, options, perturbation(ROBUST_VIEW, 0, "cpu"), batch_size)


def summary(logits, labels) -> dict:
    m = accumulators.calibration_metrics(logits, labels, 10)
    return {k: m[k] for k in ("accuracy", "ece", "adaptive_ece", "nll", "brier", "mean_confidence", "mean_margin")}


def corruption_accuracy(model, options) -> dict:
    from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS

    data = np.load(WORK / "cifar10c_subset.npz")
    keep = stratified_subset(data["labels"], C_EVAL, seed=0)
    images, labels, names = data["images"][:, :, keep], data["labels"][keep], [str(n) for n in data["names"]]
    acc = np.zeros((len(names), 5))
    for ci in range(len(names)):
        for s in range(5):
            acc[ci, s] = (predicted_logits(model, images[ci, s], options).argmax(1) == labels).mean()
    bench = [i for i, n in enumerate(names) if n in BENCHMARK_CORRUPTIONS]
    return {
        "mean_19x5": float(acc.mean()),
        "mean_15x5": float(acc[bench].mean()),
        "n_images": int(len(labels)),
        "per_corruption": {n: float(acc[i].mean()) for i, n in enumerate(names)},
        "per_severity": [float(v) for v in acc.mean(0)],
    }


def test_metrics(model, options) -> dict:
    """Test-set scores, raw and after the temperature `finetune` folds in by default (fitted on the
    validation split; it changes no prediction, so the CIFAR-10-C accuracies hold for both)."""
    x, y = test_data()
    x_val, y_val = validation_data(options)
    t = optimal_temperature(predicted_logits(model, x_val, options), y_val)
    clean, robust = predicted_logits(model, x, options), robust_logits(model, x, options)
    return {
        "temperature": t,
        "clean": summary(clean, y),
        "robust": summary(robust, y),
        "clean_after_t": summary(clean / t, y),
        "robust_after_t": summary(robust / t, y),
        "cifar10c": corruption_accuracy(model, options),
    }


def selection_metrics(model, options) -> dict:
    """Clean and noise+blur metrics on the validation split: what the sweep ranks by."""
    x, y = validation_data(options)
    return {
        "val": summary(predicted_logits(model, x, options), y),
        "val_robust": summary(robust_logits(model, x, options), y),
    }


# ------------------------------------------------------------------------------------------ runs
def train_run(name: str, options: FinetuneOptions, save_weights: bool):
    model, cfg = start_model()
    source = load_source(DATA / "cifar10_train.npz")
    ckpt = WORK / "ckpt" / f"{name}.pt"
    started = time.time()
    last = [0.0]

    def progress(description, done, total, terms=None):
        if terms and time.time() - last[0] > 60:
            last[0] = time.time()
            log(f"  {name} {description} {done}/{total} " + " ".join(f"{k} {v:.4g}" for k, v in terms.items()))

    result = finetune(model, source, options, progress=progress, checkpoint=ckpt, resume=ckpt.exists())
    if save_weights:
        save_safetensors(result.model, WORK / "models" / f"{name}.safetensors")
    return result, round(time.time() - started, 1)


def run_start() -> None:
    path = RESULTS / "runs" / "start.json"
    if path.exists():
        return
    model, cfg = start_model()
    options = base_options(cfg)
    x, y = test_data()
    clean = predicted_logits(model, x, options)
    robust = robust_logits(model, x, options)
    x_val, y_val = validation_data(options)
    t_val = optimal_temperature(predicted_logits(model, x_val, options), y_val)
    c10c = corruption_accuracy(model, options)  # temperature scaling leaves every argmax unchanged
    save_json(
        path,
        {
            "name": "start (CE sample model)",
            "clean": summary(clean, y),
            "robust": summary(robust, y),
            "cifar10c": c10c,
            **selection_metrics(model, options),
        },
    )
    save_json(
        RESULTS / "runs" / "ts_val.json",
        {
            "name": "temperature scaling (T fitted on the validation split)",
            "temperature": t_val,
            "clean": summary(clean / t_val, y),
            "robust": summary(robust / t_val, y),
            "cifar10c": c10c,
        },
    )
    log(f"start model done: T(val) = {t_val:.3f}")


def sweep_name(delta, lm, lc) -> str:
    return f"macs_d{delta:g}_m{lm:g}_c{lc:g}"


def run_sweep(epochs: float, only: list[str] | None = None) -> None:
    configs = [("ce", None)] + [("macs", c) for c in SWEEP]
    for objective, config in configs:
        name = "ce_sweep" if config is None else sweep_name(*config)
        path = RESULTS / "sweep" / f"{name}.json"
        if path.exists() or (only is not None and name not in only):
            continue
        _, cfg = start_model()
        extra = {} if config is None else dict(delta=config[0], lambda_m=config[1], lambda_c=config[2])
        extra["bn_stats"] = "both"  # as when the sweep ran, before --bn-stats existed
        options = base_options(cfg, objective=objective, epochs=epochs, seed=0, **extra)
        log(f"sweep {name}: start")
        result, seconds = train_run(f"sweep_{name}", options, save_weights=False)
        sel = selection_metrics(result.model, options)
        save_json(
            path,
            {
                "name": name,
                "objective": objective,
                "config": config,
                "options": options.to_dict(),
                **sel,
                "history": result.history,
                "seconds": seconds,
            },
        )
        v = sel["val"]
        log(
            f"sweep {name}: val acc {v['accuracy']:.4f} ece {v['ece']:.4f} nll {v['nll']:.4f} "
            f"robust {sel['val_robust']['accuracy']:.4f} ({seconds:.0f}s)"
        )


def selection_score(run: dict) -> float:
    """Mean of the clean NLL and the noise+blur NLL on the validation split: calibrated on clean
    data and under shift, the question the audit asks (lower is better)."""
    return (run["val"]["nll"] + run["val_robust"]["nll"]) / 2


def chosen_config(score=selection_score) -> tuple[float, float, float]:
    runs = [json.loads(p.read_text()) for p in sorted((RESULTS / "sweep").glob("macs_*.json"))]
    if len(runs) < len(SWEEP):
        raise SystemExit(f"the sweep has {len(runs)} of {len(SWEEP)} results: run the sweep phase first")
    return tuple(min(runs, key=score)["config"])


def final_options(objective: str, cfg, epochs: float, seed: int) -> FinetuneOptions:
    """MaCS with the shipped defaults (`macs`) or a preset (`macs-robust`); the baselines with theirs."""
    if objective.startswith("macs-"):  # the preset's values as `finetune --preset` sets them (epochs included)
        return base_options(cfg, objective="macs", epochs=epochs, seed=seed).with_preset(
            objective.removeprefix("macs-")
        )
    return base_options(cfg, objective=objective, epochs=epochs, seed=seed)


def run_final(epochs: float, only: list[str] | None = None) -> None:
    todo = [(o, s) for o, s in FINAL if only is None or f"{o}_s{s}" in only]
    for objective, seed in todo:
        name = f"{objective}_s{seed}"
        path = RESULTS / "runs" / f"{name}.json"
        if path.exists():
            continue
        _, cfg = start_model()
        options = final_options(objective, cfg, epochs, seed)
        log(f"final {name}: start")
        result, seconds = train_run(name, options, save_weights=True)
        evaluation = test_metrics(result.model, options)
        save_json(
            path,
            {
                "name": name,
                "objective": objective,
                "seed": seed,
                "options": options.to_dict(),
                "history": result.history,
                "seconds": seconds,
                **evaluation,
            },
        )
        log(
            f"final {name}: acc {evaluation['clean']['accuracy']:.4f} ece {evaluation['clean']['ece']:.4f} "
            f"nll {evaluation['clean']['nll']:.4f} robust {evaluation['robust']['accuracy']:.4f} "
            f"c10c {evaluation['cifar10c']['mean_19x5']:.4f} ({seconds:.0f}s)"
        )


# ---------------------------------------------------------------------------------------- tables
def mean_std(values, scale=100.0, digits=2) -> str:
    values = [scale * v for v in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def tables() -> str:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted((RESULTS / "runs").glob("*.json"))}
    t_val = runs["ts_val"]["temperature"] if "ts_val" in runs else float("nan")
    groups = [
        ("start (CE sample model, no fine-tuning)", ["start"], ""),
        (f"temperature scaling alone (start model, T = {t_val:.3f} fit on the validation split)", ["ts_val"], ""),
    ]
    labels = {
        "ce": "CE",
        "focal": "focal (gamma 3)",
        "label-smoothing": "label smoothing (0.1)",
        "mixup": "mixup (alpha 0.2)",
        "macs": "MaCS, shipped defaults",
        "macs-robust": "MaCS, --preset robust",
    }
    for objective, label in labels.items():
        if f"{objective}_s0" in runs and objective.startswith("macs"):
            o = runs[f"{objective}_s0"]["options"]
            blur, noise = o["blur_range"], o["noise_range"]
            label += f" (lambda_c {o['lambda_c']:g}, lambda_m {o['lambda_m']:g}, blur {blur}, noise {noise})"
        names = sorted(n for n in runs if n.startswith(objective + "_s"))
        if names:
            groups.append((f"{label} fine-tuned", names, ""))
            if all("clean_after_t" in runs[n] for n in names):
                ts = mean_std([runs[n]["temperature"] for n in names], 1, 3)
                groups.append((f"{label} fine-tuned + T (T = {ts})", names, "_after_t"))
    lines = [
        "| method | seeds | accuracy % | ECE % | NLL | robust acc. % | robust ECE % "
        "| CIFAR-10-C acc. % (19x5) | (15x5) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    severity = ["| method | seeds | severity 1 | 2 | 3 | 4 | 5 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, names, after in groups:
        rs = [runs[n] for n in names if n in runs]
        if not rs:
            continue
        clean, robust = f"clean{after}", f"robust{after}"
        lines.append(
            f"| {label} | {len(rs)} | {mean_std([r[clean]['accuracy'] for r in rs])} | "
            f"{mean_std([r[clean]['ece'] for r in rs])} | {mean_std([r[clean]['nll'] for r in rs], 1, 4)} | "
            f"{mean_std([r[robust]['accuracy'] for r in rs])} | {mean_std([r[robust]['ece'] for r in rs])} | "
            f"{mean_std([r['cifar10c']['mean_19x5'] for r in rs])} | "
            f"{mean_std([r['cifar10c']['mean_15x5'] for r in rs])} |"
        )
        if not after and names[0] != "ts_val":
            per = [mean_std([r["cifar10c"]["per_severity"][s] for r in rs]) for s in range(5)]
            severity.append(f"| {label.split(' (')[0]} | {len(rs)} | " + " | ".join(per) + " |")
    final = "\n".join(lines) + "\n\nCIFAR-10-C accuracy % by severity (mean of the 19 corruptions):\n\n"
    final += "\n".join(severity) + "\n"
    write_text(
        RESULTS / "final.md",
        "# Fine-tuning CIFAR-10: test results (10,000 test images; mean ± std over seeds)\n\n" + final,
    )

    sweep = [json.loads(p.read_text()) for p in sorted((RESULTS / "sweep").glob("*.json"))]
    rows = [
        "| run | Delta | lambda_m | lambda_c | score | val acc. % | val ECE % | val NLL | val robust acc. % | "
        "val robust ECE % | val robust NLL | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    chosen = chosen_config() if any(r["objective"] == "macs" for r in sweep) else None
    if "start" in runs and "val" in runs["start"]:
        sweep = sweep + [{**runs["start"], "name": "start model (no fine-tuning)", "config": None, "seconds": 0}]
    for r in sorted(sweep, key=selection_score):
        c = r["config"] or ["-", "-", "-"]
        mark = " (chosen)" if r["config"] and tuple(r["config"]) == chosen else ""
        sel, rob = r["val"], r["val_robust"]
        rows.append(
            f"| {r['name']}{mark} | {c[0]} | {c[1]} | {c[2]} | {selection_score(r):.4f} | "
            f"{100 * sel['accuracy']:.2f} | {100 * sel['ece']:.2f} | {sel['nll']:.4f} | {100 * rob['accuracy']:.2f} | "
            f"{100 * rob['ece']:.2f} | {rob['nll']:.4f} | {r['seconds']:.0f} |"
        )
    if chosen:
        clean_only = chosen_config(lambda r: r["val"]["nll"])
        rows.append(
            f"\nChosen by the score (mean of clean and noise+blur NLL): {chosen}. "
            f"By clean NLL alone the choice would be {clean_only}."
        )
    sweep_md = "\n".join(rows) + "\n"
    write_text(
        RESULTS / "sweep.md",
        "# MaCS sweep on the validation split (5,000 training images the start model never saw), "
        "sorted by the selection score\n\n" + sweep_md,
    )

    per_run = [
        "| run | seconds | accuracy % | ECE % | NLL | robust acc. % | CIFAR-10-C 19x5 % |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in runs.items():
        per_run.append(
            f"| {n} | {r.get('seconds', '-')} | {100 * r['clean']['accuracy']:.2f} | {100 * r['clean']['ece']:.2f} | "
            f"{r['clean']['nll']:.4f} | {100 * r['robust']['accuracy']:.2f} | {100 * r['cifar10c']['mean_19x5']:.2f} |"
        )
    write_text(RESULTS / "runs.md", "# Every run\n\n" + "\n".join(per_run) + "\n")
    return final + "\n" + sweep_md


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["prepare", "start", "sweep", "final", "table", "all"])
    parser.add_argument(
        "--data-dir", type=Path, help="folder with cifar10_train.npz and cifar10_test.npz (every phase but table)"
    )
    parser.add_argument("--sweep-epochs", type=float, default=0.5)
    parser.add_argument("--final-epochs", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1, help="1 is fastest on a shared, oversubscribed machine")
    parser.add_argument(
        "--runs",
        default="",
        help="sweep and final phases: a comma-separated subset of the runs, "
        "e.g. ce_s0,focal_s0 or macs_d1_m0.1_c1 (to split them over processes)",
    )
    args = parser.parse_args()
    if args.phase != "table":
        if args.data_dir is None:
            parser.error("--data-dir is required for this phase")
        global DATA
        DATA = args.data_dir
    torch.set_num_threads(args.threads)
    for sub in ("runs", "sweep"):
        (RESULTS / sub).mkdir(parents=True, exist_ok=True)
    phases = ["prepare", "start", "sweep", "final", "table"] if args.phase == "all" else [args.phase]
    only = [r for r in args.runs.split(",") if r] or None
    for phase in phases:
        if phase == "prepare":
            prepare()
        elif phase == "start":
            run_start()
        elif phase == "sweep":
            run_sweep(args.sweep_epochs, only)
        elif phase == "final":
            run_final(args.final_epochs, only)
        else:
            print(tables())
    log("done")


if __name__ == "__main__":
    main()
