"""Run docs/gate.md's GitHub Actions job, its steps as written there, on a temporary git repository.

    python scripts/gate_workflow.py --base sample_models/resnet9_c10_ce.onnx --head sample_models/resnet9_c10_macs.onnx

The repository gets `models/classifier.onnx` (with its sidecar .json) on `main`: the main branch's set-up
as docs/gate.md gives it (audit the model, `macs-audit init`, commit the pyproject.toml it writes), and
that branch's own gate (no baseline). A branch `pull-request` then replaces the model with `--head`. The job
is read from docs/gate.md's YAML block and run on a fresh clone of that branch: `actions/checkout` steps
as clones (`ref` and `path` read from the step; the job's own repository, never another), the install
steps and `setup-python` only with `--install` (else the macs-audit on PATH runs), `run:` steps in bash
with `${{ github.base_ref }}` and `${{ env.* }}` filled in, `if: always()` steps after a failure, and
`upload-artifact` as a check that its paths exist. `--limit N` and `--corruptions LIST` replace the
job's `--limit` and `--corruptions` values (fast runs).

Prints one line per step (its name, exit code) and a JSON summary as the last line; exits 0 when the job
passed, 1 when it failed (a step's nonzero exit, the gate's 1 included), 2 on bad arguments, 3 when the
set-up itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "gate.md"
MODEL = "models/classifier.onnx"
BASE_BRANCH, HEAD_BRANCH = "main", "pull-request"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


class SetupError(Exception):
    """The repository or the job could not be set up (exit 3)."""


def read_job(doc: Path = DOC) -> tuple[dict, dict]:
    """(the workflow's top-level env, its one job) from the doc's ```yaml block of .github/workflows/."""
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    workflows = [b for b in blocks if b.lstrip().startswith("# .github/workflows/")]
    if len(workflows) != 1:
        raise SetupError(f"{doc} holds {len(workflows)} workflow blocks, expected 1")
    workflow = yaml.safe_load(workflows[0])
    (job,) = workflow["jobs"].values()
    return workflow.get("env", {}), job


def fill(text: str, env: dict) -> str:
    """`${{ github.base_ref }}` and `${{ env.NAME }}` as the pull request's run would see them."""

    def value(match: re.Match) -> str:
        expression = match.group(1)
        if expression == "github.base_ref":
            return BASE_BRANCH
        if expression.startswith("env.") and expression[4:] in env:
            return str(env[expression[4:]])
        raise SetupError(f"the job uses ${{{{ {expression} }}}}, which this script cannot fill in")

    return EXPRESSION.sub(value, text)


def faster(command: str, limit: int | None, corruptions: str | None) -> str:
    """The command with its --limit / --corruptions values replaced (where given)."""
    if limit is not None:
        command = re.sub(r"--limit \S+", f"--limit {limit}", command)
    if corruptions is not None:
        command = re.sub(r"--corruptions \S+", f"--corruptions {shlex.quote(corruptions)}", command)
    return command


def git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.invalid"}
    env.update(GIT_COMMITTER_NAME="ci", GIT_COMMITTER_EMAIL="ci@example.invalid")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SetupError(f"git {' '.join(args)} failed: {done.stderr.strip()}")


def _place_model(model: Path, repo: Path) -> None:
    target = repo / MODEL
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model, target)
    sidecar = model.with_suffix(".json")
    if sidecar.is_file():  # its preprocessing: the sidecar rule reads it beside the model
        shutil.copyfile(sidecar, target.with_suffix(".json"))


def shell(command: str, cwd: Path, env: dict) -> tuple[int, str]:
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def make_repository(base: Path, head: Path, where: Path, setup: list[str], env: dict) -> list[dict]:
    """The repository at `where`: main with `base` and the thresholds `setup` writes, committed; a pull-request
    branch with `head`. Returns the set-up's steps (the main branch's own gate among them)."""
    where.mkdir(parents=True)
    git("init", "-q", "-b", BASE_BRANCH, cwd=where)
    _place_model(base, where)
    (where / "pyproject.toml").write_text('[project]\nname = "classifier"\nversion = "1"\n', encoding="utf-8")
    (where / ".gitignore").write_text("audit/\n", encoding="utf-8")
    steps = []
    for command in setup:
        code, output = shell(command, where, {**os.environ, **{k: str(v) for k, v in env.items()}})
        steps.append({"name": f"main: {command}", "exit": code, "output": output})
        if code != 0:
            raise SetupError(f"the main branch's set-up `{command}` exited {code}: {output.strip()}")
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", "the model and its gate thresholds", cwd=where)
    git("checkout", "-q", "-b", HEAD_BRANCH, cwd=where)
    _place_model(head, where)
    git("commit", "-q", "-am", "a new model", cwd=where)
    return steps


def run_job(job: dict, env: dict, origin: Path, work: Path, install: bool, limit, corruptions) -> list[dict]:
    """Each step of `job` in `work` (the pull request's workspace), as the runner would; one dict per step."""
    results: list[dict] = []
    failed = False
    summary = work.parent / "step-summary.md"
    summary.write_text("", encoding="utf-8")
    shell_env = {**os.environ, **{k: str(v) for k, v in env.items()}, "GITHUB_STEP_SUMMARY": str(summary)}
    for i, step in enumerate(job["steps"]):
        name = step.get("name") or step.get("uses") or f"step {i + 1}"
        if failed and "always()" not in str(step.get("if", "")):
            results.append({"name": name, "exit": None, "output": "not run: an earlier step failed"})
            continue
        uses, given = step.get("uses", ""), {k: fill(str(v), env) for k, v in (step.get("with") or {}).items()}
        code, output = 0, ""
        if uses.startswith("actions/checkout"):
            if "repository" in given:  # macs-audit's own source: only needed to install it
                if install:
                    target = work / given.get("path", ".")
                    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__"))
                else:
                    output = "skipped: macs-audit is installed (--install copies its source)"
            elif "path" in given:
                git("clone", "-q", "--branch", given.get("ref", HEAD_BRANCH), str(origin), given["path"], cwd=work)
            else:
                work.mkdir(parents=True, exist_ok=True)
                git("clone", "-q", "--branch", HEAD_BRANCH, str(origin), ".", cwd=work)
        elif uses.startswith("actions/setup-python"):
            output = "skipped: the Python on PATH runs the job"
        elif uses.startswith("actions/upload-artifact"):
            missing = [p for p in given.get("path", "").split() if not (work / p).exists()]
            code, output = (1, f"missing: {', '.join(missing)}") if missing else (0, "")
        elif "run" in step:
            command = faster(fill(step["run"], env), limit, corruptions)
            if name.startswith("Install") and not install:
                output = f"skipped (no --install): {command.strip()}"
            else:
                code, output = shell(command, work, shell_env)
        else:
            raise SetupError(f"step {name!r} uses {uses!r}, which this script cannot run")
        results.append({"name": name, "exit": code, "output": output})
        failed = failed or code != 0
    results.append({"name": "step summary", "exit": 0, "output": summary.read_text(encoding="utf-8")})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the main branch's model (.onnx)")
    parser.add_argument("--head", type=Path, required=True, help="the pull request's model (.onnx)")
    parser.add_argument("--limit", type=int, help="replace the job's --limit (fewer images: faster)")
    parser.add_argument("--corruptions", help="replace the job's --corruptions (none: no grid)")
    parser.add_argument("--install", action="store_true", help="run the install steps too (needs the network)")
    parser.add_argument("--keep", type=Path, help="build the repository here (a new directory) and keep it")
    parser.add_argument("--doc", type=Path, default=DOC, help="the document holding the job (docs/gate.md)")
    args = parser.parse_args(argv)
    for model in (args.base, args.head):
        if not model.is_file():
            parser.error(f"{model} is not a file")
    try:
        env, job = read_job(args.doc)
        evaluate = next(s["run"] for s in job["steps"] if "run" in s and f"evaluate {MODEL}" in s["run"])
        # The main branch's set-up, as docs/gate.md gives it: its audit as the job's, init, then its own gate.
        report = "audit/report.json"
        setup = [
            faster(evaluate.strip(), args.limit, args.corruptions),
            f"macs-audit init {report}",
            f"macs-audit gate {report} --no-step-summary",
        ]
        with tempfile.TemporaryDirectory(prefix="macs-gate-workflow-") as scratch:
            top = args.keep or Path(scratch)
            steps = make_repository(args.base.resolve(), args.head.resolve(), top / "origin", setup, env)
            steps += run_job(job, env, top / "origin", top / "workspace", args.install, args.limit, args.corruptions)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    job_steps = [s for s in steps if not s["name"].startswith("main: ")]
    passed = all(s["exit"] == 0 for s in job_steps)  # a step not run (None) followed a failure
    for step in steps:
        print(f"{step['name']}: exit {step['exit']}", file=sys.stderr)
    print(json.dumps({"passed": passed, "steps": steps}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
