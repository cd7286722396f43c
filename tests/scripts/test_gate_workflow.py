"""docs/gate.md's GitHub Actions job, run by scripts/gate_workflow.py as written there on a temporary git
repository: the main branch's thresholds from `init` (unedited) pass its own gate with the baseline
allowances skipped; a better model's pull request passes, a worse one's fails, and the reports are kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gate_workflow.py"
CE, MACS = ROOT / "sample_models" / "resnet9_c10_ce.onnx", ROOT / "sample_models" / "resnet9_c10_macs.onnx"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def run_workflow(base: Path, head: Path, keep: Path) -> tuple[int, dict[str, dict]]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("GITHUB_STEP_SUMMARY", None)
    args = ["--base", base, "--head", head, "--limit", "300", "--corruptions", "none", "--keep", keep]
    done = subprocess.run(
        [sys.executable, SCRIPT, *map(str, args)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode in (0, 1), done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["passed"] is (done.returncode == 0)
    return done.returncode, {step["name"]: step for step in summary["steps"]}


def test_the_documented_job_is_the_one_that_runs():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from gate_workflow import read_job
    finally:
        sys.path.remove(str(SCRIPT.parent))
    env, job = read_job()
    steps = job["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "git show" not in runs  # an LFS pointer, not the model: the base branch is checked out instead
    checkouts = [step["with"] for step in steps if step.get("uses", "").startswith("actions/checkout")]
    assert all(c.get("lfs") for c in checkouts if "repository" not in c)
    assert any(c.get("path") == "base" and "base_ref" in c.get("ref", "") for c in checkouts)
    assert "download.pytorch.org/whl/cpu" in runs  # the CPU wheels first, as the README says
    assert "pip install macs-audit" not in runs  # from its source, as the README installs it
    for step in steps:  # every report under audit/, never beside a model (its .json is the sidecar)
        if "evaluate" in step.get("run", ""):
            assert " -o audit/" in step["run"]


def test_a_better_model_passes_and_the_main_branch_gates_without_a_baseline(tmp_path):
    code, steps = run_workflow(CE, MACS, tmp_path / "better")
    assert code == 0
    main_gate = next(step for name, step in steps.items() if name.startswith("main: macs-audit gate"))
    assert main_gate["exit"] == 0 and "skipped 4 baseline allowances" in main_gate["output"]
    assert steps["Gate"]["exit"] == 0 and "gate passed: 9 of 9 checks" in steps["Gate"]["output"]
    workspace = tmp_path / "better" / "workspace"
    for name in ("base.json", "report.json", "gate.xml", "report.html", "compare.md"):
        assert (workspace / "audit" / name).is_file()
    assert (workspace / "base" / "models" / "classifier.onnx").read_bytes() == CE.read_bytes()
    assert (workspace / "models" / "classifier.onnx").read_bytes() == MACS.read_bytes()
    config = (workspace / "pyproject.toml").read_text()
    assert "\nmin_robust_accuracy = " in config and "\n# max_mce = " in config


def test_a_worse_model_fails_the_gate_and_the_reports_are_still_kept(tmp_path):
    code, steps = run_workflow(MACS, CE, tmp_path / "worse")
    assert code == 1
    assert steps["Gate"]["exit"] == 1 and "min_robust_accuracy" in steps["Gate"]["output"]
    assert steps["Compare with the target branch"]["exit"] == 0  # if: always()
    assert steps["Keep the reports"]["exit"] == 0
