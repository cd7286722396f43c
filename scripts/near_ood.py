"""The near-OOD protocol on CIFAR-10 (docs/feature-ood.md): a model trained on 6 of the 10 classes (airplane,
automobile, bird, cat, ship, truck: sample_models/resnet9_c6_ce.onnx, trained by sample_models/train_sample.py
--classes 0,1,2,3,8,9), audited on the test images of those 6 against three OOD sets: the test images of the 4
classes it never saw (deer, dog, frog, horse: near-OOD), uniform noise (far-OOD) and its own classes' test images at
severity 5 of Gaussian noise (covariate shift). The feature detectors are fitted on training images of the 6 classes
(--feature-fit-data) that the model was trained on, as the detectors' papers fit them.

    python scripts/near_ood.py --train DATA/cifar10_train.npz --test DATA/cifar10_test.npz --out runs/near_ood

Writes one report per OOD set into --out and prints the table docs/feature-ood.md shows (every score's AUROC and
FPR at 95% TPR, with their 95% intervals)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_models" / "resnet9_c6_ce.onnx"
SEEN, UNSEEN = (0, 1, 2, 3, 8, 9), (4, 5, 6, 7)
CIFAR10 = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
FIT_PER_CLASS = 1000  # training images per seen class the detectors are fitted on
FAR_IMAGES = 2000
SCORES = ("msp", "max_logit", "energy", "gen", "mahalanobis", "rmds", "knn", "vim", "react", "ash_s")


def subsets(train: Path, test: Path, out: Path) -> dict[str, Path]:
    """The npz files of the protocol: in-distribution test images (labels renumbered in SEEN's order), the fit set,
    and the three OOD sets."""
    x, y = (np.load(test)[k] for k in ("x", "y"))
    renumber = np.full(10, -1)
    renumber[list(SEEN)] = np.arange(len(SEEN))
    seen = np.isin(y, SEEN)
    files = {"in": out / "in.npz", "fit": out / "fit.npz", "near": out / "near.npz", "far": out / "far.npz"}
    names = np.array([CIFAR10[c] for c in SEEN])  # the model's class names: the data's classes meet them by name
    np.savez(files["in"], x=x[seen], y=renumber[y[seen]], class_names=names)
    np.savez(files["near"], x=x[~seen])
    rng = np.random.default_rng(0)
    np.savez(files["far"], x=rng.integers(0, 256, (FAR_IMAGES, *x.shape[1:]), dtype=np.uint8))
    tx, ty = (np.load(train)[k] for k in ("x", "y"))
    rows = np.concatenate([np.flatnonzero(ty == c)[:FIT_PER_CLASS] for c in SEEN])
    np.savez(files["fit"], x=tx[rows], y=renumber[ty[rows]], class_names=names)
    return files


def run(*args: object) -> None:
    subprocess.run([sys.executable, "-m", "macs_audit", *map(str, args)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--test", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files = subsets(args.train, args.test, args.out)
    # The covariate set: the in-distribution test images at severity 5 of Gaussian noise (macs-audit corrupt writes
    # the CIFAR-C layout, the five severities stacked: the last block is severity 5).
    run("corrupt", "--data", files["in"], "--corruptions", "gaussian_noise", "--severities", "1-5", "--out",
        args.out / "corrupted", "--quiet")  # fmt: skip
    corrupted = np.load(args.out / "corrupted" / "gaussian_noise.npy")
    files["covariate"] = args.out / "covariate.npz"
    np.savez(files["covariate"], x=corrupted[-len(np.load(files["in"])["y"]) :])
    table = {}
    for name in ("near", "far", "covariate"):
        report = args.out / f"{name}.json"
        run("evaluate", MODEL, "--data", files["in"], "--ood-data", files[name], "--feature-fit-data", files["fit"],
            "--perturbations", "none", "--sensitivity-samples", "0", "--corruptions", "none", "--calibrators", "none",
            "--features", "on", "-o", report, "--quiet")  # fmt: skip
        table[name] = json.loads(report.read_text())["ood"]["scores"]
    print("| score | " + " | ".join(f"{n} AUROC | {n} FPR95" for n in table) + " |")
    print("|---|" + "---:|---:|" * len(table))
    for score in SCORES:
        cells = []
        for name in table:
            entry = table[name][score]
            auroc, fpr = entry["auroc"], entry["fpr95"]
            (a_lo, a_hi), (f_lo, f_hi) = entry["intervals"]["auroc"], entry["intervals"]["fpr95"]
            cells += [f"{auroc:.3f} [{a_lo:.3f}, {a_hi:.3f}]", f"{fpr:.3f} [{f_lo:.3f}, {f_hi:.3f}]"]
        print(f"| {score} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
