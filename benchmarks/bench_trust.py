"""What selective prediction, conformal sets, OOD detection and the unlabeled estimate add to an audit's wall
time, on 50,000 predictions of the sample model.

    nice -n 10 python benchmarks/bench_trust.py --data DIR [--n 50000] [--seed 0]

DIR holds cifar10_train.npz (the 50,000 training images: predictions as many as the issue's budget names) and
cifar10_test.npz (10,000 images: the OOD and the unlabeled target set). One run: the audit of the 50,000
(`run_audit` with the CLI's defaults: bootstrap 1,000, calibration split 0.2, the noise+blur view, 500
sensitivity images; selective prediction and conformal sets included, as in every audit), then each added
analysis timed again alone on the audit's logits: the selective metrics and curve, the conformal fit and its
sets, the OOD section (three scores, 1,000 bootstrap resamples, 50,000 against 10,000) and the unlabeled
estimates (1,000 resamples). The ratio is the added analysis over the audit's wall time; the model's passes over
the OOD and unlabeled images are predictions, not analysis, and are not counted.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from macs_audit.auditing import AuditOptions, Loop, calibration_split, conformal_fit, evaluate_view, run_audit
from macs_audit.data.sources import load_source
from macs_audit.data.splits import stratified_subset
from macs_audit.metrics import label_free, ood, selective
from macs_audit.metrics.accumulators import softmax_with_log
from macs_audit.models.predictor import load_predictor

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_models" / "resnet9_c10_ce.onnx"


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    predictor = load_predictor(MODEL, device="cpu")
    source = load_source(args.data / "cifar10_train.npz")
    source = source.subset(stratified_subset(source.labels, args.n, args.seed))
    options = AuditOptions(perturbations=("noise+blur",), sensitivity_samples=500, seed=args.seed)
    result, audit_seconds = timed(run_audit, predictor, source, options)
    other = load_source(args.data / "cifar10_test.npz")
    _, other_logits = evaluate_view(predictor, other, 10, Loop(500), keep_logits=True)

    logits, labels = result.logits, result.labels

    def selective_part():
        p, _ = softmax_with_log(logits)
        confidence, correct = p.max(axis=1), p.argmax(axis=1) == labels
        selective.selective_metrics(confidence, correct)
        return selective.curve_points(selective.risk_curve(confidence, correct))

    def conformal_part():
        split = calibration_split(labels, options.calibration_split, options.seed)
        return conformal_fit(logits, labels, split, coverage=options.coverage).evaluate(logits)

    parts = {
        "selective prediction (metrics + curve)": selective_part,
        "conformal sets (fit + held-out sets)": conformal_part,
        "OOD section (3 scores, 1,000 resamples)": lambda: ood.ood_section(logits, other_logits, 1000, args.seed),
        "unlabeled estimates (1,000 resamples)": lambda: label_free.estimates(
            logits, labels, other_logits, 1000, args.seed
        ),
    }
    print(f"audit of {len(labels):,} predictions (CLI defaults): {audit_seconds:.1f} s wall")
    total = 0.0
    for name, fn in parts.items():
        _, seconds = timed(fn)
        total += seconds
        print(f"  {name}: {seconds:.2f} s ({100 * seconds / audit_seconds:.1f}% of the audit)")
    print(f"added analysis: {total:.2f} s = {100 * total / audit_seconds:.1f}% of the audit's wall time")


if __name__ == "__main__":
    main()
