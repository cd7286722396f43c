"""Regenerate the behaviour goldens: `python tests/goldens/make_goldens.py [report|grid]` (CPU, about 15 s).

The goldens pin what the tool computes, so that a change meant to keep behaviour (a refactor) can be
proven to keep it; `tests/test_goldens.py` recomputes them and compares within tolerances that cover
another CPU (docs/development.md, "Portable tests"):

- `sample_report.json`: the sample model's JSON report on a 100-image subset with every section
  filled, compared field by field by `tolerances.compare_reports`;
- the full 19 x 5 corruption grid of 1,000 images: `grid_sha256.txt` holds byte hashes of the
  arrays that are integer-exact by design (the labels, impulse_noise, pixelate, jpeg_compression);
  `grid_reference.npz` holds, for every corruption and severity, the pixels of two images (the
  first and the last of the 1,000) and the histogram of all 3,072,000 values, compared within
  1 grey level (see GRID_* below);
- `machine.json`: the machine each golden came from (CPU model, the instruction sets that
  onnxruntime, torch and numpy dispatch on, library versions, platform), written with it.

Regenerate only when a change is meant to alter the numbers (or the goldens' format), say so in the
commit, and name the machine (`machine.json` does). `report` or `grid` regenerates one of the two.
"""

from __future__ import annotations

import hashlib
import json
import platform
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
    "--features",
    "off",  # the features half (its MMDs and detectors) is tested on its own: tests/auditing/test_features.py
    "--quiet",
]
# What differs between runs or machines and is not a computed result: when and where it ran, and how it was
# configured (the settings name the run's own file paths; tests/cli/test_evaluate_spec.py checks them).
VOLATILE = ("created", "runtime", "tool", "settings")

REPORT_GOLDEN = HERE / "sample_report.json"
GRID_HASHES = HERE / "grid_sha256.txt"
GRID_REFERENCE = HERE / "grid_reference.npz"
MACHINE = HERE / "machine.json"

# Arrays of the grid whose every step is integer arithmetic (or float arithmetic on integers below 2^24, exact in
# any order), so any CPU gives the same bytes: the labels (copied); impulse_noise (16-bit random words compared
# with integer thresholds, byte masks); pixelate at CIFAR factors (uint8 gathers and (a + b + 1) >> 1 averages);
# jpeg_compression at 32x32 (libjpeg-turbo's integer pipeline as matrix products whose partial sums are integers
# below 2^24, then floors). The other corruptions compute in float32 and round to uint8: not byte-exact.
INTEGER_EXACT = ("labels.npy", "impulse_noise.npy", "pixelate.npy", "jpeg_compression.npy")
GRID_IMAGES = (0, 999)  # of each severity's 1,000: the first and the last batch
# Float corruptions: a value within rounding of .5 rounds either way, so a pixel may differ by 1 grey level, never
# more. MEASURED (this grid on one machine against torch, MKL, OpenBLAS and numpy forced to AVX2 kernels, and torch
# forced to scalar kernels): 1 grey level at most, on at most 0.091% of one corruption's values (elastic_transform;
# then defocus_blur 0.034%, zoom_blur 0.020%, glass_blur 0.020%). Allowed: 1 grey level on at most 0.5% (5x).
GRID_GREY_LEVELS = 1
GRID_DIFFERING_FRACTION = 0.005


