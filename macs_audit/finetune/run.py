"""A fine-tuning run from files to files: open the model, audit it, train it, write it, audit what was written.

OUT receives NAME.safetensors (or NAME.pt for TorchScript and pickled modules, kept in their format),
NAME.json (the sidecar), NAME.onnx, checkpoint.pt, finetune_config.json and the before/after audit
(before_after). Unless `temperature` is off, the run ends calibrated: a temperature fitted on the
validation split it held out is folded into the written model (the sidecar and the config record it),
when it beats no temperature on a held-out part of that split (else T = 1, with a warning).
The other fix is written beside it for comparison: NAME_temperature_only.* is the start model with a
temperature fitted on the same validation split, audited on the same evaluation data, so the
before/after table shows whether fine-tuning was worth its cost. Every file is written atomically, and
they land together: a run that fails leaves none of them (but its checkpoint, which --resume continues), and an
output it was to replace (--force) as it was.
Under torchrun (`ctx`) every rank trains and audits its shard; rank 0 alone writes. Nothing here
prints: progress goes to the callback. OUT is checked before anything is loaded: none of its files
may be an input (the model, its sidecar, the data), and existing outputs are replaced only with
`force` (or `resume`, which continues that run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from pathlib import Path

from macs_audit import distributed
from macs_audit.atomic import all_or_nothing, write_text
from macs_audit.auditing import DEFAULT_CONTEXT, AuditOptions, Loop, RunContext, evaluate_view, sized
from macs_audit.auditing.classes import in_model_order, matching_note, matching_record
from macs_audit.before_after import (
    AFTER,
    BEFORE,
    BEFORE_AFTER_FILES,
    TEMPERATURE_ONLY,
    TEMPERATURE_ONLY_FILE,
    BeforeAfter,
    Fix,
    ModelLoading,
    audit_model,
    write_before_after,
)
from macs_audit.calibrators.selection import choose_on_holdout
from macs_audit.calibrators.temperature import TemperatureScaling, optimal_temperature, temperature_nll
from macs_audit.compare import Comparison
from macs_audit.data.loading import DataSpec, load_model_data
from macs_audit.data.sources import CIFAR10_CLASSES, Source
from macs_audit.errors import UsageError
from macs_audit.finetune.options import FinetuneOptions
from macs_audit.inputs import run_inputs, writes_folder
from macs_audit.models.export import (
    check_writable,
    export_if_possible,
    model_files,
    weights_path,
    write_sidecar,
    write_weights,
)
from macs_audit.models.predictor import load_torch_predictor
from macs_audit.outputs import check_folder
from macs_audit.progress import ProgressFn
from macs_audit.report import Report

CHECKPOINT_FILE = "checkpoint.pt"
RUN_CONFIG_FILE = "finetune_config.json"  # the run's record: options, model, data, split, audit settings, history
BASELINE_SUFFIX = "_temperature_only"  # NAME_temperature_only.*: the start model with the validation temperature
# What the temperatures are fitted on: the split held out of --data, or the --val-data set.
VALIDATION_SPLIT = "validation split held out of the training data"
VAL_DATA = "--val-data set"


def output_names(name: str) -> list[str]:
    """The files a run writes into OUT besides its checkpoint: NAME's weights (.safetensors, or .pt for
    TorchScript and pickled modules), sidecar and ONNX export, the temperature-only start model's weights,
    sidecar and ONNX export, the run's config and the audits."""
    return [
        *model_files(name, onnx_file=True),
        *model_files(name + BASELINE_SUFFIX, onnx_file=True),
        RUN_CONFIG_FILE,
        *BEFORE_AFTER_FILES,
        TEMPERATURE_ONLY_FILE,
    ]


