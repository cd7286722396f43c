"""Run docs/gate.md's GitHub Actions jobs, their steps as written there, on a temporary git repository.

    python scripts/gate_workflow.py --base sample_models/resnet9_c10_ce.onnx --head sample_models/resnet9_c10_macs.onnx
    python scripts/gate_workflow.py --action --base ... --head ...    # the workflow that uses action.yml

The repository gets `models/classifier.onnx` (with its sidecar .json) on `main`: the main branch's set-up
as docs/gate.md gives it (audit the model, `macs-audit init`, commit the pyproject.toml it writes), and
that branch's own gate (no baseline). A branch `pull-request` then replaces the model with `--head`. The job
is read from docs/gate.md's YAML block and run on a fresh clone of that branch: `actions/checkout` steps
as clones (`ref` and `path` read from the step; the job's own repository, never another), the install
steps and `setup-python` only with `--install` (else the macs-audit on PATH runs), `run:` steps in bash
with their `env:`, `${{ ... }}` filled in where the runner fills them in (`with:`, `env:`, `if:`; never in a
`run:` script, refused), an `if:` evaluated (`always()`, `==`, `&&`, ...), a step's `$GITHUB_OUTPUT` read
into `steps.ID.outputs`, and `upload-artifact` as a check that its paths exist. `--limit N` and
`--corruptions LIST` replace the job's `--limit` and `--corruptions` values (fast runs).

`--action`: the job of `.github/workflows/model-gate.yml`, whose step `uses: OWNER/macs-audit@REF` (or
`uses: ./`) runs this repository's action.yml: its inputs from the step's `with:` over their defaults
(`--input NAME=VALUE` overrides one), its steps as above with `github.action_path` this repository, and its
outputs read back. The main branch's set-up audits with the action's `model` and `args` and writes the report
the action's `baseline` names (committed, as docs/gate.md suggests). The run is a pull request's (number 1);
`gh` is a stand-in on PATH that prints what it was asked and keeps the comment body it was given.

Prints one line per step (its name, exit code) and a JSON summary as the last line (with the action's
outputs); exits 0 when the job passed, 1 when it failed (a step's nonzero exit, the gate's 1 included), 2 on
bad arguments, 3 when the set-up itself failed.
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
ACTION = ROOT / "action.yml"
MODEL = "models/classifier.onnx"
BASE_BRANCH, HEAD_BRANCH = "main", "pull-request"
DOCUMENTED, WITH_ACTION = "model-audit.yml", "model-gate.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
# The pull request's run: what `${{ github.* }}` reads (action_path and workspace are added per run).
GITHUB = {
    "github.base_ref": BASE_BRANCH,
    "github.event_name": "pull_request",
    "github.event.pull_request.number": "1",
    "github.repository": "your-org/classifier",
    "github.token": "a-token-for-the-run",
}
# A stand-in for `gh`: says what it was asked (on stderr: `gh api` lists no comments) and keeps the body given.
FAKE_GH = """#!/usr/bin/env bash
echo "gh $*" >&2
while [ $# -gt 0 ]; do
  case "$1" in --body-file) cp "$2" "$FAKE_GH_COMMENT"; shift ;; esac
  shift
