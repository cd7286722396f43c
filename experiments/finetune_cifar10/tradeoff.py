"""Where does MaCS fine-tuning lose clean accuracy? The trade-off map on the validation split.

Every run fine-tunes the CE sample model with the loop behind `macs-audit finetune` and is scored on the
validation split only (the class-stratified 10% of the training data that `finetune` holds out and the
start model never saw); the test set plays no part. Per run:

  clean accuracy, ECE, NLL             raw logits
  clean NLL and ECE after T            cross-fitted: T fitted on one half of the split, scored on the
                                       other, both ways (the T the run would fold in is fitted on all of it)
  robust accuracy, ECE, NLL after T    the audit's noise+blur view (blur 0.7 then noise 0.08, seed 0)

Factors (MaCS with Delta 1, lambda_m 0.1): the strength of the training perturbations (the blur and
noise ranges times 0.5, 1 or 1.5), lambda_c, the peak learning rate, the budget (1 or 3 epochs), whether
the CE term also sees the perturbed view, and whether the perturbed pass moves batch norm's running
statistics. CE fine-tuning at each (learning rate, epochs) budget is the reference, and the start model
(no fine-tuning) a point of the map.

Grids: `ofat` (a centre point, then one factor changed at a time, then three runs around the most
accurate MaCS run of those, lambda_c 1: 13 MaCS runs, 4 CE runs) or `full`
(the factorial of the factors: 216 MaCS runs, 6 CE runs). The rule that picks one default: the most
robust MaCS configuration whose clean validation accuracy is within --tolerance (0.3 points) of CE
fine-tuning's at the same budget. When none qualifies, `report` picks the two presets of
`finetune --preset` instead: calibrated, the most accurate run with at least twice CE's noise+blur
accuracy; robust, the most robust run within 2.5 points of CE's clean accuracy.

    python experiments/finetune_cifar10/tradeoff.py run --data-dir DATA [--grid ofat] [--runs a,b] [--seeds 0]
    python experiments/finetune_cifar10/tradeoff.py report     # tradeoff.md and docs/finetune-tradeoff.png

Each run writes OUT/runs/<name>.json and is skipped when that file exists; checkpoints (WORK/ckpt, every
--checkpoint-every steps) resume a stopped run. A smoke test with a tiny budget (5 steps an epoch):

    python experiments/finetune_cifar10/tradeoff.py run --data-dir DATA --limit 200 --batch-size 32 \\
        --out runs/smoke --work runs/smoke_work --runs start,ce_lr0.02_e1_s0,macs_p1_c3_lr0.02_e1_cec_s0

DATA is a folder holding cifar10_train.npz (arrays x, uint8 N x 32 x 32 x 3, and y).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
START = ROOT / "sample_models" / "resnet9_c10_ce.safetensors"

# The budget every run shares (as run.py's final runs); only the factors below change.
BUDGET = dict(optimizer="sgd", weight_decay=5e-4, warmup=0.1, val_fraction=0.1, split_seed=0, delta=1.0)
# The centre point of the ofat grid (bn_stats "both": the perturbed pass also moves batch norm's running
# statistics).
CENTRE = dict(strength=1.0, lambda_c=3.0, lr=0.02, epochs=1.0, ce_on_perturbed=False, bn_stats="both")
LEVELS = dict(strength=(0.5, 1.0, 1.5), lambda_c=(0.3, 1.0, 3.0), lr=(0.005, 0.01, 0.02), epochs=(1.0, 3.0))
LEVELS["ce_on_perturbed"] = (False, True)
LEVELS["bn_stats"] = ("both", "clean")
# The ofat grid's runs around its most accurate one-factor MaCS run (lambda_c 1): the margin term off,
# gentler perturbations, batch-norm statistics of clean images only.
AROUND_BEST = [
    dict(lambda_c=1.0, lambda_m=0.0),
    dict(lambda_c=1.0, strength=0.5),
    dict(lambda_c=1.0, bn_stats="clean"),
]


@dataclasses.dataclass(frozen=True)
class Config:
    objective: str  # macs | ce | start (the start model, not fine-tuned)
    strength: float = 1.0  # factor on the shipped blur and noise ranges of T(x)
    lambda_c: float = 3.0
    lambda_m: float = 0.1
    lr: float = 0.02
    epochs: float = 1.0
    ce_on_perturbed: bool = False
    bn_stats: str = "both"
    seed: int = 0

    @property
    def name(self) -> str:
        if self.objective == "start":
            return "start"
        if self.objective == "ce":
            return f"ce_lr{self.lr:g}_e{self.epochs:g}_s{self.seed}"
        views = "ceb" if self.ce_on_perturbed else "cec"  # CE on both views / on the clean view only
        bn = "_bnc" if self.bn_stats == "clean" else ""  # batch-norm running statistics from clean images only
        margin = "" if self.lambda_m == 0.1 else f"_m{self.lambda_m:g}"
        budget = f"lr{self.lr:g}_e{self.epochs:g}"
        return f"macs_p{self.strength:g}_c{self.lambda_c:g}{margin}_{budget}_{views}{bn}_s{self.seed}"


def grid(kind: str, seeds: list[int]) -> list[Config]:
    """The start model, the MaCS configurations of `kind` and a CE reference at each of their budgets."""
    if kind == "ofat":
        changes = [{}] + [{k: v} for k, levels in LEVELS.items() for v in levels if v != CENTRE[k]]
        factors = [{**CENTRE, **change} for change in changes + AROUND_BEST]
    else:
        factors = [dict(zip(LEVELS, values, strict=True)) for values in itertools.product(*LEVELS.values())]
    configs = [Config("start")]
    for seed in seeds:
        macs = [Config("macs", seed=seed, **f) for f in factors]
        budgets = dict.fromkeys((c.lr, c.epochs) for c in macs)
        configs += [Config("ce", lr=lr, epochs=epochs, seed=seed) for lr, epochs in budgets] + macs
    return configs


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


# ------------------------------------------------------------------------------------------- runs
def options_for(config: Config, cfg, args):
    from macs_audit.finetune.options import FinetuneOptions

    defaults = FinetuneOptions()
    scale = config.strength
    return FinetuneOptions(
        **BUDGET,
        objective="ce" if config.objective == "start" else config.objective,
        batch_size=args.batch_size,
        lr=config.lr,
        epochs=config.epochs,
        lambda_c=config.lambda_c,
        lambda_m=config.lambda_m,
        ce_on_perturbed=config.ce_on_perturbed,
        bn_stats=config.bn_stats,
        blur_range=(scale * defaults.blur_range[0], scale * defaults.blur_range[1]),
        noise_range=(scale * defaults.noise_range[0], scale * defaults.noise_range[1]),
        seed=config.seed,
        input_size=tuple(cfg.input_size),
        mean=tuple(cfg.mean),
        std=tuple(cfg.std),
        device=args.device,
        checkpoint_every=args.checkpoint_every,
    ).validate()


def train_source(args):
    from macs_audit.data.sources import load_source
    from macs_audit.data.splits import stratified_subset

    source = load_source(args.data_dir / "cifar10_train.npz")
    return source.subset(stratified_subset(source.labels, args.limit, seed=0)) if args.limit else source


def validation_scores(model, source, options) -> dict:
    """The run's scores on the validation split `finetune` holds out of `source`."""
    from run import predicted_logits, robust_logits, summary  # run.py beside this script: the same views and metrics

    from macs_audit.calibrators.temperature import optimal_temperature
    from macs_audit.data.splits import stratified_split

    val = options.split(source.labels)[0]
    x = np.asarray(source.images(val))
    y = source.labels[val]
    clean, robust = predicted_logits(model, x, options), robust_logits(model, x, options)
    t = optimal_temperature(clean, y)  # what `finetune` folds into the model
    # Cross-fitted scores after T: each half scaled by the T fitted on the other half.
    a, b = stratified_split(y, 0.5, 0)
    crossed = clean.astype(np.float64)
    crossed[a], crossed[b] = (
        crossed[a] / optimal_temperature(clean[b], y[b]),
        crossed[b] / optimal_temperature(clean[a], y[a]),
    )
    return {
        "n_val": int(len(y)),
        "temperature": t,
        "val": summary(clean, y),
        "val_after_t": summary(crossed, y),
        "val_robust": summary(robust, y),
        "val_robust_after_t": summary(robust / t, y),
    }


