"""cli/parameters.py: a command's typer parameters built from the options table, and which were given."""

import inspect

import typer
from typer.testing import CliRunner

from macs_audit.cli.parameters import CONTEXT, given_values, takes_options
from macs_audit.settings.table import options_of


def test_the_signature_is_the_tables_options_arguments_first():
    @takes_options("evaluate")
    def command(**values): ...

    names = list(inspect.signature(command).parameters)
    assert names[0] == CONTEXT and names[1] == "model"
    assert set(names[1:]) == {option.name for option in options_of("evaluate")}


def test_only_what_the_command_line_gave_counts_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # no spec above
    seen = {}

    @takes_options("evaluate")
    def evaluate(**values):
        seen["given"], seen["spec"] = given_values(values)

    app = typer.Typer()
    app.command()(evaluate)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["evaluate", "m.onnx", "--bootstrap", "1000", "-q"])
    assert result.exit_code == 0, result.output
    # --bootstrap given at its default value still counts as given (it wins over a spec); others do not.
    assert {key: str(value) for key, value in seen["given"].items()} == {
        "model": "m.onnx",
        "bootstrap": "1000",
        "quiet": "True",
    }
    assert seen["spec"] is None
