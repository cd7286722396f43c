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

# Model options shared by evaluate, finetune, calibrate and export (one definition, one help text).
ARCH_OPTION = typer.Option(None, "--arch", help="timm architecture of a state dict / safetensors checkpoint.")
NUM_CLASSES_OPTION = typer.Option(None, "--num-classes", help="Number of classes of the checkpoint.")
INPUT_SIZE_OPTION = typer.Option(None, "--input-size", help="Model input size H,W (or one number).")
MEAN_OPTION = typer.Option(None, "--mean", help="Per-channel mean, e.g. 0.4914,0.4822,0.4465.")
STD_OPTION = typer.Option(None, "--std", help="Per-channel std, e.g. 0.2470,0.2435,0.2616.")
MODEL_OUTPUT_OPTION = typer.Option(None, "--model-output", help="What the model returns: auto, logits or probabilities.")
TRUST_PICKLED_OPTION = typer.Option(False, "--trust-pickled-model-code",
                                    help="Allow loading a fully pickled torch module. This RUNS CODE from the file: "
                                         "only for files you trust.")


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


def parse_floats(text: str | None, name: str) -> list[float] | None:
    if text is None:
        return None
    from macs_audit.errors import UsageError

    try:
        return [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"{name} must be comma-separated numbers, got {text!r}") from None


def parse_size(text: str | None) -> list[int] | None:
    if text is None:
        return None
    from macs_audit.errors import UsageError

    try:
        parts = [int(v) for v in text.lower().replace("x", ",").split(",") if v]
    except ValueError:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}")
    return parts


class Progress:
    """A rich progress bar with images/s on stderr; a no-op when quiet or not a terminal."""

    def __init__(self, enabled: bool = True):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn

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
