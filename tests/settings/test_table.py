"""The options table is the one declaration: every command's parameters come from it, each default equals the core
value it names, and the help, the spec and the API read the same names."""

import dataclasses
import importlib
import inspect

import click
import pytest
import typer.main

from macs_audit.cli import app
from macs_audit.settings.table import BY_NAME, COMMANDS, OPTIONS, PANELS, options_of

CLICK = typer.main.get_command(app)
CORE_CLASSES = {
    "AuditOptions": "macs_audit.auditing.options",
    "FinetuneOptions": "macs_audit.finetune.options",
}


def _core_default(core: str):
    """The default `core` names: "Class.field" of a core dataclass, or "module:NAME" of a constant."""
    if ":" in core:
        module, name = core.split(":")
        return getattr(importlib.import_module(module), name)
    cls_name, field = core.split(".")
    cls = getattr(importlib.import_module(CORE_CLASSES[cls_name]), cls_name)
    (found,) = [f for f in dataclasses.fields(cls) if f.name == field]
    return found.default if found.default is not dataclasses.MISSING else found.default_factory()  # type: ignore[misc]


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.core or o.per_command], ids=lambda o: o.name)
def test_each_default_equals_the_core_value_it_names(option):
    for command in option.commands:
        taken = option.of(command)  # a command's own default names its own core value (or none)
        if taken.core:
            assert taken.default == _core_default(taken.core), (option.name, command)


def test_names_are_unique_and_each_command_and_panel_known():
    assert len(BY_NAME) == len(OPTIONS)
    for option in OPTIONS:
        assert set(option.commands) <= set(COMMANDS), option.name
        assert option.panel in PANELS, option.name
        assert set(option.per_command) <= set(option.commands), option.name


@pytest.mark.parametrize("command", [c for c in COMMANDS if c in CLICK.commands])  # type: ignore[attr-defined]
def test_a_command_declares_no_option_outside_the_table(command):
    """Each parameter of the command is the table's: same name, same flags, same help."""
    params = {p.name: p for p in CLICK.commands[command].params}  # type: ignore[attr-defined]
    table = {o.name: o for o in options_of(command)}
    if not table:
        pytest.skip(f"{command} is not on the options table")
    assert set(params) == set(table), (command, set(params) ^ set(table))
    for name, param in params.items():
        option = table[name]
        if isinstance(param, click.Option):
            assert param.help == option.help, name
            flags = [*param.opts, *param.secondary_opts]
            assert set(flags) == {f for spelling in option.flags for f in spelling.split("/")}, name


def test_no_command_module_declares_a_typer_option():
    """Options are built from the table (cli/parameters.py); the app's own --debug and --version are the one
    exception (cli/console.py)."""
    import macs_audit.cli as cli_package

    for command in COMMANDS:
        module = importlib.import_module(f"macs_audit.cli.{command}")
        source = inspect.getsource(module)
        if options_of(command):
            assert "typer.Option(" not in source and "typer.Argument(" not in source, command
    assert cli_package is not None
