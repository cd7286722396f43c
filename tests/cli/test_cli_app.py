"""The app: every command registered by importing the package alone, and help without heavy imports."""

import subprocess
import sys
import textwrap

import typer.main

from macs_audit.cli import app

COMMANDS = ["corrupt", "evaluate", "finetune", "calibrate", "export", "init", "gate", "report", "compare"]


def test_every_command_is_registered_by_importing_the_app():
    assert list(typer.main.get_command(app).commands) == COMMANDS


def test_help_of_the_app_and_every_command_imports_no_torch():
    """Fresh interpreter: `macs-audit --help` and `macs-audit COMMAND --help` exit 0 with torch, timm and
    onnxruntime never imported."""
    script = textwrap.dedent(f"""
        import sys
        from macs_audit.__main__ import main
        codes = []
        for args in [[]] + [[name] for name in {COMMANDS!r}]:
            sys.argv = ["macs-audit", *args, "--help"]
            try:
                main()
            except SystemExit as exc:
                codes.append(exc.code or 0)
        heavy = [m for m in ("torch", "onnxruntime", "torchvision", "timm") if m in sys.modules]
        print("RESULT", codes, heavy, file=sys.stderr)
        sys.exit(0 if codes == [0] * {len(COMMANDS) + 1} and not heavy else 1)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_cli_modules_import_only_the_shared_cli_modules():
    """A command module may import cli.console, cli.progress, cli.parameters and cli.output, never another
    command."""
    import ast
    from pathlib import Path

    import macs_audit.cli as cli

    shared = {
        "macs_audit.cli.console",
        "macs_audit.cli.progress",
        "macs_audit.cli.parameters",
        "macs_audit.cli.output",
    }
    for path in Path(cli.__file__).parent.glob("*.py"):
        if path.name == "__init__.py":
            continue
        imported = {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("macs_audit.cli")
        }
        assert imported <= shared, (path.name, imported - shared)


def test_the_clean_onnx_audit_imports_no_torch(tmp_path):
    """The ONNX path never needs torch: a clean audit (no perturbation, sensitivity or corruption views)
    runs in a fresh interpreter without importing it, and also gates and writes its report."""
    import numpy as np
    from conftest import linear_onnx, tiny_images

    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(60)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    args = [
        str(model),
        "--data",
        str(tmp_path / "d.npz"),
        "--perturbations",
        "none",
        "--sensitivity-samples",
        "0",
        "--bootstrap",
        "0",
        "--calibration-split",
        "0",
        "-o",
        str(tmp_path / "r.json"),
        "--quiet",
    ]
    script = textwrap.dedent(f"""
        import sys
        from macs_audit.__main__ import main
        sys.argv = ["macs-audit", "evaluate", *{args!r}]
        try:
            main()
        except SystemExit as exc:
            code = exc.code or 0
        heavy = [m for m in ("torch", "torchvision", "timm") if m in sys.modules]
        print("RESULT", code, heavy, file=sys.stderr)
        sys.exit(0 if code == 0 and not heavy else 1)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "r.json").is_file()
