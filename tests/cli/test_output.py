"""cli/output.py: where rendered formats go, checked before any work; the step summary appended, never fatal."""

from pathlib import Path

import pytest

from macs_audit.cli import output
from macs_audit.errors import UsageError


def test_formats_pair_with_outputs_in_order_or_by_extension(tmp_path):
    a, b = tmp_path / "a.html", tmp_path / "b.md"
    assert output.resolve_outputs(None, [a, b]) == [("html", a), ("md", b)]
    assert output.resolve_outputs(["json", "markdown"], [a, b]) == [("json", a), ("md", b)]  # an alias read
    assert output.resolve_outputs(None, None) == [("terminal", None)]
    assert output.resolve_outputs(["html"], None) == [("html", None)]


@pytest.mark.parametrize(
    "formats,outputs,message",
    [
        (["pdf"], None, "unknown --format 'pdf'"),
        (None, ["r.bin"], "cannot tell the format of --output .*r.bin from its extension"),
        (["json", "md"], ["a.json"], "2 --format but 1 --output"),
        (None, ["a.json", "a.json"], "a.json"),  # one file named twice
    ],
)
def test_bad_pairs_are_usage_errors_before_any_work(tmp_path, formats, outputs, message):
    with pytest.raises(UsageError, match=message):
        output.resolve_outputs(formats, [tmp_path / name for name in outputs] if outputs else None)


def test_evaluate_writes_json_where_no_extension_names_a_format_and_never_junit(tmp_path):
    assert output.report_targets(None, [tmp_path / "report"]) == [("json", tmp_path / "report")]
    assert output.report_targets(None, None) == []
    with pytest.raises(UsageError, match="JUnit output lists gate checks"):
        output.report_targets(["junit"], None)


def test_an_output_that_is_an_input_is_refused(tmp_path):
    data = tmp_path / "data.npz"
    data.write_bytes(b"x")
    with pytest.raises(UsageError):
        output.resolve_outputs(["json"], [data], inputs=[data])
    assert data.read_bytes() == b"x"


def test_emit_writes_each_file_whole(tmp_path):
    target = tmp_path / "r.md"
    output.emit([("md", target)], lambda name: f"# {name}\n", quiet=True)
    assert target.read_text() == "# md\n"


def test_the_step_summary_is_appended_when_set_and_a_failure_is_a_warning(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert output.append_step_summary("one\n") and output.append_step_summary("two\n")
    assert summary.read_text() == "one\n\ntwo\n\n"  # each step's block apart
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder: cannot be appended to
    assert output.append_step_summary("three\n") is False
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert output.append_step_summary("four\n") is False
    assert Path(summary).read_text() == "one\n\ntwo\n\n"