def grid_hash(path: Path) -> str:
    """SHA-256 over one array's name, dtype, shape and bytes."""
    array = np.load(path)
    digest = hashlib.sha256()
    digest.update(path.name.encode())
    digest.update(str(array.dtype).encode() + str(array.shape).encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def grid_summary(directory: Path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """(hashes of the integer-exact arrays, {"<corruption>@<severity>/images": (2, H, W, 3) uint8,
    "<corruption>@<severity>/histogram": (256,) int64})."""
    hashes = {name: grid_hash(directory / name) for name in INTEGER_EXACT}
    reference = {}
    for path in sorted(directory.glob("*.npy")):
        if path.name == "labels.npy":
            continue
        array = np.load(path, mmap_mode="r")
        per = len(array) // 5
        for s in range(5):
            block = np.asarray(array[s * per : (s + 1) * per])
            key = f"{path.stem}@{s + 1}"
            reference[f"{key}/images"] = block[list(GRID_IMAGES)]
            reference[f"{key}/histogram"] = np.bincount(block.ravel(), minlength=256).astype(np.int64)
    return hashes, reference


def compare_grid(hashes: dict[str, str], reference: dict[str, np.ndarray], want_hashes, want_reference) -> list[str]:
    """What the tolerances do not allow: a hash that differs, images beyond GRID_GREY_LEVELS or with more than
    GRID_DIFFERING_FRACTION of their values changed, or a cumulative histogram moved by more values than that
    fraction of the block (each value moved by one grey level crosses one level)."""
    problems = [f"{name}: sha256 differs" for name in want_hashes if hashes.get(name) != want_hashes[name]]
    if set(reference) != set(want_reference):
        problems.append(f"grid keys differ: {sorted(set(reference) ^ set(want_reference))[:6]}")
        return problems
    for key in sorted(want_reference):
        got, want = reference[key].astype(np.int64), want_reference[key].astype(np.int64)
        if got.shape != want.shape:
            problems.append(f"{key}: shape {got.shape} against {want.shape}")
        elif key.endswith("/images"):
            diff = np.abs(got - want)
            if diff.max() > GRID_GREY_LEVELS or (diff > 0).mean() > GRID_DIFFERING_FRACTION:
                problems.append(f"{key}: {int(diff.max())} grey levels at most, on {(diff > 0).mean():.3%} of values")
        else:
            moved = np.abs(np.cumsum(got) - np.cumsum(want)).max()
            if got.sum() != want.sum() or moved > GRID_DIFFERING_FRACTION * want.sum():
                problems.append(f"{key}: cumulative histogram moved by {int(moved)} of {int(want.sum())} values")
    return problems


def read_grid_hashes(path: Path = GRID_HASHES) -> dict[str, str]:
    hashes = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split()
            hashes[name] = digest
    return hashes


def read_grid_reference(path: Path = GRID_REFERENCE) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


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


def compute_grid() -> tuple[dict[str, str], dict[str, np.ndarray]]:
    with tempfile.TemporaryDirectory() as tmp:
        grid_dir = Path(tmp) / "grid"
        run_cli(GRID_ARGS + ["--out", str(grid_dir)])
        return grid_summary(grid_dir)


def compute_report() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        run_cli(REPORT_ARGS + ["-o", str(report_path)])
        return stable_report(json.loads(report_path.read_text()))


def _cpu() -> dict:
    """CPU model and the instruction-set flags the numeric libraries dispatch on (Linux: /proc/cpuinfo)."""
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    relevant = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni")
    relevant += ("avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")
    return {"model": model, "instruction_sets": [f for f in relevant if f in flags]}


def machine() -> dict:
    """Where a golden was computed: no paths, no host name."""
    import importlib.metadata as metadata

    import torch

    versions = {}
    for dist in ("macs-audit", "numpy", "onnxruntime", "onnxruntime-gpu", "torch", "pillow", "scipy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    numpy_simd = getattr(np, "__config__", None)
    simd = getattr(numpy_simd, "CONFIG", {}).get("SIMD Extensions", {}).get("found") if numpy_simd else None
    return {
        "cpu": _cpu(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_simd": simd,
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "versions": versions,
    }


def write_report(report: dict) -> None:
    REPORT_GOLDEN.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def write_grid(hashes: dict[str, str], reference: dict[str, np.ndarray]) -> None:
    lines = [
        "# SHA-256 of the corruption grid's arrays that are integer-exact by design (make_goldens.INTEGER_EXACT):",
        "# every CPU gives these bytes. The float corruptions are compared within 1 grey level (grid_reference.npz).",
    ]
    GRID_HASHES.write_text("\n".join(lines + [f"{hashes[name]}  {name}" for name in INTEGER_EXACT]) + "\n")
    np.savez_compressed(GRID_REFERENCE, **reference)


def record_machine(*names: str) -> None:
    records = json.loads(MACHINE.read_text()) if MACHINE.exists() else {}
    for name in names:
        records[name] = machine()
    MACHINE.write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    which = sys.argv[1:] or ["report", "grid"]
    if not set(which) <= {"report", "grid"}:
        raise SystemExit("usage: python tests/goldens/make_goldens.py [report] [grid]")
    if "report" in which:
        write_report(compute_report())
        record_machine(REPORT_GOLDEN.name)
    if "grid" in which:
        write_grid(*compute_grid())
        record_machine(GRID_HASHES.name, GRID_REFERENCE.name)
    print(json.dumps(machine(), indent=2))
