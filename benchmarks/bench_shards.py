"""WebDataset shards against the same images as a folder: `macs-audit evaluate` on each, wall time, images per
second and peak memory; and the peak memory of a shard set of N1 against N2 images (it must not grow with
the images beyond the per-sample arrays).

    python benchmarks/bench_shards.py [--sizes 1000,8000] [--px 224] [--workers 0] [--keep DIR]

The images: scikit-image's sample photographs, random 256-400 px crops of them saved as quality-90 JPEGs
(ImageNet's validation images are JPEGs of about this size), 1,000 classes of a 1,000-output ONNX model
(global average pool and a linear layer: the model costs next to nothing, so the numbers are the data path's).
The shards hold 1,000 images each, written by webdataset's ShardWriter in the folder's order. Every run is a
fresh `macs-audit evaluate` process with the clean view only (`--perturbations none --sensitivity-samples 0
--bootstrap 0 --calibration-split 0 --calibrators none`); wall time and peak resident memory (ru_maxrss)
from wait4.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "cat", "immunohistochemistry", "colorwheel", "hubble_deep_field")
CLEAN_ONLY = ["--perturbations", "none", "--sensitivity-samples", "0", "--bootstrap", "0"]
CLEAN_ONLY += ["--calibration-split", "0", "--calibrators", "none", "-q"]


def write_sets(root: Path, n: int, seed: int = 0) -> tuple[Path, str]:
    """root/folder/<class>/<i>.jpg and root/shards-{000000..}.tar of the same bytes (classes i % 1000)."""
    import skimage.data
    import webdataset as wds
    from PIL import Image

    photos = [getattr(skimage.data, name)() for name in PHOTOS]
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        side = int(rng.integers(256, min(400, h, w) + 1))
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        buffer = io.BytesIO()
        Image.fromarray(photo[top : top + side, left : left + side]).save(buffer, format="JPEG", quality=90)
        samples.append((i % 1000, f"{i:06d}", buffer.getvalue()))
    samples.sort()  # the folder's order: by class, then by name
    for label, name, data in samples:
        (root / "folder" / f"{label:04d}").mkdir(parents=True, exist_ok=True)
        (root / "folder" / f"{label:04d}" / f"{name}.jpg").write_bytes(data)
    with wds.ShardWriter(str(root / "shards-%06d.tar"), maxcount=1000, verbose=0) as sink:
        for label, name, data in samples:
            sink.write({"__key__": name, "jpg": data, "cls": label})
    return root / "folder", f"{root}/shards-{{000000..{(n - 1) // 1000:06d}}}.tar"


def model(path: Path, px: int) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import linear_onnx

    return linear_onnx(path, num_classes=1000, size=px)


def run(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one fresh process."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "macs_audit", *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(args)}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,8000")
    parser.add_argument("--px", type=int, default=224)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="write the sets here (default: a temporary folder)")
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        base = opts.keep or Path(tmp)
        onnx = model(base / "m.onnx", opts.px)
        print("| images | data | wall (s) | images/s | peak RSS (MiB) |\n|---:|---|---:|---:|---:|")
        for n in sizes:
            folder, spec = write_sets(base / f"n{n}", n)
            for kind, data in (("folder", str(folder)), ("shards", spec)):
                common = [str(onnx), "--data", data, "--input-size", str(opts.px), "--crop-pct", "0.875"]
                wall, peak = run(["evaluate", *common, "--workers", str(opts.workers), *CLEAN_ONLY])
                print(f"| {n:,} | {kind} | {wall:.1f} | {n / wall:.0f} | {peak:.0f} |", flush=True)


if __name__ == "__main__":
    main()
