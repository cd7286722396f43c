"""From settings to inputs: an audit's resolved options (settings/resolve.py) become an `AuditPlan` (every value
parsed and checked, every file it will read listed, nothing loaded), then `load_audit` loads the model, the data
and the companion sets, and `run_planned` audits them. The evaluate command and `macs_audit.audit()` both go
through here, so that a flag, a spec key and an API keyword mean one thing."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from macs_audit.auditing import (
    AuditInputs,
    AuditOptions,
    AuditResult,
    RunContext,
    check_corruption_files,
    run_audit,
)
from macs_audit.auditing.calibration import check_conformal_split, parse_raps
from macs_audit.auditing.options import AUTO_BATCH_SIZE
from macs_audit.calibrators.selection import parse_methods
from macs_audit.data.loading import DataSpec, load_model_data
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE, Context, rank_device
from macs_audit.errors import UsageError
from macs_audit.inputs import run_inputs
from macs_audit.metrics.conformal import check_coverage
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn
from macs_audit.settings.parse import (
    model_flags,
    parse_corruption_set,
    parse_corruptions,
    parse_perturbations,
    parse_severities,
    parse_shift_data,
)
from macs_audit.settings.resolve import Resolved
from macs_audit.settings.table import BY_NAME, FLAG

FEATURE_MODES = ("auto", "on", "off")
# --predictions' companions and reading options (predictions/audit.py): with a model, a flag giving one is an error.
COMPANION_OPTIONS = (
    "ood_predictions",
    "unlabeled_predictions",
    "shift_predictions",
    "reference_predictions",
    "label_column",
)


@dataclasses.dataclass(frozen=True)
class AuditPlan:
    """An audit's settings, parsed and checked: numbers, names and paths. `model` and `data` may instead be
    in-memory objects from the Python API (a torch module or an onnxruntime session; a Source)."""

    resolved: Resolved
    model: Any
    flags: dict[str, Any]  # the model's config overrides (models/config.py)
    data: DataSpec
    in_memory_data: Source | None
    options: AuditOptions
    shift_sets: tuple[tuple[str, Path], ...]
    class_map: dict[str, int] | None
    reference_settings: dict[str, Any]

    def files(self) -> tuple[Any, ...]:
        """Every file and folder the audit reads: no output may replace one (macs_audit.outputs)."""
        r = self.resolved
        model = [(self.model, r["arch"])] if isinstance(self.model, (str, Path)) else []
        return run_inputs(
            models=[*model, (r["reference"], r["arch"])],
            data=[
                self.data.path,
                r["ood_data"],
                r["unlabeled"],
                r["feature_fit_data"],
                *(folder for _, folder in self.shift_sets),
            ],
            files=[
                r["corruption_baseline"],
                r["corrupted_data"],
                r["frost_textures"],
                r["class_prompts"],
                r["class_map"],
                r["real_labels_file"],
                r["reference_config"],
                r["metadata"],
            ],
        )


def audit_options(r: Resolved) -> AuditOptions:
    """The AuditOptions of resolved evaluate options (checked here, before any model loads)."""
    from macs_audit.auditing import check_calibration_split

    calibrators = r["calibrators"].strip()
    return AuditOptions(
        batch_size=AUTO_BATCH_SIZE if r["batch_size"] is None else r["batch_size"],
        calibration_split=check_calibration_split(r["calibration_split"]),
        calibrators=() if calibrators == "none" else tuple(parse_methods(calibrators)),
        bootstrap=r["bootstrap"],
        seed=r["seed"],
        perturbations=parse_perturbations(r["perturbations"]),
        sensitivity_samples=r["sensitivity_samples"],
        sensitivity_directions=r["sensitivity_directions"],
        corruptions=parse_corruptions(r["corruptions"]),
        severities=parse_severities(r["severities"]),
        released_dir=str(r["corrupted_data"]) if r["corrupted_data"] else None,
        frost_textures=str(r["frost_textures"]) if r["frost_textures"] else None,
        corruption_set=parse_corruption_set(r["corruption_set"]),
        workers=r["workers"],
        coverage=check_coverage(r["coverage"]),
        conformal_split=check_conformal_split(r["conformal_split"]),
        raps=parse_raps(r["raps"]),
        precision=r["precision"],
        features=parse_features(r["features"]),
        feature_layer=r["feature_layer"],
        image_slices=r["image_slices"],
        slice_bins=r["slice_bins"],
        min_slice_size=r["min_slice_size"],
        slice_correction=parse_correction(r["slice_correction"]),
    )


def plan_audit(r: Resolved, *, model: Any = None, data: Source | None = None) -> AuditPlan:
    """Parse and check every resolved evaluate option (see `_plan`); a bad value the spec set is said to come
    from the spec's key."""
    from macs_audit.settings.resolve import naming_the_spec

    try:
        return _plan(r, model=model, data=data)
    except UsageError as error:
        raise naming_the_spec(error, r) from None


