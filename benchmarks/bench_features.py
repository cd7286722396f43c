"""The feature detectors' cost against the inference passes that produce their features, and the cost of the
ONNX `features` output; measured side by side in one run.

    python benchmarks/bench_features.py [--model RESNET18.onnx] [--images 1000] [--fit 50000] [--scored 10000]

(a) Inference: a CIFAR ResNet-18 as an ONNX file (512 features; `make_resnet18_cifar.py`'s, built here when
`--model` is not given), its `features` output enabled (`enable_features`), run by onnxruntime over `--images`
built-in test images in batches of 250 on every core. Its seconds an image times fit + 2 x scored images is what
the passes producing the detectors' features cost (50,000 + 10,000 + 10,000 at the defaults).

(b) The detectors, on seeded synthetic features of the same shape (ReLU of a Gaussian per class, 10 classes, the
out-of-distribution set's mean elsewhere; float32, as the passes return them) and a random final layer: every
feature detector fitted on `--fit` features (`fit_detectors`), each scored on `--scored` in- and `--scored`
out-of-distribution features, and the metrics of all ten scores with intervals (`scores_section`, 1,000 resamples),
as the audit runs them. The bar: (b) at most 10% of (a).

(c) The `features` output's cost: the sample model (`resnet9_c10_ce.onnx`) over 2,000 built-in images, `predict`
and `predict_with_features` on two predictors, each batch by both in an order alternated batch by batch, six
times over, at 1 and 2 threads and batches of 250 and 500: the median of the batches' ratios. The bar: at most 1.05x.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce.onnx"
DETECTOR_BAR, OUTPUT_BAR = 0.10, 1.05


def test_images(n: int) -> np.ndarray:
    """The first n built-in test images as float [0, 1] NCHW (the predictors normalise them)."""
    from macs_audit.data.sources import load_source

    x = load_source(None).images(np.arange(n))
    return (x.astype(np.float32) / 255.0).transpose(0, 3, 1, 2)


def predictor(path: Path, threads: int, features: bool) -> Any:
    from macs_audit.models.features import enable_features
    from macs_audit.models.predictor import load_predictor

    os.environ["OMP_NUM_THREADS"] = str(threads)  # read by the ONNX backend when it opens the session
    loaded = load_predictor(path, device="cpu")
    if features:
        enable_features(loaded)
    return loaded


def inference_seconds_per_image(model: Path, images: np.ndarray, batch: int) -> float:
    """Seconds an image of `model` with its features output, on every core (one untimed batch first)."""
    net = predictor(model, os.cpu_count() or 1, features=True)
    net.predict_with_features(images[:batch])
    start = time.perf_counter()
    for lo in range(0, len(images), batch):
        net.predict_with_features(images[lo : lo + batch])
    return (time.perf_counter() - start) / len(images)


def synthetic(n: int, classes: int, dim: int, seed: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    means = np.random.default_rng(0).standard_normal((classes, dim)) * 0.5
    labels = rng.integers(0, classes, n)
    features = np.maximum(means[labels] + shift + rng.standard_normal((n, dim)), 0).astype(np.float32)
    return features, labels


def detectors_seconds(n_fit: int, n_scored: int, dim: int = 512, classes: int = 10) -> dict[str, float]:
    """Seconds of fitting, scoring (per detector) and the metrics with intervals, as the audit runs them."""
    from macs_audit.metrics import feature_ood, ood

    rng = np.random.default_rng(1)
    weight, bias = rng.standard_normal((classes, dim)) * 0.05, rng.standard_normal(classes) * 0.1
    fit_x, fit_y = synthetic(n_fit, classes, dim, seed=2, shift=0.0)
    in_x, _ = synthetic(n_scored, classes, dim, seed=3, shift=0.0)
    out_x, _ = synthetic(n_scored, classes, dim, seed=4, shift=0.3)
    sets = {"fit": fit_x, "in": in_x, "out": out_x}
    logits = {name: x.astype(np.float64) @ weight.T + bias for name, x in sets.items()}
    times: dict[str, float] = {}
    start = time.perf_counter()
    fitted = feature_ood.fit_detectors(fit_x, fit_y, logits["fit"], weight, bias)
    times["fit"] = time.perf_counter() - start
    scores_in: dict[str, np.ndarray] = dict(ood.scores(logits["in"]))
    scores_out: dict[str, np.ndarray] = dict(ood.scores(logits["out"]))
    for name, detector in fitted.detectors.items():
        start = time.perf_counter()
        scores_in.update(feature_ood.FittedDetectors({name: detector}, (), dim).scores(in_x, logits["in"]))
        scores_out.update(feature_ood.FittedDetectors({name: detector}, (), dim).scores(out_x, logits["out"]))
        times[f"score {name}"] = time.perf_counter() - start
    start = time.perf_counter()
    ood.scores_section(scores_in, scores_out, 1000, 0)
    times[f"metrics with intervals ({len(scores_in)} scores)"] = time.perf_counter() - start
    return times


def output_ratios(images: np.ndarray, rounds: int = 6) -> list[tuple[int, int, float]]:
    """(threads, batch, median over batches of the seconds with the features output / without) on the sample
    model: two predictors, each batch run by both in an order alternated batch by batch, `rounds` times over."""
    rows = []
    for threads in (1, 2):
        plain, tapped = predictor(SAMPLE, threads, False), predictor(SAMPLE, threads, True)
        runs = (plain.predict, tapped.predict_with_features)
        for batch in (250, 500):
            runs[0](images[:batch]), runs[1](images[:batch])
            ratios = []
            for step, lo in enumerate(list(range(0, len(images), batch)) * rounds):
                seconds = [0.0, 0.0]
                for which in (step % 2, 1 - step % 2):
                    start = time.perf_counter()
                    runs[which](images[lo : lo + batch])
                    seconds[which] = time.perf_counter() - start
                ratios.append(seconds[1] / seconds[0])
            rows.append((threads, batch, float(np.median(ratios))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a CIFAR ResNet-18 ONNX file (built when not given)")
    parser.add_argument("--images", type=int, default=1000, help="images timed for (a)")
    parser.add_argument("--fit", type=int, default=50_000)
    parser.add_argument("--scored", type=int, default=10_000)
    args = parser.parse_args()
    python = platform.python_version()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; Python {python}, numpy {np.__version__}")

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            model = Path(tmp) / "resnet18_cifar.onnx"
            script = Path(__file__).with_name("make_resnet18_cifar.py")
            subprocess.run([sys.executable, str(script), str(model)], check=True, capture_output=True)
        images = test_images(max(args.images, 2000))
        per_image = inference_seconds_per_image(model, images[: args.images], batch=250)
    passes = args.fit + 2 * args.scored
    inference = per_image * passes
    print(f"(a) ResNet-18 with features: {1 / per_image:.1f} images/s; {passes:,} images: {inference:.1f} s")

    times = detectors_seconds(args.fit, args.scored)
    total = sum(times.values())
    print(f"(b) the detectors on {args.fit:,} x 512 fit, {args.scored:,} in and {args.scored:,} out:")
    for name, seconds in times.items():
        print(f"    {name:<40} {seconds:7.2f} s")
    verdict = "meets" if total <= DETECTOR_BAR * inference else "misses"
    print(f"    {'total':<40} {total:7.2f} s = {total / inference:.3f} of (a); {verdict} the bar of {DETECTOR_BAR}")

    print("(c) the features output on the sample model, with / without:")
    for threads, batch, ratio in output_ratios(images[:2000]):
        verdict = "meets" if ratio <= OUTPUT_BAR else "misses"
        print(f"    {threads} thread(s), batches of {batch}: {ratio:.3f}x ({verdict} {OUTPUT_BAR}x)")


if __name__ == "__main__":
    main()
