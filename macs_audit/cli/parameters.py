"""A command's parameters, built from the options table (settings/table.py): typer reads a function's signature,
so `takes_options(command)` gives the command function one parameter per option the table lists for it, with the
table's flags, help, panel and range; `given_values` says which were given on the command line, for the
resolution flag over spec over preset over default (settings/resolve.py). Free of the models and the audit: the
commands that read reports build their parameters here too."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, List, Optional, TypeVar

import typer

from macs_audit.settings.spec import Spec
from macs_audit.settings.table import Option, options_of

F = TypeVar("F", bound=Callable[..., Any])

# Path options and arguments pass readable=False: click would otherwise check each existing path with
# os.access and stop an unreadable one as a usage error (exit 2) before the command starts. The loaders
# report it instead, as the input error it is (exit 3, docs/errors.md). A required option the spec may set is
# not required here: settings/resolve.py requires it once the spec is read.


def _parameter(option: Option) -> inspect.Parameter:
    """The typer parameter of one option: its flags, help, panel, range and placeholder."""
    kind: Any = option.kind
    annotation: Any = (
        List[kind]
        if option.repeatable
        else (kind if option.kind is bool and option.default is not None else Optional[kind])
    )  # noqa: UP006
    # the loaders report an unreadable file (exit 3)
    readable: dict[str, Any] = {"readable": False} if option.kind is Path else {}
    if option.argument:
        info: Any = typer.Argument(
            ... if option.required and not option.in_spec else None,
            help=option.help,
            metavar=option.flag,
            show_default=False,
            **readable,
        )
    else:
        info = typer.Option(
            ... if option.required and not option.in_spec else option.default,
            *option.flags,
            help=option.help,
            min=option.minimum,
            max=option.maximum,
            rich_help_panel=option.panel,
            metavar=None if option.kind is bool else METAVARS.get(option.kind),
            **readable,
        )
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


# The placeholder of a value in --help, by its type: words a user types (PATH, N), not typer's type labels.
METAVARS: dict[type, str] = {Path: "PATH", int: "N", float: "F", str: "TEXT"}


CONTEXT = "cli_context"  # the parameter typer fills with the command's context (which options were given)


def takes_options(command: str) -> Callable[[F], F]:
    """Give `function` (which takes **values) the signature of `command`'s options in the table, for typer, and
    the command's context as `cli_context` (given_values reads it)."""

    def apply(function: F) -> F:
        parameters = [_parameter(option) for option in options_of(command)]
        parameters.sort(key=lambda p: not isinstance(p.default, typer.models.ArgumentInfo))  # the arguments first
        context = inspect.Parameter(CONTEXT, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [context, *(p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in parameters)]
        )
        function.__annotations__ = {CONTEXT: typer.Context, **{p.name: p.annotation for p in parameters}}
        return function

    return apply


def given_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line (the context's parameter source). `values` loses `cli_context`."""
    context = values.pop(CONTEXT)
    return {
        name: value
        for name, value in values.items()
        if getattr(context.get_parameter_source(name), "name", None) == "COMMANDLINE"
    }


def given_values(values: dict[str, Any]) -> tuple[dict[str, Any], Spec | None]:
    """The options given on the command line, and the spec (--config, else the one found from the current
    directory): what `settings.resolve.resolve` takes. `values` loses `cli_context`."""
    from macs_audit.settings.spec import load_spec

    return given_flags(values), load_spec(values.get("config"))
