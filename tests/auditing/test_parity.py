"""The parity audit (auditing/parity.py through run_audit): the reference scored on the same batches of every view,
a copy of the candidate giving differences of exactly zero, the clean view's numbers equal to those of the two
models' own predictions, and the pairs that cannot be compared refused."""

import dataclasses
import shutil

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images

from macs_audit.auditing import AuditInputs, AuditOptions, run_audit
from macs_audit.data.sources import array_source
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import parity
from macs_audit.metrics.accumulators import CalibrationAccumulator
from macs_audit.models.predictor import load_predictor

OPTIONS = AuditOptions(
    batch_size=64, perturbations=("noise",), sensitivity_samples=0, bootstrap=50, calibrators=(), calibration_split=0.3
)


@pytest.fixture
def source():
    x, y = tiny_images(200, seed=3)
    return array_source("tiny", "npz", x, y, [str(i) for i in range(10)])


def test_a_copy_of_the_candidate_differs_by_exactly_zero(tmp_path, source):
    candidate = linear_onnx(tmp_path / "candidate.onnx", seed=1)
    copy = shutil.copy(candidate, tmp_path / "copy.onnx")
    report = run_audit(load_predictor(candidate), source, OPTIONS, reference=load_predictor(copy)).report
    assert [v.name for v in report.parity.views] == ["clean", "noise"]
    for view in report.parity.views:
        assert view.agreement == 1.0 and view.agreement_interval == [1.0, 1.0]
        assert view.max_abs_logit_difference == 0.0 and view.mean_kl == 0.0
        for name, entry in view.metrics.items():
            assert entry["difference"] == 0.0 and entry["interval"] == [0.0, 0.0], name
        for method in view.conformal.values():
            assert all(d == {"difference": 0.0, "interval": [0.0, 0.0]} for d in method["differences"].values())
    assert report.to_dict()["parity"]["reference"]["path"] == str(copy)


def test_the_clean_view_is_that_of_both_models_predictions(tmp_path, source):
    candidate = load_predictor(linear_onnx(tmp_path / "candidate.onnx", seed=1))
    reference = load_predictor(linear_onnx(tmp_path / "reference.onnx", seed=2))
    result = run_audit(candidate, source, OPTIONS, reference=reference)
    images = source.images(np.arange(len(source))).astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    ref_logits = reference.predict(images)
    clean = result.report.parity.view("clean")
    expected = parity.agreement_summary(parity.agreement(ref_logits, result.logits, result.labels))
    assert clean.agreement == pytest.approx(expected["agreement"])
    assert clean.correct_to_wrong == expected["correct_to_wrong"] and clean.n == len(source)
    assert clean.mean_kl == pytest.approx(expected["mean_kl"], rel=1e-6)
    assert clean.metrics["accuracy"]["candidate"] == pytest.approx(result.report.clean.metrics["accuracy"])
    assert clean.metrics["ece"]["candidate"] == pytest.approx(result.report.clean.metrics["ece"])
    assert 0 < clean.agreement < 1
    low, high = clean.metrics["nll"]["interval"]
    assert low < clean.metrics["nll"]["difference"] < high


def test_pairs_that_cannot_be_compared_are_refused(tmp_path, source):
    path = linear_onnx(tmp_path / "candidate.onnx")
    candidate = load_predictor(path)
    with pytest.raises(UsageError, match="is the model being audited"):
        run_audit(candidate, source, OPTIONS, reference=load_predictor(path))
    with pytest.raises(InputError, match="the reference has 5 classes but the candidate has 10"):
        run_audit(
            candidate, source, OPTIONS, reference=load_predictor(linear_onnx(tmp_path / "k5.onnx", num_classes=5))
        )
    small = load_predictor(linear_onnx(tmp_path / "small.onnx", size=16))
    with pytest.raises(InputError, match="takes 16x16 images but the candidate takes 32x32"):
        run_audit(candidate, source, OPTIONS, reference=small)


