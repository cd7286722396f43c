"""ONNX audits from the command line against bare onnxruntime scripts: wall time, CPU time, peak memory
and the default audit's time by stage.

    python benchmarks/bench_startup.py [--model sample_models/resnet9_c10_ce.onnx] [--runs 5] [--python PYTHON]
                                       [--no-bytecode-cache]

`--python` runs the four processes with another environment's interpreter (one with PyTorch's CPU
build, say: the torch import's memory differs by build), which must have macs-audit installed.

Bytecode caches are on, as in an installed package: the processes run with a cache directory of their
own (PYTHONPYCACHEPREFIX, a temporary directory; PYTHONDONTWRITEBYTECODE dropped), filled by one untimed
round before the timed ones. With `--no-bytecode-cache` every process compiles the project's modules from
source (PYTHONDONTWRITEBYTECODE=1: what a checkout run with that variable gets; the libraries' own caches
are still read).

Every run is a fresh process; each round runs the four below once (the order rotated from round to
round), so machine noise hits all of them alike and the ratios are taken within a round:
- default: `macs-audit evaluate MODEL`, the README's first command (clean view, noise+blur view,
           sensitivity on 500 images, 1,000 bootstrap resamples per view, temperature scaling, the six
           post-hoc calibrators, conformal sets, the terminal summary);
- floor:   benchmarks/onnx_default_passes.py, the default audit's three inference passes on the same
           inputs and nothing else (start-up, the clean pass, the noise+blur pass with the audit's own
           perturbation code, the 500 x 17 sensitivity passes);
- clean:   `macs-audit evaluate MODEL --perturbations none --sensitivity-samples 0 --bootstrap 0
           --calibration-split 0` (the clean view only: start-up, imports, model and data loading,
           hashing, preprocessing, the model, every clean metric, the terminal summary);
- script:  benchmarks/onnx_baseline.py (load the same npz, normalise, run the model, accuracy and ECE).
Reported: medians of wall time, CPU time (user + system) and peak resident memory (ru_maxrss), all
from wait4; the medians of the paired ratios (default / floor and clean / script for time, default /
clean for memory; on a shared machine CPU time is the steadier guide); the default audit's stages
from its progress lines (each stage's own time, `[m:ss] NAME: done ... in T`) beside the floor's
passes; and whether the clean CLI process imported torch (one extra, untimed run with
`python -X importtime`): the ONNX path should not.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLEAN_FLAGS = ["--perturbations", "none", "--sensitivity-samples", "0", "--bootstrap", "0", "--calibration-split", "0"]
DONE = re.compile(r"^\[[0-9:]+\] (?P<stage>.+?): done(?:, [0-9,]+ \w+)? in (?P<time>[0-9.]+ s|[0-9:]+)")
PASS = re.compile(r"^pass (?P<stage>\S+) (?P<time>[0-9.]+ s)$")
TARGET_TIME = 1.3  # default / floor wall time
TARGET_MEMORY = 2.0  # default / clean peak memory


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak resident MiB and stderr of one process; raises if it fails."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing blocks while we wait
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode()
        if code != 0:
            raise SystemExit(f"{' '.join(cmd)} failed (exit {code}):\n{text[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text  # Linux reports KiB


def seconds(text: str) -> float:
    """'2.5 s' or '2:36' (a progress line's duration) in seconds."""
    if text.endswith(" s"):
        return float(text[:-2])
    parts = [int(p) for p in text.split(":")]
    return float(sum(p * 60**i for i, p in enumerate(reversed(parts))))


def stages(log: str, pattern: re.Pattern) -> dict[str, float]:
    """Seconds per stage from the progress lines (or the floor's pass lines) of one run."""
    out: dict[str, float] = {}
    for line in log.splitlines():
        match = pattern.match(line.strip())
        if match:
            out[match["stage"]] = out.get(match["stage"], 0.0) + seconds(match["time"])
    return out


def imports_torch(cmd: list[str], env: dict[str, str]) -> bool:
    done = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True)
    return any(line.rsplit("|", 1)[-1].strip() == "torch" for line in done.stderr.splitlines())


def torch_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return done.stdout.strip() or "not installed"


def median_stages(runs: list[dict[str, float]]) -> dict[str, float]:
    names = list(dict.fromkeys(name for r in runs for name in r))
    return {name: statistics.median(r.get(name, 0.0) for r in runs) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "sample_models" / "resnet9_c10_ce.onnx")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="the interpreter of every process (default: this one)")
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="compile the project's modules from source in every process"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE")
            env["PYTHONPYCACHEPREFIX"] = cache
        measure(args, env)


