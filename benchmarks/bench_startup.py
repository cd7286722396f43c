"""A clean ONNX audit from the command line against a bare onnxruntime script: wall time and peak memory.

    python benchmarks/bench_startup.py [--model sample_models/resnet9_c10_ce.onnx] [--runs 5]

Each run is a fresh process, paired (CLI, then script) so machine noise hits both alike:
- cli:    `macs-audit evaluate MODEL --perturbations none --sensitivity-samples 0 --bootstrap 0
          --calibration-split 0` (the clean view only: start-up, imports, model and data loading,
          hashing, preprocessing, the model, every clean metric, the terminal summary);
- script: benchmarks/onnx_baseline.py (load the same npz, normalise, run the model, accuracy and ECE).
Reported: medians of wall time, CPU time (user + system) and peak resident memory (ru_maxrss), all
from wait4; the medians of the paired wall and CPU ratios (on a shared machine CPU time is the
steadier guide); and whether the CLI process imported torch (one extra, untimed run with
`python -X importtime`): the ONNX path should not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_FLAGS = ["--perturbations", "none", "--sensitivity-samples", "0", "--bootstrap", "0", "--calibration-split", "0"]


def run(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak resident MiB of one process; raises if it fails."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing blocks while we wait
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed (exit {code}):\n{err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux reports KiB


def imports_torch(cmd: list[str]) -> bool:
    done = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], cwd=ROOT, capture_output=True, text=True)
    return any(line.rsplit("|", 1)[-1].strip() == "torch" for line in done.stderr.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "sample_models" / "resnet9_c10_ce.onnx")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    commands = {
        "cli": [sys.executable, "-m", "macs_audit", "evaluate", str(args.model), *CLI_FLAGS],
        "script": [sys.executable, str(ROOT / "benchmarks" / "onnx_baseline.py"), str(args.model)],
    }
    wall: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    peak: dict[str, list[float]] = {k: [] for k in commands}
    for r in range(args.runs):
        for key, cmd in commands.items():
            seconds, cpu_seconds, mib = run(cmd)
            wall[key].append(seconds)
            cpu[key].append(cpu_seconds)
            peak[key].append(mib)
            print(
                f"run {r + 1} {key:<6} {seconds:6.2f} s wall {cpu_seconds:6.2f} s CPU {mib:6.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
    wall_ratio = statistics.median(c / s for c, s in zip(wall["cli"], wall["script"], strict=True))
    cpu_ratio = statistics.median(c / s for c, s in zip(cpu["cli"], cpu["script"], strict=True))
    load = os.getloadavg()[0]
    print(f"model {args.model.name}, {args.runs} paired runs (medians); {os.cpu_count()} CPUs, load average {load:.1f}")
    print(f"{'process':<8} {'wall s':>7} {'CPU s':>7} {'peak MiB':>9}")
    for key in commands:
        print(
            f"{key:<8} {statistics.median(wall[key]):>7.2f} {statistics.median(cpu[key]):>7.2f} "
            f"{statistics.median(peak[key]):>9.0f}"
        )
    memory_ratio = statistics.median(peak["cli"]) / statistics.median(peak["script"])
    print(
        f"cli / script: wall {wall_ratio:.2f}x, CPU {cpu_ratio:.2f}x (medians of paired ratios), "
        f"peak memory {memory_ratio:.2f}x"
    )
    print(f"the CLI process imports torch: {'yes' if imports_torch(commands['cli']) else 'no'}")


if __name__ == "__main__":
    main()
