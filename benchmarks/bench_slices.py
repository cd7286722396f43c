"""What slicing costs the default audit of the sample model, measured side by side in one run.

    python benchmarks/bench_slices.py [--rounds 3]

(a) The image-property slices: the default `evaluate` of the sample model on the built-in 10,000 test images, with
the image properties read in the clean pass and sliced (the default) and with `--no-image-slices`, in-process through
the API, alternated round by round after one untimed audit; the ratio of the medians. The bar: at most 1.05x. The
same added work timed inside the audits with slices (the properties' calls in the clean pass, the slice stage) gives
the ratio without the rounds' noise.

(b) The slice analysis: 40 slices (the four image properties' quintiles and two metadata columns of ten values),
intervals included (1,000 resamples), on the clean view of the same audit (auditing/slicing.slices_section), against
the audit's analysis part: its wall time less its inference passes (the clean view, the robust view and the
sensitivity images, timed by the progress callback from each pass's first event to its last). The bar: at most 10%.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce.onnx"
PROPERTY_BAR, ANALYSIS_BAR = 1.05, 0.10
PASSES = ("clean", "noise+blur", "sensitivity")  # the default audit's inference passes


class PassTimer:
    """The progress callback: each inference pass's time from its first event to its last, and the slice stage's."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def __call__(self, stage, done, total, terms=None) -> None:
        name, now = str(stage), time.perf_counter()
        if name in (*PASSES, "slices"):
            self.first.setdefault(name, now)
            self.last[name] = now

    def inference(self) -> float:
        return sum(self.last[name] - self.first[name] for name in self.first if name != "slices")

    def slices(self) -> float:
        return self.last.get("slices", 0.0) - self.first.get("slices", 0.0)


class PropertyClock:
    """The time the clean pass spends on the image properties: PropertyTaps.observe, timed."""

    def __init__(self) -> None:
        from macs_audit.metrics.image_properties import PropertyTaps

        self.seconds, observe = 0.0, PropertyTaps.observe

        def timed(taps, start, images) -> None:
            began = time.perf_counter()
            observe(taps, start, images)
            self.seconds += time.perf_counter() - began

        PropertyTaps.observe = timed  # type: ignore[method-assign]


def audit(image_slices: bool, clock: PropertyClock):
    import macs_audit

    timer, before = PassTimer(), clock.seconds
    start = time.perf_counter()
    report = macs_audit.audit(str(SAMPLE), image_slices=image_slices, progress=timer)
    wall = time.perf_counter() - start
    return wall, timer.inference(), clock.seconds - before + timer.slices(), report


def forty_slices(report, seed: int = 0) -> float:
    """The slice analysis of 40 slices on the sample model's clean logits, timed (the median of three)."""
    from macs_audit.auditing import AuditOptions
    from macs_audit.auditing.calibration import calibration_split, conformal_fit
    from macs_audit.auditing.slicing import SliceColumns, slices_section
    from macs_audit.data.sources import load_source
    from macs_audit.metrics import accumulators
    from macs_audit.metrics.image_properties import image_properties
    from macs_audit.models.predictor import load_predictor

    source = load_source(None)
    predictor = load_predictor(str(SAMPLE), {}, device="cpu")
    images = source.images(np.arange(len(source)))
    floats = (images.astype(np.float32) / 255).transpose(0, 3, 1, 2)
    logits = np.concatenate([predictor.predict(floats[i : i + 500]) for i in range(0, len(floats), 500)])
    acc = accumulators.CalibrationAccumulator(logits.shape[1])
    acc.update(logits, source.labels)
    rng = np.random.default_rng(seed)
    columns = dict(image_properties(floats))
    for name in ("camera", "site"):
        columns[name] = rng.choice(np.array([f"{name}{i}" for i in range(10)], dtype=object), len(source))
    sliced = SliceColumns(columns, dict.fromkeys(columns, "bench"))
    options = AuditOptions()
    split = calibration_split(source.labels, options.calibration_split, options.seed)
    sets = conformal_fit(logits, source.labels, split, coverage=options.coverage)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        section = slices_section(acc.samples(), logits, sets, sliced, options)
        times.append(time.perf_counter() - start)
    assert section is not None and len(section.slices) + len(section.small) == 40, len(section.slices)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternated pairs of audits for (a)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}")
    with_slices, without, analysis, added = [], [], [], []
    clock = PropertyClock()
    audit(True, clock)  # the imports and the first onnxruntime InferenceSession, paid once before the timed rounds
    report = None
    for round_ in range(args.rounds):
        for image_slices in (True, False) if round_ % 2 == 0 else (False, True):
            wall, inference, sliced, found = audit(image_slices, clock)
            (with_slices if image_slices else without).append(wall)
            if image_slices:
                analysis.append(wall - inference)
                added.append(sliced)
                report = found
            print(f"  round {round_}: image slices {'on ' if image_slices else 'off'} {wall:6.1f} s", flush=True)
    on, off, own = float(np.median(with_slices)), float(np.median(without)), float(np.median(added))
    print(
        f"(a) default audit: {on:.1f} s with image slices, {off:.1f} s without: {on / off:.3f}x (bar {PROPERTY_BAR}x)"
    )
    print(f"    timed inside: the properties in the clean pass and the slice stage {own:.2f} s: {1 + own / off:.3f}x")
    part = float(np.median(analysis))
    cost = forty_slices(report)
    print(
        f"(b) 40 slices with intervals: {cost:.2f} s; the audit's analysis part {part:.1f} s: {cost / part:.3f} "
        f"(bar {ANALYSIS_BAR})"
    )


if __name__ == "__main__":
    main()
