"""Images/s of `macs-audit evaluate` against a bare onnxruntime loop, same model and data, one run.

    python benchmarks/bench_evaluate.py [--model sample_models/resnet9_c10_ce.onnx] [--repeats 3]

Three measurements, interleaved so machine noise hits all of them alike (medians reported):
- bare:      onnxruntime InferenceSession.run over the already-preprocessed float32 test set,
             batch 500 — the floor any tool pays;
- audit:     macs_audit.auditing.run_audit in-process on the built-in test set (uint8 -> preprocessing
             -> model -> metrics, 1000 bootstrap resamples, temperature fit);
- audit-noboot: the same without the 1000 bootstrap resamples (a fixed ~0.3 s for 10,000 images);
- cli:       `macs-audit evaluate MODEL --quiet --perturbations none --sensitivity-samples 0`
             end to end in a fresh process: the same clean audit plus Python start-up, imports,
             model loading and hashing, and writing nothing (the default command also scores the
             noise+blur view and 500 sensitivity images, i.e. more work than the bare loop does).
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def bare_loop(model: Path, x: np.ndarray, batch_size: int) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    start = time.perf_counter()
    for i in range(0, len(x), batch_size):
        session.run(None, {name: x[i : i + batch_size]})
    return time.perf_counter() - start


def audit_in_process(model: Path, batch_size: int, bootstrap: int = 1000) -> float:
    from macs_audit.auditing import AuditOptions, run_audit
    from macs_audit.data.sources import load_source
    from macs_audit.models.predictor import load_predictor

    predictor = load_predictor(model, device="cpu")
    source = load_source(None)
    start = time.perf_counter()
    run_audit(predictor, source, AuditOptions(batch_size=batch_size, bootstrap=bootstrap))
    return time.perf_counter() - start


def cli(model: Path, batch_size: int) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "macs_audit",
            "evaluate",
            str(model),
            "--quiet",
            "--device",
            "cpu",
            "--batch-size",
            str(batch_size),
            "--perturbations",
            "none",
            "--sensitivity-samples",
            "0",
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "sample_models" / "resnet9_c10_ce.onnx")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from macs_audit.data.sources import load_source
    from macs_audit.models.predictor import load_predictor
    from macs_audit.models.preprocessing import resize_and_normalize
    from macs_audit.pixels import to_unit_float

    source = load_source(None)
    cfg = load_predictor(args.model, device="cpu").config
    x = resize_and_normalize(to_unit_float(source.images(np.arange(len(source)))), cfg.input_size, cfg.mean, cfg.std)
    n = len(x)
    times = {"bare": [], "audit": [], "audit-noboot": [], "cli": []}
    for _ in range(args.repeats):
        times["bare"].append(bare_loop(args.model, x, args.batch_size))
        times["audit"].append(audit_in_process(args.model, args.batch_size))
        times["audit-noboot"].append(audit_in_process(args.model, args.batch_size, bootstrap=0))
        times["cli"].append(cli(args.model, args.batch_size))
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"model {args.model.name}, {n} images, batch {args.batch_size}, {args.repeats} interleaved repeats (median)")
    print(f"{'measurement':<12} {'seconds':>8} {'images/s':>9} {'ratio to bare':>14}")
    for key in times:
        print(f"{key:<12} {median[key]:>8.2f} {n / median[key]:>9.0f} {median['bare'] / median[key]:>14.2f}")


if __name__ == "__main__":
    main()
