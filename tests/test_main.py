"""The script's entry point: an interrupt is one line and exit 130 wherever it lands."""

from __future__ import annotations

import sys

import pytest

import macs_audit.__main__ as entry
from macs_audit.cli import console


class _InterruptImport:
    """A meta-path finder that interrupts the import of one module, as Ctrl-C during start-up does."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name:
            raise KeyboardInterrupt
        return None


def test_an_interrupt_while_the_cli_imports_is_one_line_and_130(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "macs_audit.cli")
    monkeypatch.setattr(sys, "meta_path", [_InterruptImport("macs_audit.cli"), *sys.meta_path])
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def _exit_130() -> None:
    raise SystemExit(130)  # what typer does with an interrupt while it parses the command line


def test_an_interrupt_while_typer_parses_gets_its_line(monkeypatch, capsys):
    monkeypatch.setattr("macs_audit.cli.app", _exit_130)
    monkeypatch.setitem(console.state, "interrupt_reported", False)
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_an_interrupt_a_command_reported_is_not_reported_twice(monkeypatch, capsys):
    monkeypatch.setattr("macs_audit.cli.app", _exit_130)
    monkeypatch.setitem(console.state, "interrupt_reported", True)
    with pytest.raises(SystemExit):
        entry.main()
    assert capsys.readouterr().err == ""


def test_the_script_runs_the_app(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["macs-audit", "--version"])
    with pytest.raises(SystemExit) as exit_info:
        entry.main()
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("macs-audit ")


def test_the_objects_alive_at_exit_are_frozen_before_teardown(tmp_path):
    """A fresh interpreter running the script: by the time its exit handlers have run, the objects still alive
    are out of the garbage collector's reach (its teardown would otherwise walk them all)."""
    import subprocess
    import textwrap

    script = textwrap.dedent("""
        import atexit, gc, sys
        atexit.register(lambda: sys.stderr.write(f"frozen {gc.get_freeze_count()}\\n"))  # registered first: runs last
        from macs_audit.__main__ import main
        sys.argv = ["macs-audit", "--version"]
        main()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    frozen = int(done.stderr.split("frozen ")[-1])
    assert frozen > 10_000, done.stderr  # typer, rich and the package's modules at least
