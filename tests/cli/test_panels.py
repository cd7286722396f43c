"""cli/panels.py: --help lists a command's options under the table's panels, in the table's order, and an option
without a panel under "Other options" (never dropped)."""

import typer
from typer.testing import CliRunner

from macs_audit.cli.panels import ORDER, OTHER, PanelledCommand
from macs_audit.settings.table import PANELS


def _help(command) -> str:
    app = typer.Typer(rich_markup_mode=None)
    app.command(cls=PanelledCommand)(command)
    app.command("other")(lambda: None)  # two commands: the first is a sub-command by name
    result = CliRunner().invoke(app, ["command", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


def test_options_are_listed_by_panel_in_the_table_order():
    def command(
        model: str = typer.Argument("m"),
        device: str = typer.Option("cpu", rich_help_panel=PANELS[-1], help="runtime"),
        data: str = typer.Option("d", rich_help_panel=PANELS[0], help="data"),
        stray: int = typer.Option(0, help="no panel"),
    ) -> None: ...

    text = _help(command)
    headings = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["Arguments", f"{PANELS[0]} options", f"{PANELS[-1]} options", OTHER], text
    assert text.index("--stray") > text.index(OTHER) and text.index("--help") > text.index(OTHER)


def test_a_command_without_panels_keeps_one_options_block():
    def command(flag: bool = typer.Option(False, help="a flag")) -> None: ...

    text = _help(command)
    assert "Options:" in text and OTHER not in text


def test_the_order_is_the_tables_then_other():
    assert ORDER == (*PANELS, OTHER)