def _plan(r: Resolved, *, model: Any = None, data: Source | None = None) -> AuditPlan:
    """Parse and check every resolved evaluate option: UsageError (one line) for a bad value or a combination
    that cannot run, before anything loads. `model` / `data`: the API's in-memory model and data, instead of
    r["model"] / r["data"]."""
    from macs_audit.data.label_space import read_class_map
    from macs_audit.models.config import read_reference_config

    for name in COMPANION_OPTIONS:
        if r.sources[name] == FLAG:
            raise UsageError(f"{BY_NAME[name].flag} goes with --predictions FILE (an audit of saved predictions)")
    model = model if model is not None else r["model"]
    if model is None:
        raise UsageError(
            'give MODEL (or the model in the spec\'s evaluate table, model = "model.onnx"), or --predictions FILE'
        )
    if r["corrupted_data"] and not r["corruptions"]:
        raise UsageError("--corrupted-data / --cifar-c needs --corruptions (e.g. --corruptions all)")
    if r["frost_textures"] and not r["corruptions"]:
        raise UsageError("--frost-textures needs --corruptions (e.g. --corruptions frost)")
    if r["reference"] is not None and isinstance(model, (str, Path)):
        from macs_audit.auditing.parity import same_file

        if same_file(r["reference"], model):
            raise UsageError(f"--reference {r['reference']} is MODEL itself; give the model MODEL was built from")
    if r["reference_config"] is not None and r["reference"] is None:
        raise UsageError("--reference-config gives the --reference model's settings; give --reference MODEL too")
    flags = model_flags(
        r["arch"], r["num_classes"], r["input_size"], r["mean"], r["std"], r["output_kind"], r["crop_pct"],
        r["interpolation"],
    )  # fmt: skip
    plan = AuditPlan(
        resolved=r,
        model=Path(model) if isinstance(model, str) else model,
        flags=flags,
        data=DataSpec(
            r["data"], r["data_format"], r["split"], r["limit"], r["seed"], skip_damaged_shards=r["skip_damaged_shards"]
        ),
        in_memory_data=data,
        options=audit_options(r),
        shift_sets=tuple(parse_shift_data(r["shift_data"])),
        class_map=read_class_map(r["class_map"]) if r["class_map"] is not None else None,  # a bad map fails first
        reference_settings=read_reference_config(r["reference_config"]) if r["reference_config"] else {},
    )
    check_corruption_files(plan.options)  # the --corrupted-data folder and frost textures
    return plan


@dataclasses.dataclass(frozen=True)
class LoadedAudit:
    """What an AuditPlan loads: the model (and its reference), the data and the companion inputs."""

    predictor: Predictor
    reference: Predictor | None
    source: Source
    data_info: dict[str, Any]
    inputs: AuditInputs


def _load_model(plan: AuditPlan, ctx: Context, debug: bool) -> Predictor:
    r = plan.resolved
    device = rank_device(ctx, r["device"])
    if not isinstance(plan.model, Path):  # the API's torch module or onnxruntime session
        from macs_audit.models.in_memory import predictor_of

        return predictor_of(plan.model, plan.flags, device=device, precision=r["precision"])
    from macs_audit.models.predictor import load_predictor

    return load_predictor(
        plan.model,
        plan.flags,
        device=device,
        allow_unsafe_pickle=r["trust_pickled"],
        debug=debug,
        precision=r["precision"],
        class_prompts=r["class_prompts"],
        provider=r["provider"],
    )


def _load_reference(plan: AuditPlan, predictor: Predictor, ctx: Context, debug: bool) -> Predictor | None:
    """The --reference model on the same device, at full precision (an fp16 or bf16 run against fp32 is what
    parity measures), with the same class prompts; checked against the candidate before the data is read."""
    r = plan.resolved
    if r["reference"] is None:
        return None
    from macs_audit.auditing.parity import check_pair, load_reference

    reference = load_reference(
        r["reference"],
        plan.flags,
        plan.reference_settings,
        device=rank_device(ctx, r["device"]),
        allow_unsafe_pickle=r["trust_pickled"],
        debug=debug,
        class_prompts=r["class_prompts"],
        provider=r["reference_provider"],
    )
    check_pair(reference, predictor)  # run_audit pairs them again and reports what the pairing said
    return reference


