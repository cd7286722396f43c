"""Options and parsers shared by the commands: one definition, one help text each. The options of the commands
that read saved reports (gate, report, compare; evaluate's --format and --output) are cli/report_options.py's:
this module's parsers reach the audit and the models, which those commands never import (pyproject's contract)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from macs_audit.errors import UsageError
from macs_audit.views.corruptions.table import PARAMETER_SETS

if TYPE_CHECKING:
    from macs_audit.audit import AuditOptions

# Path options and arguments pass readable=False: click would otherwise check each existing path with
# os.access and stop an unreadable one as a usage error (exit 2) before the command starts. The loaders
# report it instead, as the input error it is (exit 3, docs/errors.md), in the words they use for any
# file they cannot read; outputs are checked by macs_audit.outputs before the work.
MODEL_HELP = (
    "Model: .onnx, TorchScript (.pt), a torch.export program (.pt2), a state dict (.pt/.pth/.safetensors) with "
    "--arch, a Hugging Face save_pretrained or timm save_for_hf folder, or hf-hub:ORG/NAME from the local cache."
)

# Model options shared by evaluate, finetune, calibrate and export (one definition, one help text).
ARCH_OPTION = typer.Option(
    None,
    "--arch",
    help="Architecture of a state dict / safetensors checkpoint: a timm name, torchvision:NAME, open_clip:NAME "
    "(with --class-prompts) or hf-hub:ORG/NAME (a timm config in the local Hugging Face cache).",
)
CLASS_PROMPTS_OPTION = typer.Option(
    None,
    "--class-prompts",
    readable=False,
    help='OpenCLIP zero-shot: a JSON file {"classes": [...], "templates": ["a photo of a {}.", ...]}.',
)
PRECISION_OPTION = typer.Option(
    "fp32",
    "--precision",
    help=(
        "Torch models on CUDA: fp32 (the default), or bf16 / fp16 autocast for the audits (the model evaluated, "
        "or the before/after audits; a --reference runs at fp32). Recorded in the report's model.precision."
    ),
)
NUM_CLASSES_OPTION = typer.Option(None, "--num-classes", help="Number of classes of the checkpoint.")
INPUT_SIZE_OPTION = typer.Option(None, "--input-size", help="Model input size H,W (or one number).")
MEAN_OPTION = typer.Option(None, "--mean", help="Per-channel mean, e.g. 0.4914,0.4822,0.4465.")
STD_OPTION = typer.Option(None, "--std", help="Per-channel std, e.g. 0.2470,0.2435,0.2616.")
CROP_PCT_OPTION = typer.Option(
    None,
    "--crop-pct",
    help="Image folders: resize the shorter side to input size / F, then centre-crop (timm's crop_pct, e.g. 0.875). "
    "Default: the model's sidecar or metadata, else resize whole.",
)
INTERPOLATION_OPTION = typer.Option(
    None,
    "--interpolation",
    help="How images are resized to the input size: bilinear, bicubic (antialiased, as Pillow), "
    "bilinear-no-antialias, bicubic-no-antialias or nearest. Default: the model's config, else bilinear "
    "(bicubic with --crop-pct).",
)
MODEL_OUTPUT_OPTION = typer.Option(
    None, "--model-output", help="What the model returns: auto, logits or probabilities."
)
TRUST_PICKLED_OPTION = typer.Option(
    False,
    "--trust-pickled-model-code",
    help="Allow loading a fully pickled torch module. This RUNS CODE from the file: only for files you trust.",
)

# Images per model call of the audits (evaluate, calibrate; finetune's --audit-batch-size): by the input size.
BATCH_SIZE_HELP = (
    "Images per model call. Default: by the model's input size, the largest of 500, 256, 128, 64, ... whose "
    "float32 inputs times 32 (for the activations) fit 2 GiB: 500 up to 96x96 (CIFAR's 32x32), 64 at 224x224. "
    "The report's runtime.batch_size records it."
)
BATCH_SIZE_OPTION = typer.Option(None, "--batch-size", min=1, help=BATCH_SIZE_HELP)

# The before/after audit of finetune and calibrate, declared once for both.
EVAL_DATA_OPTION = typer.Option(
    None,
    "--eval-data",
    readable=False,
    help="Evaluation data for the before/after audit (same formats as --data). Default: built-in CIFAR-10 test set.",
)
EVAL_LIMIT_OPTION = typer.Option(None, "--eval-limit", help="Audit a class-stratified subset of N images.")
BOOTSTRAP_OPTION = typer.Option(200, "--bootstrap", min=0, help="Bootstrap resamples of the audits (0 disables).")
CALIBRATION_SPLIT_OPTION = typer.Option(
    0.2, "--calibration-split", help="Audit: fraction held out to fit a temperature (0 disables)."
)
PERTURBATIONS_OPTION = typer.Option(
    "noise+blur",
    "--perturbations",
    help="Audit perturbation views (noise, blur, noise+blur, all or none); noise+blur gives the robust accuracy.",
)
SENSITIVITY_SAMPLES_OPTION = typer.Option(
    500, "--sensitivity-samples", min=0, help="Audit: images for the input sensitivity L^ (0 disables)."
)
CORRUPTIONS_OPTION = typer.Option(
    None,
    "--corruptions",
    help="Audit CIFAR-C grid: all (the 19; alias cifar-c), benchmark (the 15), or names (default: none).",
)
SEVERITIES_OPTION = typer.Option("1-5", "--severities", help="Audit: corruption severities, e.g. 1-5 or 3.")
CORRUPTION_SET_OPTION = typer.Option(
    "auto",
    "--corruption-set",
    help="Corruption parameters: "
    + ", ".join(f"{pset.name} ({pset.size} px)" for pset in PARAMETER_SETS.values())
    + ", or auto (the set nearest the size of the images corrupted; an error when none is near).",
)
# Trust beyond calibration (evaluate): conformal sets, OOD detection, accuracy without labels.
COVERAGE_OPTION = typer.Option(
    0.9, "--coverage", help="Target coverage of the conformal prediction sets fitted on the calibration split."
)
CONFORMAL_SPLIT_OPTION = typer.Option(
    None,
    "--conformal-split",
    help="Fit the conformal sets on their own class-stratified fraction of the images the temperature is not "
    "fitted on (scored on the rest), instead of on the temperature's part.",
)
RAPS_OPTION = typer.Option(
    None,
    "--raps",
    help="RAPS's regularisation as K_REG,PENALTY (default: chosen by Angelopoulos et al.'s rule on 30% of the "
    "conformal fit part).",
)
SKIP_DAMAGED_SHARDS_OPTION = typer.Option(
    False,
    "--skip-damaged-shards",
    help="Leave out a shard of --data that is cut short or not a whole tar, instead of failing; the report's "
    "data.damaged_shards_skipped counts them.",
)
OOD_DATA_OPTION = typer.Option(
    None,
    "--ood-data",
    readable=False,
    help="A second data set to tell apart from --data (OOD detection: AUROC, AUPR, FPR at 95% TPR); any format "
    "--data reads, labels not needed (an .npz with only x, a folder of images).",
)
PROVIDER_OPTION = typer.Option(
    None,
    "--provider",
    help="onnxruntime execution provider of an ONNX MODEL: cpu, cuda or tensorrt (default: cuda on a GPU device, "
    "else cpu). The report's runtime records the one that ran.",
)
REFERENCE_PROVIDER_OPTION = typer.Option(
    None, "--reference-provider", help="The --reference model's execution provider (as --provider)."
)
REFERENCE_OPTION = typer.Option(
    None,
    "--reference",
    readable=False,
    help="The model MODEL was made from (the float ONNX export of an FP16 or INT8 build, say): scored on the same "
    "images of every view in the same pass, for the report's parity section (agreement, flips, metric changes "
    "with paired intervals). The model flags apply to both; a setting one model declares and the other does not "
    "is taken by both (said in a warning); different declared ones are refused (see --reference-config).",
)
REFERENCE_CONFIG_OPTION = typer.Option(
    None,
    "--reference-config",
    readable=False,
    help="The --reference model's own settings as a sidecar JSON (mean, std, input_size, crop_pct, ...; checked "
    "as a sidecar is): they win over the model flags and the reference's sidecar or metadata. Needed where both "
    "models declare a different mean or std; a model that declares none takes the other's.",
)
UNLABELED_OPTION = typer.Option(
    None,
    "--unlabeled",
    readable=False,
    help="Unlabeled images whose accuracy is estimated without labels (ATC, DoC), fitted on --data; formats as "
    "--ood-data.",
)
# Natural-shift sets (evaluate): image folders scored as views, their classes mapped to the model's outputs.
SHIFT_DATA_OPTION = typer.Option(
    None,
    "--shift-data",
    readable=False,
    help="A natural-shift set NAME=DIR (repeatable; e.g. imagenet-a=/data/imagenet-a): an ImageFolder whose "
    "classes (WordNet ids, the model's class names, or --class-map) map to the model's outputs; scored under the "
    "restricted and unrestricted conventions.",
)
CLASS_MAP_OPTION = typer.Option(
    None,
    "--class-map",
    readable=False,
    help="Map the classes of --data and of the --shift-data sets it names to model output indices: a JSON object "
    "{class: index} or CSV rows class,index (default: by the model's class names, WordNet id or output number).",
)
REAL_LABELS_OPTION = typer.Option(
    False,
    "--real-labels",
    help="Score the clean view against the ImageNet ReaL labels too (an ImageNet validation folder as --data, its "
    "images under their own names): ReaL accuracy and calibration beside the original labels'; timm's copy.",
)
REAL_LABELS_FILE_OPTION = typer.Option(
    None, "--real-labels-file", readable=False, help="The ReaL labels' JSON (real.json) instead of timm's copy."
)
# One --quiet for every command; evaluate also drops its tables when the report goes to --output.
QUIET_OPTION = typer.Option(
    False,
    "--quiet",
    "-q",
    help="No progress (no bar on a terminal, no lines in a log). evaluate with --output: the verdict line alone, "
    "no tables and no notes of what was written (warnings and errors still show).",
)
# Commands that write models (calibrate, export, finetune) refuse to replace an existing output without it.
FORCE_OPTION = typer.Option(
    False, "--force", help="Replace outputs that already exist (never the command's own inputs)."
)


def model_flags(
    arch: str | None,
    num_classes: int | None,
    input_size: str | None,
    mean: str | None,
    std: str | None,
    output_kind: str | None,
    crop_pct: float | None = None,
    interpolation: str | None = None,
) -> dict:
    """ModelConfig overrides from the command line (None = not given)."""
    return {
        "arch": arch,
        "num_classes": num_classes,
        "input_size": parse_size(input_size),
        "mean": parse_floats(mean, "--mean"),
        "std": parse_floats(std, "--std"),
        "output": output_kind,
        "crop_pct": crop_pct,
        "interpolation": interpolation,
    }


def audit_options(
    batch_size: int | None,
    calibration_split: float,
    bootstrap: int,
    seed: int,
    perturbations: str | None,
    sensitivity_samples: int,
    corruptions: str | None,
    severities: str | None,
    **more: Any,
) -> AuditOptions:
    """The AuditOptions of the flags shared by evaluate and the before/after audits (`batch_size` None: by the
    model's input size, audit.options.default_batch_size); `more` sets the others."""
    from macs_audit.audit import AuditOptions, check_calibration_split
    from macs_audit.audit.options import AUTO_BATCH_SIZE

    return AuditOptions(
        batch_size=AUTO_BATCH_SIZE if batch_size is None else batch_size,
        calibration_split=check_calibration_split(calibration_split),  # the core's range, checked before the model
        bootstrap=bootstrap,
        seed=seed,
        perturbations=parse_perturbations(perturbations),
        sensitivity_samples=sensitivity_samples,
        corruptions=parse_corruptions(corruptions),
        severities=parse_severities(severities),
        **more,
    )


def parse_floats(text: str | None, name: str) -> list[float] | None:
    """'0.5,0.25' -> [0.5, 0.25]; every value finite (float() reads 'nan' and 'inf', which no option means)."""
    if text is None:
        return None
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"{name} must be finite numbers, got {text!r}")
    return values


