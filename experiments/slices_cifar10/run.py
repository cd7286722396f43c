"""Slices on the built-in CIFAR-10 test set: a planted slice found, random marks and random columns not flagged.

    nice -n 10 python experiments/slices_cifar10/run.py > slices.log 2>&1
    python experiments/slices_cifar10/run.py --write-planted DIR   # only DIR/dark.npz and DIR/lighting.csv

1. Planted: 10% of the 10,000 built-in test images (drawn with --seed) darkened to 0.4 of their brightness, labels
   kept, and marked `lighting=dark` (the others `normal`) in a metadata file keyed by index; the sample model
   audited by `macs-audit evaluate` with the default options and `--metadata`. Where does the dark slice rank, is it
   significant, and is the darkest brightness bin?
2. Random marks: the same marks on the undarkened images: is any `lighting` slice flagged?
3. False alarms: the model's logits of the undarkened images saved once (`--save-predictions`, without the image
   properties), then audited `--runs` times with one random metadata column each: a text column of 2 to 6 values in
   random proportions (even runs) or a normal number cut into quintiles (odd runs), under each correction. The share
   of runs flagging any slice is the family-wise false-alarm rate (Holm controls it at 5%; Benjamini-Hochberg's
   false discovery rate equals it when nothing differs).

Writes results/slices.json and results/slices.md (the tables docs/method.md and docs/slices.md show). The data
written for the audits (the darkened npz, the metadata files, the reports) go to a temporary folder.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

import macs_audit

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "sample_models" / "resnet9_c10_ce.onnx"
BUILTIN = ROOT / "macs_audit" / "assets" / "cifar10_test.npz"
OUT = Path(__file__).resolve().parent / "results"


def write_marks(path: Path, values: list[str], column: str = "lighting") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["index", column])
        writer.writerows([i, v] for i, v in enumerate(values))
    return path


def write_planted(folder: Path, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """folder/dark.npz: the built-in test set with 10% of its images (drawn with `seed`) darkened to 0.4 of their
    brightness, labels kept; folder/lighting.csv: `lighting` dark or normal by index. Returns the labels and marks."""
    with np.load(BUILTIN) as data:
        x, y, names = data["x"], data["y"], data["class_names"]
    marked = np.random.default_rng(seed).uniform(size=len(y)) < 0.1
    dark = x.copy()
    dark[marked] = (dark[marked] * 0.4).astype(np.uint8)
    np.savez(folder / "dark.npz", x=dark, y=y, class_names=names)
    write_marks(folder / "lighting.csv", ["dark" if m else "normal" for m in marked])
    return y, marked


def summary(report, column: str) -> dict:
    """The slice section's facts the tables show: the worst slices, the column's slices, what was flagged."""
    section = report.slices
    rows = [
        {
            "slice": f"{s.column} = {s.value}",
            "n": s.n,
            "accuracy": s.metrics["accuracy"],
            "accuracy_gap": s.gaps["accuracy"]["gap"],
            "accuracy_gap_interval": s.gaps["accuracy"]["interval"],
            "overconfidence_gap": s.gaps["overconfidence"]["gap"],
            "ece": s.metrics["ece"],
            "adjusted_p": min(g["adjusted_p_value"] for g in s.gaps.values()),
            "significant": s.significant,
        }
        for s in section.slices
    ]
    return {
        "tests": section.tests,
        "correction": section.correction,
        "rank_of_column": next((i + 1 for i, s in enumerate(section.slices) if s.column == column), None),
        "worst": rows[:6],
        "column": [r for r in rows if r["slice"].startswith(f"{column} = ")],
        "flagged": [r["slice"] for r in rows if r["significant"]],
        "multicalibration": section.multicalibration,
    }


def random_column(rng: np.random.Generator, n: int, run: int) -> list[str]:
    if run % 2:  # a number, cut into quintiles
        return [f"{v:.6f}" for v in rng.normal(size=n)]
    k = int(rng.integers(2, 7))
    shares = rng.dirichlet(np.full(k, 2.0))
    return [f"v{int(v)}" for v in rng.choice(k, size=n, p=shares)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=200, help="random metadata columns for the false-alarm rate")
    parser.add_argument("--write-planted", type=Path, help="only write the planted data and marks into this folder")
    args = parser.parse_args()
    if args.write_planted is not None:
        args.write_planted.mkdir(parents=True, exist_ok=True)
        write_planted(args.write_planted, args.seed)
        return
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        y, marked = write_planted(work, args.seed)
        lighting = work / "lighting.csv"
        results: dict = {"seed": args.seed, "images": int(len(y)), "marked": int(marked.sum())}
        start = time.perf_counter()
        planted = macs_audit.audit(str(MODEL), str(work / "dark.npz"), metadata=str(lighting))
        results["planted"] = summary(planted, "lighting")
        results["planted"]["brightness"] = [
            r for r in summary(planted, "brightness")["column"] if r["slice"].startswith("brightness = ")
        ]
        print(f"planted: {time.perf_counter() - start:.0f} s", flush=True)

        clean = macs_audit.audit(str(MODEL), None, metadata=str(lighting), image_slices=False)
        results["random_marks"] = summary(clean, "lighting")
        print("random marks: flagged", results["random_marks"]["flagged"], flush=True)

        # The undarkened images' logits, saved once with no slice columns; each run adds one random column.
        saved = work / "predictions.npz"
        from typer.testing import CliRunner

        from macs_audit.cli import app

        invoked = CliRunner().invoke(
            app,
            ["evaluate", str(MODEL), "--no-image-slices", "--perturbations", "none", "--sensitivity-samples", "0"]
            + ["--calibrators", "none", "--bootstrap", "0", "--save-predictions", str(saved), "--quiet"]
            + ["-o", str(work / "clean.json")],
        )
        assert invoked.exit_code in (0, 1), invoked.output
        flagged = {"holm": 0, "bh": 0}
        draws = np.random.default_rng(args.seed + 1)
        for run in range(args.runs):
            column = write_marks(work / "random.csv", random_column(draws, len(y), run), "random")
            for correction in flagged:
                report = macs_audit.audit_predictions(
                    saved, metadata=str(column), slice_correction=correction, calibrators="none", bootstrap=0
                )
                flagged[correction] += any(s.significant for s in report.slices.slices)
        noise = math.sqrt(0.05 * 0.95 / args.runs)
        results["false_alarms"] = {
            "runs": args.runs,
            "nominal": 0.05,
            "binomial_sd": noise,
            "bound": 0.05 + 2 * noise,
            **{f"{name}_rate": count / args.runs for name, count in flagged.items()},
            **{f"{name}_runs_flagged": count for name, count in flagged.items()},
        }
        print("false alarms:", results["false_alarms"], flush=True)
    (OUT / "slices.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (OUT / "slices.md").write_text(markdown(results), encoding="utf-8")


def markdown(results: dict) -> str:
    def pct(v: float) -> str:
        return f"{100 * v:.1f}%"

    def row(r: dict) -> str:
        low, high = r["accuracy_gap_interval"]
        return (
            f"| {r['slice']} | {r['n']:,} | {pct(r['accuracy'])} | {100 * r['accuracy_gap']:+.1f} "
            f"[{100 * low:+.1f}, {100 * high:+.1f}] | {100 * r['overconfidence_gap']:+.1f} | {pct(r['ece'])} | "
            f"{r['adjusted_p']:.2g} | {'yes' if r['significant'] else ''} |"
        )

    header = (
        "| slice | n | accuracy | accuracy gap, points [95% CI] | overconfidence gap | ECE | adjusted p | significant |"
    )
    rule = "|---|---:|---:|---:|---:|---:|---:|---|"
    planted, marks, alarms = results["planted"], results["random_marks"], results["false_alarms"]
    lines = [
        f"Planted: {results['marked']:,} of {results['images']:,} images darkened (x0.4) and marked lighting=dark; "
        f"{planted['tests']} tests, {planted['correction']}. The worst slices:",
        "",
        header,
        rule,
        *(row(r) for r in planted["worst"]),
        "",
        "The same marks on undarkened images:",
        "",
        header,
        rule,
        *(row(r) for r in marks["column"]),
        "",
        f"False alarms over {alarms['runs']} random columns on unchanged data: Holm {pct(alarms['holm_rate'])}, "
        f"Benjamini-Hochberg {pct(alarms['bh_rate'])} of runs flagged any slice (nominal 5%, binomial SD "
        f"{pct(alarms['binomial_sd'])}, bound {pct(alarms['bound'])}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
