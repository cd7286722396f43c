"""Fit time of the six post-hoc calibrators on large synthetic logits, and of netcal where it has the method.

    python benchmarks/bench_calibrators.py [--n 50000] [--classes 1000] [--seed 0] [--linear-max-iter 10]

One process, one run. Synthetic data (seeded): true logits are standard Gaussian noise plus log(classes) + 2
on one class a row (the labels, drawn from their softmax, agree with the argmax about 80% of the time on
any number of classes), and the "model" reports twice the true logits plus a per-class offset
(overconfident and biased), as float64. Every calibrator is fitted on (n, classes) through its registry
entry, without `check_fit_size` (which refuses matrix and Dirichlet below classes x (classes + 1) / 4
images: 250,250 for 1,000 classes); then it maps 10,000 fresh logits, whose NLL is printed as a sanity
check (the raw logits' first).

Matrix scaling and Dirichlet calibration fit classes x (classes + 1) parameters with two (n, K) x (K, K)
products per L-BFGS evaluation; on 1,000 classes that is seconds an evaluation, so their iterations are
capped by --linear-max-iter (0: the library default) and the time per evaluation is printed as well.

netcal (`pip install netcal`) runs the same data where it has the method: TemperatureScaling, and the
one-vs-rest IsotonicRegression and HistogramBinning (equal-mass bins fit but cannot predict in netcal,
so its equal-width bins are timed against ours too). netcal's vector scaling (LogisticCalibration on
log-probabilities) uses finite-difference gradients (2 x classes objective evaluations a step) and is not
run; it has no matrix scaling. Ratios are netcal's wall time over ours. Wall and CPU times are printed:
on a shared machine CPU time is the steadier guide.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from macs_audit.calibrators.base import CALIBRATORS
from macs_audit.calibrators.common import log_softmax, mean_nll, softmax


def synthetic(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(model logits (n, k) float64, labels): labels from softmax(true); the model says 2 x true + offset."""
    rng = np.random.default_rng(seed)
    true = rng.standard_normal((n, k))
    true[np.arange(n), rng.integers(0, k, n)] += np.log(k) + 2.0
    cumulative = softmax(true).cumsum(axis=1)
    labels = np.minimum((cumulative < rng.random(n)[:, None]).sum(axis=1), k - 1)
    offset = np.random.default_rng(seed + 1_000_003).normal(0.0, 0.5, k)
    return 2.0 * true + offset, labels


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):  # netcal prints its warnings
        result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--linear-max-iter", type=int, default=10, help="matrix/Dirichlet L-BFGS cap (0: default)")
    parser.add_argument("--no-netcal", action="store_true")
    args = parser.parse_args()

    import scipy.optimize  # noqa: F401  (imports are not what is timed)
    import sklearn.isotonic  # noqa: F401

    start = time.perf_counter()
    z, y = synthetic(args.n, args.classes, args.seed)
    z_test, y_test = synthetic(10_000, args.classes, args.seed + 1)
    print(f"data: {args.n:,} x {args.classes:,} float64 logits, seed {args.seed} ({time.perf_counter() - start:.1f} s)")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (others' work slows every number)")
    print(f"raw logits: held-out NLL {mean_nll(log_softmax(z_test), y_test):.4f}")

    ours: dict[str, float] = {}
    print(f"\n{'method':<12}{'fit wall s':>11}{'fit CPU s':>11}{'held-out NLL':>14}  notes")
    for method, fit in CALIBRATORS.items():
        options: dict[str, Any] = {}
        if method in ("matrix", "dirichlet") and args.linear_max_iter > 0:
            options["max_iter"] = args.linear_max_iter
        calibrator, wall, cpu = timed(lambda fit=fit, options=options: fit(z, y, **options))
        ours[method] = wall
        description = calibrator.describe()
        nll = mean_nll(calibrator.transform(z_test), y_test)
        parameters = description["parameters"]
        notes = f"{description['n_parameters']:,} parameter{'s' if description['n_parameters'] > 1 else ''}"
        if "iterations" in parameters:
            notes += (
                f"; {parameters['iterations']} iterations, {parameters['evaluations']} evaluations "
                f"({wall / parameters['evaluations']:.2f} s each), "
                f"{'converged' if parameters['converged'] else 'stopped at the cap'}"
            )
        print(f"{method:<12}{wall:>11.1f}{cpu:>11.1f}{nll:>14.4f}  {notes}", flush=True)
    print(f"{'all six':<12}{sum(ours.values()):>11.1f}")

    if args.no_netcal:
        return
    from netcal.binning import HistogramBinning, IsotonicRegression
    from netcal.scaling import TemperatureScaling

    p = softmax(z)
    runs: list[tuple[str, str, Callable[[], Any]]] = [
        ("temperature", "TemperatureScaling", lambda: TemperatureScaling().fit(p, y)),
        ("isotonic", "IsotonicRegression", lambda: IsotonicRegression().fit(p, y)),
        (
            "histogram",
            "HistogramBinning(equal_intervals=False, bins=15)",
            lambda: HistogramBinning(15, False).fit(p, y),
        ),
    ]
    _, uniform_wall, _ = timed(lambda: CALIBRATORS["histogram"](z, y, strategy="uniform"))
    print(f"\n{'netcal':<52}{'fit wall s':>11}{'fit CPU s':>11}{'netcal / ours':>15}")
    for method, name, run in runs:
        _, wall, cpu = timed(run)
        print(f"{name:<52}{wall:>11.1f}{cpu:>11.1f}{wall / ours[method]:>15.2f}", flush=True)
    _, wall, cpu = timed(lambda: HistogramBinning(15, True).fit(p, y))
    name = "HistogramBinning(bins=15), vs ours strategy=uniform"
    print(f"{name:<52}{wall:>11.1f}{cpu:>11.1f}{wall / uniform_wall:>15.2f}")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
