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
        (lambda d: d.pop("clean"), "malformed"),
        (lambda d: d.update(model=[1, 2]), "ModelInfo is list, not an object"),
        (lambda d: d["temperature_scaling"].pop("temperature"), "malformed.*temperature"),
        (lambda d: d["corruption_summary"].update(corruptions=3), "corruptions is not an object"),
    ],
)
def test_a_malformed_report_is_an_input_error(change, message):
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    change(data)
    with pytest.raises(InputError, match=message):
        Report.from_dict(data)


def test_not_json_is_an_input_error(tmp_path):
    (tmp_path / "r.json").write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        load_report(tmp_path / "r.json")
    with pytest.raises(InputError, match="report not found"):
        load_report(tmp_path / "missing.json")
