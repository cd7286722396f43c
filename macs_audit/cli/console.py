"""The consoles every command prints to, its error handling (one line and an exit code), and progress bars."""

from __future__ import annotations

import functools
import sys
import time
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from macs_audit.errors import MacsAuditError

stdout = Console()
stderr = Console(stderr=True)
state = {"debug": False}
F = TypeVar("F", bound=Callable[..., Any])


def root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")) -> None:
    """The app's callback: options that apply to every command."""
    state["debug"] = debug


def handle_errors(func: F) -> F:
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
            stderr.print(
                f"[bold red]error:[/] unexpected {type(exc).__name__}: {escape(first)} "
                "(rerun with --debug for details)",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(3) from None

    return wrapper  # type: ignore[return-value]


class Progress:
    """A rich progress bar on stderr per task description: images/s, or the loss terms of the current
    training step when the caller passes them. Disabled when quiet or not a terminal; then, with
    `epoch_lines`, a log still gets one line per fine-tuning epoch (its validation metrics)."""

    def __init__(self, enabled: bool = True, epoch_lines: bool = False):
        from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.enabled, self.epoch_lines = enabled, epoch_lines
        self._tasks: dict[str, TaskID] = {}
        self._start: dict[str, float] = {}
        self._epoch = ""
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=stderr,
            transient=False,
            disable=not enabled,
        )

    def __enter__(self) -> Progress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.__exit__(*exc)

    def __call__(self, description: str, done: int, total: int, terms: dict | None = None) -> None:
        if description not in self._tasks:
            self._tasks[description] = self._bar.add_task(description, total=total, rate="")
            self._start[description] = time.perf_counter()
        if terms is None:
            elapsed = max(time.perf_counter() - self._start[description], 1e-9)
            text = f"{done / elapsed:,.0f} img/s"
        else:
            text = "  ".join(f"{k} {v:.4g}" for k, v in terms.items())
        self._bar.update(self._tasks[description], total=total, completed=done, rate=text)
        if description.startswith("epoch"):
            self._epoch = description
        elif description == "validate" and terms and self.epoch_lines and not self.enabled:
            stderr.print(f"{self._epoch}: {text}", highlight=False)


def show_progress(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()
