"""`evaluate CANDIDATE --reference REFERENCE` with models preprocessed otherwise (issue 41, item 4): a model that
declares no preprocessing takes the other's and the run says so; two that declare different ones are refused in
one line, unless --reference-config gives the reference's own; the parity section records both pipelines and
where each value came from. Every model here has the same weights, so a pair fed the same pixels agrees exactly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.auditing import AuditOptions, RunContext, run_audit
from macs_audit.cli import app
from macs_audit.data.sources import array_source
from macs_audit.models.predictor import load_predictor
from macs_audit.report import Report

runner = CliRunner()
CIFAR100 = {"mean": [0.5071, 0.4865, 0.4409], "std": [0.2673, 0.2564, 0.2762]}
CIFAR10 = {"mean": [0.4914, 0.4822, 0.4465], "std": [0.247, 0.2435, 0.2616]}
QUICK = ("--data", "data.npz", "--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0")
QUICK += ("--calibrators", "none", "--calibration-split", "0.3")


def _model(path: Path, metadata: dict | None, static: bool = True, softmax: bool = False) -> None:
    """The one linear model: a static 32x32 input (its ONNX metadata then declares the input size; without
    mean/std it is known to fit CIFAR-10's), or a symbolic one and no metadata (it declares nothing); `softmax`:
    its outputs probabilities."""
    props = {f"macs_audit.{key}": json.dumps(value) for key, value in (metadata or {}).items()}
    linear_onnx(path, seed=1, size=32 if static else "S", metadata=props, softmax=softmax)


MODELS = {
    "c100": lambda path: _model(path, CIFAR100),
    "c10": lambda path: _model(path, CIFAR10),
    "c100-crop": lambda path: _model(path, {**CIFAR100, "crop_pct": 0.875}),
    "c100-crop90": lambda path: _model(path, {**CIFAR100, "crop_pct": 0.9}),
    "bare": lambda path: _model(path, None, static=False),
    "known": lambda path: _model(path, None),
    # Output kinds: a softmax read as probabilities ('auto'), or each kind declared in the metadata.
    "c100-softmax": lambda path: _model(path, CIFAR100, softmax=True),
    "c100-probabilities": lambda path: _model(path, {**CIFAR100, "output": "probabilities"}, softmax=True),
    "c100-logits": lambda path: _model(path, {**CIFAR100, "output": "logits"}),
}
PIPELINE_KEYS = ("input_size", "crop_pct", "crop_offset", "interpolation", "mean", "std", "output")


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    candidate: str  # a MODELS key
    reference: str
    args: tuple[str, ...] = ()
    exit_code: int = 0
    said: str = ""  # a fragment of the output (a warning or the one-line error)
    more: str = ""  # another
    reference_pipeline: dict | None = None  # expected parity.reference_preprocessing: {key: (value, source)}
    candidate_pipeline: dict | None = None
    reference_config: dict | None = None  # written to ref.json
    same_logits: bool = True  # both output the same kind: the same weights give the same logits


def _pipeline(values: dict, source: str) -> dict:
    return {key: (value, source) for key, value in values.items()}


CASES = [
    Case(
        "reference-declares-nothing-inherits",
        "c100",
        "bare",
        said="warning: the reference declares no input_size, mean or std: it takes the candidate's, input_size "
        "32x32 (candidate's metadata), mean 0.5071,0.4865,0.4409 (candidate's metadata)",
        reference_pipeline=_pipeline(CIFAR100, "inherited from the candidate's metadata"),
        candidate_pipeline=_pipeline(CIFAR100, "metadata"),
    ),
    Case(
        "candidate-declares-nothing-inherits",
        "bare",
        "c100",
        said="warning: the candidate declares no input_size, mean or std: it takes the reference's",
        reference_pipeline=_pipeline(CIFAR100, "metadata"),
        candidate_pipeline=_pipeline(CIFAR100, "inherited from the reference's metadata"),
    ),
    Case(
        "both-declare-different",
        "c100",
        "c10",
        exit_code=3,
        said="error: the reference's mean 0.4914,0.4822,0.4465 (metadata) differs from the candidate's "
        "0.5071,0.4865,0.4409 (metadata): give the reference's with --reference-config FILE (a sidecar JSON), or "
        "both models' with --mean",
    ),
    Case(
        "known-to-fit-reference-against-other-declared",
        "c100",
        "known",
        exit_code=3,
        said="error: the reference's mean 0.4914,0.4822,0.4465 (default, known to fit) differs from the candidate's",
    ),
    Case(
        "explicit-reference-config",
        "c100",
        "c10",
        args=("--reference-config", "ref.json"),
        reference_config=CIFAR10,
        reference_pipeline=_pipeline(CIFAR10, "--reference-config"),
        candidate_pipeline=_pipeline(CIFAR100, "metadata"),
    ),
    Case(
        "both-declare-the-same",
        "c100",
        "c100",
        reference_pipeline=_pipeline(CIFAR100, "metadata"),
        candidate_pipeline=_pipeline(CIFAR100, "metadata"),
    ),
    Case(
        "flags-apply-to-both",
        "c100",
        "c10",
        args=("--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"),
        reference_pipeline={"mean": ([0.5] * 3, "flag"), "std": ([0.25] * 3, "flag")},
        candidate_pipeline={"mean": ([0.5] * 3, "flag"), "std": ([0.25] * 3, "flag")},
    ),
    Case(
        "both-declare-different-crops",
        "c100-crop",
        "c100-crop90",
        exit_code=3,
        said="error: the reference's crop_pct 0.9 (metadata) differs from the candidate's 0.875 (metadata): parity "
        "feeds both models the same images; give the one they share with --crop-pct",
    ),
    Case(
        "a-crop-the-reference-does-not-declare-is-inherited",
        "c100-crop",
        "c100",
        said="warning: the reference declares no crop_pct: it takes the candidate's, crop_pct 0.875 (candidate's "
        "metadata)",
        reference_pipeline={
            "crop_pct": (0.875, "inherited from the candidate's metadata"),
            "interpolation": ("bicubic", "default"),
        },
    ),
    Case(
        "a-default-the-reference-is-not-known-to-fit-is-warned",
        "known",
        "bare",
        said="warning: the reference declares no input_size: it takes the candidate's, input_size 32x32",
        more="warning: the reference: no --mean or --std given: normalising with CIFAR-10's",
        reference_pipeline=_pipeline(CIFAR10, "default"),
        candidate_pipeline=_pipeline(CIFAR10, "default, known to fit"),
    ),
    Case(
        "output-kinds-both-detected-differ",
        "c100-softmax",
        "c100",
        args=("--quiet",),  # the refusal comes mid-run: no progress before it
        exit_code=3,
        said="error: the reference outputs logits (detected) but the candidate probabilities (detected): a detected "
        "kind may be misread; declare each model's with --output (the reference's own with --reference-config FILE)",
    ),
    Case(
        "output-kind-declared-against-another-detected",
        "c100-probabilities",
        "c100",
        args=("--quiet",),  # the refusal comes mid-run: no progress before it
        exit_code=3,
        said="error: the reference outputs logits (detected) but the candidate probabilities (declared)",
    ),
    Case(
        "output-kinds-both-declared-differ-each-its-own",
        "c100-probabilities",
        "c100-logits",
        reference_pipeline={"output": ("logits", "metadata")},
        candidate_pipeline={"output": ("probabilities", "metadata")},
        same_logits=False,
    ),
    Case(
        "output-kind-detected-the-same",
        "c100-softmax",
        "c100-probabilities",
        reference_pipeline={"output": ("probabilities", "metadata")},
        candidate_pipeline={"output": ("probabilities", "detected")},
    ),
    Case(
        "reference-config-without-reference",
        "c100",
        "",
        args=("--reference-config", "ref.json"),
        reference_config=CIFAR10,
        exit_code=2,
        said="error: --reference-config gives the --reference model's settings; give --reference MODEL too",
    ),
    Case(
        "reference-config-bad-value",
        "c100",
        "c10",
        args=("--reference-config", "ref.json"),
        reference_config={"mean": "x"},
        exit_code=2,
        said="error: mean must be a list of finite numbers, one per channel, got 'x' from --reference-config",
    ),
    Case(
        "reference-config-without-settings",
        "c100",
        "c10",
        args=("--reference-config", "ref.json"),
        reference_config={"training": {"epochs": 3}},
        exit_code=2,
        said="error: --reference-config ref.json sets no model setting",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_parity_pixels(case: Case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_images(100, seed=2)
    np.savez("data.npz", x=x, y=y)
    MODELS[case.candidate](tmp_path / "candidate.onnx")
    args = ["evaluate", "candidate.onnx", *QUICK, *case.args, "-o", "report.json"]
    if case.reference:
        MODELS[case.reference](tmp_path / "reference.onnx")
        args += ["--reference", "reference.onnx"]
    if case.reference_config is not None:
        (tmp_path / "ref.json").write_text(json.dumps(case.reference_config))
    result = runner.invoke(app, args)
    assert result.exit_code == case.exit_code, result.output
    output = " ".join(result.output.split())
    assert case.said in output and case.more in output
    if case.exit_code:
        assert len(result.output.strip().splitlines()) == 1, result.output  # one line
        assert not (tmp_path / "report.json").exists()
        return
    report = json.loads((tmp_path / "report.json").read_text())
    parity = report["parity"]
    for side, expected in (("reference", case.reference_pipeline), ("candidate", case.candidate_pipeline)):
        recorded = parity[f"{side}_preprocessing"]
        assert set(recorded) == {*PIPELINE_KEYS, "sources"} and set(recorded["sources"]) == set(PIPELINE_KEYS)
        for key, (value, source) in (expected or {}).items():
            assert recorded[key] == pytest.approx(value) if isinstance(value, list) else recorded[key] == value, key
            assert recorded["sources"][key] == source, (side, key)
    if "declares no" not in case.said:
        assert "declares no" not in output
    if case.reference_config is None and case.candidate_pipeline and case.reference_pipeline:
        # The same weights fed the same pixels: every logit agrees (the reference normalised as the candidate).
        clean = parity["views"][0]
        assert clean["agreement"] == 1.0  # log-probabilities and logits of one model: the same top-1
        assert clean["max_abs_logit_difference"] == 0.0 or not case.same_logits
    if case.id == "candidate-declares-nothing-inherits":  # the report's model section says it too, and no warning
        sources = report["model"]["config_sources"]
        assert sources["mean"] == sources["std"] == "inherited from the reference's metadata"
        assert "warnings" not in report["model"]


def test_an_int8_build_that_alone_declares_its_normalisation(tmp_path, monkeypatch):
    """The issue's case: `export --precision int8 --mean --std` of a float ONNX model that declares none writes them
    into the INT8 file's metadata alone; `evaluate INT8 --reference FLOAT` normalises the float model with them,
    says so once and records it, and agrees as an explicit --reference-config of the same values does."""
    monkeypatch.chdir(tmp_path)
    x, y = tiny_images(100, seed=2)
    np.savez("data.npz", x=x, y=y)
    MODELS["bare"](tmp_path / "float.onnx")
    values = [f"--{key}" if i == 0 else ",".join(map(str, CIFAR100[key])) for key in CIFAR100 for i in range(2)]
    export = ["export", "float.onnx", "--precision", "int8", *values, "--calibration-data", "data.npz", "--no-audit"]
    built = runner.invoke(app, [*export, "-o", "int8.onnx", "--quiet"])
    assert built.exit_code == 0, built.output
    (tmp_path / "ref.json").write_text(json.dumps(CIFAR100))
    runs = {}
    for name, more in (("inherited", ()), ("explicit", ("--reference-config", "ref.json"))):
        args = ["evaluate", "int8.onnx", "--reference", "float.onnx", *QUICK, *more, "-o", f"{name}.json"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        runs[name] = " ".join(result.output.split()), json.loads((tmp_path / f"{name}.json").read_text())["parity"]
    said, parity = runs["inherited"]
    line = "the reference declares no mean or std: it takes the candidate's, mean 0.5071,0.4865,0.4409 (candidate's"
    assert said.count("declares no") == 1 and f"warning: {line}" in said, said  # once, though paired twice
    assert "CIFAR-10" not in said
    sources = parity["reference_preprocessing"]["sources"]
    assert sources["mean"].startswith("inherited") and sources["std"].startswith("inherited"), sources
    assert len(parity["warnings"]) == 1 and parity["warnings"][0].startswith(line)
    explicit = runs["explicit"][1]
    assert explicit["reference_preprocessing"]["sources"]["mean"] == "--reference-config", explicit.get("warnings")
    assert "warnings" not in explicit, explicit["warnings"]
    for view, same in zip(parity["views"], explicit["views"], strict=True):
        assert view["agreement"] == same["agreement"], view["name"]
        for metric, entry in view["metrics"].items():
            assert entry["difference"] == pytest.approx(same["metrics"][metric]["difference"], abs=1e-6), metric


def test_run_audit_hands_on_and_records_the_pairing_warnings(tmp_path):
    """A caller of run_audit (the Python API, export's build audit) hears what the pairing said through on_warning,
    and the report's parity section records it, through a JSON round trip."""
    MODELS["c100"](tmp_path / "candidate.onnx")
    MODELS["bare"](tmp_path / "reference.onnx")
    x, y = tiny_images(60, seed=2)
    source = array_source("tiny", "npz", x, y, [str(i) for i in range(10)])
    options = AuditOptions(bootstrap=0, perturbations=(), sensitivity_samples=0, calibrators=(), calibration_split=0.3)
    heard: list[str] = []
    candidate, reference = load_predictor(tmp_path / "candidate.onnx"), load_predictor(tmp_path / "reference.onnx")
    context = RunContext(on_warning=heard.append)
    report = run_audit(candidate, source, options, reference=reference, context=context).report
    assert len(heard) == 1 and heard[0].startswith("the reference declares no input_size, mean or std: it takes the")
    assert report.parity is not None and report.parity.warnings == heard
    again = Report.from_dict(report.to_dict()).parity
    assert again is not None and again.warnings == heard
