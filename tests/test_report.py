"""The Report's typed sections: the same JSON in and out, old and newer minor versions read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import InputError
from macs_audit.report import CorruptionMeans, Report, Robustness, ViewResult, load_report

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "sample_models").glob("*.audit.json"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_committed_report_is_saved_back_byte_identical(path):
    text = path.read_text()
    report = load_report(path)
    assert report.to_json() == text
    assert isinstance(report.corruption_summary.corruptions["fog"], CorruptionMeans)
    assert report.robustness.sensitivity.lipschitz > 0 and report.clean.reliability.count


def test_the_golden_report_reads_back_to_the_same_json():
    data = json.loads((ROOT / "tests" / "goldens" / "sample_report.json").read_text())
    data.update(tool={"name": "macs-audit", "version": "0.0"}, created="", runtime={})  # its volatile keys
    assert json.loads(Report.from_dict(data).to_json()) == data


def test_keys_a_newer_minor_version_adds_are_kept_in_place():
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    data["schema_version"] = "1.7"
    data["model"] = {"quantised": True, **data["model"]}
    data["robustness"]["sensitivity"]["new_estimate"] = 1.5
    data["corruption_summary"]["corruptions"]["fog"]["worst_severity"] = 5
    data["gate"] = {"passed": True}  # written by `gate --format json`, not part of the report
    report = Report.from_dict(data)
    assert report.model.extra_keys == {"quantised": True}
    del data["gate"]
    assert report.to_json() == json.dumps(data, indent=2) + "\n"


def test_optional_keys_are_left_out_unless_the_schema_writes_null():
    section = Robustness(robust_accuracy=0.5, robust_view="noise+blur").to_dict()
    assert section == {"robust_accuracy": 0.5, "robust_view": "noise+blur"}
    view = ViewResult("clean", "clean", {"accuracy": 0.9}).to_dict()
    assert view["reliability"] is None and view["corruption"] is None and view["intervals"] == {}
    assert Robustness.from_dict({"robustness_ratio": None}).to_dict() == {"robustness_ratio": None}  # as read


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(schema_version="2.0"), "schema 2.0 is not supported"),
        (lambda d: d.pop("schema_version"), "no schema_version"),
        (lambda d: d.pop("clean"), "^clean: missing"),
        (lambda d: d.update(model=[1, 2]), "^model: expected an object, got an array$"),
        (lambda d: d["temperature_scaling"].pop("temperature"), "^temperature_scaling.temperature: missing"),
        (lambda d: d["corruption_summary"].update(corruptions=3), "^corruption_summary.corruptions: expected an obj"),
        # every key the schema names is checked against its type; the message gives its JSON path
        (lambda d: d["clean"].update(metrics=None), "^clean.metrics: expected an object, got null$"),
        (lambda d: d["clean"].update(metrics=[0.5]), "^clean.metrics: expected an object, got an array$"),
        (lambda d: d["clean"]["metrics"].update(ece="low"), '^clean.metrics.ece: expected a number, got "low"$'),
        (lambda d: d["data"].update(class_names=5), "^data.class_names: expected an array of strings, got 5$"),
        (lambda d: d["data"]["class_names"].__setitem__(2, 7), r"^data.class_names\[2\]: expected a string, got 7$"),
        (lambda d: d.update(created=5), "^created: expected a string, got 5$"),
        (lambda d: d["seeds"].update(bootstrap=True), "^seeds.bootstrap: expected an integer, got true$"),
        (lambda d: d["views"][1].pop("kind"), r"^views\[1\].kind: missing"),
        (lambda d: d.update(schema_version=1.2), "^schema_version: expected a string, got 1.2$"),
    ],
)
def test_a_malformed_report_is_an_input_error(change, message):
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    change(data)
    with pytest.raises(InputError, match=message):
        Report.from_dict(data)


def test_not_json_is_an_input_error(tmp_path):
    (tmp_path / "r.json").write_text("{")
    with pytest.raises(InputError, match="r.json: not valid JSON"):
        load_report(tmp_path / "r.json")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),  # json's own recursion limit
        ('{"schema_version": "1.2", "x": ' + "[" * 65 + "]" * 65 + "}", "nested more than 64 levels deep"),
        ('{"schema_version": "1.2", "x": NaN}', "NaN is not a JSON number"),
    ],
)
def test_a_report_file_json_cannot_hold_is_an_input_error_naming_it(tmp_path, text, message):
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(InputError, match=f"r.json: .*{message}"):
        load_report(tmp_path / "r.json")
    with pytest.raises(InputError, match="report not found"):
        load_report(tmp_path / "missing.json")
