"""`macs-audit evaluate` under torchrun with 2 CPU processes against 1 process, same model and data.

    python benchmarks/bench_distributed.py [--model sample_models/resnet9_c10_ce.onnx] [--repeats 3]
        [--evaluate-args "..." [--evaluate-args "..."]] [--results FILE]

Three configurations, interleaved (A B C, A B C, ...) so machine noise hits them alike; medians reported:
- 1 proc x 2 threads: `python -m macs_audit evaluate MODEL --device cpu` with 2 threads;
- 1 proc x 1 thread:  the same with 1 thread;
- 2 procs x 1 thread: `torchrun --nproc-per-node 2 -m macs_audit evaluate ...` (gloo), 1 thread each.
Every run is the CLI end to end in fresh processes (start-up, imports, model loading included),
on the built-in CIFAR-10 test set with the default views (clean + the noise+blur robust view,
500-image sensitivity, 1000 bootstrap resamples, temperature fit) unless --evaluate-args says
otherwise; each --evaluate-args given is one workload with its own table. Besides wall-clock time,
the CPU time (user + system) of all processes of a run is reported: on a machine shared with other
jobs, wall time depends on what else runs, CPU time much less.

Threads: OMP_NUM_THREADS bounds torch (views, corruptions); onnxruntime ignores it and sizes its
own pool to the physical cores, so each run here sets the session's intra_op_num_threads to the
same number through a small shim (the `--entry` mode below) — otherwise "1 thread" would not be
one thread for the model. The sharded report is checked against the single-process one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()


def entry(argv: list[str]) -> None:
    """Run the CLI with onnxruntime's intra-op pool pinned to BENCH_THREADS (torchrun runs this per rank)."""
    threads = int(os.environ.get("BENCH_THREADS", "0"))
    if threads:
        import onnxruntime as ort

        original = ort.InferenceSession.__init__

        def init(self, path, sess_options=None, *args, **kwargs):
            sess_options = sess_options or ort.SessionOptions()
            sess_options.intra_op_num_threads = threads
            sess_options.inter_op_num_threads = 1
            original(self, path, sess_options, *args, **kwargs)

        ort.InferenceSession.__init__ = init
    sys.path.insert(0, str(ROOT))
    from macs_audit.__main__ import main

    sys.argv = ["macs-audit", *argv]
    main()