def test_corruption_cells_get_their_parity_with_intervals_of_the_means(tmp_path, source):
    candidate = load_predictor(linear_onnx(tmp_path / "candidate.onnx", seed=1))
    reference = load_predictor(linear_onnx(tmp_path / "reference.onnx", seed=2))
    options = dataclasses.replace(OPTIONS, perturbations=(), corruptions=("gaussian_noise", "fog"), severities=(2,))
    report = run_audit(candidate, source, options, reference=reference).report
    assert [v.name for v in report.parity.views] == ["clean", "gaussian_noise@2", "fog@2"]
    for view in report.parity.views[1:]:
        assert view.kind == "corruption" and view.severity == 2 and view.agreement_interval is not None
        assert view.metrics["accuracy"]["interval"] is not None and view.metrics["ece"]["interval"] is None
        assert view.conformal is not None and view.metrics["accuracy"]["candidate"] == pytest.approx(
            report.view(view.name).metrics["accuracy"]
        )


def test_a_device_resident_batch_reaches_an_onnx_reference_as_an_array(tmp_path):
    """A torch candidate on CUDA scores device tensors (data/batching.py); onnxruntime takes them as arrays."""
    import torch

    from macs_audit.auditing.inference import view_result
    from macs_audit.auditing.parity import ParityRecorder
    from macs_audit.views.view import CLEAN

    reference = load_predictor(linear_onnx(tmp_path / "reference.onnx"))
    x, y = tiny_images(20)
    images = CLEAN(torch.from_numpy(x), 0)  # a tensor, as the resident path gives it
    recorder = ParityRecorder(reference, y, None, AuditOptions(coverage=0.9, bootstrap=0, seed=0))
    logits = reference.predict(images.numpy())
    recorder.observe(CLEAN, 0, images, y, logits)
    acc = CalibrationAccumulator(10)
    acc.update(logits, y)
    assert view_result(CLEAN, acc, 0, 0, observer=recorder).intervals == {}
    assert recorder.section().views[0].agreement == 1.0


def test_the_candidates_report_is_its_solo_audits_and_the_resamples_are_drawn_once(tmp_path, source, monkeypatch):
    """The reference's statistics run on the candidate's own resamples of each view: the candidate's sections
    (its intervals included) are those of an audit without a reference, and no view's counts are drawn twice."""
    from macs_audit.metrics import bootstrap, resampling

    candidate = load_predictor(linear_onnx(tmp_path / "candidate.onnx", seed=1))
    reference = load_predictor(linear_onnx(tmp_path / "reference.onnx", seed=2))
    options = dataclasses.replace(OPTIONS, corruptions=("fog",), severities=(2,))
    drawn = []

    def counted(n, n_resamples, rng, **kw):
        drawn.append(n_resamples)
        return draw_counts(n, n_resamples, rng, **kw)

    draw_counts = resampling.draw_counts
    for module in (bootstrap, resampling):  # the bootstrap's own draws and the parity section's
        monkeypatch.setattr(module, "draw_counts", counted)
    solo = run_audit(candidate, source, options).report.to_dict()
    solo_draws, drawn[:] = list(drawn), []
    paired = run_audit(candidate, source, options, reference=reference).report.to_dict()
    assert solo_draws == [OPTIONS.bootstrap] * 2  # the clean and noise views' intervals
    # One draw more: the grid cell's means, which the candidate alone does not resample.
    assert drawn == solo_draws + [OPTIONS.bootstrap]
    parity_views = paired.pop("parity")["views"]
    assert [v["name"] for v in parity_views] == ["clean", "noise", "fog@2"]
    assert all(v["metrics"]["smooth_ece"]["interval"] is not None for v in parity_views[:2])
    assert solo.pop("parity") is None
    for report in (solo, paired):
        report.pop("created")
    assert paired == solo


