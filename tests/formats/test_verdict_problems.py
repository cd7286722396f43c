"""A model at chance is a problem (issue 41, item 6): an accuracy whose 95% interval does not lie above chance,
a constant prediction and equal confidences are named in the summary and the verdict, however well calibrated
the uniform confidences are; the summary's bars are ProblemBars, changed by `evaluate --problem-bars` and
recorded in the report. Exit codes stay the audit's (0) unless a gate runs."""

import json

import numpy as np
import onnx
import pytest
from conftest import linear_onnx
from fixtures.synthetic_report import synthetic_report
from onnx import numpy_helper
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.errors import InputError, UsageError
from macs_audit.formats.summary import BARS, ProblemBars, parse_bars, summarize, wilson_interval

runner = CliRunner()
QUICK = ["--perturbations", "none", "--sensitivity-samples", "0", "--calibrators", "none", "-q"]


def constant_onnx(path):
    """linear_onnx with every weight and bias 0: equal logits for every image, so argmax is class 0 and every
    confidence 1/10: perfectly calibrated at chance."""
    model = onnx.load(str(linear_onnx(path)))
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(init)), init.name))
    onnx.save(model, str(path))
    return path


def at_chance(accuracy=0.103, ci=(0.09, 0.12), n=1000, shares=None, spread=None):
    """A synthetic report of a 10-class model at `accuracy` with that interval (None: none), classes of the
    given image counts (clean.per_class), and clean.predictions `spread`."""
    report = synthetic_report(accuracy=accuracy, ece=0.01, corruptions=[], n=n)
    report.robustness = None  # no robust view: the chance findings alone
    report.views = []
    report.clean.intervals = {} if ci is None else {"accuracy": list(ci)}
    counts = shares or [n // 10] * 10
    report.clean.per_class = [{"class": k, "name": f"c{k}", "n": c} for k, c in enumerate(counts)]
    report.clean.predictions = spread
    return report


def healthy_spread(**kw):
    return {
        "classes_predicted": 10,
        "top_class": 3,
        "top_class_name": "cat",
        "top_class_share": 0.12,
        "confidence_min": 0.2,
        "confidence_max": 1.0,
        **kw,
    }


def test_an_accuracy_whose_interval_reaches_chance_is_a_problem():
    found = summarize(at_chance(spread=healthy_spread()))
    assert found.problems == ("accuracy 10.30% not above chance 10.00% (1/10; its bootstrap 95% interval reaches it)",)
    assert found.findings[0].bad and "not above chance 10.00%" in found.findings[0].value
    assert found.verdict.startswith("audit: 1 problem (accuracy 10.30% not above chance 10.00%")
    # The same accuracy with an interval above chance is no problem.
    assert summarize(at_chance(ci=(0.101, 0.105), spread=healthy_spread())).problems == ()


def test_chance_is_the_most_frequent_class_where_it_beats_one_over_k():
    shares = [400] + [50] * 12  # 13 classes: 40% of the images are class 0
    report = at_chance(accuracy=0.41, ci=(0.38, 0.44), n=1000, shares=shares, spread=healthy_spread())
    (problem,) = summarize(report).problems
    assert "chance 40.00% (the share of the most frequent class, c0;" in problem
    report.clean.intervals["accuracy"] = [0.405, 0.44]  # above 40%: no problem
    assert summarize(report).problems == ()


def test_without_a_bootstrap_interval_the_wilson_interval_decides():
    low, high = wilson_interval(0.12, 1000)
    assert low == pytest.approx(0.10129, abs=1e-4) and high == pytest.approx(0.14165, abs=1e-4)
    (problem,) = summarize(at_chance(accuracy=0.11, ci=None, spread=healthy_spread())).problems
    assert problem.endswith("(1/10; its Wilson 95% interval reaches it)")
    assert summarize(at_chance(accuracy=0.13, ci=None, spread=healthy_spread())).problems == ()


def test_one_class_of_data_cannot_tell_and_is_not_judged():
    report = at_chance(accuracy=1.0, ci=(1.0, 1.0), n=50, shares=[50], spread=None)
    report.clean.per_class = [{"class": 4, "name": "c4", "n": 50}]
    report.clean.predictions = healthy_spread(classes_predicted=1, top_class=4, top_class_share=1.0)
    assert summarize(report).problems == ()


def test_a_constant_prediction_and_equal_confidences_are_problems():
    spread = healthy_spread(classes_predicted=1, top_class_share=1.0, confidence_min=0.1, confidence_max=0.1)
    found = summarize(at_chance(accuracy=0.5, ci=(0.45, 0.55), spread=spread))
    assert found.problems == (
        "constant prediction: every image predicted as class cat",
        "equal confidences: every image's confidence 10.00%",
    )
    assert [f.label for f in found.findings if f.bad] == ["constant prediction", "equal confidences"]


@pytest.mark.parametrize(
    "bars, spread, problems",
    [
        # top_class_share: 95% of the images on one class is a problem under a bar of 0.9, not under the default.
        ({}, {"top_class_share": 0.95}, ()),
        ({"top_class_share": 0.9}, {"top_class_share": 0.95}, ("constant prediction: 95.00% of the images",)),
        # confidence_range: confidences 0.05 points apart are equal under a bar of 0.001, not under the default.
        ({}, {"confidence_min": 0.1, "confidence_max": 0.1005}, ()),
        (
            {"confidence_range": 0.001},
            {"confidence_min": 0.1, "confidence_max": 0.1005},
            ("equal confidences: every image's confidence in [10.00%, 10.05%]",),
        ),
    ],
)
def test_the_prediction_bars_are_configurable(bars, spread, problems):
    report = at_chance(accuracy=0.5, ci=(0.45, 0.55), spread=healthy_spread(**spread))
    report.conventions.problem_bars = {**BARS.to_dict(), **bars}
    found = summarize(report).problems
    assert len(found) == len(problems) and all(f.startswith(p) for f, p in zip(found, problems, strict=True))


def test_the_ece_and_view_bars_are_configurable_and_read_from_the_report():
    report = synthetic_report(ece=0.05, corruptions=[])
    report.robust_view().metrics["ece"] = 0.05
    assert summarize(report).problems == ("ECE 5.00% > 3.00%",)
    report.conventions.problem_bars = {"ece": 0.06, "view_ece": 0.04}
    found = summarize(report)
    assert found.problems == ("noise+blur ECE 5.00% > 4.00%",)
    assert found.bars == ProblemBars(ece=0.06, view_ece=0.04)
    report.conventions.problem_bars = {"ece": 3.0}
    with pytest.raises(InputError, match=r"^the report's conventions.problem_bars: ece must be a fraction in \[0, 1\]"):
        summarize(report)


@pytest.mark.parametrize(
    "text, message",
    [
        ("ece", "--problem-bars 'ece': give NAME=VALUE pairs separated by commas, e.g. ece=0.05"),
        ("eec=0.05", "--problem-bars: unknown bar 'eec'; did you mean 'ece'?"),
        ("ece=5", r"--problem-bars: ece must be a fraction in [0, 1] (0.05 for 5%), got 5"),
        ("ece=nan", r"--problem-bars: ece must be a fraction in [0, 1] (0.05 for 5%), got nan"),
        ("ece=high", r"--problem-bars: ece must be a fraction in [0, 1] (0.05 for 5%), got 'high'"),
        ("ece=0.1,ece=0.2", "--problem-bars sets ece twice; give each bar once"),
    ],
)
def test_bad_problem_bars_are_one_line_usage_errors(text, message):
    with pytest.raises(UsageError) as raised:
        parse_bars(text)
    assert str(raised.value) == message


def test_parse_bars_changes_only_the_named_bars():
    assert parse_bars("ece=0.05, robust_drop=0.2") == ProblemBars(ece=0.05, robust_drop=0.2)


def test_a_constant_model_through_the_cli_names_its_problems_and_exits_0(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    constant_onnx(tmp_path / "constant.onnx")
    result = runner.invoke(
        app, ["evaluate", "constant.onnx", "--limit", "300", "--bootstrap", "0", *QUICK, "-o", "r.json"]
    )
    assert result.exit_code == 0, result.output
    last = " ".join(result.stdout.strip().splitlines()[-3:])
    verdict = " ".join(last[last.index("audit: ") :].split())
    assert verdict.startswith("audit: 3 problems (accuracy 10.00% not above chance 10.00%"), verdict
    assert "constant prediction: every image predicted as class airplane" in verdict
    assert "equal confidences: every image's confidence 10.00%" in verdict
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["clean"]["predictions"] == {
        "classes_predicted": 1,
        "top_class": 0,
        "top_class_name": "airplane",
        "top_class_share": 1.0,
        "confidence_min": pytest.approx(0.1),
        "confidence_max": pytest.approx(0.1),
    }
    assert report["conventions"].get("problem_bars") is None  # the built-in bars: nothing recorded
    # The same audit gated on a threshold it meets: the gate's verdict, the gate's exit code.
    (tmp_path / "macs-audit.toml").write_text("[gate]\nmax_ece = 0.5\n")
    result = runner.invoke(app, ["evaluate", "constant.onnx", "--limit", "300", "--bootstrap", "0", *QUICK, "--gate"])
    assert result.exit_code == 0, result.output
    assert "audit: 3 problems" not in " ".join(result.output.split())


def test_a_model_at_chance_through_the_cli_and_bars_recorded(tmp_path, monkeypatch):
    """Random labels: no model beats chance on them; its confidences vary, and it predicts several classes."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.integers(0, 256, (300, 32, 32, 3), dtype=np.uint8), y=np.arange(300) % 10)
    linear_onnx(tmp_path / "random.onnx", seed=1)
    args = ["evaluate", "random.onnx", "--data", "d.npz", "--bootstrap", "200", *QUICK, "-o", "r.json"]
    result = runner.invoke(app, [*args, "--problem-bars", "ece=1,confidence_range=0"])
    assert result.exit_code == 0, result.output
    verdict = " ".join(result.stdout[result.stdout.rindex("audit: ") :].split())
    assert verdict.startswith("audit: 1 problem (accuracy "), verdict
    assert "not above chance 10.00% (1/10; its bootstrap 95% interval reaches it)" in verdict
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["conventions"]["problem_bars"] == {**BARS.to_dict(), "ece": 1.0, "confidence_range": 0.0}
    assert report["clean"]["predictions"]["classes_predicted"] > 1
    result = runner.invoke(app, [*args, "--problem-bars", "ece=2"])
    assert result.exit_code == 2 and "--problem-bars: ece must be a fraction in [0, 1]" in result.output


def test_the_sample_model_keeps_its_verdict(tmp_path, monkeypatch):
    """The sample model predicts every class with varied confidences, well above chance: the new problems stay
    out of its verdict, which still names its miscalibration."""
    from conftest import SAMPLE_ONNX

    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["evaluate", str(SAMPLE_ONNX), "--limit", "500", "--bootstrap", "100", *QUICK])
    assert result.exit_code == 0, result.output
    verdict = " ".join(result.stdout[result.stdout.rindex("audit: ") :].split())
    assert verdict.startswith("audit: 1 problem (ECE "), verdict
    assert not any(word in verdict for word in ("chance", "constant", "equal confidences"))
