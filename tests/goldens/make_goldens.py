"""Regenerate the behaviour goldens: `python tests/goldens/make_goldens.py` (CPU, about a minute).

The goldens pin what the tool computes, so that a change meant to keep behaviour (a refactor) can be
proven to keep it: the sample model's JSON report on a small subset with every section filled, and
one hash over the bytes of the full 19 x 5 corruption grid of 1,000 images. `tests/test_goldens.py`
recomputes both and compares. Regenerate only when a change is meant to alter the numbers, and say
so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SAMPLE_ONNX = ROOT / "sample_models" / "resnet9_c10_ce.onnx"
GRID_ARGS = ["corrupt", "--limit", "1000", "--seed", "0", "--device", "cpu", "--quiet"]
REPORT_ARGS = [
    "evaluate",
    str(SAMPLE_ONNX),
    "--limit",
    "100",
    "--seed",
    "0",
    "--device",
    "cpu",
    "--bootstrap",
    "200",
    "--sensitivity-samples",
    "50",
    "--perturbations",
    "all",
    "--corruptions",
    "cifar-c",
    "--severities",
    "3",
    "--quiet",
]
# What differs between runs or machines and is not a computed result.
VOLATILE = ("created", "runtime", "tool")


def grid_hash(directory: Path) -> str:
    """SHA-256 over labels.npy's array and each corruption's array, in sorted file order."""
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.npy")):
        array = np.load(path)
        digest.update(path.name.encode())
        digest.update(str(array.dtype).encode() + str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def stable_report(report: dict) -> dict:
    out = {k: v for k, v in report.items() if k not in VOLATILE}
    out["model"] = {k: v for k, v in report["model"].items() if k != "path"}
    return out


def run_cli(args: list[str]) -> None:
    from typer.testing import CliRunner

    from macs_audit.cli import app

    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed ({result.exit_code}): {result.output}")


def compute() -> tuple[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        grid_dir = Path(tmp) / "grid"
        run_cli(GRID_ARGS + ["--out", str(grid_dir)])
        report_path = Path(tmp) / "report.json"
        run_cli(REPORT_ARGS + ["-o", str(report_path)])
        return grid_hash(grid_dir), stable_report(json.loads(report_path.read_text()))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    digest, report = compute()
    (HERE / "grid_sha256.txt").write_text(digest + "\n")
    (HERE / "sample_report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(digest)