done
"""


class SetupError(Exception):
    """The repository or the job could not be set up (exit 3)."""


def read_job(doc: Path = DOC, workflow: str = DOCUMENTED) -> tuple[dict, dict]:
    """(the workflow's top-level env, its one job) from the doc's ```yaml block of .github/workflows/`workflow`."""
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    found = [b for b in blocks if b.lstrip().startswith(f"# .github/workflows/{workflow}\n")]
    if len(found) != 1:
        raise SetupError(f"{doc} holds {len(found)} blocks of .github/workflows/{workflow}, expected 1")
    workflow_yaml = yaml.safe_load(found[0])
    (job,) = workflow_yaml["jobs"].values()
    return workflow_yaml.get("env", {}), job


def read_action(path: Path = ACTION) -> dict:
    import yaml

    action = yaml.safe_load(path.read_text(encoding="utf-8"))
    if action.get("runs", {}).get("using") != "composite":
        raise SetupError(f"{path} is not a composite action")
    return action


def text(value: object) -> str:
    """A YAML value as the runner passes it on: booleans lower-case, None empty."""
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def lookup(name: str, context: dict) -> str:
    """A context value (`github.base_ref`, `env.NAME`, `inputs.NAME`, `steps.ID.outputs.NAME`); a step's output
    that was not set is empty, as on the runner."""
    if name in context:
        return context[name]
    if name.startswith("steps."):
        return ""
    raise SetupError(f"the job uses ${{{{ {name} }}}}, which this script cannot fill in")


def fill(value: object, context: dict) -> str:
    """`${{ NAME }}` in a `with:` or `env:` value, as the pull request's run would see it."""
    return EXPRESSION.sub(lambda match: lookup(match.group(1), context), text(value))


TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(==|!=|&&|\|\||!|\(|\))|(\w+)\(\)|([A-Za-z_][\w.-]*))")
STATUS = {"always": lambda failed: True, "success": lambda failed: not failed, "failure": lambda failed: failed}


def condition(expression: object, context: dict, failed: bool) -> bool:
    """A step's `if:`: strings, context names, `== != && || ! ( )` and the status functions; without a status
    function it holds only while no step has failed (the runner's implicit `success() &&`)."""
    if expression is None:
        return not failed
    source = EXPRESSION.sub(lambda match: match.group(1), text(expression)).strip()
    python, position, status_called = [], 0, False
    words = {"&&": " and ", "||": " or ", "!": " not "}
    while position < len(source):
        match = TOKEN.match(source, position)
        if match is None or match.end() == position:
            raise SetupError(f"cannot read the condition `if: {expression}` at {source[position:]!r}")
        string, operator, call, name = match.groups()
        if string is not None:
            python.append(repr(string[1:-1].replace("''", "'")))
        elif operator is not None:
            python.append(words.get(operator, operator))
        elif call is not None:
            if call not in STATUS:
                raise SetupError(f"the condition `if: {expression}` calls {call}(), which this script cannot run")
            python.append(repr(STATUS[call](failed)))
            status_called = True
        elif name in ("true", "false"):
            python.append(repr(name == "true"))
        else:
            python.append(repr(lookup(name, context)))
        position = match.end()
    held = bool(eval("".join(python), {"__builtins__": {}}))  # only literals and operators, built above
    return held if status_called else held and not failed


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
    """`command` as the runner runs a `shell: bash` step (bash --noprofile --norc -eo pipefail)."""
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
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
        code, output = shell(command, where, {**os.environ, **{k: text(v) for k, v in env.items()}})
        steps.append({"name": f"main: {command}", "exit": code, "output": output})
        if code != 0:
            raise SetupError(f"the main branch's set-up `{command}` exited {code}: {output.strip()}")
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", "the model and its gate thresholds", cwd=where)
    git("checkout", "-q", "-b", HEAD_BRANCH, cwd=where)
    _place_model(head, where)
    git("commit", "-q", "-am", "a new model", cwd=where)
    return steps


def is_this_action(uses: str) -> bool:
    return uses == "./" or re.fullmatch(r"[\w.-]+/macs-audit@[\w./-]+", uses) is not None


class Runner:
    """Runs steps in `work` (the pull request's workspace) as the runner would, one result dict per step."""

    def __init__(
        self, origin: Path, work: Path, env: dict, install: bool, limit: int | None, corruptions: str | None
    ) -> None:
        self.origin, self.work, self.install = origin, work, install
        self.limit, self.corruptions = limit, corruptions
        scratch = work.parent
        self.summary, self.comment = scratch / "step-summary.md", scratch / "posted-comment.md"
        self.summary.write_text("", encoding="utf-8")
        tools = scratch / "bin"
        tools.mkdir(exist_ok=True)
        (tools / "gh").write_text(FAKE_GH, encoding="utf-8")
        (tools / "gh").chmod(0o755)
        self.env = {
            **os.environ,
            **{k: text(v) for k, v in env.items()},  # the workflow's env, as every step sees it
            "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "FAKE_GH_COMMENT": str(self.comment),
        }
        self.results: list[dict] = []
        self.failed = False

    def steps(self, steps: list[dict], context: dict, prefix: str = "", action_inputs: dict | None = None) -> None:
        """Run `steps` with `context` (the names `${{ }}` reads; each step's outputs are added to it)."""
        for i, step in enumerate(steps):
            own = step.get("name") or step.get("uses") or f"step {i + 1}"
            name = prefix + own
            if not condition(step.get("if"), context, self.failed):
                reason = "an earlier step failed" if self.failed else f"if: {step['if']} is false"
                self.results.append({"name": name, "exit": None, "output": f"not run: {reason}"})
                continue
            uses = step.get("uses", "")
            given = {k: fill(v, context) for k, v in (step.get("with") or {}).items()}
            code, output, outputs = 0, "", {}
            if is_this_action(uses):
                outputs = self.action(given, context, action_inputs or {})
                self.results.append({"name": name, "exit": int(self.failed), "output": "", "outputs": outputs})
                self.record(step, outputs, context)
                continue
            if uses.startswith("actions/checkout"):
                output = self.checkout(given)
            elif uses.startswith("actions/setup-python"):
                output = "skipped: the Python on PATH runs the job"
            elif uses.startswith("actions/upload-artifact"):
                missing = [p for p in given.get("path", "").split() if not (self.work / p).exists()]
                code, output = (1, f"missing: {', '.join(missing)}") if missing else (0, "")
            elif "run" in step:
                code, output, outputs = self.run(step, own, context)
            else:
                raise SetupError(f"step {name!r} uses {uses!r}, which this script cannot run")
            self.results.append({"name": name, "exit": code, "output": output})
            self.record(step, outputs, context)
            self.failed = self.failed or code != 0

    @staticmethod
    def record(step: dict, outputs: dict, context: dict) -> None:
        if "id" in step:
            context.update({f"steps.{step['id']}.outputs.{k}": v for k, v in outputs.items()})

    def checkout(self, given: dict) -> str:
        if "repository" in given:  # macs-audit's own source: only needed to install it
            if not self.install:
                return "skipped: macs-audit is installed (--install copies its source)"
            target = self.work / given.get("path", ".")
            shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__"))
        elif "path" in given:
            ref = given.get("ref", HEAD_BRANCH)
            git("clone", "-q", "--branch", ref, str(self.origin), given["path"], cwd=self.work)
        else:
            self.work.mkdir(parents=True, exist_ok=True)
            git("clone", "-q", "--branch", HEAD_BRANCH, str(self.origin), ".", cwd=self.work)
        return ""

    def run(self, step: dict, name: str, context: dict) -> tuple[int, str, dict]:
        """A `run:` step in bash with its `env:`; (exit code, output, what it wrote to $GITHUB_OUTPUT)."""
        script = step["run"]
        if EXPRESSION.search(script):  # filled in before bash reads it: a crafted value would run as code
            raise SetupError(f"step {name!r} writes ${{{{ ... }}}} into its script: pass the value through env:")
        script = faster(script, self.limit, self.corruptions)
        if name.startswith("Install") and not self.install:
            return 0, f"skipped (no --install): {script.strip()}", {}
        written = self.work.parent / "github-output"
        written.write_text("", encoding="utf-8")
        env = {**self.env, **{k: fill(v, context) for k, v in (step.get("env") or {}).items()}}
        env.update(GITHUB_OUTPUT=str(written), GITHUB_WORKSPACE=str(self.work))
        code, output = shell(script, self.work, env)
        return code, output, read_outputs(written.read_text(encoding="utf-8"))

    def action(self, given: dict, outer: dict, overrides: dict) -> dict:
        """This repository's action.yml with the inputs `given` (and `overrides`); its outputs."""
        action = read_action()
        declared = action.get("inputs", {})
        unknown = sorted((set(given) | set(overrides)) - set(declared))
        if unknown:
            raise SetupError(f"action.yml has no input {', '.join(unknown)}")
        inputs = {name: text(spec.get("default", "")) for name, spec in declared.items()}
        inputs.update(given)
        inputs.update(overrides)
        if "args" in inputs:  # the audit's fast options, as --limit / --corruptions replace the job's
            inputs["args"] = faster(inputs["args"], self.limit, self.corruptions)
        context = {k: v for k, v in outer.items() if k.startswith(("github.", "env."))}
        context.update({f"inputs.{k}": v for k, v in inputs.items()})
        context.update({"github.action_path": str(ROOT), "github.workspace": str(self.work)})
        self.env["GITHUB_ACTION_PATH"] = str(ROOT)
        self.steps(action["runs"]["steps"], context, prefix="action: ")
        return {name: fill(spec.get("value", ""), context) for name, spec in action.get("outputs", {}).items()}


def read_outputs(written: str) -> dict[str, str]:
    """$GITHUB_OUTPUT's `name=value` lines and `name<<DELIMITER` blocks."""
    outputs, lines = {}, iter(written.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            block = []
            for inner in lines:
                if inner == delimiter:
                    break
                block.append(inner)
            outputs[name] = "\n".join(block)
        elif "=" in line:
            name, value = line.split("=", 1)
            outputs[name] = value
    return outputs


def setup_commands(job: dict, action: bool, limit: int | None, corruptions: str | None) -> list[str]:
    """The main branch's set-up, as docs/gate.md gives it: its audit as the job's, init, then its own gate."""
    if action:
        step = next((s for s in job["steps"] if is_this_action(s.get("uses", ""))), None)
        if step is None:
            raise SetupError("the workflow has no step that uses macs-audit's action")
        given = {k: text(v) for k, v in (step.get("with") or {}).items()}
        report = given.get("baseline") or "audit/report.json"
        args = faster(given.get("args", ""), limit, corruptions)
        evaluate = f"macs-audit evaluate {shlex.quote(given['model'])} {args} --quiet -o {shlex.quote(report)}"
    else:
        report = "audit/report.json"
        documented = next(s["run"] for s in job["steps"] if "run" in s and f"evaluate {MODEL}" in s["run"])
        evaluate = faster(documented.strip(), limit, corruptions)
    return [
        evaluate,
        f"macs-audit init {shlex.quote(report)}",
        f"macs-audit gate {shlex.quote(report)} --no-step-summary",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the main branch's model (.onnx)")
    parser.add_argument("--head", type=Path, required=True, help="the pull request's model (.onnx)")
    parser.add_argument("--action", action="store_true", help=f"run {WITH_ACTION}, the workflow that uses action.yml")
    parser.add_argument(
        "--input", action="append", default=[], metavar="NAME=VALUE", help="--action: set one of the action's inputs"
    )
    parser.add_argument("--limit", type=int, help="replace the job's --limit (fewer images: faster)")
    parser.add_argument("--corruptions", help="replace the job's --corruptions (none: no grid)")
    parser.add_argument("--install", action="store_true", help="run the install steps too (needs the network)")
    parser.add_argument("--keep", type=Path, help="build the repository here (a new directory) and keep it")
    parser.add_argument("--doc", type=Path, default=DOC, help="the document holding the job (docs/gate.md)")
    args = parser.parse_args(argv)
    for model in (args.base, args.head):
        if not model.is_file():
            parser.error(f"{model} is not a file")
    overrides = {}
    for item in args.input:
        name, equals, value = item.partition("=")
        if not equals or not args.action:
            parser.error(f"--input {item}: give NAME=VALUE, with --action")
        overrides[name] = value
    try:
        env, job = read_job(args.doc, WITH_ACTION if args.action else DOCUMENTED)
        setup = setup_commands(job, args.action, args.limit, args.corruptions)
        with tempfile.TemporaryDirectory(prefix="macs-gate-workflow-") as scratch:
            top = args.keep or Path(scratch)
            steps = make_repository(args.base.resolve(), args.head.resolve(), top / "origin", setup, env)
            runner = Runner(top / "origin", top / "workspace", env, args.install, args.limit, args.corruptions)
            context = {**GITHUB, **{f"env.{k}": text(v) for k, v in env.items()}}
            runner.steps(job["steps"], context, action_inputs=overrides)
            runner.results.append(
                {"name": "step summary", "exit": 0, "output": runner.summary.read_text(encoding="utf-8")}
            )
            steps += runner.results
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    passed = not runner.failed  # a step not run followed a failure, or its `if:` was false
    outputs = next((s["outputs"] for s in steps if "outputs" in s), {})
    for step in steps:
        print(f"{step['name']}: exit {step['exit']}", file=sys.stderr)
    print(json.dumps({"passed": passed, "outputs": outputs, "steps": steps}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
