"""The parity audit (`evaluate CANDIDATE --reference REFERENCE`) against the two models' bare inference passes,
same data, one run.

    python benchmarks/bench_parity.py [--precision int8] [--repeats 5] [--model MODEL.onnx] [--images N]

The candidate is built from the model (the sample model by default; deployment.build_precision: FP16, or INT8
on 512 class-stratified calibration images of the built-in test set). One untimed parity audit first (the modules
the audit imports on first use), then --repeats rounds of the six measurements below on the built-in test set's
10,000 images (or a class-stratified N of them), interleaved so that machine noise hits them alike (medians, and
the median of the per-round ratios):
- bare pair:       InferenceSession.run of the reference and of the candidate over the already-preprocessed
                   float32 images, batch 500, on the sessions the audit makes (its options: idle threads
                   sleep): the floor of any tool that scores both, and the base of every ratio;
- default sessions: the same on sessions with onnxruntime's default options (bench_evaluate's bare_loop;
                   their idle threads spin, which costs much more on a loaded machine);
- parity:          run_audit(candidate, reference=reference) in-process, clean view: both models on the same
                   batches (uint8 -> float -> preprocessing -> both models), the candidate's audit (metrics,
                   1,000 bootstrap resamples, temperature, conformal sets) and the parity section (agreement,
                   flips, KL, every metric's difference on the candidate's own 1,000 resamples, the sets at
                   both thresholds);
- parity-noboot:   the same with --bootstrap 0;
- candidate audit: run_audit of the candidate alone, with `parity`'s options;
- two audits:      run_audit of the reference, then of the candidate (what comparing two reports costs), with
                   the same options as `parity`.
Each is timed in wall-clock seconds and in the process's CPU seconds (every thread's, onnxruntime's included):
on a shared machine the CPU time is the steadier measure of the work done. The parity audit is also split by
part, timed inside it: both models' onnxruntime runs, the bootstrap (metrics.bootstrap.paired_bootstrap: the
candidate's intervals and the paired statistics), and the rest (data, preprocessing, metrics, the parity
summary): the ratio of each to the same round's bare pair is steadier than a difference of two whole runs.
The last lines are what the parity section adds to the candidate's own audit (parity - candidate audit) against
the reference's bare pass: the reference's inference, the paired statistics on the shared resamples and the
parity summary.
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
    from macs_audit.auditing import AuditOptions

    return AuditOptions(
        batch_size=batch_size, bootstrap=bootstrap, perturbations=(), sensitivity_samples=0, calibrators=()
    )


Clock = tuple[float, float]  # (wall, CPU) seconds


def clock() -> Clock:
    return time.perf_counter(), time.process_time()


def since(start: Clock) -> Clock:
    return time.perf_counter() - start[0], time.process_time() - start[1]


def timed_bare_loop(model: Path, x: np.ndarray, batch_size: int) -> Clock:
    start = clock()
    bare_loop(model, x, batch_size)  # its session's creation is in the CPU time: a small, fixed part
    return since(start)


def session_loop(model: Path, x: np.ndarray, batch_size: int) -> Clock:
    """bare_loop on the session the audit makes for `model` (models/onnx.py's options)."""
    from macs_audit.models.onnx import OnnxPredictor
    from macs_audit.models.predictor import load_predictor

    predictor = load_predictor(model, device="cpu")
    assert isinstance(predictor, OnnxPredictor)
    session, name = predictor.session, predictor.input_name
    start = clock()
    for i in range(0, len(x), batch_size):
        session.run(None, {name: x[i : i + batch_size]})
    return since(start)


class Stopwatch:
    """Wall seconds spent inside some functions (wrapped for the whole run; one thread calls them)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner, name: str, key: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken


STOPWATCH = Stopwatch()


def parity(candidate: Path, reference: Path, source, batch_size: int, bootstrap: int) -> Clock:
    from macs_audit.auditing import run_audit
    from macs_audit.models.predictor import load_predictor

    cand, ref = load_predictor(candidate, device="cpu"), load_predictor(reference, device="cpu")
    STOPWATCH.take()
    start = clock()
    run_audit(cand, source, options(batch_size, bootstrap), reference=ref)
    return since(start)


def audits(paths: list[Path], source, batch_size: int, bootstrap: int) -> Clock:
    """run_audit of each model on its own, one after the other."""
    from macs_audit.auditing import run_audit
    from macs_audit.models.predictor import load_predictor

    models = [load_predictor(path, device="cpu") for path in paths]
    start = clock()
    for model in models:
        run_audit(model, source, options(batch_size, bootstrap))
    return since(start)


def copied_model(model: Path, folder: Path) -> Path:
    """`model` copied into `folder` as float.onnx, with its sidecar (its preprocessing) where it has one: the builds
    made from the copy are written beside it, not beside the original."""
    from macs_audit.models.config import sidecar_path

    copy = folder / "float.onnx"
    copy.write_bytes(model.read_bytes())
    if sidecar_path(model).exists():
        sidecar_path(copy).write_bytes(sidecar_path(model).read_bytes())
    return copy


def plus(a: Clock, b: Clock) -> Clock:
    return a[0] + b[0], a[1] + b[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp16", "int8"), default="int8")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", type=Path, default=SAMPLE, help="the float ONNX model (the reference)")
    parser.add_argument("--images", type=int, default=None, help="a class-stratified subset of the test set")
    args = parser.parse_args()

    from macs_audit.data.loading import DataSpec
    from macs_audit.data.sources import load_source
    from macs_audit.data.splits import stratified_subset
    from macs_audit.deployment import BuildSpec, Calibration, build_precision
    from macs_audit.models.predictor import load_predictor
    from macs_audit.models.preprocessing import resize_and_normalize
    from macs_audit.pixels import to_unit_float

    reference = copied_model(args.model, Path(tempfile.mkdtemp(prefix="bench_parity_")))
    calibration = Calibration(DataSpec(None, "builtin"), 512, 0) if args.precision == "int8" else None
    candidate = build_precision(reference, BuildSpec(args.precision, calibration)).path

    source = load_source(None)
    if args.images:
        source = source.subset(stratified_subset(np.asarray(source.labels), args.images))
    cfg = load_predictor(reference, device="cpu").config
    x = resize_and_normalize(to_unit_float(source.images(np.arange(len(source)))), cfg.input_size, cfg.mean, cfg.std)
    parity(candidate, reference, source, args.batch_size, 1000)  # the audit's first-use imports, untimed
    from macs_audit.metrics import bootstrap
    from macs_audit.models.onnx import OnnxPredictor

    # Inside the timed parity audits: onnxruntime's runs (both models) and the bootstrap (the candidate's
    # intervals and the paired statistics on the same resamples), the rest being the audit's own work.
    STOPWATCH.wrap(OnnxPredictor, "_run", "inference")
    STOPWATCH.wrap(bootstrap, "paired_bootstrap", "bootstrap")
    keys = ("bare pair", "default sessions", "parity", "parity-noboot", "candidate audit", "two audits")
    times: dict[str, list[Clock]] = {key: [] for key in keys}
    bare_reference: list[Clock] = []
    inside: list[dict[str, float]] = []  # per round: the parity audit's seconds by part
    for _ in range(args.repeats):
        bare_reference.append(session_loop(reference, x, args.batch_size))
        times["bare pair"].append(plus(bare_reference[-1], session_loop(candidate, x, args.batch_size)))
        default = [timed_bare_loop(path, x, args.batch_size) for path in (reference, candidate)]
        times["default sessions"].append(plus(*default))
        times["parity"].append(parity(candidate, reference, source, args.batch_size, 1000))
        inside.append(STOPWATCH.take())
        times["parity-noboot"].append(parity(candidate, reference, source, args.batch_size, 0))
        times["candidate audit"].append(audits([candidate], source, args.batch_size, 1000))
        times["two audits"].append(audits([reference, candidate], source, args.batch_size, 1000))
    print(
        f"{args.precision} candidate of {args.model.name} against it, {len(x)} images, batch {args.batch_size}, "
        f"{args.repeats} interleaved rounds (medians; ratio: the median of the rounds' ratios to the bare pair)"
    )
    print_times(times, inside, bare_reference)


def print_times(times: dict[str, list[Clock]], inside: list[dict[str, float]], bare_reference: list[Clock]) -> None:
    """The table of `times` against the bare pair's, the parity audit by part (`inside`: its seconds by part, per
    round) and what the parity audit adds to the candidate's audit against the reference's bare pass."""
    print("| measurement | wall s | ratio | CPU s | ratio |\n|---|---:|---:|---:|---:|")
    for key, values in times.items():
        cells = []
        for j in (0, 1):  # wall, CPU
            ratio = statistics.median(v[j] / b[j] for v, b in zip(values, times["bare pair"], strict=True))
            cells.append(f"{statistics.median(v[j] for v in values):.2f} | {ratio:.2f}x")
        print(f"| {key} | {' | '.join(cells)} |")
    parts = {"inference": [], "bootstrap": [], "rest": []}
    for part, whole, pair in zip(inside, times["parity"], times["bare pair"], strict=True):
        seconds = {key: part.get(key, 0.0) for key in ("inference", "bootstrap")}
        seconds["rest"] = whole[0] - sum(seconds.values())
        for key, value in seconds.items():
            parts[key].append((value, value / pair[0]))
    print(
        "the parity audit by part (wall, medians; ratio to the bare pair's wall): "
        + ", ".join(
            f"{key} {statistics.median(s for s, _ in v):.2f} s ({statistics.median(r for _, r in v):.2f}x)"
            for key, v in parts.items()
        )
    )
    for j, unit in ((0, "wall"), (1, "CPU")):
        added = [p[j] - c[j] for p, c in zip(times["parity"], times["candidate audit"], strict=True)]
        ratio = statistics.median(a / b[j] for a, b in zip(added, bare_reference, strict=True))
        print(
            f"parity - candidate audit, {unit}: {statistics.median(added):.2f} s, {ratio:.2f}x the reference's bare "
            f"pass ({statistics.median(b[j] for b in bare_reference):.2f} s)"
        )


if __name__ == "__main__":
    main()
