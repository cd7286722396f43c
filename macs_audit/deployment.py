"""`export --precision fp16|int8` from files to files: the deployment build of a model (a float ONNX file, or the
float ONNX export of a PyTorch checkpoint) made by models/precision.py, then the parity audit of what was made
against the float model it was made from (`run_audit(..., reference=)`), on the audit data."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from macs_audit.atomic import all_or_nothing
from macs_audit.auditing import AuditOptions, RunContext, run_audit
from macs_audit.auditing.classes import check_classes
from macs_audit.auditing.parity import REFERENCE_SAID, check_pair
from macs_audit.data.loading import DataSpec, load_model_data
from macs_audit.data.splits import stratified_subset
from macs_audit.devices import resolve_device
from macs_audit.errors import InputError, UsageError
from macs_audit.inputs import Input, run_inputs
from macs_audit.models.onnx import GPU_PROVIDERS, check_provider
from macs_audit.models.precision import (
    DEFAULT_CALIBRATION_IMAGES,
    calibration_batches,
    check_int8_target,
    check_precision,
    convert_fp16,
    convert_int8,
    default_int8_target,
)
from macs_audit.models.predictor import ONNX_SUFFIXES, load_predictor
from macs_audit.outputs import check_file
from macs_audit.progress import ProgressFn, Stage, step
from macs_audit.report import Report

BUILD_STAGE = Stage("reduced-precision build", "")


@dataclasses.dataclass(frozen=True)
class Calibration:
    """INT8's calibration images: `images` class-stratified images of `data` drawn with `seed`; None: the
    default, DEFAULT_CALIBRATION_IMAGES or every image when the data holds fewer (only a number asked for is
    an error beyond the data)."""

    data: DataSpec
    images: int | None = None
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    """What `build_precision` makes and where it runs: the model at `precision` (fp16, int8), INT8 quantised for
    `int8_target` (default `default_int8_target` of the build's provider) on `calibration`'s images; the build run
    on execution `provider`, the float model on `reference_provider` (models.onnx.PROVIDERS; the CPU by default, a
    GPU provider on the first GPU)."""

    precision: str
    calibration: Calibration | None = None
    int8_target: str | None = None
    provider: str | None = None
    reference_provider: str | None = None


@dataclasses.dataclass(frozen=True)
class ParityAudit:
    """The parity audit of the build against the float model it was made from: on `data`, with `options`."""

    data: DataSpec
    options: AuditOptions | None = None


@dataclasses.dataclass(frozen=True)
class Build:
    path: Path  # the reduced-precision model written
    reference: Path  # the float ONNX model it was made from
    precision: str
    calibration_images: int | None  # INT8: how many calibration images were used
    int8_target: str | None  # INT8: the hardware it was quantised for (models.precision.INT8_TARGETS)
    report: Report | None  # the parity audit of `path` against `reference` (None without audit data)
    # What the user should know about the float model (CIFAR-10's mean/std applied to a model that declares none)
    warnings: tuple[str, ...] = ()

    @property
    def parity_warnings(self) -> list[str]:
        """What pairing the build with the float model said (the parity section's warnings: a side that took the
        other's settings), less the float model's own `warnings`, which it repeats as the reference's."""
        said = self.report.parity.warnings if self.report is not None and self.report.parity is not None else None
        return [line for line in said or [] if line.removeprefix(REFERENCE_SAID) not in self.warnings]


def _device(provider: str | None) -> str:
    """The CPU, or the first GPU for a GPU provider (UsageError without one)."""
    return resolve_device("cuda") if provider in GPU_PROVIDERS else "cpu"


def default_output(reference: Path, precision: str) -> Path:
    return reference.with_name(f"{reference.stem}.{precision}.onnx")


def check_build(precision: str, calibration: Calibration | None, int8_target: str | None = None) -> str:
    """The options' consistency, before any work: INT8 needs calibration data and takes a known target, FP16 takes
    neither."""
    check_precision(precision)
    if precision == "int8" and calibration is None:
        raise UsageError("--precision int8 needs --calibration-data DATA (images to fit the activation ranges on)")
    for option, given in (("--calibration-data", calibration), ("--int8-target", int8_target)):
        if precision != "int8" and given is not None:
            raise UsageError(f"{option} is for --precision int8, not {precision}")
    if calibration is not None and calibration.images is not None and calibration.images < 1:
        raise UsageError(f"--calibration-images must be positive, got {calibration.images}")
    if int8_target is not None:
        check_int8_target(int8_target)
    return precision


def build_precision(
    reference: Path,
    spec: BuildSpec,
    out: Path | None = None,
    *,
    flags: dict | None = None,
    audit: ParityAudit | None = None,
    progress: ProgressFn | None = None,
    force: bool = False,
    inputs: Iterable[Input] = (),
) -> Build:
    """Build `reference` (a float ONNX model) as `spec` says into `out` (default REFERENCE.<precision>.onnx) and,
    with `audit`, audit it against `reference`, each on its execution provider. The output is checked first: never
    a file the build reads (the model, the hub cache's files of an hf-hub: --arch, the calibration and audit data)
    or one of the run's other `inputs` (the checkpoint the float model was exported from, its files), an existing
    file only with `force`."""
    check_build(spec.precision, spec.calibration, spec.int8_target)
    check_providers(spec.provider, spec.reference_provider, audited=audit is not None)
    spec = dataclasses.replace(  # the providers by their keys
        spec, provider=check_provider(spec.provider), reference_provider=check_provider(spec.reference_provider)
    )
    if reference.suffix.lower() not in ONNX_SUFFIXES:
        raise UsageError(f"{reference} is not an ONNX model: --precision builds from the float ONNX model")
    path = out or default_output(reference, spec.precision)
    read_data = (spec.calibration.data if spec.calibration else None, audit.data if audit else None)
    data = [given.path for given in read_data if given is not None]
    read = run_inputs(models=[(reference, (flags or {}).get("arch"))], data=data)
    dest = check_file(path, inputs=(*read, *inputs), option="--out", force=force)  # never an input, --force or not
    # A failed build or audit leaves no new file, and an earlier one (--force) as it was.
    with all_or_nothing([] if dest.file is None else [dest.file]):
        return _build(reference, spec, path, flags, audit, progress)


def check_providers(provider: str | None, reference_provider: str | None, audited: bool = True) -> None:
    """Each execution provider known, and a GPU present for a GPU provider that will run (the candidate's only when
    it is audited): before anything is written."""
    candidate = check_provider(provider)
    for option, name in (
        ("--provider", candidate if audited else None),
        ("--reference-provider", check_provider(reference_provider)),
    ):
        try:
            _device(name)
        except UsageError:
            raise UsageError(
                f"{option} {name} runs on a CUDA GPU and none is available; leave {option} out to run on the CPU"
            ) from None


def _build(
    reference: Path,
    spec: BuildSpec,
    path: Path,
    flags: dict | None,
    audit: ParityAudit | None,
    progress: ProgressFn | None,
) -> Build:
    float_model = load_predictor(reference, flags, _device(spec.reference_provider), provider=spec.reference_provider)
    # Only what was declared: a default (CIFAR-10's mean/std) written as metadata would read as the build's own.
    meta = float_model.config.as_metadata(declared_only=True)
    if meta.get("output") == "auto":
        meta.pop("output")
    used, int8_target = None, spec.int8_target
    if spec.precision == "fp16":
        finish = step(progress, BUILD_STAGE)
        convert_fp16(reference, path, meta)
    else:
        calibration = spec.calibration
        assert calibration is not None
        source, _ = load_model_data(calibration.data, float_model.config)  # the model's whole pipeline
        check_classes(float_model, source)
        if calibration.images is not None and calibration.images > len(source):
            raise InputError(
                f"--calibration-images {calibration.images} is more than the {len(source)} images of {source.name}"
            )
        wanted = DEFAULT_CALIBRATION_IMAGES if calibration.images is None else calibration.images
        positions = stratified_subset(source.labels, min(wanted, len(source)), calibration.seed)
        batches = calibration_batches(source.images(positions), float_model.config)
        finish = step(progress, BUILD_STAGE)
        int8_target = int8_target or default_int8_target(spec.provider)
        convert_int8(reference, path, meta, batches, int8_target)
        used = len(positions)
    finish()
    report = None
    if audit is not None:
        candidate = load_predictor(path, flags, _device(spec.provider), provider=spec.provider)
        # Paired before the data is read by the candidate's pipeline, which may take the float model's settings;
        # run_audit pairs them again and records what the pairing said (report.parity.warnings).
        check_pair(float_model, candidate)
        source, data_info = load_model_data(audit.data, candidate.config)
        audited = run_audit(
            candidate, source, audit.options, data_info=data_info, reference=float_model, context=RunContext(progress)
        )
        report = audited.report
    return Build(
        path=path,
        reference=reference,
        precision=spec.precision,
        calibration_images=used,
        int8_target=int8_target,
        report=report,
        warnings=tuple(float_model.info.get("warnings", [])),
    )