def load_audit(plan: AuditPlan, ctx: Context = SINGLE, *, debug: bool = False) -> LoadedAudit:
    """Load what `plan` names: the model, its reference, the data (in the model's preprocessing) and the OOD,
    unlabeled, natural-shift and ReaL-label inputs. `debug` lets the libraries' warnings through."""
    from macs_audit.auditing.classes import match_classes
    from macs_audit.data.label_space import check_class_map_used, load_mapped_sets
    from macs_audit.data.metadata import read_metadata
    from macs_audit.data.real_labels import load_real_labels
    from macs_audit.models.predictor import check_prompts_read
    from macs_audit.report import load_report

    r = plan.resolved
    metadata = read_metadata(r["metadata"]) if r["metadata"] is not None else None  # a bad table fails first
    predictor = _load_model(plan, ctx, debug)
    reference = _load_reference(plan, predictor, ctx, debug)
    check_prompts_read(r["class_prompts"], predictor, reference)
    if plan.in_memory_data is not None:
        source, data_info = plan.in_memory_data, dict[str, Any]()
    else:
        source, data_info = load_model_data(plan.data, predictor.config)

    def unlabeled(path: Path | None) -> Source | None:  # --ood-data and --unlabeled: labels not needed
        return load_model_data(DataSpec(path, labeled=False), predictor.config)[0] if path is not None else None

    config = predictor.config
    map_name = str(r["class_map"])
    inputs = AuditInputs(
        ood_source=unlabeled(r["ood_data"]),
        unlabeled_source=unlabeled(r["unlabeled"]),
        shift_sets=tuple(
            load_mapped_sets(
                list(plan.shift_sets),
                predictor.num_classes or source.num_classes,
                config,
                class_map=plan.class_map,
                class_map_name=map_name,
            )
        ),
        class_map=plan.class_map,
        class_map_name=map_name,
        real_labels=load_real_labels(source, r["real_labels_file"])
        if r["real_labels"] or r["real_labels_file"]
        else None,
        corruption_baseline=load_report(r["corruption_baseline"]) if r["corruption_baseline"] else None,
        feature_fit_source=_labelled(r["feature_fit_data"], config),
        metadata=metadata,
    )
    if plan.class_map is not None:  # a map that names no class, then --data matched as run_audit does
        matched = functools.partial(match_classes, predictor, source, plan.class_map, map_name)
        check_class_map_used(plan.class_map, map_name, source, matched, inputs.shift_sets)
    return LoadedAudit(predictor, reference, source, data_info, inputs)


def _labelled(path: Path | None, config: Any) -> Source | None:
    """A labelled data set in the model's preprocessing (--feature-fit-data), or None where not given."""
    return load_model_data(DataSpec(path), config)[0] if path is not None else None


def parse_correction(value: str) -> str:
    """--slice-correction: one of metrics.slices.CORRECTIONS (UsageError otherwise)."""
    from macs_audit.metrics.slices import CORRECTIONS

    if value not in CORRECTIONS:
        raise UsageError(f"--slice-correction must be one of {', '.join(CORRECTIONS)}, got {value!r}")
    return value


def parse_features(value: str) -> str:
    """--features: auto, on or off (UsageError otherwise)."""
    if value not in FEATURE_MODES:
        raise UsageError(f"--features must be one of {', '.join(FEATURE_MODES)}, got {value!r}")
    return value


def run_planned(
    plan: AuditPlan,
    loaded: LoadedAudit,
    *,
    progress: ProgressFn | None = None,
    ctx: Context = SINGLE,
    on_warning: Callable[[str], None] | None = None,
) -> AuditResult:
    """Audit what `plan` loaded; the report records the settings (each option's value and source, the spec)."""
    from macs_audit.report import Settings

    result = run_audit(
        loaded.predictor,
        loaded.source,
        plan.options,
        loaded.inputs,
        data_info=loaded.data_info,
        reference=loaded.reference,
        context=RunContext(progress, ctx, on_warning),
    )
    result.report.settings = Settings.from_dict(plan.resolved.record())
    return result