def validation_temperature(
    predictor,
    val_source: Source,
    batch_size: int,
    progress: ProgressFn | None,
    fit_data: str = VALIDATION_SPLIT,
    seed: int = 0,
) -> dict:
    """Fit T on the predictor's logits of the validation data (as the audit reads them); the fit's record, with
    the model's accuracy there (for the contamination check). `temperature` is the T to fold: the one fitted on
    all of the data when it beats the uncalibrated model on a held-out part of it (calibrators.selection.
    choose_on_holdout, seeded by `seed`, as `calibrate` decides), else 1 (`kept_uncalibrated` says why, also
    when the data is too small to hold a part out); `fitted_temperature` is the fitted T either way."""
    val_source, space = in_model_order(predictor, val_source)  # labels as output indices (run_finetune's are)
    k = space.num_outputs
    loop = Loop(batch_size, progress=progress)
    _, logits = evaluate_view(predictor, val_source, k, loop, description="fit temperature", keep_logits=True)
    scaling = None
    try:
        selection, scaling = choose_on_holdout(logits, val_source.labels, ["temperature"], seed=seed)
        kept = None if scaling is not None else selection.reason
    except UsageError:  # a class-stratified part of so few images is empty: nothing to check T on
        kept = f"{len(val_source):,} images are too few to hold out a part of them to check the temperature on"
    # The T fitted on all of the data: the chosen map's where one was chosen (fitted again on all of it).
    fitted = (
        scaling.temperature
        if isinstance(scaling, TemperatureScaling)
        else optimal_temperature(logits, val_source.labels)
    )
    t = fitted if kept is None else 1.0  # never fold a T not shown to beat no temperature
    return {
        "temperature": t,
        "fitted_temperature": fitted,
        "kept_uncalibrated": kept,
        "fit_data": fit_data,
        "n": len(val_source),
        "accuracy": float((logits.argmax(axis=1) == val_source.labels).mean()),
        "nll_before": temperature_nll(logits, val_source.labels, 1.0),
        "nll_after": temperature_nll(logits, val_source.labels, t),
    }


def with_temperature(model, temperature: float, fmt: str, meta: dict, debug: bool = False):
    """(copy of `model` whose logits are divided by `temperature`, where it was folded), on CPU: folded into the
    classifier's weights (the same architecture and keys), or for TorchScript a scripted wrapper that divides.
    `debug` lets TorchScript's deprecation warnings through."""
    import copy

    import torch

    from macs_audit.models.backend import library_warnings
    from macs_audit.models.calibrated_torch import fold_temperature_torch, temperature_wrapper

    model = copy.deepcopy(model).cpu().eval()  # the caller's model stays where it is
    if fmt == "torchscript":  # no Python head to edit
        with library_warnings(debug):
            scripted = torch.jit.script(temperature_wrapper(model, temperature))
        return scripted, "TorchScript wrapper (logits / T)"
    example = torch.randn(4, len(meta["mean"]), *meta["input_size"], generator=torch.Generator().manual_seed(0))
    return fold_temperature_torch(model, temperature, example)


def contamination_warnings(fit: dict, before: Report, fit_name: str, temperature: bool, force: bool) -> list[str]:
    """[] when the start model's scores on the temperature's data show nothing; else UsageError (one line,
    naming --val-data), or with `force` (or no temperature folded) the warning that the run goes on with it."""
    from macs_audit.calibrators.held_out import Scores, contamination

    fitted = Scores(fit["accuracy"], fit["n"], nll=fit["nll_before"])
    reason = contamination(fitted, Scores.clean_of(before), fit["fitted_temperature"], fit_name)
    if reason is None:
        return []
    if temperature and not force:
        raise UsageError(
            f"the {fit_name} looks trained on: {reason}; fit the temperature on images the model never saw "
            "(--val-data), or fold it anyway with --force-temperature"
        )
    return [f"the {fit_name} looks trained on: {reason}; the temperatures fitted on it are not a fix"]


@dataclasses.dataclass
class FinetuneRun:
    weights: Path  # the fine-tuned weights in OUT
    onnx: Path | None  # its ONNX export; None when the model could not be exported
    onnx_skipped: str | None  # why not (a TorchScript model cannot be traced for export)
    before: Report
    after: Report
    comparison: Comparison | None  # after against before; None on ranks other than 0, which write nothing
    title: str
    temperature: float | None  # folded into the written model; None with temperature off
    baseline: Report | None = None  # the start model with temperature scaling only (NAME_temperature_only)
    baseline_temperature: float | None = None
    fixes: list[Fix] = dataclasses.field(default_factory=list)  # before, temperature only, fine-tuned
    # A forced temperature on contaminated data; a fitted T not folded because it did not beat no temperature.
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # how the training data's classes met the outputs
    history: list[dict] = dataclasses.field(default_factory=list)  # one entry per epoch, finetune_config.json's


