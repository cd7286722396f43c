"""The schema version (macs_audit/report/versions.py): which versions are read, what an older one keeps."""

from __future__ import annotations

import json

import pytest
from fixtures.saved_reports import schema_2_0
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import InputError
from macs_audit.report import SCHEMA_VERSION, Report, load_report
from macs_audit.report.versions import version


def test_versions_compare_as_numbers():
    assert version("2.10") > version("2.2") > version("2.0") and version("x") == (0, 0)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(schema_version="9.0"), "^report schema 9.0 is not supported"),
        (lambda d: d.pop("schema_version"), "no schema_version"),
        (lambda d: d.update(schema_version=2.0), "^schema_version: expected a string, got 2.0$"),
    ],
)
def test_a_report_of_another_major_version_or_none_is_an_input_error(change, message):
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    change(data)
    with pytest.raises(InputError, match=message):
        Report.from_dict(data)


def test_a_report_of_an_older_version_is_saved_without_the_sections_added_after_it():
    report = synthetic_report()
    report.shift = report.real_labels = report.parity = None  # the sections 3.0 added
    added = {"shift", "real_labels", "parity"}
    assert added <= set(report.to_dict()) and report.schema_version == SCHEMA_VERSION  # as null
    report.schema_version = "2.0"
    assert not added & set(report.to_dict())
    data = report.to_dict()
    assert Report.from_dict(data).to_json() == json.dumps(data, indent=2) + "\n"


def test_the_previous_major_versions_renamed_keys_are_read_under_their_new_names_with_a_note_each():
    data = schema_2_0()
    original = json.dumps(data)
    report = Report.from_dict(data)
    assert json.dumps(data) == original  # the caller's object is not changed
    summary = report.corruption_summary
    assert summary.mean_corruption_error == 0.8 and summary.relative_mean_corruption_error == 0.9
    assert not summary.extra_keys
    (note,) = report.deprecations  # mean_corruption_error has had its name since 2.0: no note
    assert note.startswith("corruption_summary.relative_mce of a schema 2.0 report is deprecated: read as ")
    assert "corruption_summary.relative_mean_corruption_error, its name since schema 3.0" in note
    assert "\n" not in note
    # saved again, a 2.0 report keeps its key, in its place, and its bytes
    assert report.to_json() == json.dumps(data, indent=2) + "\n"
    assert "deprecations" not in report.to_dict()


def test_load_report_names_the_file_in_the_note(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps(schema_2_0()))
    (note,) = load_report(tmp_path / "old.json").deprecations
    assert note.startswith(f"{tmp_path / 'old.json'}: corruption_summary.relative_mce of a schema 2.0 report")


def test_no_note_where_nothing_was_renamed():
    assert Report.from_dict(schema_2_0(relative_mce=None)).deprecations == []
    assert synthetic_report().deprecations == []
    current = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    current["corruption_summary"]["relative_mce"] = 0.8  # not a key of 3.0: kept unread, like any unknown key
    report = Report.from_dict(current)
    assert report.deprecations == [] and report.corruption_summary.relative_mean_corruption_error is None
    assert report.corruption_summary.extra_keys == {"relative_mce": 0.8}


def test_a_2_x_mce_is_not_the_mean_corruption_error():
    # 2.0 renamed the 1.x `mce`; no 2.x report holds it, so it is an unknown key, not the mCE
    data = schema_2_0(mean_corruption_error=None, relative_mce=None)
    data["corruption_summary"]["mce"] = 0.8
    report = Report.from_dict(data)
    assert report.deprecations == [] and report.corruption_summary.mean_corruption_error is None
    assert report.corruption_summary.extra_keys == {"mce": 0.8}


def test_a_report_of_this_version_writes_the_new_keys():
    report = synthetic_report(corruptions=["fog"])
    report.corruption_summary.relative_mean_corruption_error = 0.8
    summary = report.to_dict()["corruption_summary"]
    assert summary["relative_mean_corruption_error"] == 0.8 and "relative_mce" not in summary
    assert SCHEMA_VERSION == "3.4" and report.schema_version == SCHEMA_VERSION


def test_this_version_reads_2_x_and_3_x_and_refuses_1_x():
    data = json.loads(synthetic_report().to_json())
    for readable in ("2.0", "2.5", "3.0", "3.4"):
        data["schema_version"] = readable
        assert Report.from_dict(data).schema_version == readable
    for refused in ("0.9", "1.0", "1.2", "4.0"):
        data["schema_version"] = refused
        message = rf"^report schema {refused} is not supported \(this version writes 3.4 and reads 2.x and 3.x\)$"
        with pytest.raises(InputError, match=message):
            Report.from_dict(data)


def test_a_2_x_unnormalised_mce_is_read_as_the_mean_corruption_error_unnormalized_and_written_back_as_it_was():
    report = synthetic_report()  # all 19 corruptions: the unnormalised mCE is there
    value = report.corruption_summary.mean_corruption_error_unnormalized
    report.schema_version = "2.0"  # written under the name 2.0 gave it
    data = json.loads(report.to_json())
    assert data["corruption_summary"]["mce_unnormalized"] == value is not None
    assert "mean_corruption_error_unnormalized" not in data["corruption_summary"]
    report = Report.from_dict(data)
    assert report.corruption_summary.mean_corruption_error_unnormalized == value
    (note,) = report.deprecations
    assert note.startswith("corruption_summary.mce_unnormalized of a schema 2.0 report is deprecated: read as ")
    assert report.to_json() == json.dumps(data, indent=2) + "\n"
    assert "mce_unnormalized" not in synthetic_report().to_dict()["corruption_summary"]