def parse_size(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        parts = [int(v) for v in text.lower().replace("x", ",").split(",") if v]
    except ValueError:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2:
        raise UsageError(f"--input-size must be H,W or one number, got {text!r}")
    from macs_audit.models.config import check_input_size

    check_input_size((parts[0], parts[1]), "--input-size")  # before anything of that size is allocated
    return parts


def parse_range(text: str | None, name: str, default: tuple[float, float]) -> tuple[float, float]:
    """'LO,HI' -> (LO, HI); None -> `default`."""
    values = parse_floats(text, name)
    if values is None:
        return default
    if len(values) != 2:
        raise UsageError(f"{name} must be LO,HI, got {text!r}")
    return values[0], values[1]


ALL = "all"


def parse_perturbations(text: str | None) -> tuple[str, ...]:
    from macs_audit.views.perturbation_params import EVAL_VIEWS

    if text is None or text.strip() in ("", "none"):
        return ()
    names = EVAL_VIEWS if text.strip() == ALL else tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise UsageError(f"--perturbations {text!r} names no perturbation; use {', '.join(EVAL_VIEWS)}, all or none")
    unknown = [n for n in names if n not in EVAL_VIEWS]
    if unknown:
        raise UsageError(f"unknown perturbation {unknown[0]!r}; choose from {', '.join(EVAL_VIEWS)}, all or none")
    return tuple(dict.fromkeys(names))


def parse_corruptions(text: str | None) -> tuple[str, ...]:
    """'all' (or its alias 'cifar-c', an older name: it meant all 19 for every parameter set) -> the 19;
    'benchmark' -> the 15; else a comma-separated list of names."""
    from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, CORRUPTIONS

    if text is None or text.strip() in ("", "none"):
        return ()
    text = text.strip()
    if text in ("cifar-c", ALL):
        return CORRUPTIONS
    if text == "benchmark":
        return BENCHMARK_CORRUPTIONS
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise UsageError(f"--corruptions {text!r} names no corruption; use all, benchmark, names, or none")
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown:
        raise UsageError(
            f"unknown corruption {unknown[0]!r}; use cifar-c, benchmark, or names from: {', '.join(CORRUPTIONS)}"
        )
    return tuple(dict.fromkeys(names))


def parse_corruption_set(text: str) -> str:
    """A parameter set's name or 'auto'."""
    text = text.strip()
    if text != "auto" and text not in PARAMETER_SETS:
        raise UsageError(f"--corruption-set must be auto or one of: {', '.join(PARAMETER_SETS)}; got {text!r}")
    return text


def parse_severities(text: str | None) -> tuple[int, ...]:
    """'1-5', '3', '1,3,5' -> sorted unique severities in 1..5 (each range's ends checked before it is expanded:
    '1-10000000000' is refused, not listed)."""
    text = (text or "1-5").replace(" ", "")
    bounds = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            bounds.append((int(lo), int(hi or lo)))
    except ValueError:
        raise UsageError(f"--severities must look like 1-5 or 1,3,5, got {text!r}") from None
    if any(lo < 1 or hi > 5 for lo, hi in bounds):
        raise UsageError(f"severities must lie in 1-5, got {text!r}")
    out = {severity for lo, hi in bounds for severity in range(lo, hi + 1)}
    if not out:
        raise UsageError(f"severities must lie in 1-5, got {text!r}")
    return tuple(sorted(out))


def parse_shift_data(values: list[str] | None) -> list[tuple[str, Path]]:
    """['imagenet-a=/data/a', ...] -> [('imagenet-a', Path('/data/a')), ...]; names unique and non-empty."""
    found: dict[str, Path] = {}
    for value in values or []:
        name, sep, folder = value.partition("=")
        name = name.strip()
        if not sep or not name or not folder:
            raise UsageError(f"--shift-data must be NAME=DIR (e.g. imagenet-a=/data/imagenet-a), got {value!r}")
        if name in found:
            raise UsageError(f"--shift-data names {name!r} twice; give each set its own name")
        found[name] = Path(folder)
    return list(found.items())