@dataclasses.dataclass(frozen=True)
class FinetuneData:
    """The run's data: trained on `train` (less the validation split it holds out), audited before and after on
    `eval_data`, the temperatures fitted on `val_data` where given (images the start model never saw), else on the
    validation split."""

    train: DataSpec
    eval_data: DataSpec
    val_data: DataSpec | None = None

    @property
    def paths(self) -> list[Path | None]:
        return [self.train.path, self.eval_data.path, *([self.val_data.path] if self.val_data else [])]


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """How the run writes and what it folds: NAME.* in OUT (`name`), existing outputs replaced only with `force`
    (or `resume`, which continues the run of OUT's checkpoint); a validation temperature folded into the written
    model unless `temperature` is off, also where its data looks trained on with `force_temperature`; the models
    loaded by `loading` (its device: this rank's)."""

    name: str = "model"
    resume: bool = False
    force: bool = False
    temperature: bool = True
    force_temperature: bool = False
    loading: ModelLoading = ModelLoading()


@dataclasses.dataclass(frozen=True)
class StartModel:
    """What the written models take of the start model: its format, every config value (the example input of a
    temperature fold, the run's record), the values someone declared (sidecars, ONNX metadata: never a default),
    its file and the file's hash."""

    format: str
    meta: dict
    declared: dict
    path: Path
    sha256: str

    @classmethod
    def of(cls, predictor, model: Path) -> StartModel:
        cfg = predictor.config
        meta = {**cfg.as_metadata(), "output": "logits"}
        declared = {**cfg.as_metadata(declared_only=True), "output": "logits"}
        return cls(predictor.info["format"], meta, declared, model, predictor.info["sha256"])


@dataclasses.dataclass(frozen=True)
class RunData:
    """The run's data sets as loaded for the model: the training set (labels as output indices), the evaluation
    set, the temperatures' data and what it is called, with what the loaders and the class matching said."""

    train: Source
    train_info: dict
    eval_source: Source
    eval_info: dict
    val: Source
    fit_name: str  # VAL_DATA or VALIDATION_SPLIT
    notes: list[str]  # how the data's classes met the outputs, where not in order
    class_matching: dict


def check_run_outputs(model: Path, flags: dict, data: FinetuneData, out: Path, settings: FinetuneSettings) -> list:
    """OUT checked before anything is loaded: none of its files an input, no checkpoint there without `resume`
    (continued only as the user asked), existing outputs replaced only with `force` or `resume`. The Hugging Face
    folders the run writes (NAME, NAME_temperature_only), replaced as a whole."""
    from macs_audit.finetune.loop import check_resume  # torch

    arch = flags.get("arch")
    inputs = run_inputs(models=[(model, arch)], data=data.paths)  # every file read: never replaced, --force or not
    check_folder(out, [CHECKPOINT_FILE], inputs=inputs)
    checkpoint = out / CHECKPOINT_FILE
    if checkpoint.exists() and not settings.resume:
        raise UsageError(
            f"{out} already holds a fine-tuning checkpoint; pass --resume to continue it or choose another --out"
        )
    check_resume(checkpoint, settings.resume)  # the user's own request first: before any model loads or is written
    name = settings.name
    folders = [name, name + BASELINE_SUFFIX] if writes_folder(model, arch) else []
    check_folder(out, output_names(name), inputs=inputs, force=settings.force or settings.resume, folders=folders)
    return folders


