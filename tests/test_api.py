"""The Python API (macs_audit.api, served by the package's root): Report's save and renderings, load_report, gate,
audit_predictions and its options, images as arrays, and `import macs_audit` staying light."""

import json
import subprocess
import sys

import numpy as np
import pytest
from fixtures.synthetic_report import synthetic_report

import macs_audit
from macs_audit import api
from macs_audit import report as schema
from macs_audit.errors import InputError, UsageError


@pytest.fixture
def report():
    return api.Report.of(synthetic_report(corruptions=["fog"]))


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """`tmp_path` as the working directory, with no gate config above it to find."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the package's root ---------------------------------------------------------------------------------------------


def test_the_root_serves_every_api_name_it_lists():
    for name in macs_audit.__all__:
        assert getattr(macs_audit, name) is (macs_audit.__version__ if name == "__version__" else getattr(api, name))
    assert set(api.__all__) >= set(macs_audit.__all__) - {"__version__"}
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        macs_audit.nothing  # noqa: B018


def test_importing_the_package_and_reading_reports_load_no_torch_or_onnxruntime(tmp_path):
    code = (
        "import sys, macs_audit\n"
        "assert 'macs_audit.api' not in sys.modules\n"
        "macs_audit.load_report, macs_audit.Report, macs_audit.audit_predictions\n"
        "heavy = [name for name in ('torch', 'onnxruntime', 'timm', 'matplotlib') if name in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


# --- Report ---------------------------------------------------------------------------------------------------------


def test_a_report_of_a_plain_one_is_one_with_the_same_fields_and_json():
    plain = synthetic_report()
    wrapped = api.Report.of(plain)
    assert isinstance(wrapped, schema.Report) and isinstance(wrapped, api.Report)
    assert wrapped.clean is plain.clean and wrapped.views is plain.views
    assert wrapped.to_json() == plain.to_json()
    assert api.Report.of(wrapped) is wrapped


def test_renderings_are_the_formats_and_the_gate_goes_with_them(report):
    result = api.gate(report, {"max_ece": 0.05})
    assert json.loads(report.to_json(result))["gate"]["passed"] is True
    assert "gate" not in json.loads(report.to_json())
    assert report.to_html().lstrip().lower().startswith("<!doctype html>")
    assert report.to_markdown().startswith("## macs-audit calibration audit")
    assert report.to_markdown(result).startswith("## ✅ macs-audit")


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("report.json", lambda text: json.loads(text)["schema_version"] == schema.SCHEMA_VERSION),
        ("report.html", lambda text: "<html" in text),
        ("report.HTM", lambda text: "<html" in text),
        ("report.md", lambda text: text.startswith("## macs-audit")),
        ("report.txt", lambda text: text.startswith("Calibration audit:")),
    ],
)
def test_save_writes_the_format_its_extension_names(report, tmp_path, name, check):
    report.save(tmp_path / name)
    assert check((tmp_path / name).read_text(encoding="utf-8"))
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left


def test_save_with_a_format_and_a_gate_and_a_saved_report_loads_back_equal(report, tmp_path):
    result = api.gate(report, {"max_ece": 0.05})
    report.save(tmp_path / "checks.out", format="xml", gate=result)  # an alias: JUnit
    assert "<testsuites" in (tmp_path / "checks.out").read_text(encoding="utf-8")
    report.save(str(tmp_path / "report.json"), gate=result)
    loaded = macs_audit.load_report(tmp_path / "report.json")
    assert isinstance(loaded, api.Report) and loaded.to_json() == report.to_json()


def test_save_refuses_what_it_cannot_tell_and_leaves_the_old_file(report, tmp_path):
    old = tmp_path / "checks.xml"
    old.write_text("old")
    with pytest.raises(UsageError, match="JUnit output lists gate checks"):
        report.save(old)
    assert old.read_text() == "old"
    with pytest.raises(UsageError, match=r"cannot tell the format of .*report\.pdf from its extension; use one of "):
        report.save(tmp_path / "report.pdf")
    with pytest.raises(UsageError, match="unknown format 'pdf'; choose from"):
        report.save(tmp_path / "report.json", format="pdf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checks.xml"]


def test_load_report_names_the_file_that_is_not_one(tmp_path):
    with pytest.raises(InputError, match="report not found"):
        macs_audit.load_report(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InputError, match=r"bad\.json: not a macs-audit report"):
        macs_audit.load_report(tmp_path / "bad.json")


# --- gate -----------------------------------------------------------------------------------------------------------


def test_gate_of_a_dict_table_passes_and_fails_as_its_checks_do(report):
    passed = api.gate(report, {"max_ece": 0.05, "min_accuracy": 0.9})
    assert passed.passed and [c.name for c in passed.checks] == ["max_ece", "min_accuracy"]
    assert passed.failures == [] and passed.config == "thresholds"
    failed = api.gate(report, {"max_ece": 0.01, "corruptions": {"min_accuracy": 0.5}})
    assert not failed.passed and [c.name for c in failed.failures] == ["max_ece"]
    assert any(c.name.startswith("corruptions.fog") for c in failed.checks)
    assert failed.to_dict()["n_failed"] == 1


def test_gate_validates_the_table_as_the_config_file_is_validated(report):
    with pytest.raises(UsageError, match=r"unknown key 'max_ecee' in thresholds; did you mean 'max_ece'\?"):
        api.gate(report, {"max_ecee": 0.05})
    with pytest.raises(UsageError, match=r"max_ece = 5 is outside \[0, 1\]"):
        api.gate(report, {"max_ece": 5})
    with pytest.raises(UsageError, match="sets no thresholds"):
        api.gate(report, {})
    with pytest.raises(UsageError, match="thresholds must be a dict, a TOML file's path or None, got list"):
        api.gate(report, [("max_ece", 0.05)])


def test_gate_reads_a_toml_file_or_finds_one_as_the_cli_does(report, isolated):
    with pytest.raises(UsageError, match="no gate thresholds found"):
        api.gate(report)
    (isolated / "macs-audit.toml").write_text("[gate]\nmax_ece = 0.01\n")
    found = api.gate(report)
    assert not found.passed and "macs-audit.toml" in str(found.config)
    (isolated / "loose.toml").write_text("[tool.macs-audit.gate]\nmax_ece = 0.05\nuse_interval = true\n")
    given = api.gate(report, isolated / "loose.toml")
    assert given.passed and given.use_interval
    assert api.gate(report, str(isolated / "loose.toml"), use_interval=False).use_interval is False


def test_gate_with_a_baseline_report_or_its_path_or_the_tables_own(report, isolated):
    worse = synthetic_report(accuracy=0.90, corruptions=["fog"])
    table = {"max_ece": 0.05, "baseline": {"max_accuracy_drop": 0.005}}
    by_object = api.gate(worse, table, baseline=report)
    assert not by_object.passed and by_object.failures[0].name == "baseline.max_accuracy_drop"
    report.save(isolated / "base.json")
    by_path = api.gate(worse, table, baseline=isolated / "base.json")
    assert by_path.to_dict()["checks"] == by_object.to_dict()["checks"] and by_path.baseline.endswith("base.json")
    by_table = api.gate(worse, {**table, "baseline": {**table["baseline"], "report": "base.json"}})
    assert by_table.to_dict()["checks"] == by_object.to_dict()["checks"]
    skipped = api.gate(worse, table)  # no baseline: its allowances are skipped, and said so
    assert skipped.passed and "no baseline report given" in skipped.skipped[0]


# --- audit_predictions ----------------------------------------------------------------------------------------------


def _predictions(n: int = 400, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits of an overconfident classifier right about 70% of the time."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    guessed = np.where(rng.random(n) < 0.7, labels, rng.integers(0, classes, n))
    logits = rng.normal(0, 1, (n, classes))
    logits[np.arange(n), guessed] += 4.0
    return logits.astype(np.float32), labels


def test_audit_predictions_reports_the_metrics_of_the_logits():
    from macs_audit.metrics.accumulators import calibration_metrics

    logits, labels = _predictions()
    report = macs_audit.audit_predictions(logits, labels, bootstrap=20, seed=3, calibrators="none")
    assert isinstance(report, api.Report) and report.robustness is None and report.parity is None
    expected = calibration_metrics(logits, labels, 4)
    assert report.clean.metrics["ece"] == pytest.approx(expected["ece"], rel=1e-6, abs=1e-9)
    assert report.clean.metrics["accuracy"] == pytest.approx(expected["accuracy"], rel=1e-9)
    assert report.data.class_names == ["0", "1", "2", "3"] and report.seeds["bootstrap"] == 3
    assert set(report.clean.intervals) >= {"ece", "accuracy"}
    named = macs_audit.audit_predictions(logits, labels, class_names=["a", "b", "c", "d"], bootstrap=0)
    assert named.data.class_names == ["a", "b", "c", "d"] and named.clean.intervals == {}


def test_audit_predictions_with_ood_and_unlabeled_logits_and_what_does_not_fit():
    logits, labels = _predictions()
    ood, _ = _predictions(n=100, seed=1)
    report = macs_audit.audit_predictions(
        logits, labels, ood_logits=ood * 0.3, unlabeled_logits=_predictions(n=120, seed=2)[0], bootstrap=0
    )
    assert report.ood is not None and report.unlabeled is not None
    assert report.to_json() == api.Report.of(schema.Report.from_json(report.to_json())).to_json()
    with pytest.raises(InputError):
        macs_audit.audit_predictions(logits[:, 0], labels)
    with pytest.raises(InputError):
        macs_audit.audit_predictions(logits, labels[:-1])
    with pytest.raises(UsageError, match="needs a model and its images"):
        macs_audit.audit_predictions(logits, labels, perturbations=("noise",))


def test_prediction_options_are_the_audits_and_the_others_are_named():
    options = api.prediction_options({"bootstrap": 5, "calibrators": "all", "coverage": 0.8})
    assert options.bootstrap == 5 and options.coverage == 0.8 and len(options.calibrators) > 1
    assert api.prediction_options({"calibrators": ["isotonic", "temperature"]}).calibrators == (
        api.prediction_options({"calibrators": "temperature,isotonic"}).calibrators
    )
    assert api.prediction_options({"calibrators": "none"}).calibrators == ()
    with pytest.raises(UsageError, match=r"unknown option 'bootstrp'; did you mean 'bootstrap'\?"):
        api.prediction_options({"bootstrp": 5})
    with pytest.raises(UsageError, match="corruptions needs a model and its images; an audit of predictions takes"):
        api.prediction_options({"corruptions": ("fog",)})
    with pytest.raises(UsageError, match="unknown calibration method"):
        api.prediction_options({"calibrators": ["platt"]})
    with pytest.raises(UsageError, match="unknown calibration method 3"):
        api.prediction_options({"calibrators": 3})
    with pytest.raises(UsageError, match=r"calibrators \(a keyword of audit_predictions\(\)\) must be text or numbers"):
        api.prediction_options({"calibrators": [None]})
    # The CLI's defaults where not given (evaluate fits every calibrator), each value checked as its flag's would be.
    assert api.prediction_options({}).calibrators == api.prediction_options({"calibrators": "all"}).calibrators
    with pytest.raises(UsageError, match=r"seed \(a keyword of audit_predictions\(\)\) must be at least 0, got -1"):
        api.prediction_options({"seed": -1})
    assert api.prediction_options({"raps": (1, 0.1)}).raps == api.prediction_options({"raps": "1,0.1"}).raps


# --- images as arrays -----------------------------------------------------------------------------------------------


def test_arrays_source_takes_uint8_images_in_either_layout_and_refuses_floats():
    rng = np.random.default_rng(0)
    nhwc = rng.integers(0, 256, (5, 6, 7, 3), dtype=np.uint8)
    labels = np.array([0, 1, 2, 1, 0])
    source = api.arrays_source(nhwc, labels)
    assert source.class_names == ["0", "1", "2"] and not source.named  # matched with the outputs by position
    np.testing.assert_array_equal(source.images(np.arange(5)), nhwc)
    nchw = api.arrays_source(nhwc.transpose(0, 3, 1, 2), labels, class_names=["cat", "dog", "emu"])
    np.testing.assert_array_equal(nchw.images(np.arange(5)), nhwc)
    assert nchw.class_names == ["cat", "dog", "emu"] and nchw.named
    with pytest.raises(InputError, match=r"images must be uint8 in \[0, 255\], got float32; convert \[0, 1\] floats"):
        api.arrays_source(nhwc.astype(np.float32) / 255, labels)
    with pytest.raises(InputError, match="label 3 is out of range for 3 classes"):
        api.arrays_source(nhwc, labels + 1, class_names=["a", "b", "c"])
    with pytest.raises(InputError, match="is not a class index"):
        api.arrays_source(nhwc, np.array([0, 1, 2, 1, 10**13]))


def test_a_wrong_argument_is_a_usage_error_naming_it(tmp_path):
    import macs_audit

    with pytest.raises(UsageError, match="model must be a path, a torch.nn.Module or an onnxruntime.InferenceSession"):
        macs_audit.audit(None)
    with pytest.raises(UsageError, match="data must be a path, \\(images, labels\\) arrays or None, got int"):
        macs_audit.audit("model.onnx", data=5)
    with pytest.raises(UsageError, match="data as arrays must be \\(images, labels\\), got a tuple of 3"):
        macs_audit.audit("model.onnx", data=(1, 2, 3))
    with pytest.raises(UsageError, match=r"batch_size \(a keyword of audit\(\)\) must be at least 1, got 0"):
        macs_audit.audit("model.onnx", batch_size=0)
    with pytest.raises(UsageError, match="quiet is not an option of calibrate\\(\\): the API never prints"):
        macs_audit.calibrate("model.onnx", "fit.npz", out=tmp_path / "out", quiet=True)
    with pytest.raises(UsageError, match="report must be a Report"):
        macs_audit.gate("report.json", {"max_ece": 0.1})


# --- predictions: files, probabilities, companions, calibration maps ---------------------------------------------


def test_audit_predictions_of_probabilities_and_of_a_file_are_those_of_the_logits(tmp_path):
    rng = np.random.default_rng(5)
    labels = np.arange(300) % 3
    logits = rng.normal(size=(300, 3)) + 1.5 * np.eye(3)[labels]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    options = {"bootstrap": 30, "calibrators": ["temperature"]}
    of_logits = macs_audit.audit_predictions(logits, labels, **options)
    of_probabilities = macs_audit.audit_predictions(probabilities, labels, kind="probabilities", **options)
    assert of_probabilities.clean.metrics["ece"] == pytest.approx(of_logits.clean.metrics["ece"], abs=1e-12)
    np.savez(tmp_path / "p.npz", probabilities=probabilities, labels=labels)
    of_file = macs_audit.audit_predictions(tmp_path / "p.npz", **options)
    assert of_file.clean.metrics["nll"] == pytest.approx(of_logits.clean.metrics["nll"], abs=1e-12)
    assert of_file.data.source == str(tmp_path / "p.npz") and of_file.settings.options["bootstrap"]["value"] == 30
    shifted = macs_audit.audit_predictions(
        logits, labels, shift={"half": (logits / 2, labels)}, reference_logits=logits * 3, bootstrap=0
    )
    assert shifted.shift.sets["half"].restricted.metrics["n"] == 300
    assert shifted.parity.views[0].agreement == 1.0 and shifted.parity.paired_by == "row"
    with pytest.raises(UsageError, match="labels come from the predictions file"):
        macs_audit.audit_predictions(tmp_path / "p.npz", labels)
    with pytest.raises(UsageError, match="kind must be 'logits' or 'probabilities'"):
        macs_audit.audit_predictions(logits, labels, kind="scores")
    with pytest.raises(UsageError, match="predictions is not an option of audit"):
        macs_audit.audit("m.onnx", predictions=tmp_path / "p.npz")


def test_a_calibration_map_fitted_on_predictions_applies_in_python(tmp_path):
    rng = np.random.default_rng(6)
    labels = np.arange(1200) % 4
    logits = 3 * (rng.normal(size=(1200, 4)) + 1.2 * np.eye(4)[labels])  # overconfident: temperature helps
    np.savez(tmp_path / "fit.npz", logits=logits[:800], labels=labels[:800])
    fitted = macs_audit.calibrate_predictions(tmp_path / "fit.npz", out=tmp_path / "cal", method="temperature")
    assert fitted["method"] == "temperature" and (tmp_path / "cal" / "calibration_map.json").exists()
    calibrated = macs_audit.apply_calibration(tmp_path / "cal" / "calibration_map.json", logits[800:])
    assert calibrated.shape == (400, 4) and np.allclose(calibrated.sum(axis=1), 1)
    before = macs_audit.audit_predictions(logits[800:], labels[800:], bootstrap=0, calibrators="none")
    after = macs_audit.audit_predictions(np.log(calibrated), labels[800:], bootstrap=0, calibrators="none")
    assert after.clean.metrics["nll"] < before.clean.metrics["nll"]
    assert after.clean.metrics["accuracy"] == before.clean.metrics["accuracy"]  # a temperature keeps the ranking