def run_one(config: Config, args) -> None:
    from macs_audit.atomic import write_text
    from macs_audit.finetune.loop import finetune
    from macs_audit.models.predictor import load_predictor

    path = args.out / "runs" / f"{config.name}.json"
    if path.exists():
        return
    predictor = load_predictor(args.start, device=args.device)
    source = train_source(args)
    options = options_for(config, predictor.config, args)
    log(f"{config.name}: start")
    started, history, steps = time.time(), [], 0
    model = predictor.model
    if config.objective != "start":
        ckpt = args.work / "ckpt" / f"{config.name}.pt"
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        last = [0.0]

        def progress(description, done, total, terms=None):
            if terms and time.time() - last[0] > 60:
                last[0] = time.time()
                shown = " ".join(f"{k} {v:.4g}" for k, v in terms.items())
                log(f"  {config.name} {description} {done}/{total} {shown}")

        result = finetune(model.train(), source, options, progress, checkpoint=ckpt, resume=ckpt.exists())
        model, history, steps = result.model, result.history, result.steps
    scores = validation_scores(model.eval(), source, options)
    record = {
        "name": config.name,
        "config": dataclasses.asdict(config),
        "options": options.to_dict(),
        "limit": args.limit,
        "steps": steps,
        "seconds": round(time.time() - started, 1),
        "history": history,
        **scores,
    }
    write_text(path, json.dumps(record, indent=2) + "\n")
    v, r = scores["val"], scores["val_robust"]
    log(
        f"{config.name}: acc {v['accuracy']:.4f} nll after T {scores['val_after_t']['nll']:.4f} "
        f"robust acc {r['accuracy']:.4f} T {scores['temperature']:.3f} ({record['seconds']:.0f}s)"
    )