def load_run_data(predictor, data: FinetuneData, options: FinetuneOptions) -> RunData:
    """The run's data for `predictor`: training labels read as output indices (classes matched by name, another
    order converted, a subset refused), too few images to train refused now, not after the first audit."""
    cfg = predictor.config
    train_source, train_info = load_model_data(data.train, cfg)
    train_source, space = in_model_order(predictor, train_source)
    notes = [] if space.is_identity else [matching_note(space, train_source)]
    class_matching = matching_record(space, predictor, train_source)
    options.checked_split(train_source.labels)
    eval_source, eval_info = load_model_data(data.eval_data, cfg)
    if data.val_data is None:
        val_source = train_source.subset(options.split(train_source.labels)[0])
        return RunData(
            train_source, train_info, eval_source, eval_info, val_source, VALIDATION_SPLIT, notes, class_matching
        )
    val_source, val_space = in_model_order(predictor, load_model_data(data.val_data, cfg)[0])  # read like --data
    notes += [] if val_space.is_identity else [matching_note(val_space, val_source)]
    return RunData(train_source, train_info, eval_source, eval_info, val_source, VAL_DATA, notes, class_matching)


def write_temperature_only(model, fit: dict, weights: Path, start: StartModel, debug: bool) -> None:
    """The start model with the validation temperature `fit` folded in, its sidecar and its ONNX export beside it,
    as the fine-tuned model's: either fix deploys the same way. Before training, which changes the start model's
    weights in place."""
    scaled, folded_into = with_temperature(model, fit["temperature"], start.format, start.meta, debug)
    write_weights(scaled, weights, start.format)
    calibration = {"method": "temperature", **fit, "folded_into": folded_into}
    write_sidecar(
        weights.with_suffix(".json"),
        {**start.declared, "calibration": {**calibration, "from": start.path.name, "from_sha256": start.sha256}},
    )
    export_if_possible(scaled, weights.with_suffix(".onnx"), start.declared, start.format)


def write_finetuned(trained, fit: dict | None, out: Path, name: str, summary: dict, start: StartModel, debug: bool):
    """The fine-tuned model as NAME.* in OUT, with the validation temperature `fit` folded in (none: not fitted),
    its sidecar (the run's `summary`) and its ONNX export; (weights, why the export was skipped or None)."""
    weights = weights_path(out, name, start.format)
    folded_into = None
    if fit is not None:
        trained, folded_into = with_temperature(trained, fit["temperature"], start.format, start.meta, debug)
    write_weights(trained, weights, start.format)
    sidecar = {**start.declared, "finetune": summary}
    if fit is not None:
        sidecar["calibration"] = {"method": "temperature", **fit, "folded_into": folded_into}
    write_sidecar(out / f"{name}.json", sidecar)
    return weights, export_if_possible(trained, out / f"{name}.onnx", start.declared, start.format)


def run_record(
    options: FinetuneOptions,
    audit: AuditOptions,
    start: StartModel,
    data: RunData,
    result,
    temperatures: dict,
    started: float,
) -> str:
    """The run's record, finetune_config.json's text: its options, model, data, split, audit settings, steps,
    `temperatures` (the fine-tuned model's and the temperature-only start model's), where it resumed, its history
    and its time since `started`."""
    record = {
        "options": options.to_dict(),
        "model": {**start.meta, "from": str(start.path), "from_sha256": start.sha256, "format": start.format},
        "data": {
            "source": data.train.name,
            "n": len(data.train),
            **data.train_info,
            "class_matching": data.class_matching,
        },
        "split": result.split,
        "eval_data": {"source": data.eval_source.name, "n": len(data.eval_source), **data.eval_info},
        "audit": {
            "batch_size": audit.batch_size,
            "bootstrap": audit.bootstrap,
            "calibration_split": audit.calibration_split,
            "seed": audit.seed,
            "perturbations": list(audit.perturbations),
            "sensitivity_samples": audit.sensitivity_samples,
            "corruptions": list(audit.corruptions),
            "severities": list(audit.severities),
        },
        "steps": result.steps,
        **temperatures,
        "resumed_from_epoch": result.resumed_from_epoch,
        "resumed_from_step": result.resumed_from_step,
        "history": result.history,
        "seconds_this_run": round(time.time() - started, 1),
    }
    return json.dumps(record, indent=2) + "\n"


