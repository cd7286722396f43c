"""The view's metrics on adversarial inputs against ordinary data of the same size, side by side in one run.

    python benchmarks/bench_adversarial.py [--sizes 10000x10 50000x1000] [--resamples 1000] [--repeats 1]

What the audit computes for the clean view once the logits are in (`audit.view_result`: every metric of the
accumulator, the selective-prediction metrics, 95% bootstrap intervals over --resamples resamples, the
reliability tables and the smoothed curve; then the risk-coverage curve and the conformal sets fitted on a
class-stratified 20% and scored on the rest), timed on ordinary logits and on each adversarial input made from
them (bench_calibrators.synthetic, seeded: overconfident and biased):

- all_correct, all_wrong: the labels set to the model's prediction, or to the next class;
- tied: every confidence equal (one logit of 2 above zeros at the predicted class; correctness unchanged);
- rounded_8bit: the confidence rounded to a multiple of 1/256, as a quantized model's output, so 256 values
  at most (the predicted class's logit set to give it, the rest zero; correctness unchanged);
- nearly_correct: right on every image but 10 of the 20 least confident (not one of the issue's cases: the
  sweep runs deep without being sorted);
- one_class, two_classes: every label 0, or each label y made y % 2 (each row's logits of the two classes
  swapped with it, so confidences and correctness stay the ordinary data's).

Cases are interleaved: each repeat times every case of a size in turn; each figure is the least over the
repeats (others' jobs on a shared machine only ever add time), and the ratios are to the ordinary data of the
same size, in CPU seconds of this process (less disturbed by other jobs than wall time; wall is printed too).
"point" is the view with no resamples, "intervals" the view's CPU seconds less those. "accumulate"
(CalibrationAccumulator.update in batches of 5,000: softmax and sums, the same work for every case; wall seconds)
is printed apart from the ratio.

Before: ECE-sweep as it searched before (every bin count from 2 up, each a binary search per boundary), kept
here as the reference. Its point estimate is timed on sizes up to --before-max-n, and its bootstrap on
--before-resamples resamples, scaled to --resamples ("scaled"); the sweep's search alone, not the view, in
wall seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_calibrators import synthetic  # noqa: E402

from macs_audit.auditing import AuditOptions, calibration_split, conformal_fit, view_result  # noqa: E402
from macs_audit.metrics import estimators, selective  # noqa: E402
from macs_audit.metrics.accumulators import CalibrationAccumulator  # noqa: E402
from macs_audit.metrics.resampling import draw_counts  # noqa: E402
from macs_audit.views.view import CLEAN  # noqa: E402

BATCH = 5_000
CASES = (
    "ordinary",
    "all_correct",
    "all_wrong",
    "tied",
    "rounded_8bit",
    "nearly_correct",
    "one_class",
    "two_classes",
)


def one_logit(n: int, k: int, predicted: np.ndarray, confidence: np.ndarray) -> np.ndarray:
    """Logits whose softmax puts `confidence` on `predicted` and the rest evenly on the other classes."""
    z = np.zeros((n, k))
    z[np.arange(n), predicted] = np.log(confidence * (k - 1) / (1 - confidence))
    return z


def swap_to(z: np.ndarray, labels: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each row's logits of its label and of `target` swapped: the label becomes `target`, nothing else moves."""
    rows = np.arange(len(z))
    out = z.copy()
    out[rows, labels], out[rows, target] = z[rows, target], z[rows, labels]
    return out


def make_case(case: str, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, k = z.shape
    predicted = z.argmax(axis=1)
    confidence = 1 / np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1)
    # tied and rounded_8bit: the prediction moved to class 0 (the label with it), so that equal confidences are
    # the same logits row, the same float
    to_zero = np.where(y == predicted, 0, np.where(y == 0, predicted, y))
    if case == "ordinary":
        return z, y
    if case == "all_correct":
        return z, predicted
    if case == "all_wrong":
        return z, (predicted + 1) % k
    if case == "tied":
        return one_logit(n, k, np.zeros(n, dtype=np.int64), np.full(n, np.exp(2.0) / (np.exp(2.0) + k - 1))), to_zero
    if case == "rounded_8bit":
        lowest = (np.floor(256 / k) + 1) / 256  # the least level still above 1/k: the prediction stays the argmax
        rounded = np.clip(np.round(confidence * 256) / 256, lowest, 255 / 256)
        return one_logit(n, k, np.zeros(n, dtype=np.int64), rounded), to_zero
    if case == "nearly_correct":
        labels = predicted.copy()
        least = np.argsort(confidence)[:20]
        labels[least[::2]] = (labels[least[::2]] + 1) % k
        return z, labels
    if case == "one_class":
        return swap_to(z, y, np.zeros(n, dtype=np.int64)), np.zeros(n, dtype=np.int64)
    if case == "two_classes":
        return swap_to(z, y, y % 2), y % 2
    raise ValueError(case)


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def cpu_timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def accumulated(z: np.ndarray, y: np.ndarray) -> CalibrationAccumulator:
    acc = CalibrationAccumulator(z.shape[1])
    for i in range(0, len(y), BATCH):
        acc.update(z[i : i + BATCH], y[i : i + BATCH])
    return acc