def measure(args: argparse.Namespace, env: dict[str, str]) -> None:
    python = args.python
    cli = [python, "-m", "macs_audit", "evaluate", str(args.model)]
    commands = {
        "default": cli,
        "floor": [python, str(ROOT / "benchmarks" / "onnx_default_passes.py"), str(args.model)],
        "clean": [*cli, *CLEAN_FLAGS],
        "script": [python, str(ROOT / "benchmarks" / "onnx_baseline.py"), str(args.model)],
    }
    keys = list(commands)
    wall: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    peak: dict[str, list[float]] = {k: [] for k in commands}
    default_stages: list[dict[str, float]] = []
    floor_passes: list[dict[str, float]] = []
    if not args.no_bytecode_cache:
        for key in keys:  # untimed: writes the bytecode caches, as a package's first run after installing does
            run(commands[key], env)
    load_before = os.getloadavg()[0]
    for r in range(args.runs):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:  # the order rotated each round
            seconds_, cpu_seconds, mib, log = run(commands[key], env)
            wall[key].append(seconds_)
            cpu[key].append(cpu_seconds)
            peak[key].append(mib)
            if key == "default":
                default_stages.append(stages(log, DONE))
            elif key == "floor":
                floor_passes.append(stages(log, PASS))
            print(
                f"run {r + 1} {key:<7} {seconds_:6.2f} s wall {cpu_seconds:6.2f} s CPU {mib:6.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
    load_after = os.getloadavg()[0]

    def ratio(series: dict[str, list[float]], a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(series[a], series[b], strict=True))

    median = {k: (statistics.median(wall[k]), statistics.median(cpu[k]), statistics.median(peak[k])) for k in keys}
    print(
        f"model {args.model.name}, {args.runs} rounds (medians), torch {torch_version(python)}; {os.cpu_count()} CPUs, "
        f"load average {load_before:.1f} before, {load_after:.1f} after; bytecode caches "
        f"{'off' if args.no_bytecode_cache else 'on'}"
    )
    print(f"{'process':<8} {'wall s':>7} {'CPU s':>7} {'peak MiB':>9}")
    for key in keys:
        print(f"{key:<8} {median[key][0]:>7.2f} {median[key][1]:>7.2f} {median[key][2]:>9.0f}")
    time_ratio, memory_ratio = ratio(wall, "default", "floor"), ratio(peak, "default", "clean")
    print(
        f"default / floor: wall {time_ratio:.2f}x, CPU {ratio(cpu, 'default', 'floor'):.2f}x, "
        f"peak memory {ratio(peak, 'default', 'floor'):.2f}x (target wall {TARGET_TIME}x: "
        f"{'met' if time_ratio <= TARGET_TIME else 'not met'})"
    )
    print(
        f"default / clean: peak memory {memory_ratio:.2f}x (target {TARGET_MEMORY}x: "
        f"{'met' if memory_ratio <= TARGET_MEMORY else 'not met'}); floor / clean: {ratio(peak, 'floor', 'clean'):.2f}x"
    )
    print(
        f"clean / script: wall {ratio(wall, 'clean', 'script'):.2f}x, CPU {ratio(cpu, 'clean', 'script'):.2f}x, "
        f"peak memory {ratio(peak, 'clean', 'script'):.2f}x"
    )
    print("\nthe default audit by stage (median seconds; each stage's own time from its progress lines):")
    by_stage = median_stages(default_stages)
    for name, value in by_stage.items():
        print(f"  {name:<34} {value:6.2f}")
    outside = median["default"][0] - sum(by_stage.values())
    print(f"  {'outside the stages (start-up, loading, printing, exit)':<34} {outside:6.2f}")
    intervals = sum(v for name, v in by_stage.items() if name.endswith(": bootstrap intervals"))
    without = (median["default"][0] - intervals) / median["floor"][0]
    print(f"default less its bootstrap stages / floor: wall {without:.2f}x")
    print("the floor by pass (median seconds):")
    for name, value in median_stages(floor_passes).items():
        print(f"  {name:<34} {value:6.2f}")
    print(f"the clean CLI process imports torch: {'yes' if imports_torch(commands['clean'], env) else 'no'}")


if __name__ == "__main__":
    main()
