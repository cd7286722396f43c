"""The audit spec: found as the gate config is, validated with one-line errors, paths from its folder."""

from pathlib import Path

import pytest

from macs_audit.errors import UsageError
from macs_audit.settings.spec import find_spec, load_spec, read_spec


def _pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(body)
    return path


def test_values_are_typed_and_paths_are_relative_to_the_spec(tmp_path):
    spec = read_spec(
        _pyproject(
            tmp_path,
            '[tool.macs-audit.evaluate]\nmodel = "m.onnx"\nbootstrap = 200\ncoverage = 0.8\n'
            'corruptions = ["fog", "snow"]\nshift_data = ["a=sets/a"]\nreal_labels = true\n',
        )
    )
    values = spec.values("evaluate")
    assert values["model"] == tmp_path / "m.onnx"
    assert values["bootstrap"] == 200 and values["coverage"] == 0.8 and values["real_labels"] is True
    assert values["corruptions"] == "fog,snow"
    assert values["shift_data"] == [f"a={tmp_path / 'sets/a'}"]
    assert len(spec.sha256) == 64
    assert spec.values("finetune") == {}


@pytest.mark.parametrize(
    "body,message",
    [
        ("bootstrp = 10", "unknown key 'bootstrp' in .* did you mean 'bootstrap'\\?"),
        ('bootstrap = "ten"', "bootstrap in .* must be an integer, got 'ten'"),
        ("bootstrap = -1", "bootstrap in .* must be at least 0, got -1"),
        ("coverage = true", "coverage in .* must be a number"),
        ('output = "r.json"', "'output' in .* is for the command line only \\(--output\\)"),
        ("model = 3", "model in .* must be a path"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_the_table(tmp_path, body, message):
    spec = read_spec(_pyproject(tmp_path, f"[tool.macs-audit.evaluate]\n{body}\n"))
    with pytest.raises(UsageError, match=message) as caught:
        spec.values("evaluate")
    assert "\n" not in str(caught.value) and "[tool.macs-audit.evaluate]" in str(caught.value)


def test_an_unknown_command_table_names_the_closest(tmp_path):
    with pytest.raises(UsageError, match="unknown key 'evaluat' .* did you mean 'evaluate'"):
        read_spec(_pyproject(tmp_path, "[tool.macs-audit.evaluat]\nseed = 1\n"))


def test_a_macs_audit_toml_holds_the_tables_at_the_top(tmp_path):
    path = tmp_path / "macs-audit.toml"
    path.write_text("[evaluate]\nseed = 3\n[gate]\nmax_ece = 0.1\n")
    spec = read_spec(path)
    assert spec.values("evaluate") == {"seed": 3}
    assert spec.where("evaluate") == f"{path} [evaluate]"


def test_found_from_a_subfolder_up_to_the_project_root(tmp_path, monkeypatch):
    _pyproject(tmp_path, "[tool.macs-audit.evaluate]\nseed = 1\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert find_spec() == tmp_path / "pyproject.toml"
    spec = load_spec(None)
    assert spec is not None and spec.values("evaluate") == {"seed": 1}


def test_a_pyproject_without_the_tool_table_is_no_spec(tmp_path, monkeypatch):
    _pyproject(tmp_path, "[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    assert find_spec() is None and load_spec(None) is None