@pytest.fixture(scope="module")
def shift_case(tmp_path_factory):
    """A 1,000-output candidate, a reference and a copy of the candidate; a clean set of two images per class and a
    shift set of real photographs under four of ImageNet-A's WordNet ids."""
    from fixtures.shift_trees import image_tree, imagenet_model, subset_classes

    from macs_audit.data.label_space import load_mapped_sets
    from macs_audit.models.config import ModelConfig

    tmp = tmp_path_factory.mktemp("parity-shift")
    models = {
        "candidate": imagenet_model(tmp / "candidate.onnx", seed=1),
        "reference": imagenet_model(tmp / "reference.onnx", seed=2),
    }
    models["copy"] = shutil.copy(models["candidate"], tmp / "copy.onnx")
    x = np.random.default_rng(0).integers(0, 256, (2000, 32, 32, 3), dtype=np.uint8)
    clean = array_source("val", "npz", x, np.arange(2000) % 1000, [str(i) for i in range(1000)])
    tree = image_tree(tmp / "imagenet-a", subset_classes("imagenet_a", 4), per_class=3)
    (mapped,) = load_mapped_sets([("imagenet-a", tree)], 1000, ModelConfig(input_size=(32, 32)))
    options = dataclasses.replace(OPTIONS, perturbations=(), calibration_split=0.5)
    return {name: load_predictor(path) for name, path in models.items()}, clean, mapped, options


def test_a_shift_set_is_compared_in_its_restricted_convention(shift_case):
    from macs_audit.pixels import to_unit_float

    models, clean, mapped, options = shift_case
    report = run_audit(
        models["candidate"], clean, options, AuditInputs(shift_sets=(mapped,)), reference=models["reference"]
    ).report
    assert [v.name for v in report.parity.views] == ["clean", "imagenet-a"]
    view = report.parity.view("imagenet-a")
    assert view.kind == "shift" and view.n == len(mapped.source) == 12
    images = to_unit_float(mapped.source.images(np.arange(len(mapped.source))))
    logits = {name: models[name].predict(images) for name in ("candidate", "reference")}
    restricted = {name: z[:, mapped.space.outputs] for name, z in logits.items()}  # the set's classes only
    expected = parity.agreement_summary(
        parity.agreement(restricted["reference"], restricted["candidate"], mapped.source.labels)
    )
    assert view.agreement == pytest.approx(expected["agreement"])
    assert view.mean_kl == pytest.approx(expected["mean_kl"], rel=1e-5)
    own = report.shift.sets["imagenet-a"].restricted.metrics
    for name in ("accuracy", "nll", "ece"):
        assert view.metrics[name]["candidate"] == pytest.approx(own[name])
    hit = restricted["reference"].argmax(1) == mapped.source.labels
    assert view.metrics["accuracy"]["reference"] == pytest.approx(hit.mean())
    assert view.metrics["nll"]["interval"] is not None
    # The conformal sets on every output (as the shift section scores them), over every image of the set.
    sets = view.conformal["lac"]
    own_sets = report.shift.sets["imagenet-a"].unrestricted.conformal["lac"]
    assert sets["candidate_at_own_threshold"]["coverage"] == pytest.approx(own_sets["coverage"])


def test_a_copy_differs_by_exactly_zero_on_a_shift_set(shift_case):
    models, clean, mapped, options = shift_case
    report = run_audit(
        models["candidate"], clean, options, AuditInputs(shift_sets=(mapped,)), reference=models["copy"]
    ).report
    view = report.parity.view("imagenet-a")
    assert view.agreement == 1.0 and view.agreement_interval == [1.0, 1.0] and view.mean_kl == 0.0
    for name, entry in view.metrics.items():
        assert entry["difference"] == 0.0 and entry["interval"] == [0.0, 0.0], name
    for method in view.conformal.values():
        assert all(d == {"difference": 0.0, "interval": [0.0, 0.0]} for d in method["differences"].values())