# ----------------------------------------------------------------------------------------- report
def load_runs(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))}


def reference(run: dict, runs: dict[str, dict]) -> dict | None:
    """The CE run at the same budget (learning rate, epochs, seed) as `run`."""
    c = run["config"]
    return runs.get(f"ce_lr{c['lr']:g}_e{c['epochs']:g}_s{c['seed']}")


def with_references(runs: dict[str, dict]) -> list[tuple[str, dict, dict]]:
    """(name, run, its CE reference) for every MaCS run whose CE reference has finished."""
    pairs = ((n, r, reference(r, runs)) for n, r in runs.items() if r["config"]["objective"] == "macs")
    return [(n, r, ref) for n, r, ref in pairs if ref is not None]


def choose(runs: dict[str, dict], tolerance: float) -> tuple[str | None, list[str]]:
    """The most robust MaCS run whose clean validation accuracy is within `tolerance` of its CE reference's,
    and the names of those that qualify."""
    pairs = with_references(runs)
    eligible = [n for n, r, ref in pairs if r["val"]["accuracy"] >= ref["val"]["accuracy"] - tolerance]
    best = max(eligible, key=lambda n: runs[n]["val_robust"]["accuracy"], default=None)
    return best, eligible


ROBUST_FACTOR = 2.0  # the calibrated preset must at least double CE's noise+blur accuracy
ROBUST_COST = 0.025  # the robust preset may cost up to 2.5 points of clean accuracy (the old defaults' cost)


