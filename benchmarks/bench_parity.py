"""The parity audit (`evaluate CANDIDATE --reference REFERENCE`) against the two models' bare inference passes,
same data, one run.

    python benchmarks/bench_parity.py [--precision int8] [--repeats 5]

The candidate is built from the sample model first (deployment.build_precision: FP16, or INT8 on 512
class-stratified calibration images of the built-in test set). Four measurements on the built-in test set's
10,000 images, interleaved so that machine noise hits them alike (medians, and the median of the per-round
ratios):
- bare pair:     onnxruntime InferenceSession.run of the reference and of the candidate over the
                 already-preprocessed float32 images, batch 500: the floor of any tool that scores both;
- parity:        run_audit(candidate, reference=reference) in-process, clean view: both models on the same
                 batches (uint8 -> float -> preprocessing -> both models), the candidate's audit (metrics,
                 1,000 bootstrap resamples, temperature, conformal sets) and the parity section (agreement,
                 flips, KL, every metric's difference with 1,000 paired resamples, the sets at both thresholds);
- parity-noboot: the same with --bootstrap 0;
- two audits:    run_audit of the reference, then of the candidate (what comparing two reports costs), with the
                 same options as `parity`.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_evaluate import bare_loop  # benchmarks/ is on sys.path: the script's own folder

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce.onnx"


def options(batch_size: int, bootstrap: int):
    from macs_audit.audit import AuditOptions

    return AuditOptions(
        batch_size=batch_size, bootstrap=bootstrap, perturbations=(), sensitivity_samples=0, calibrators=()
    )


def parity(candidate: Path, reference: Path, source, batch_size: int, bootstrap: int) -> float:
    from macs_audit.audit import run_audit
    from macs_audit.models.predictor import load_predictor

    cand, ref = load_predictor(candidate, device="cpu"), load_predictor(reference, device="cpu")
    start = time.perf_counter()
    run_audit(cand, source, options(batch_size, bootstrap), reference=ref)
    return time.perf_counter() - start


def two_audits(candidate: Path, reference: Path, source, batch_size: int, bootstrap: int) -> float:
    from macs_audit.audit import run_audit
    from macs_audit.models.predictor import load_predictor

    models = [load_predictor(path, device="cpu") for path in (reference, candidate)]
    start = time.perf_counter()
    for model in models:
        run_audit(model, source, options(batch_size, bootstrap))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp16", "int8"), default="int8")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from macs_audit.data.loading import DataSpec
    from macs_audit.data.sources import load_source
    from macs_audit.deployment import Calibration, build_precision
    from macs_audit.models.predictor import load_predictor
    from macs_audit.models.preprocessing import resize_and_normalize
    from macs_audit.pixels import to_unit_float

    folder = Path(tempfile.mkdtemp(prefix="bench_parity_"))
    reference = folder / "float.onnx"
    reference.write_bytes(SAMPLE.read_bytes())
    calibration = Calibration(DataSpec(None, "builtin"), 512, 0) if args.precision == "int8" else None
    candidate = build_precision(reference, args.precision, calibration=calibration).path

    source = load_source(None)
    cfg = load_predictor(reference, device="cpu").config
    x = resize_and_normalize(to_unit_float(source.images(np.arange(len(source)))), cfg.input_size, cfg.mean, cfg.std)
    times: dict[str, list[float]] = {"bare pair": [], "parity": [], "parity-noboot": [], "two audits": []}
    for _ in range(args.repeats):
        times["bare pair"].append(bare_loop(reference, x, args.batch_size) + bare_loop(candidate, x, args.batch_size))
        times["parity"].append(parity(candidate, reference, source, args.batch_size, 1000))
        times["parity-noboot"].append(parity(candidate, reference, source, args.batch_size, 0))
        times["two audits"].append(two_audits(candidate, reference, source, args.batch_size, 1000))
    median = {k: statistics.median(v) for k, v in times.items()}
    ratio = {k: statistics.median(a / b for a, b in zip(v, times["bare pair"], strict=True)) for k, v in times.items()}
    print(
        f"{args.precision} candidate of {SAMPLE.name} against it, {len(x)} images, batch {args.batch_size}, "
        f"{args.repeats} interleaved rounds (medians; ratio: the median of the rounds' ratios)"
    )
    print("| measurement | seconds | ratio to the bare pair |\n|---|---:|---:|")
    for key in times:
        print(f"| {key} | {median[key]:.2f} | {ratio[key]:.2f}x |")


if __name__ == "__main__":
    main()
