"""settings/resolve.py and settings/presets.py: flag over spec over preset over default, each value's source
recorded; presets set audit settings only, never a model's preprocessing."""

from pathlib import Path

import pytest

from macs_audit.errors import UsageError
from macs_audit.settings.presets import PRESETS
from macs_audit.settings.resolve import resolve
from macs_audit.settings.spec import read_spec
from macs_audit.settings.table import BY_NAME, MODEL


def _pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(body)
    return path


def test_flag_over_spec_over_preset_over_default(tmp_path):
    spec = read_spec(_pyproject(tmp_path, '[tool.macs-audit.evaluate]\npreset = "quick"\nseed = 5\nbootstrap = 300\n'))
    resolved = resolve("evaluate", {"bootstrap": 50}, spec)
    assert resolved["bootstrap"] == 50 and resolved.sources["bootstrap"] == "flag"
    assert resolved["seed"] == 5 and resolved.sources["seed"] == "spec"
    assert resolved["perturbations"] == "none" and resolved.sources["perturbations"] == "preset"
    assert resolved["coverage"] == 0.9 and resolved.sources["coverage"] == "default"
    record = resolved.record()
    assert record["spec"] == str(tmp_path / "pyproject.toml") and record["preset"] == "quick"
    assert record["options"]["bootstrap"] == {"value": 50, "source": "flag"}


def test_the_record_keeps_no_password_of_a_url():
    """The tracking URI's user name and password never reach the report's settings (nor its MLflow artifact)."""
    uri = "https://ci-bot:s3cret@mlflow.example.com:5000/prefix"
    record = resolve("evaluate", {"mlflow_tracking_uri": uri, "mlflow": True}).record()
    assert record["options"]["mlflow_tracking_uri"]["value"] == "https://mlflow.example.com:5000/prefix"
    assert "s3cret" not in str(record)


def test_an_unknown_preset_or_keyword_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown preset 'fast' for evaluate; presets: quick, full, imagenet"):
        resolve("evaluate", {"preset": "fast"})
    with pytest.raises(
        UsageError, match="unknown key 'bootstraps' in the options of evaluate; did you mean 'bootstrap'"
    ):
        resolve("evaluate", {"bootstraps": 3})


@pytest.mark.parametrize("command,name", [(c, n) for c, presets in PRESETS.items() for n in presets])
def test_a_preset_sets_options_of_its_command_and_never_the_models_preprocessing(command, name):
    for key in PRESETS[command][name]:
        option = BY_NAME[key]
        assert command in option.commands and option.panel != MODEL, (command, name, key)


def test_a_preset_typo_names_the_closest():
    with pytest.raises(UsageError, match="unknown preset 'quik' for evaluate; did you mean 'quick'\\?"):
        resolve("evaluate", {"preset": "quik"})


def test_a_bad_value_the_spec_set_names_the_key_and_the_file(tmp_path):
    from macs_audit.plan import plan_audit

    spec = read_spec(_pyproject(tmp_path, '[tool.macs-audit.evaluate]\nmodel = "m.onnx"\ncalibration_split = 1.5\n'))
    with pytest.raises(UsageError) as caught:
        plan_audit(resolve("evaluate", {}, spec))
    assert str(caught.value) == (
        "--calibration-split must be in [0, 1), got 1.5 "
        f"(from calibration_split in {tmp_path / 'pyproject.toml'} [tool.macs-audit.evaluate])"
    )
    with pytest.raises(UsageError) as caught:  # the same value as a flag: the flag's message alone
        plan_audit(resolve("evaluate", {"calibration_split": 1.5}, spec))
    assert str(caught.value) == "--calibration-split must be in [0, 1), got 1.5"


def test_a_spec_may_give_text_options_as_numbers_lists_and_tables(tmp_path):
    spec = read_spec(
        _pyproject(
            tmp_path,
            "[tool.macs-audit.evaluate]\ninput_size = 224\nmean = [0.5, 0.5, 0.5]\nseverities = [1, 3]\n"
            'problem_bars = {ece = 0.05}\nshift_data = {a = "sets/a"}\n',
        )
    )
    values = spec.values("evaluate")
    assert values["input_size"] == "224" and values["mean"] == "0.5,0.5,0.5" and values["severities"] == "1,3"
    assert values["problem_bars"] == "ece=0.05" and values["shift_data"] == [f"a={tmp_path / 'sets/a'}"]


def test_a_config_that_is_missing_or_holds_no_table_is_refused(tmp_path):
    with pytest.raises(UsageError, match="config not found: .*nope.toml"):
        read_spec(tmp_path / "nope.toml")
    with pytest.raises(UsageError, match="holds no macs-audit table"):
        read_spec(_pyproject(tmp_path, "[project]\nname = 'x'\n"))
    other = tmp_path / "other.toml"  # any file but a pyproject.toml holds the tables at its top
    other.write_text("[evaluate]\nlimit = 200\n[gate]\nmax_ece = 0.1\n")
    assert read_spec(other).values("evaluate") == {"limit": 200}
