"""INT8 builds of one model for each --int8-target, against the float model on this machine's CPU.

    python benchmarks/bench_int8_targets.py [--model MODEL.onnx] [--images N] [--repeats 3]

Each target's build (deployment.build_precision: QDQ, per-channel weights, 512 class-stratified calibration images
of the built-in test set, the target's activation type and weight range) and the float model score the built-in
test set (or a class-stratified N of it) on onnxruntime's CPU provider, batch 500: top-1 agreement with the float
model, accuracy, the largest absolute logit difference, and the wall time of a pass as a ratio to the float model's
(the passes interleaved, --repeats rounds, medians). An x86-64 CPU without VNNI multiplies uint8 by int8 with
VPMADDUBSW, whose 16-bit sums of two products saturate on 8-bit weights; the first line names the CPU's features.
"""

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_parity import copied_model  # benchmarks/ is on sys.path: the script's own folder

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce.onnx"


def cpu_features() -> str:
    """The machine and the CPU features its INT8 kernels depend on (x86: AVX2, AVX-512, VNNI; ARM: the dot-product
    and matrix-multiply instructions), from /proc/cpuinfo where there is one."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("flags", "Features"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    wanted = sorted(f for f in flags if f in ("avx2", "avx512f", "asimddp", "i8mm") or "vnni" in f)
    return f"{platform.machine()}: {', '.join(wanted) or 'none of avx2, avx512f, *vnni*, asimddp, i8mm'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=SAMPLE, help="the float ONNX model")
    parser.add_argument("--images", type=int, default=None, help="a class-stratified subset of the test set")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from macs_audit.data.loading import DataSpec
    from macs_audit.data.sources import load_source
    from macs_audit.data.splits import stratified_subset
    from macs_audit.deployment import BuildSpec, Calibration, build_precision
    from macs_audit.models.precision import INT8_TARGETS
    from macs_audit.models.predictor import load_predictor
    from macs_audit.pixels import to_unit_float

    print(f"CPU {cpu_features()}")
    folder = Path(tempfile.mkdtemp(prefix="bench_int8_"))
    reference = copied_model(args.model, folder)
    calibration = Calibration(DataSpec(None, "builtin"), 512, 0)
    models = {"float": load_predictor(reference, device="cpu")}
    for target in INT8_TARGETS:
        out = folder / f"{target}.onnx"
        build_precision(reference, BuildSpec("int8", calibration, target), out)
        models[target] = load_predictor(out, device="cpu")

    source = load_source(None)
    if args.images:
        source = source.subset(stratified_subset(np.asarray(source.labels), args.images))
    images, labels = to_unit_float(source.images(np.arange(len(source)))), np.asarray(source.labels)
    logits: dict[str, np.ndarray] = {}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            start = time.perf_counter()
            logits[name] = np.concatenate([model.predict(images[i : i + 500]) for i in range(0, len(images), 500)])
            seconds[name].append(time.perf_counter() - start)
    ratios = {
        name: statistics.median(s / f for s, f in zip(v, seconds["float"], strict=True)) for name, v in seconds.items()
    }
    top = logits["float"].argmax(1)
    print(f"{len(labels)} images, {args.repeats} interleaved rounds (medians)")
    print("| build | agreement | accuracy | max abs logit difference | pass s | ratio to float |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, z in logits.items():
        agreement, accuracy = np.mean(z.argmax(1) == top), np.mean(z.argmax(1) == labels)
        gap, wall = np.abs(z - logits["float"]).max(), statistics.median(seconds[name])
        print(f"| {name} | {agreement:.2%} | {accuracy:.2%} | {gap:.3f} | {wall:.2f} | {ratios[name]:.2f}x |")


if __name__ == "__main__":
    main()
