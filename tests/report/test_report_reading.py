"""Reading a section's JSON (macs_audit/report/reading.py): every key the schema names checked against its
type, the message naming its JSON path; keys a newer minor version adds kept in place; strict JSON."""

from __future__ import annotations

import json

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import InputError
from macs_audit.report import Report, Sensitivity, load_report
from macs_audit.report.reading import parse_json, within_depth


def test_keys_a_newer_minor_version_adds_are_kept_in_place():
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    data["schema_version"] = "3.7"
    data["model"] = {"quantised": True, **data["model"]}
    data["robustness"]["sensitivity"]["new_estimate"] = 1.5
    data["corruption_summary"]["corruptions"]["fog"]["worst_severity"] = 5
    data["gate"] = {"passed": True}  # written by `gate --format json`, not part of the report
    report = Report.from_dict(data)
    assert report.model.extra_keys == {"quantised": True}
    del data["gate"]
    assert report.to_json() == json.dumps(data, indent=2) + "\n"


@pytest.mark.parametrize(
    "change, message",
    [
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
        (lambda d: d["clean"]["intervals"].update(ece=[0.1]), r"^clean.intervals.ece: expected an array of 2 numb"),
    ],
)
def test_a_malformed_report_is_an_input_error(change, message):
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    change(data)
    with pytest.raises(InputError, match=message):
        Report.from_dict(data)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),  # json's own recursion limit
        ('{"schema_version": "3.0", "x": ' + "[" * 65 + "]" * 65 + "}", "nested more than 64 levels deep"),
        ('{"schema_version": "3.0", "x": NaN}', "NaN is not a JSON number"),
    ],
)
def test_a_report_file_json_cannot_hold_is_an_input_error_naming_it(tmp_path, text, message):
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(InputError, match=f"r.json: .*{message}"):
        load_report(tmp_path / "r.json")
    with pytest.raises(InputError, match=message):
        parse_json(text)


def test_depth_counts_arrays_and_objects():
    assert within_depth({"a": [{"b": 1}]}, 3) and not within_depth({"a": [{"b": []}]}, 3)
    assert within_depth(5, 1) and within_depth([], 1)


def test_a_field_stored_under_another_key_is_read_and_written_under_that_key():
    data = {"units": "u", "lipschitz": 2.5, "lipschitz_error": None, "new": 1}
    section = Sensitivity.from_dict(data, "robustness.sensitivity")
    assert section.mean_gradient_norm == 2.5 and section.mean_gradient_norm_error is None
    assert section.to_dict() == data and section.extra_keys == {"new": 1}  # in the order it was read in
    assert section.at("lipschitz") == 2.5 and section.at("new") == 1 and section.at("mean_gradient_norm") is None
    assert Sensitivity(mean_gradient_norm=1.0).to_dict() == {"lipschitz": 1.0}
    with pytest.raises(InputError, match="^robustness.sensitivity.lipschitz: missing"):
        Sensitivity.from_dict({"units": "u"}, "robustness.sensitivity")
    with pytest.raises(InputError, match='^robustness.sensitivity.lipschitz: expected a number, got "x"$'):
        Sensitivity.from_dict({"lipschitz": "x"}, "robustness.sensitivity")


def test_a_built_section_writes_the_keys_it_was_given_in_their_order_none_as_null():
    from macs_audit.report import Conformal

    section = Conformal.of(target_coverage=0.9, n_calibration=2, n_eval=8, methods={}, corruption_mean=None)
    assert list(section.to_dict()) == ["target_coverage", "n_calibration", "n_eval", "methods", "corruption_mean"]
    assert section.to_dict()["corruption_mean"] is None
    assert Conformal.from_dict(section.to_dict()).to_dict() == section.to_dict()
