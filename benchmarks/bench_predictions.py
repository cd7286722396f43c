"""`evaluate --predictions` against the analysis of a model audit of the same logits, and on 50,000 x 1,000 logits.

    python benchmarks/bench_predictions.py [--rounds 3] [--large-rounds 1] [--n 50000] [--classes 1000] [--skip-large]

(a) 10,000 x 10 logits: the sample model's on the built-in CIFAR-10 test set. Each round runs, as fresh
processes in an order alternated from round to round:
- model audit: this script with `--model-audit-child`: `run_audit` of the sample model with the options an audit of
  predictions takes at their CLI defaults (1,000 bootstrap resamples, calibration split 0.2, the six post-hoc
  calibrators, conformal sets; no perturbed view, no sensitivity), timed by a progress callback. Its analysis is
  the time from the end of the clean stage (the model's pass over the images, with the metric sums it feeds) to
  `run_audit`'s return: what the model audit spends on the logits after inference. The first round also writes the
  predictions as `--save-predictions` does (`write_predictions`: logits, labels, class names, batch size);
- predictions: `python -m macs_audit evaluate --predictions P.npz -o report.json --quiet`, the whole process:
  start-up, imports (no torch), reading the file, the same analysis, writing the report.
  The model audit's whole process less its clean pass (start-up, imports, loading the model and the data, the
  analysis) is printed as well: the like-for-like figure, start-up on both sides;
- fixed cost: the same command on the first 200 rows of the file: start-up, imports, reading and writing, with
  next to no analysis.
The ratios are the predictions process's wall and CPU seconds over the model audit's analysis, per round; the bar
is 1.1. Also printed: `audit_logits` of the same logits in this process (warm: its imports done), the analysis alone.

(b) 50,000 x 1,000 logits, seeded and synthetic: a standard normal per class, the label's raised by 3.8 (top-1
accuracy about 70%), all scaled by 6 (overconfident: temperature scaling fits T of about 1.5), float32 in an .npz
as `--save-predictions` writes them. `evaluate --predictions` of them as a whole process with the default
analysis: wall and CPU seconds, peak memory, and its stages from its progress lines; the bar is 30 s on 2 cores.
Then the same with `--calibrators none`: what the analysis costs without the post-hoc calibrators.

Bytecode caches are on, as in an installed package: every process shares a cache directory of this run
(PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE dropped), filled by an untimed round first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_startup import seconds  # benchmarks/ is on sys.path: the script's own folder

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_models" / "resnet9_c10_ce.onnx"
RATIO_BAR, LARGE_BAR = 1.1, 30.0
DONE = re.compile(r"^\[[0-9:]+\] (?P<stage>.+?): done(?:, [0-9,]+ \w+)? in (?P<time>[0-9.]+ s|[0-9:]+)")


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak resident MiB and stderr of one process (from wait4); raises if it fails."""
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        out.seek(0)
        text = err.read().decode() + out.read().decode()
        if code != 0:
            raise SystemExit(f"{' '.join(cmd)} failed (exit {code}):\n{text[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text  # Linux reports KiB


def stages(log: str) -> dict[str, float]:
    """Seconds per stage from the progress lines of one run."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        match = DONE.match(line.strip())
        if match:
            found[match["stage"]] = found.get(match["stage"], 0.0) + seconds(match["time"])
    return found


def options():
    """The AuditOptions of `evaluate --predictions` with no flags (the CLI's defaults)."""
    from macs_audit.api import prediction_options

    return prediction_options({})


def model_audit_child(predictions: Path) -> None:
    """The model audit of the sample model on the built-in test set, its stages timed; prints them as JSON and
    writes the predictions to `predictions` where no file is there yet."""
    from macs_audit.auditing import run_audit
    from macs_audit.auditing.options import RunContext
    from macs_audit.data.sources import load_source
    from macs_audit.models.predictor import load_predictor
    from macs_audit.predictions.files import write_predictions

    predictor = load_predictor(MODEL, device="cpu")
    source = load_source(None)
    begun: dict[str, float] = {}
    spent: dict[str, float] = {}
    clean_done = [0.0, 0.0]  # wall and CPU seconds when the clean stage ended

    def progress(stage, done, total, terms=None):
        now, name = time.perf_counter(), str(stage)
        if done == 0:
            begun[name] = now
        if done == total and name in begun:
            spent[name] = spent.get(name, 0.0) + now - begun.pop(name)
            if name == "clean":
                clean_done[:] = [now, time.process_time()]

    start = time.perf_counter()
    result = run_audit(predictor, source, options(), context=RunContext(progress=progress))
    end, cpu = time.perf_counter(), time.process_time()
    if not predictions.exists():
        write_predictions(predictions, result)
    timings = {"audit": end - start, "analysis": end - clean_done[0], "analysis_cpu": cpu - clean_done[1]}
    print(json.dumps({**timings, "stages": spent}))


def in_process_analysis(predictions: Path) -> float:
    """audit_logits of the saved logits, in this process: the analysis alone, warm."""
    from macs_audit.auditing import SavedLogits, audit_logits
    from macs_audit.predictions.files import read_predictions

    found = read_predictions(predictions)
    audit = options()
    if found.batch_size is not None:  # the model audit's batches, as evaluate --predictions takes them
        audit = dataclasses.replace(audit, batch_size=found.batch_size)
    saved = SavedLogits(found.logits, found.labels, found.names())
    start = time.perf_counter()
    audit_logits(saved, audit)
    return time.perf_counter() - start


def small(args: argparse.Namespace, env: dict[str, str], folder: Path) -> None:
    predictions, report = folder / "sample_model.npz", folder / "report.json"
    child = [sys.executable, str(Path(__file__).resolve()), "--model-audit-child", str(predictions)]
    evaluate = [sys.executable, "-m", "macs_audit", "evaluate", "--predictions", str(predictions)]
    evaluate += ["-o", str(report), "--quiet"]
    run(child, env)  # untimed: fills the bytecode cache, writes the predictions
    run(evaluate, env)
    # The process's fixed cost (start-up, imports, reading, writing): the same command on the first 200 rows.
    few = folder / "few.npz"
    with np.load(predictions) as saved:
        arrays = {key: saved[key] for key in saved.files}
    np.savez(few, **{**arrays, "logits": arrays["logits"][:200], "labels": arrays["labels"][:200]})
    fixed_cost = [*evaluate[:5], str(few), *evaluate[6:]]
    rows: dict[str, list[float]] = {
        name: []
        for name in (
            *("model", "analysis", "analysis_cpu", "model_process", "predictions", "cpu"),
            *("ratio", "cpu_ratio", "few", "few_cpu"),
        )
    }
    stage_runs: list[dict[str, float]] = []
    for round_ in range(args.rounds):
        order = ("model", "predictions", "few") if round_ % 2 == 0 else ("few", "predictions", "model")
        for which in order:
            if which == "model":
                wall, _, _, out = run(child, env)
                timings = json.loads(out.strip().splitlines()[-1])
                rows["model_process"].append(wall - timings["stages"]["clean"])
                rows["model"].append(timings["audit"])
                rows["analysis"].append(timings["analysis"])
                rows["analysis_cpu"].append(timings["analysis_cpu"])
                stage_runs.append(timings["stages"])
            else:
                wall, cpu, _, _ = run(evaluate if which == "predictions" else fixed_cost, env)
                rows[which].append(wall)
                rows["cpu" if which == "predictions" else "few_cpu"].append(cpu)
        rows["ratio"].append(rows["predictions"][-1] / rows["analysis"][-1])
        rows["cpu_ratio"].append(rows["cpu"][-1] / rows["analysis_cpu"][-1])
    warm = statistics.median(in_process_analysis(predictions) for _ in range(args.rounds))
    med = {name: statistics.median(values) for name, values in rows.items()}
    print(f"(a) 10,000 x 10 logits of {MODEL.name} on the built-in test set; {args.rounds} rounds, medians")
    print(
        f"  model audit (run_audit in its own process): {med['model']:.2f} s; after inference {med['analysis']:.2f} s "
        f"wall, {med['analysis_cpu']:.2f} s CPU"
    )
    for name in dict.fromkeys(name for r in stage_runs for name in r):
        print(f"    {name}: {statistics.median(r.get(name, 0.0) for r in stage_runs):.2f} s")
    print(f"  the model audit's whole process less its clean pass: {med['model_process']:.2f} s")
    print(f"  evaluate --predictions, whole process: {med['predictions']:.2f} s wall, {med['cpu']:.2f} s CPU")
    print(f"  the same on the first 200 rows (the fixed cost): {med['few']:.2f} s wall, {med['few_cpu']:.2f} s CPU")
    print(f"  audit_logits in this process (warm): {warm:.2f} s")
    for what, key in (("wall", "ratio"), ("CPU", "cpu_ratio")):
        verdict = "met" if med[key] <= RATIO_BAR else "missed"
        print(
            f"  {what} ratio, process / model audit's analysis: {med[key]:.2f}x (bar {RATIO_BAR}x: {verdict}); "
            "rounds: " + ", ".join(f"{r:.2f}" for r in rows[key])
        )
    like = [p / m for p, m in zip(rows["predictions"], rows["model_process"], strict=True)]
    print(f"  like for like, process / model audit's process less its clean pass: {statistics.median(like):.2f}x")


def synthetic(n: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    logits = rng.standard_normal((n, classes), dtype=np.float32)
    logits[np.arange(n), labels] += 3.8
    logits *= 6.0
    return logits, labels


def large(args: argparse.Namespace, env: dict[str, str], folder: Path) -> None:
    path, report = folder / "large.npz", folder / "large.json"
    logits, labels = synthetic(args.n, args.classes)
    accuracy = float((logits.argmax(axis=1) == labels).mean())
    np.savez(path, logits=logits, labels=labels)
    del logits
    print(f"(b) {args.n:,} x {args.classes:,} logits (accuracy {accuracy:.1%}), evaluate --predictions, whole process")
    # The default analysis, then the same without the post-hoc calibrators (what the rest costs).
    for flags in ([], ["--calibrators", "none"]):
        evaluate = [sys.executable, "-m", "macs_audit", "evaluate", "--predictions", str(path), "-o", str(report)]
        runs = [run([*evaluate, *flags], env) for _ in range(args.large_rounds)]
        wall, cpu, peak = (statistics.median(r[i] for r in runs) for i in range(3))
        verdict = f" (bar {LARGE_BAR:.0f} s: {'met' if wall <= LARGE_BAR else 'missed'})" if not flags else ""
        print(f"  {' '.join(flags) or 'defaults'}: {wall:.1f} s wall, {cpu:.1f} s CPU, peak {peak:,.0f} MiB{verdict}")
        for name, spent in stages(runs[0][3]).items():
            print(f"    {name}: {spent:.1f} s")
        data = json.loads(report.read_text())
        fitted = [m["method"] for m in (data["calibrators"] or {"methods": []})["methods"] if m.get("scores")]
        print(f"    temperature T = {data['temperature_scaling']['temperature']:.2f}; calibrators scored: {fitted}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large-rounds", type=int, default=1)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--classes", type=int, default=1_000)
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--model-audit-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model_audit_child is not None:
        model_audit_child(args.model_audit_child)
        return
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(Path(folder) / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        small(args, env, Path(folder))
        if not args.skip_large:
            large(args, env, Path(folder))


if __name__ == "__main__":
    main()
