"""What the image properties of the slice analysis (brightness, contrast, sharpness, colourfulness) cost per image,
computed on the batches the clean pass scores.

    python benchmarks/bench_image_properties.py [--cifar 10000] [--batch 500] [--large 64] [--repeats 5]

Seeded random uint8 images brought to float32 [0, 1] NCHW, as the predictor receives them: `--cifar` CIFAR-like
32x32x3 images in batches of `--batch`, and `--large` 224x224x3 images in one batch, through
`image_properties` as numpy arrays and as CPU torch tensors (and CUDA tensors where a GPU is present). One untimed
call first; the best of `--repeats` timed runs, in images a second. Nothing is written.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from macs_audit.metrics.image_properties import image_properties


def images(n: int, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8).transpose(0, 3, 1, 2).astype(np.float32) / 255


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def inputs(x: np.ndarray) -> dict[str, Callable[[np.ndarray], Any]]:
    """Ways to hand a batch over: numpy, and torch on each device present (made before timing, as the loop has
        them), each a function of the batch returning what image_properties is given. A CUDA batch's time includes
    the wait for its work: image_properties returns numpy."""
    ways: dict[str, Callable[[np.ndarray], Any]] = {"numpy": lambda batch: batch}
    try:
        import torch
    except ImportError:
        return ways
    ways["torch cpu"] = torch.from_numpy
    if torch.cuda.is_available():
        ways["torch cuda"] = lambda batch: torch.from_numpy(batch).cuda()
    return ways


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cifar", type=int, default=10_000, help="CIFAR-like 32x32 images")
    parser.add_argument("--batch", type=int, default=500, help="their batch size")
    parser.add_argument("--large", type=int, default=64, help="224x224 images, one batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, "
        f"numpy {np.__version__}"
    )
    cases = {
        f"{args.cifar:,} x 32x32, batches of {args.batch}": (images(args.cifar, 32, 0), args.batch),
        f"{args.large:,} x 224x224, one batch": (images(args.large, 224, 1), args.large),
    }
    print(f"{'images':<34} {'input':<11} {'seconds':>9} {'images/s':>11}")
    for name, (x, batch) in cases.items():
        for way, convert in inputs(x).items():
            batches = [convert(x[lo : lo + batch]) for lo in range(0, len(x), batch)]
            seconds = best_seconds(lambda batches=batches: [image_properties(b) for b in batches], args.repeats)
            print(f"{name:<34} {way:<11} {seconds:9.4f} {len(x) / seconds:11,.0f}")


if __name__ == "__main__":
    main()