def model_options(options: FinetuneOptions, predictor, data: FinetuneData) -> FinetuneOptions:
    """`options` with the model's preprocessing and device, validated; UsageError where the before/after audit
    would read the built-in CIFAR-10 test set for a model of other classes."""
    cfg = predictor.config
    if data.eval_data.path is None and cfg.num_classes not in (None, len(CIFAR10_CLASSES)):
        raise UsageError(
            f"the model has {cfg.num_classes} classes and the before/after audit reads the built-in CIFAR-10 test "
            "set unless --eval-data names another: pass --eval-data with held-out images of the model's classes "
            "(images it was not trained on, not --data)"
        )
    return dataclasses.replace(
        options,
        input_size=tuple(cfg.input_size),
        mean=tuple(cfg.mean),
        std=tuple(cfg.std),
        device=predictor.info["device"],
    ).validate()


def audit_written(weights: Path, baseline_weights: Path, audits: BeforeAfter) -> tuple[Report, Report]:
    """The audits of the written models: the fine-tuned one (after) and the temperature-only start model."""
    return audit_model(weights, {}, AFTER, audits), audit_model(baseline_weights, {}, TEMPERATURE_ONLY, audits)


def unfolded_warnings(fit_name: str, fits: dict[str, dict | None]) -> list[str]:
    """A warning per temperature not folded because it did not beat no temperature on a held-out part of its data
    (`fits`: label -> the fit, None where none was fitted)."""
    return [
        f"the temperature fitted on the {fit_name} ({label}, T = {fit['fitted_temperature']:.3f}) is not folded "
        f"(T = 1): {fit['kept_uncalibrated']}; fit it on more held-out data (--val-data)"
        for label, fit in fits.items()
        if fit is not None and fit["kept_uncalibrated"]
    ]