def view_metrics(acc: CalibrationAccumulator, z: np.ndarray, y: np.ndarray, resamples: int) -> None:
    """The clean view's metrics as the audit computes them from its accumulator and logits."""
    samples = acc.samples()
    selective.curve_points(selective.risk_curve(samples["confidence"], samples["correct"]))
    options = AuditOptions()
    sets = conformal_fit(z, y, calibration_split(y, options.calibration_split, options.seed), coverage=options.coverage)
    view_result(CLEAN, acc, resamples, 0, conformal=sets.evaluate(z) if sets is not None else None)


def sweep_before(prefix: estimators.SortedPrefix) -> np.ndarray:
    """ECE-sweep's bin counts as they were searched before: every count from 2 up until the first that is not
    monotone, each count's boundaries looked up by binary search."""
    n = prefix.total
    best = np.ones(prefix.rows, dtype=np.int64)
    searching = np.arange(prefix.rows)
    for bins in range(2, n + 1):
        if len(searching) == 0:
            break
        bounds = estimators.equal_mass_bounds(n, bins)
        queries = bounds[None, :] + (searching * (n + 1))[:, None]
        found = np.searchsorted(prefix.laid_out, queries.ravel(), side="right").reshape(queries.shape)
        some = found > (searching * prefix.n)[:, None]
        last = np.where(some, found - 1, 0)
        following = np.minimum(found - (searching * prefix.n)[:, None], prefix.n - 1)
        partial = bounds[None, :] - np.where(some, prefix.cum_count[last], 0.0)
        hits = np.diff(np.where(some, prefix.cum_hit[last], 0.0) + partial * prefix.hit[following], axis=1)
        monotone = ~np.any(np.diff(hits / np.diff(bounds), axis=1) < 0, axis=1)
        best[searching[monotone]] = bins
        searching = searching[monotone]
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["10000x10", "50000x1000"], help="N x K, e.g. 10000x10")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before-max-n", type=int, default=10_000)
    parser.add_argument("--before-resamples", type=int, default=2)
    args = parser.parse_args()
    cases = ["ordinary"] + [c for c in args.cases if c != "ordinary"]
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (others' work slows every number)")
    print(f"{args.resamples:,} resamples, {args.repeats} repeat(s), cases interleaved within each size\n")
    for size in args.sizes:
        n, k = (int(v) for v in size.lower().split("x"))
        base = synthetic(n, k, args.seed)
        times: dict[str, list[tuple[float, float, float, float, float]]] = {c: [] for c in cases}
        before: dict[str, tuple[float | None, float | None, int, int]] = {}
        for repeat in range(args.repeats):
            for case in cases:
                z, y = make_case(case, *base)
                acc, accumulate = timed(lambda z=z, y=y: accumulated(z, y))
                _, point = cpu_timed(lambda acc=acc, z=z, y=y: view_metrics(acc, z, y, 0))
                total, cpu = cpu_timed(lambda acc=acc, z=z, y=y: view_metrics(acc, z, y, args.resamples))
                times[case].append((accumulate, point, cpu - point, cpu, total))
                if repeat == 0:
                    s = acc.samples()
                    bins = estimators.ece_sweep(s["confidence"], s["correct"])[1]
                    distinct = len(np.unique(s["confidence"]))
                    point_before = resampled_before = None
                    if n <= args.before_max_n:
                        prefix = estimators.SortedPrefix(s["confidence"], s["correct"])
                        _, point_before = timed(lambda prefix=prefix: sweep_before(prefix))
                        rng = np.random.default_rng(args.seed)
                        counts = next(draw_counts(n, args.before_resamples, rng))
                        resampled = estimators.SortedPrefix(s["confidence"], s["correct"], counts)
                        _, elapsed = timed(lambda resampled=resampled: sweep_before(resampled))
                        resampled_before = elapsed / args.before_resamples * args.resamples
                    before[case] = (point_before, resampled_before, bins, distinct)
                del z, y, acc
        least = {case: [min(t[i] for t in rows) for i in range(5)] for case, rows in times.items()}
        print(f"## {n:,} x {k:,}\n")
        print(
            "| case | ECE-sweep bins | distinct confidences | accumulate s | point CPU s | intervals CPU s "
            "| metrics CPU s | ratio to ordinary | intervals' ratio | metrics wall s | wall ratio "
            "| before: sweep point s | before: sweep intervals s (scaled) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        o = least["ordinary"]
        for case in cases:
            accumulate, point, intervals, cpu, wall = least[case]
            point_before, resampled_before, bins, distinct = before[case]
            pb = f"{point_before:.2f}" if point_before is not None else "-"
            rb = f"{resampled_before:,.0f}" if resampled_before is not None else "-"
            print(
                f"| {case} | {bins:,} | {distinct:,} | {accumulate:.2f} | {point:.2f} | {intervals:.2f} | {cpu:.2f} "
                f"| {cpu / o[3]:.2f}x | {intervals / o[2]:.2f}x | {wall:.2f} | {wall / o[4]:.2f}x | {pb} | {rb} |"
            )
        print()


if __name__ == "__main__":
    main()