def choose_presets(runs: dict[str, dict]) -> dict[str, str]:
    """The presets shipped when no run meets the tolerance, each by its rule (names of runs):
    calibrated: the most accurate MaCS run whose noise+blur accuracy is at least ROBUST_FACTOR times CE's;
    robust: the most robust MaCS run whose clean accuracy is at most ROBUST_COST below CE's."""
    pairs = with_references(runs)
    doubled = [n for n, r, ref in pairs if r["val_robust"]["accuracy"] >= ROBUST_FACTOR * ref["val_robust"]["accuracy"]]
    cheap = [n for n, r, ref in pairs if r["val"]["accuracy"] >= ref["val"]["accuracy"] - ROBUST_COST]
    chosen = {
        "calibrated": max(doubled, key=lambda n: runs[n]["val"]["accuracy"], default=None),
        "robust": max(cheap, key=lambda n: runs[n]["val_robust"]["accuracy"], default=None),
    }
    return {preset: name for preset, name in chosen.items() if name}


def pareto(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The points no other point beats on both coordinates (higher is better), by the first coordinate."""
    front = [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q[:2] != p[:2] for q in points)]
    return sorted(front)


def report(args) -> str:
    from macs_audit.atomic import write_text

    runs = load_runs(args.out)
    if not runs:
        raise SystemExit(f"no results in {args.out / 'runs'}: run the `run` phase first")
    best, eligible = choose(runs, args.tolerance)
    presets = {} if best else choose_presets(runs)
    rows = [
        "| run | steps | val acc. % | vs CE (pp) | val NLL | NLL after T | ECE after T % | T | robust acc. % "
        "| robust ECE after T % | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, run in sorted(runs.items(), key=lambda kv: -kv[1]["val"]["accuracy"]):
        ref = reference(run, runs) if run["config"]["objective"] == "macs" else None
        gap = f"{100 * (run['val']['accuracy'] - ref['val']['accuracy']):+.2f}" if ref else "-"
        mark = " (chosen)" if name == best else (" (within tolerance)" if name in eligible else "")
        mark += "".join(f" (preset {preset})" for preset, chosen in presets.items() if chosen == name)
        v, after, rob = run["val"], run["val_after_t"], run["val_robust"]
        rows.append(
            f"| {name}{mark} | {run['steps']} | {100 * v['accuracy']:.2f} | {gap} | {v['nll']:.4f} | "
            f"{after['nll']:.4f} | {100 * after['ece']:.2f} | {run['temperature']:.3f} | {100 * rob['accuracy']:.2f} | "
            f"{100 * run['val_robust_after_t']['ece']:.2f} | {run['seconds']:.0f} |"
        )
    finished_macs = [n for n, r in runs.items() if r["config"]["objective"] == "macs"]
    planned = [c.name for c in grid(args.grid, [int(s) for s in args.seeds.split(",")])]
    missing = [name for name in planned if name not in runs]
    if missing:  # a partial map chooses nothing: a run still to come may be the one the rule picks
        verdict = (
            f"{len(planned) - len(missing)} of the {len(planned)} runs of the {args.grid} grid have finished, so "
            f"nothing is chosen yet (still to run: {', '.join(missing)})."
            + (f" So far the rule would pick {best}." if best else "")
        )
    elif best:
        verdict = f"Chosen by the rule: {best}."
    elif not finished_macs:
        verdict = "No MaCS run has finished yet: nothing to choose from (the CE runs and the start model are below)."
    else:
        verdict = (
            f"No MaCS configuration is within {100 * args.tolerance:.1f} points of CE fine-tuning's clean validation "
            "accuracy at its budget: presets instead. calibrated (the defaults): the most accurate run whose "
            f"noise+blur accuracy is at least {ROBUST_FACTOR:g}x CE's, {presets.get('calibrated', 'none')}; robust: "
            f"the most robust run within {100 * ROBUST_COST:.1f} points of CE's clean accuracy, "
            f"{presets.get('robust', 'none')}."
        )
    n_val = next(iter(runs.values()))["n_val"]
    text = (
        f"# MaCS fine-tuning: the trade-off on the validation split ({n_val:,} images)\n\n"
        f"Rule: the most robust MaCS configuration whose clean validation accuracy is within "
        f"{100 * args.tolerance:.1f} points of CE fine-tuning's at the same learning rate and epochs. {verdict}\n\n"
        + "\n".join(rows)
        + "\n"
    )
    write_text(args.out / "tradeoff.md", text)
    plot(runs, best, presets, args.figure)
    return text


def plot(runs: dict[str, dict], best: str | None, presets: dict[str, str], path: Path) -> None:
    """Clean accuracy against robust accuracy (the front) and against the NLL after T, one point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    macs = {n: r for n, r in runs.items() if r["config"]["objective"] == "macs"}
    others = {n: r for n, r in runs.items() if n not in macs}
    acc = {n: 100 * r["val"]["accuracy"] for n, r in runs.items()}
    robust = {n: 100 * r["val_robust"]["accuracy"] for n, r in runs.items()}
    nll = {n: r["val_after_t"]["nll"] for n, r in runs.items()}
    if macs:
        shade = left.scatter(
            [acc[n] for n in macs], [robust[n] for n in macs], c=[nll[n] for n in macs], cmap="viridis_r", zorder=3
        )
        fig.colorbar(shade, ax=left, label="clean NLL after T (validation, cross-fitted)")
        front = pareto([(acc[n], robust[n], n) for n in runs])
        left.plot([p[0] for p in front], [p[1] for p in front], "--", color="grey", label="front", zorder=2)
    for n in others:
        marker = "s" if n == "start" else "x"
        left.scatter(acc[n], robust[n], marker=marker, color="black", zorder=4)
    for n in runs:
        left.annotate(n.rsplit("_s", 1)[0], (acc[n], robust[n]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        right.scatter(acc[n], nll[n], color="tab:blue" if n in macs else "black", marker="o" if n in macs else "x")
    marked = {"chosen": best} if best else {f"preset {p}": n for p, n in presets.items()}
    for (label, name), colour in zip(marked.items(), ("red", "darkorange"), strict=False):
        for axis, y in ((left, robust[name]), (right, nll[name])):
            axis.scatter(acc[name], y, marker="*", s=250, facecolor="none", edgecolor=colour, label=label, zorder=5)
    left.set(xlabel="clean accuracy % (validation)", ylabel="noise+blur accuracy % (validation)")
    left.set_title("robustness against clean accuracy (x: CE, square: start model)")
    right.set(xlabel="clean accuracy % (validation)", ylabel="clean NLL after T (validation, cross-fitted)")
    right.set_title("calibrated NLL against clean accuracy")
    left.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["run", "report", "list"])
    parser.add_argument("--data-dir", type=Path, help="folder with cifar10_train.npz (the run phase)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "tradeoff", help="results folder")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "finetune_tradeoff", help="checkpoints")
    parser.add_argument("--start", type=Path, default=START, help="the start model (safetensors with a sidecar)")
    parser.add_argument("--grid", choices=["ofat", "full"], default="ofat")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds of every fine-tuning run")
    parser.add_argument("--runs", default="", help="a comma-separated subset of the grid's run names (see `list`)")
    parser.add_argument("--limit", type=int, default=0, help="a stratified subset of the training data (smoke tests)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--checkpoint-every", type=int, default=100, help="optimizer steps between checkpoints")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared machine)")
    parser.add_argument("--figure", type=Path, default=ROOT / "docs" / "finetune-tradeoff.png", help="the map")
    parser.add_argument("--tolerance", type=float, default=0.003, help="accuracy below CE's the rule allows")
    args = parser.parse_args()
    configs = grid(args.grid, [int(s) for s in args.seeds.split(",")])
    only = {r for r in args.runs.split(",") if r}
    unknown = only - {c.name for c in configs}
    if unknown:
        parser.error(f"not in the {args.grid} grid: {', '.join(sorted(unknown))} (see `list`)")
    if args.phase == "list":
        print("\n".join(c.name for c in configs))
        return
    if args.phase == "run":
        import torch

        if args.data_dir is None:
            parser.error("--data-dir is required for the run phase")
        torch.set_num_threads(args.threads)
        for config in configs:
            if not only or config.name in only:
                run_one(config, args)
    print(report(args))


if __name__ == "__main__":
    main()