def run_finetune(
    model: Path,
    flags: dict,
    data: FinetuneData,
    out: Path,
    options: FinetuneOptions,
    audit: AuditOptions,
    settings: FinetuneSettings = FinetuneSettings(),
    *,
    context: RunContext = DEFAULT_CONTEXT,
) -> FinetuneRun:
    """Fine-tune the PyTorch `model` on `data.train` with `options` (its preprocessing and device are taken from
    the model), write it to `out` as NAME.* (with a validation temperature folded in unless settings.temperature
    is off), write the start model with temperature scaling only as NAME_temperature_only.*, and audit
    all three on `data.eval_data`.

    The temperatures are fitted on `data.val_data` when given (images the start model never saw), else on the
    validation split held out of the training data, which is honest only when the start model was trained without
    it. When the start model's scores on that data show it was trained on (calibrators.held_out.contamination),
    the run stops before writing anything (UsageError naming --val-data), unless settings.force_temperature: then
    it folds the temperature anyway, says so in `warnings`, and shows no "which fix" comparison built on it.

    Raises UsageError for an ONNX model, a checkpoint in `out` without settings.resume, an output that would
    replace an input, or existing outputs without settings.force or settings.resume; InputError for training data
    (or validation data) whose classes do not match the model's outputs or are a subset of them. Classes in another
    order are matched by name and their labels read as output indices (auditing/classes.py, `in_model_order`).
    """
    from macs_audit.finetune.loop import finetune  # torch

    folders = check_run_outputs(model, flags, data, out, settings)
    loading, ctx, name = settings.loading, context.ctx, settings.name
    predictor = load_torch_predictor(model, flags, loading.device, loading.trust_pickled, debug=loading.debug)
    check_writable(predictor.info["format"])  # a torch.export program, a zero-shot head: before any training
    cfg = predictor.config
    audit = sized(audit, cfg)  # the validation temperature's batches and the run's record of the audits'
    options = model_options(options, predictor, data)
    loaded = load_run_data(predictor, data, options)
    training = "training from scratch" if options.from_scratch else "fine-tuning"
    title = f"{options.objective} {training} of {model.name}: before / after on {loaded.eval_source.name}"
    distributed.barrier(ctx)  # every rank has checked for an old checkpoint before rank 0 writes one
    started = time.time()
    # The three audits, alike but for the model; the comparison's paired intervals from the start and fine-tuned
    # models' clean outputs.
    audits = BeforeAfter(loaded.eval_source, loaded.eval_info, audit, loading, context)
    before = audit_model(model, flags, BEFORE, audits)
    start = StartModel.of(predictor, model)
    # Every rank computes the same temperatures from the whole validation split; rank 0 writes.
    fit_temperature = functools.partial(
        validation_temperature,
        predictor,
        loaded.val,
        audit.batch_size,
        context.progress,
        loaded.fit_name,
        options.split_seed,
    )
    baseline_fit = fit_temperature()
    # From scratch the trained model never sees the split, so only the start model's own T would be unfair.
    folds_it = settings.temperature and not options.from_scratch
    warnings = contamination_warnings(baseline_fit, before, loaded.fit_name, folds_it, settings.force_temperature)
    # What it writes lands together: a run that fails from here on leaves none of it (the checkpoint stays, for
    # --resume), and an output it replaces comes back as it was.
    written = [out / file for file in [*output_names(name), *folders]]
    with all_or_nothing(written) if ctx.is_main else contextlib.nullcontext():
        baseline_weights = weights_path(out, name + BASELINE_SUFFIX, start.format)
        if ctx.is_main:  # before training, which changes the start model's weights in place
            out.mkdir(parents=True, exist_ok=True)  # only now; all_or_nothing removes it again on a failure
            write_temperature_only(predictor.model, baseline_fit, baseline_weights, start, loading.debug)
        if options.from_scratch:  # the start model stays the comparison; training starts from its architecture's init
            from macs_audit.finetune.scratch import random_initialisation

            random_initialisation(predictor.model, cfg.arch, loaded.train.num_classes, options.seed, cfg.model_args)
        checkpoint = out / CHECKPOINT_FILE
        result = finetune(
            predictor.model.train(), loaded.train, options, context.progress, checkpoint, settings.resume, ctx
        )
        # The loop trained predictor.model in place, so the predictor now reads the fine-tuned model.
        final_fit = fit_temperature() if settings.temperature else None
        t_final, t0 = final_fit["temperature"] if final_fit is not None else None, baseline_fit["temperature"]
        trained = result.model.cpu().eval()
        if not ctx.is_main:  # rank 0 writes the outputs; the others join the sharded audit of them
            distributed.barrier(ctx)
            weights = weights_path(out, name, start.format)
            after, baseline = audit_written(weights, baseline_weights, audits)
            return FinetuneRun(weights, None, None, before, after, None, title, t_final, baseline, t0)
        summary = {
            "objective": options.objective,
            "from": model.name,
            "from_sha256": start.sha256,
            "steps": result.steps,
            "final_val": result.history[-1]["val"] if result.history else None,  # before the temperature
            "temperature": t_final,  # folded into these weights; null: none (--no-temperature)
        }
        weights, onnx_skipped = write_finetuned(trained, final_fit, out, name, summary, start, loading.debug)
        temperatures = {"temperature": final_fit, "temperature_only": {**baseline_fit, "model": baseline_weights.name}}
        write_text(out / RUN_CONFIG_FILE, run_record(options, audit, start, loaded, result, temperatures, started))
        distributed.barrier(ctx)  # the weights are written before the other ranks read them
        after, baseline = audit_written(weights, baseline_weights, audits)
        fixes = (
            []
            if warnings  # the temperature's data looks trained on
            else [  # no "which fix" comparison built on a temperature fitted on memorised data
                Fix("start model", before),
                Fix(f"temperature scaling only, T = {t0:.3f}", baseline),
                Fix(
                    f"{options.objective} {training}" + (f" + T = {t_final:.3f}" if t_final is not None else ", no T"),
                    after,
                ),
            ]
        )
        # A T that does not beat no temperature on a held-out part of its data is not folded.
        warnings += unfolded_warnings(loaded.fit_name, {"start model": baseline_fit, "trained model": final_fit})
        comparison = write_before_after(out, before, after, title, fixes, audits.outputs)
        write_text(out / TEMPERATURE_ONLY_FILE, baseline.to_json())
        onnx_path = None if onnx_skipped else out / f"{name}.onnx"
        return FinetuneRun(
            weights,
            onnx_path,
            onnx_skipped,
            before,
            after,
            comparison,
            title,
            t_final,
            baseline,
            t0,
            fixes,
            warnings,
            loaded.notes,
            result.history,
        )
