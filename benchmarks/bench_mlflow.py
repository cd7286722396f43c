"""What `--mlflow` adds to an audit against a local MLflow store (macs_audit/integrations/mlflow.py).

    python benchmarks/bench_mlflow.py [--rounds 5] [--n 10000] [--classes 10]

The audit: `macs-audit evaluate --predictions P.npz -o report.json --quiet` with the default analysis (1,000
bootstrap resamples, the six post-hoc calibrators, conformal sets) of seeded synthetic logits, N x K float32
(a standard normal per class, the label's raised by 2.5, all scaled by 2), as fresh processes. Each round runs,
in an order rotated from round to round:
- plain:  the audit alone;
- sqlite: the audit with `--mlflow --mlflow-tracking-uri sqlite:///STORE/mlflow.db` (MLflow's default local store);
- file:   the audit with `--mlflow --mlflow-tracking-uri file:///STORE/mlruns` (MLflow 3 serves a file store only with
          MLFLOW_ALLOW_FILE_STORE=true, set for these runs).
Each logging run makes a new run in the store (the metrics, ~15 parameters, the tags, report.json, the reliability
PNG). One untimed round first fills the bytecode caches and makes the stores' tables. Printed: each variant's
median wall time and the medians of the paired differences (logging run - plain run, within a round); the bar is
1 s. Then where the difference goes, in one process of its own (`--breakdown-child`), in order: importing mlflow,
opening the SQLite store (SQLAlchemy's models), the first reliability diagram (matplotlib's import), then log_run of
the report, several times (all of the logging, warm: what an audit logged into a training script's run adds, its
mlflow imported and its store open).

MLflow's usage reports are off (MLFLOW_DISABLE_TELEMETRY): this machine reaches no network, and a user's own
setting decides them. Bytecode caches are on, as in an installed package (PYTHONPYCACHEPREFIX: one cache
directory for the run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BAR = 1.0  # seconds the logging may add


def write_predictions(path: Path, n: int, classes: int) -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes))
    logits[np.arange(n), labels] += 2.5
    np.savez(path, logits=(2 * logits).astype(np.float32), labels=labels)


def timed(cmd: list[str], env: dict[str, str], folder: Path) -> float:
    """Wall seconds of one process, run in `folder` (a SQLite store's artifacts go to ./mlruns there)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def breakdown_child(predictions: Path, uri: str, calls: int) -> None:
    """Seconds of, in order: importing mlflow, opening the store (the client's first call), the first reliability
    diagram (matplotlib imported), then each log_run of the audit's report (all of the logging, warm; JSON)."""
    import macs_audit
    from macs_audit.formats import plots
    from macs_audit.integrations import mlflow as integration

    report = macs_audit.audit_predictions(predictions)
    marks = [time.perf_counter()]
    mlflow = integration.require_mlflow()
    marks.append(time.perf_counter())
    mlflow.MlflowClient(uri).search_experiments(max_results=1)  # the client makes its store, which one call opens
    marks.append(time.perf_counter())
    plots.reliability(report.clean)
    marks.append(time.perf_counter())
    spent = []
    for _ in range(calls):
        began = time.perf_counter()
        integration.log_report(report, tracking_uri=uri, experiment="breakdown")
        spent.append(time.perf_counter() - began)
    import_, store, plot = (b - a for a, b in zip(marks, marks[1:], strict=False))
    print(json.dumps({"import": import_, "store": store, "plot": plot, "log": spent}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--breakdown-child", nargs=2, metavar=("PREDICTIONS", "URI"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.breakdown_child:
        breakdown_child(Path(args.breakdown_child[0]), args.breakdown_child[1], calls=4)
        return 0
    import mlflow

    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        folder = Path(tmp)
        predictions = folder / "predictions.npz"
        write_predictions(predictions, args.n, args.classes)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPYCACHEPREFIX": str(folder / "pycache"), "MLFLOW_DISABLE_TELEMETRY": "true"}
        audit = [sys.executable, "-m", "macs_audit", "evaluate", "--predictions", str(predictions), "--quiet"]
        variants = {
            "plain": ([], env),
            "sqlite": (["--mlflow-tracking-uri", f"sqlite:///{folder / 'mlflow.db'}"], env),
            "file": (
                ["--mlflow-tracking-uri", (folder / "mlruns").as_uri()],
                env | {"MLFLOW_ALLOW_FILE_STORE": "true"},
            ),
        }

        def command(name: str, round_: int) -> list[str]:
            extra = variants[name][0]
            return [*audit, "-o", str(folder / f"{name}-{round_}.json"), *(["--mlflow", *extra] if extra else [])]

        names = list(variants)
        for name in names:  # untimed: the bytecode caches and the stores' tables
            timed(command(name, -1), variants[name][1], folder)
        walls: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                walls[name].append(timed(command(name, round_), variants[name][1], folder))
        store = f"sqlite:///{folder / 'mlflow.db'}"
        child = [sys.executable, str(Path(__file__).resolve()), "--breakdown-child", str(predictions), store]
        found = subprocess.run(child, cwd=folder, env=env, capture_output=True, text=True, check=True).stdout
        parts = json.loads(found.strip().splitlines()[-1])

    print(f"bench_mlflow: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"mlflow {mlflow.__version__}; {args.n:,} x {args.classes} predictions, {args.rounds} rounds")  # fmt: skip
    for name in names:
        each = ", ".join(f"{wall:.2f}" for wall in walls[name])
        print(f"  {name:7s} median wall {statistics.median(walls[name]):6.2f} s  ({each})")
    worst = 0.0
    for name in names[1:]:
        added = statistics.median(a - b for a, b in zip(walls[name], walls["plain"], strict=True))
        worst = max(worst, added)
        print(f"  --mlflow, {name} store: adds {added:+.2f} s (median of paired differences; bar {BAR:.0f} s)")
    log = statistics.median(parts["log"])
    print(
        f"  where it goes (SQLite store, one process): import mlflow {parts['import']:.2f} s, open the store "
        f"{parts['store']:.2f} s, the first plot (matplotlib) {parts['plot']:.2f} s; then each log_run, warm (the "
        f"values in one log_batch, the artifacts, the plot rendered) {log:.2f} s"
    )
    print(f"  verdict: {'within' if worst <= BAR else 'over'} the {BAR:.0f} s bar (the larger store's difference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
