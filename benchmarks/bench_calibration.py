"""The full calibration analysis and `calibrate --method all` on large logits, beside the reference libraries.

    python benchmarks/bench_calibration.py [--n 50000] [--classes 1000] [--resamples 1000] [--reference-resamples 20]

One process, one run, the synthetic logits of bench_calibrators.py (seeded; overconfident and biased).

Analysis: what an audit computes for one view. Ours: every metric of CalibrationAccumulator (ECE, MCE,
adaptive, classwise, smooth, L2 and debiased L2 ECE, ECE-sweep, NLL, Brier, margins) fed in batches of
5,000, then 95% bootstrap intervals over --resamples resamples for all of them but classwise ECE.
References, the same estimators where they have them: torchmetrics (binned ECE and MCE, 15 bins),
relplot (smooth ECE), uncertainty-calibration (plug-in and debiased L2 ECE over 15 equal-mass bins),
netcal (ECE); scikit-learn has none of these. None has a bootstrap, so each runs on the point estimate
and on --reference-resamples resamples (the same index sets for all), and its time per resample is
scaled to --resamples: "scaled" in the table says so.

`calibrate --method all`: ours fits the six methods on a class-stratified 70% and scores each on the other
30% (calibrators.selection.compare_calibrators; matrix and Dirichlet are refused below classes x
(classes + 1) / 4 images, 250,250 for 1,000 classes, and say so). netcal fits and applies the three
methods it has (temperature, isotonic, histogram binning) on the same split.

Wall and CPU seconds are printed; ratios are the reference's wall time over ours.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_calibrators import synthetic  # noqa: E402

from macs_audit.calibrators.common import softmax  # noqa: E402
from macs_audit.data.splits import stratified_split  # noqa: E402
from macs_audit.metrics import bootstrap  # noqa: E402
from macs_audit.metrics.accumulators import CalibrationAccumulator  # noqa: E402

BATCH = 5_000
BINS = 15


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):  # netcal prints its warnings
        result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def ours_analysis(z: np.ndarray, y: np.ndarray, resamples: int) -> tuple[float, float, float]:
    """(point-estimate seconds, interval seconds, CPU seconds) of the whole analysis."""
    cpu = time.process_time()
    start = time.perf_counter()
    acc = CalibrationAccumulator(z.shape[1])
    for i in range(0, len(y), BATCH):
        acc.update(z[i : i + BATCH], y[i : i + BATCH])
    estimates = acc.compute()
    middle = time.perf_counter()
    bootstrap.bootstrap_intervals(acc, resamples, seed=0, estimates=estimates)
    end = time.perf_counter()
    return middle - start, end - middle, time.process_time() - cpu


def references(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, Callable[[np.ndarray], Any]]:
    """name -> function of a resample's indices computing that library's estimates on it."""
    found: dict[str, Callable[[np.ndarray], Any]] = {}
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == labels).astype(np.float64)
    with contextlib.suppress(ImportError):
        import torch
        from torchmetrics.functional.classification import multiclass_calibration_error

        p32, y_t = torch.from_numpy(probabilities.astype(np.float32)), torch.from_numpy(labels)
        k = probabilities.shape[1]

        def torchmetrics_ece(index: np.ndarray) -> Any:
            i = torch.from_numpy(index)
            return [multiclass_calibration_error(p32[i], y_t[i], k, BINS, norm=norm) for norm in ("l1", "max")]

        found["torchmetrics: ECE, MCE"] = torchmetrics_ece
    with contextlib.suppress(ImportError):
        import relplot

        found["relplot: smooth ECE"] = lambda index: relplot.smECE(confidence[index], correct[index])
    with contextlib.suppress(ImportError):
        import calibration

        def l2(index: np.ndarray) -> Any:
            pairs = (confidence[index], correct[index].astype(int))
            return [calibration.get_calibration_error(*pairs, debias=d) for d in (False, True)]

        found["uncertainty-calibration: L2, debiased L2"] = l2
    with contextlib.suppress(ImportError):
        from netcal.metrics import ECE

        ece = ECE(bins=BINS)
        found["netcal: ECE"] = lambda index: ece.measure(probabilities[index], labels[index])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--reference-resamples", type=int, default=20)
    parser.add_argument("--skip-calibrate", action="store_true")
    args = parser.parse_args()

    z, y = synthetic(args.n, args.classes, args.seed)
    print(f"data: {args.n:,} x {args.classes:,} float64 logits, seed {args.seed}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (others' work slows every number)")

    (point, intervals, cpu), wall, _ = timed(lambda: ours_analysis(z, y, args.resamples))
    print(f"\nanalysis, ours: {wall:.1f} s wall ({cpu:.1f} s CPU): point estimates {point:.1f} s, ")
    print(f"  intervals of 10 estimators over {args.resamples:,} resamples {intervals:.1f} s")

    probabilities = softmax(z)
    rng = np.random.default_rng(args.seed)
    draws = [rng.integers(0, args.n, args.n) for _ in range(args.reference_resamples)]
    everything = np.arange(args.n)
    total = 0.0
    print(f"\n{'reference':<42}{'point s':>9}{'per resample s':>16}{'scaled total s':>16}")
    for name, fn in references(probabilities, y).items():
        _, first, _ = timed(lambda fn=fn: fn(everything))
        _, rest, _ = timed(lambda fn=fn: [fn(index) for index in draws])
        each = rest / max(1, len(draws))
        scaled = first + each * args.resamples
        total += scaled
        print(f"{name:<42}{first:>9.2f}{each:>16.3f}{scaled:>16.1f}")
    print(f"references together, scaled to {args.resamples:,} resamples: {total:.1f} s = {total / wall:.1f}x ours")

    if args.skip_calibrate:
        return
    from macs_audit.calibrators.selection import compare_calibrators

    held, fit = stratified_split(y, 0.3, args.seed)
    selection, wall, cpu = timed(lambda: compare_calibrators(z[fit], y[fit], z[held], y[held]))
    print(f"\ncalibrate --method all, ours: {wall:.1f} s wall ({cpu:.1f} s CPU), chose {selection.selected}")
    for trial in selection.trials[1:]:
        what = f"{trial.fit_seconds:.1f} s fit" if trial.fit_seconds is not None else f"refused: {trial.refused}"
        print(f"  {trial.method:<12}{what}")
    with contextlib.suppress(ImportError):
        from netcal.binning import HistogramBinning, IsotonicRegression
        from netcal.scaling import TemperatureScaling

        def netcal_three() -> None:
            for method in (TemperatureScaling(), IsotonicRegression(), HistogramBinning(bins=BINS)):
                method.fit(probabilities[fit], y[fit])
                method.transform(probabilities[held])

        ours_three = sum(t.fit_seconds or 0.0 for t in selection.trials if t.method in ("temperature", "isotonic"))
        ours_three += next(t.fit_seconds or 0.0 for t in selection.trials if t.method == "histogram")
        _, netcal_wall, _ = timed(netcal_three)
        print(f"netcal temperature + isotonic + histogram (fit and apply): {netcal_wall:.1f} s")
        print(f"  = {netcal_wall / ours_three:.1f}x our fits of the same three ({ours_three:.1f} s)")


if __name__ == "__main__":
    main()