def run(config: str, model: Path, extra: list[str], out: Path, port: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all processes of the run)."""
    threads = 2 if config == "1x2" else 1
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "BENCH_THREADS": str(threads),
        "PYTHONPATH": str(ROOT),
    }
    cli = ["evaluate", str(model), "--device", "cpu", "--quiet", "-o", str(out), *extra]
    if config == "2x1":
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(port),
            str(HERE),
            "--entry",
            *cli,
        ]
    else:
        cmd = [sys.executable, str(HERE), "--entry", *cli]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # includes torchrun's workers, reaped by it
    if proc.returncode != 0:
        raise SystemExit(f"{config} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def differences(a, b, path="") -> list[str]:
    """Paths whose values differ: counts exactly, floats beyond 1e-9 (relative)."""
    if isinstance(a, dict):
        return [d for k in a for d in differences(a[k], b.get(k), f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= 1e-9 * max(1.0, abs(a)) else [path]
    return [] if a == b else [path]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "sample_models" / "resnet9_c10_ce.onnx")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--evaluate-args",
        action="append",
        help="Extra evaluate flags of one workload, e.g. "
        '"--sensitivity-samples 0"; repeat for several workloads (default: one, the defaults).',
    )
    parser.add_argument("--port", type=int, default=29541)
    parser.add_argument("--results", type=Path, help="also write the markdown report to this file")
    args = parser.parse_args()
    workloads = args.evaluate_args or [""]
    if not args.model.is_file():
        raise SystemExit(f"model not found: {args.model}")
    model_name = args.model.relative_to(ROOT) if args.model.is_relative_to(ROOT) else args.model
    configs = ("1x2", "1x1", "2x1")
    labels = {"1x2": "1 process x 2 threads", "1x1": "1 process x 1 thread", "2x1": "2 processes x 1 thread (torchrun)"}
    load_before = os.getloadavg()[0]
    sections = []
    for w, workload in enumerate(workloads):
        extra = shlex.split(workload)
        wall: dict[str, list[float]] = {c: [] for c in configs}
        cpu: dict[str, list[float]] = {c: [] for c in configs}
        with tempfile.TemporaryDirectory() as tmp:
            reports = {c: Path(tmp) / f"{c}.json" for c in configs}
            for r in range(args.repeats):
                for c in configs:
                    t, u = run(c, args.model, extra, reports[c], args.port + 10 * w + r)
                    wall[c].append(t)
                    cpu[c].append(u)
                    print(
                        f"[{workload or 'defaults'}] repeat {r + 1} {labels[c]:<34} {t:7.1f} s wall {u:7.1f} s CPU",
                        file=sys.stderr,
                        flush=True,
                    )
            a, b = (json.loads(reports[c].read_text()) for c in ("1x2", "2x1"))
        diffs = [d for d in differences(a, b) if d not in ("/runtime/world_size", "/created")]
        views = ["clean"] + [v["name"] for v in a["views"]]
        sens = (a.get("robustness") or {}).get("sensitivity")
        med = {c: statistics.median(v) for c, v in wall.items()}
        med_cpu = {c: statistics.median(v) for c, v in cpu.items()}
        sec = [
            f"## Workload: {('`' + workload + '`') if workload else 'default flags'}",
            "",
            f"`macs-audit evaluate` on {a['data']['n']} images, views {', '.join(views)}"
            + (
                f", sensitivity on {sens['n']} images ({sens['method'].split(' (')[0]}, sharded across ranks)"
                if sens
                else ", no sensitivity"
            )
            + f", {a['conventions'].get('bootstrap_resamples', '?')} bootstrap resamples.",
            "",
            "| configuration | wall runs (s) | median wall (s) "
            "| wall speed-up of 2 procs x 1 thread | median CPU (s) |",
            "|---|---|---:|---:|---:|",
        ]
        for c in configs:
            sec.append(
                f"| {labels[c]} | {', '.join(f'{t:.1f}' for t in wall[c])} | {med[c]:.1f} | "
                + ("—" if c == "2x1" else f"{med[c] / med['2x1']:.2f}x")
                + f" | {med_cpu[c]:.1f} |"
            )
        sec += [
            "",
            "Sharded report vs single-process report: "
            + (
                "identical apart from world_size and timestamp (counts exact, floats within 1e-9)."
                if not diffs
                else f"{len(diffs)} fields differ: {', '.join(diffs[:8])}"
            ),
            "",
        ]
        sections += sec
    load_after = os.getloadavg()[0]
    lines = [
        "# Distributed evaluate on CPU: torchrun 2 processes vs 1 process",
        "",
        f"`python benchmarks/bench_distributed.py --model {model_name} --repeats {args.repeats}"
        + "".join(f" --evaluate-args {shlex.quote(wl)}" for wl in (args.evaluate_args or []))
        + "`",
        "",
        f"- Machine: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
        f"shared with other jobs (1-minute load average {load_before:.1f} at the start, "
        f"{load_after:.1f} at the end; runs niced).",
        f"- Model: {args.model.name} (sha256 {a['model']['sha256'][:16]}…), onnxruntime CPU provider.",
        "- Each run: the CLI end to end in fresh processes (start-up, imports, model load included). "
        "onnxruntime's intra-op pool pinned to the stated threads (it ignores OMP_NUM_THREADS).",
        f"- {args.repeats} repeats, configurations interleaved; medians. "
        "CPU = user + system time of all the run's processes.",
        "",
        *sections,
    ]
    text = "\n".join(lines)
    print(text)
    if args.results:
        args.results.write_text(text)
        print(f"written to {args.results}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--entry":
        entry(sys.argv[2:])
    else:
        main()
