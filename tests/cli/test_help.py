"""`--help` read in an 80-column log: every option whole, brackets kept, no type shown for flags, every option
explained, and only what the command does promised; `--version`."""

import click
import pytest
import typer.main
from typer.testing import CliRunner

from macs_audit import __version__
from macs_audit.cli import app

runner = CliRunner()
COMMANDS = list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def help_text(*args: str, columns: int = 80) -> str:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns_with_every_option_whole(command):
    text = help_text(command)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text and "<bool>" not in text
    words = set(text.replace(",", " ").replace("/", " ").split())
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    for param in cmd.params:
        if isinstance(param, click.Option):
            for name in [*param.opts, *param.secondary_opts]:
                assert name in words, (command, name)


def test_the_security_flag_is_shown_whole_where_it_is_offered():
    for command in ("evaluate", "finetune", "calibrate", "export"):
        assert "--trust-pickled-model-code" in help_text(command).split(), command


def test_every_option_and_argument_has_help():
    for name, cmd in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        for param in cmd.params:
            assert getattr(param, "help", None), (name, param.name)
        assert cmd.short_help, name  # the line `macs-audit --help` lists it by, never cut


def test_bracketed_config_tables_survive_in_help():
    text = " ".join(help_text("gate").split())  # joined across the wrapped lines
    assert "macs-audit.toml ([gate]) or pyproject.toml ([tool.macs-audit.gate])" in text
    assert "[gate.baseline]" in text
    assert "[tool.macs-audit.gate]" in " ".join(help_text("init").split())


def test_the_app_lists_each_command_in_one_uncut_line():
    commands = help_text().split("Commands:")[1]
    assert "..." not in commands
    for command in COMMANDS:
        assert f"  {command} " in commands


def test_export_help_promises_only_what_export_does():
    text = " ".join(help_text("export").split())
    assert "Not TorchScript" in text and "or TorchScript" not in text


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"macs-audit {__version__}\n"


def test_help_texts_that_list_a_registry_list_every_entry():
    """Each help text that names a registry's entries names every one: the ones the options table writes out,
    free of the models (settings/table.py), too."""
    import re

    from macs_audit.finetune.options import OBJECTIVES
    from macs_audit.formats import EXTENSIONS, FORMATS
    from macs_audit.models.precision import (
        CPU_INT8_TARGET,
        DEFAULT_CALIBRATION_IMAGES,
        GPU_INT8_TARGET,
        INT8_TARGETS,
    )
    from macs_audit.views.corruptions.table import PARAMETER_SETS

    def option_help(command: str, name: str) -> str:
        params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
        return " ".join(next(p.help for p in params if p.name == name).split())

    def words(text: str) -> list[str]:
        return re.findall(r"[\w-]+", text)

    for command in ("gate", "report", "compare"):
        assert set(FORMATS) <= set(words(option_help(command, "format")))
        extensions = re.findall(r"\.\w+", option_help(command, "output"))
        assert {EXTENSIONS[ext] for ext in extensions} == set(EXTENSIONS.values())  # model-card has none
    assert set(OBJECTIVES) <= set(words(option_help("finetune", "objective")))
    int8_target = option_help("export", "int8_target")
    for name, target in INT8_TARGETS.items():
        assert f"{name} ({target.description})" in int8_target
    assert f"Default: {GPU_INT8_TARGET} with a GPU --provider, else {CPU_INT8_TARGET}" in int8_target
    assert f"Default: {DEFAULT_CALIBRATION_IMAGES}," in option_help("export", "calibration_images")
    layout_help = option_help("corrupt", "layout")
    for pset in PARAMETER_SETS.values():
        for command in ("evaluate", "corrupt"):
            assert f"{pset.name} ({pset.size} px)" in option_help(command, "corruption_set")
        assert f"{pset.released_layout} for " in layout_help and pset.name in words(layout_help)


@pytest.mark.parametrize("command", COMMANDS)
def test_placeholders_are_words_not_type_names(command):
    text = help_text(command)
    for leaked in ("<list[", "<int range>", "<float range>", "<int>", "<float>", "<str>", "{model}", "{checkpoint}"):
        assert leaked not in text, (command, leaked)


def test_evaluate_lists_its_options_by_panel_in_order():
    text = help_text("evaluate")
    headings = [line[:-1] for line in text.splitlines() if line.endswith(" options:")]
    assert headings == [
        "Data options",
        "Model options",
        "View options",
        "Analysis options",
        "Gate options",
        "Output options",
        "Runtime options",
        "Other options",  # --help
    ]
    assert "Usage: macs-audit evaluate [OPTIONS] [MODEL]" in text  # MODEL may come from the spec
    panel = text[text.index("View options:") : text.index("Analysis options:")]
    assert "--corruptions TEXT" in panel and "--perturbations TEXT" in panel
    assert "--batch-size N" in text[text.index("Runtime options:") :]


def test_the_top_level_help_says_what_corrupt_writes():
    text = " ".join(help_text().split())
    assert "CIFAR-C .npy files or an image tree" in text
