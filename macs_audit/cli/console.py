"""The consoles every command prints to and its error handling (one line and an exit code); progress is
cli/progress.py."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from macs_audit.errors import MacsAuditError
from macs_audit.text import printable


class _Console(Console):
    """rich's Console, wide where its stream is not a terminal (a log, a pipe, a file): rich would take 80
    columns there (or the width of a terminal on another stream) and hard-wrap the lines a reader copies from
    a log, such as a suggested command. COLUMNS, where set, still decides."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and "COLUMNS" not in self._environ:
            from macs_audit.formats.terminal import WIDTH  # the width of the text files reports are written as

            return ConsoleDimensions(max(size.width, WIDTH), size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


stdout = _Console()
stderr = _Console(stderr=True)
state = {"debug": False, "interrupt_reported": False}
F = TypeVar("F", bound=Callable[..., Any])


def print_version(value: bool) -> None:
    if value:
        from macs_audit.version import __version__

        typer.echo(f"macs-audit {__version__}")
        raise typer.Exit()


def root(
    debug: bool = typer.Option(
        False, "--debug", help="Show full tracebacks on errors, and the warnings torch and timm print while loading."
    ),
    version: bool = typer.Option(
        False, "--version", callback=print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """The app's callback: options that apply to every command."""
    state["debug"] = debug


def handle_errors(func: F) -> F:
    """Turn MacsAuditError into a one-line message and its exit code; anything else into exit 3. What a message
    quotes from the data or the command line (a file name, a class name) is shown through `printable`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except MacsAuditError as exc:
            if state["debug"]:
                raise
            stderr.print(f"[bold red]error:[/] {escape(printable(exc))}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            stderr.print("interrupted")
            state["interrupt_reported"] = True
            raise typer.Exit(130) from None
        except OSError as exc:  # the OS refused a read or write the core does not check itself: name the file
            if state["debug"]:
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            reason = printable(where + (exc.strerror or str(exc)))
            stderr.print(
                f"[bold red]error:[/] {escape(reason)} (rerun with --debug for details)",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(3) from None
        except Exception as exc:  # a bug or an unexpected library failure: still one line
            if state["debug"]:
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            stderr.print(
                f"[bold red]error:[/] unexpected {type(exc).__name__}: {escape(printable(first))} "
                "(rerun with --debug for details)",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(3) from None

    return wrapper  # type: ignore[return-value]


def note(message: str) -> None:
    """One plain line on stderr about what a run did (what it wrote, which parameters it used): paths and names
    in it are shown through `printable`, never read as markup."""
    stderr.print(printable(message), markup=False, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    """One line on stderr that the run went on but its user should know something (never for errors)."""
    stderr.print(f"[yellow]warning:[/] {escape(printable(message))}", markup=True, highlight=False, soft_wrap=True)


def warn_about_model(warnings: list[str] | None) -> None:
    """The warnings a Report's model section lists (report.model.warnings), one line each."""
    for message in warnings or []:
        warn(message)
