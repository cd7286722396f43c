"""How the tests start processes for torch.distributed: `torchrun` launches two ranks on this machine (gloo on the
CPU; NCCL where the caller gives each rank a GPU), `one_process` runs the same command alone, in the same
environment, for the sharded run to be compared with, and `evaluate_alone_and_sharded` does both for
`macs-audit evaluate`. Tests that call them are marked `slow`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# A hung rendezvous or rank fails its test instead of stalling the suite.
TIMEOUT_S = 600


def free_port() -> int:
    """A TCP port free right now, for torchrun's rendezvous (a fixed port can collide with a concurrent test run
    or a lingering process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def environment(**extra: str) -> dict[str, str]:
    """This process's environment with one OpenMP thread per process (two ranks share the cores), and the tests
    folder (a script run under torchrun may import conftest) and this tree (`-m macs_audit` without an install, as
    benchmarks/gpu_check.sh runs) on the import path; `extra` on top."""
    path = os.pathsep.join(p for p in (str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **extra}


def torchrun(args: Sequence[str], cwd: str | os.PathLike, nproc: int = 2, **env: str) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node nproc ARGS` (a script, or `-m module ...`) in `cwd`, its output captured as text;
    `env`: variables for the ranks (CUDA_VISIBLE_DEVICES, ...)."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    return subprocess.run(
        [*launch, "--master-port", str(free_port()), *args],
        env=environment(**env),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=TIMEOUT_S,
    )


def one_process(args: Sequence[str], cwd: str | os.PathLike, **env: str) -> subprocess.CompletedProcess:
    """`python ARGS` in `cwd`, in the environment `torchrun` gives its ranks."""
    return subprocess.run(
        [sys.executable, *args], env=environment(**env), capture_output=True, text=True, cwd=cwd, timeout=TIMEOUT_S
    )


def evaluate_alone_and_sharded(args: Sequence[str], tmp_path: Path, **alone_env: str) -> tuple[dict, dict]:
    """`macs-audit evaluate ARGS` in one process and under `torchrun`, each in its own folder of `tmp_path` writing
    `-o report.json` there (the report records the option as given, so the two agree); returns the two reports.
    `alone_env`: variables for the single process only (CUDA_VISIBLE_DEVICES=0 beside two GPUs)."""
    reports = []
    for launch, folder, env in ((one_process, "alone", alone_env), (torchrun, "sharded", {})):
        (tmp_path / folder).mkdir()
        run = launch(["-m", "macs_audit", "evaluate", *args, "-o", "report.json"], tmp_path / folder, **env)
        assert run.returncode == 0, f"{folder}: {run.stderr[-2000:]}"
        reports.append(json.loads((tmp_path / folder / "report.json").read_text()))
    return reports[0], reports[1]
