"""action.yml, the reusable action, run by scripts/gate_workflow.py --action as docs/gate.md's workflow uses it (its
steps as written, on a temporary git repository): a better model's pull request passes, a worse one's fails after
the summary, the upload and the comment, and an input naming a missing file stops it first, one line, exit 3."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gate_workflow.py"
CE, MACS = ROOT / "sample_models" / "resnet9_c10_ce.onnx", ROOT / "sample_models" / "resnet9_c10_macs.onnx"
MARKER = "<!-- macs-audit-pr-comment -->"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def script():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gate_workflow
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return gate_workflow


def run_action(base: Path, head: Path, keep: Path, *inputs: str, limit: int = 300) -> tuple[int, dict, dict[str, dict]]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("GITHUB_STEP_SUMMARY", None)
    args = ["--action", "--base", base, "--head", head, "--limit", limit, "--corruptions", "none", "--keep", keep]
    args += [item for value in inputs for item in ("--input", value)]
    done = subprocess.run(
        [sys.executable, SCRIPT, *map(str, args)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode in (0, 1), done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["passed"] is (done.returncode == 0)
    return done.returncode, summary["outputs"], {step["name"]: step for step in summary["steps"]}


def test_the_action_reads_every_input_through_env_and_the_doc_uses_it_in_two_lines():
    gate_workflow = script()
    action = gate_workflow.read_action()
    inputs = action["inputs"]
    assert inputs["model"]["required"] is True
    assert {"spec", "baseline", "python-version", "cpu-wheels", "args", "comment", "source"} <= set(inputs)
    assert all(spec.get("description") for spec in inputs.values())
    assert all("default" in spec for name, spec in inputs.items() if name != "model")
    assert set(action["outputs"]) == {"verdict", "report"}
    steps = action["runs"]["steps"]
    for step in steps:  # no expression written into a script: a crafted input would run as code
        assert "${{" not in step.get("run", "") and step.get("shell", "bash") == "bash"
    uses = [step["uses"].split("@")[0] for step in steps if "uses" in step]
    assert uses == ["actions/setup-python", "actions/upload-artifact"]
    assert steps[0]["name"] == "Check the inputs" and "exit 3" in steps[0]["run"]  # before anything is installed
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "download.pytorch.org/whl/cpu" in runs and "--format pr-comment" not in runs  # -f pr-comment, with -o
    assert "gh pr comment" in runs and "GH_TOKEN" in str(steps)
    text = (ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    assert "- uses: your-org/macs-audit@v1\n  with: {model: models/classifier.onnx}\n" in text
    assert "pull-requests: write" in text.split("## A reusable action")[1]
    _, job = gate_workflow.read_job(workflow=gate_workflow.WITH_ACTION)
    assert sum(gate_workflow.is_this_action(step.get("uses", "")) for step in job["steps"]) == 1


def test_conditions_read_as_the_runner_reads_them():
    condition = script().condition
    context = {"inputs.comment": "true", "github.event_name": "pull_request", "steps.gate.outputs.verdict": "fail"}
    assert condition("inputs.comment == 'true' && github.event_name == 'pull_request'", context, failed=False)
    assert not condition("inputs.comment == 'true' && github.event_name == 'pull_request'", context, failed=True)
    assert condition("${{ always() }}", context, failed=True)
    assert condition("!(steps.gate.outputs.verdict != 'fail') || false", context, failed=False)
    assert not condition("steps.audit.outputs.report != ''", context, failed=False)  # an output never set: ''


@pytest.mark.slow
@needs_git
def test_a_better_model_passes_with_the_summary_the_reports_and_the_comment(tmp_path):
    code, outputs, steps = run_action(CE, MACS, tmp_path / "better")
    assert code == 0 and outputs == {"verdict": "pass", "report": "audit/report.json"}
    assert "gate passed: 9 of 9 checks" in steps["action: Gate"]["output"]
    assert steps["step summary"]["output"].startswith("## ✅ macs-audit gate passed: 9 of 9 checks")
    comment = (tmp_path / "better" / "workspace" / "audit" / "pr-comment.md").read_text(encoding="utf-8")
    assert comment.startswith(f"{MARKER}\n### ✅ macs-audit gate passed")
    assert (tmp_path / "better" / "posted-comment.md").read_text(encoding="utf-8") == comment
    assert "gh pr comment 1 --body-file audit/pr-comment.md" in steps["action: Comment on the pull request"]["output"]
    for name in ("report.json", "gate.xml", "report.html"):
        assert (tmp_path / "better" / "workspace" / "audit" / name).is_file()


@pytest.mark.slow
@needs_git
def test_a_worse_model_fails_after_the_upload_and_the_comment_list_the_failures_first(tmp_path):
    code, outputs, steps = run_action(MACS, CE, tmp_path / "worse")
    assert code == 1 and outputs["verdict"] == "fail"
    assert steps["action: Gate"]["exit"] == 0  # the verdict is an output; the last step fails the job
    assert steps["action: Keep the reports"]["exit"] == 0
    assert steps["action: Comment on the pull request"]["exit"] == 0
    assert steps["action: Fail on a failed gate"]["exit"] == 1 and steps["Audit and gate the model"]["exit"] == 1
    assert "❌ macs-audit gate FAILED" in steps["step summary"]["output"]
    posted = (tmp_path / "worse" / "posted-comment.md").read_text(encoding="utf-8")
    failed_table, passed = posted.split("<details>")
    assert "min\\_robust\\_accuracy" in failed_table and "min\\_robust\\_accuracy" not in passed
    assert re.search(r"\| baseline\.max\\_robust\\_accuracy\\_drop \|.*\| \d+\.\d\d% \|$", failed_table, re.M)


@pytest.mark.slow
@needs_git
def test_an_input_naming_a_missing_file_stops_the_action_first_with_one_line(tmp_path):
    code, outputs, steps = run_action(CE, MACS, tmp_path / "missing", "model=models/missing.onnx", limit=100)
    assert code == 1 and outputs == {"verdict": "", "report": ""}
    check = steps["action: Check the inputs"]
    assert check["exit"] == 3
    assert check["output"].strip().splitlines() == [
        "::error title=macs-audit::input model: models/missing.onnx not found in the workspace (is it checked out?)"
    ]
    assert steps["action: Audit the model"]["exit"] is None and steps["step summary"]["output"] == ""


def test_args_that_do_not_split_stop_the_audit_with_one_line(tmp_path):
    """An unclosed quote in `args`: the audit step fails (exit 2) with shlex's reason, and no audit runs with the
    words left out."""
    code, outputs, steps = run_action(CE, MACS, tmp_path / "args", "args=--bootstrap '100", limit=100)
    audit = steps["action: Audit the model"]
    assert code == 1 and audit["exit"] == 2 and outputs["verdict"] == ""
    assert audit["output"].strip().splitlines() == ["::error title=macs-audit::input args: No closing quotation"]
