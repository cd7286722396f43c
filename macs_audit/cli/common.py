"""Shared CLI plumbing: the Typer app, consoles, error handling, progress, list parsing."""

from __future__ import annotations

import functools
import sys
import time
from typing import Callable

import typer
from rich.console import Console
from rich.markup import escape

from macs_audit.errors import MacsAuditError

app = typer.Typer(
    name="macs-audit",
    help="Audit image classifiers for calibration and robustness, and fix them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
stdout = Console()
stderr = Console(stderr=True)
state = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")) -> None:
    state["debug"] = debug


def handle_errors(func: Callable) -> Callable:
    """Turn MacsAuditError into a one-line message and its exit code; anything else into exit 3."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except MacsAuditError as exc:
            if state["debug"]:
                raise
            stderr.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            stderr.print("interrupted")
            raise typer.Exit(130) from None
        except Exception as exc:  # a bug or an unexpected library failure: still one line
            if state["debug"]:
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            stderr.print(f"[bold red]error:[/] unexpected {type(exc).__name__}: {escape(first)} (rerun with --debug for details)",
                         markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(3) from None

    return wrapper


class Progress:
    """A rich progress bar with images/s on stderr; a no-op when quiet or not a terminal."""

    def __init__(self, enabled: bool = True):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self.enabled = enabled
        self._tasks: dict[str, int] = {}
        self._start: dict[str, float] = {}
        self._bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=stderr, transient=False,
            disable=not enabled,
        )

    def __enter__(self):
        self._bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self._bar.__exit__(*exc)

    def __call__(self, description: str, done: int, total: int) -> None:
        if description not in self._tasks:
            self._tasks[description] = self._bar.add_task(description, total=total, rate="")
            self._start[description] = time.perf_counter()
        elapsed = max(time.perf_counter() - self._start[description], 1e-9)
        self._bar.update(self._tasks[description], completed=done, rate=f"{done / elapsed:,.0f} img/s")


def show_progress(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()
