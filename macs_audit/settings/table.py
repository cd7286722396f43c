"""Every option of every command, declared once: its flags, type, default, help, help panel and the commands
that take it. The CLI builds each command's parameters from this table (cli/parameters.py), the spec reader
validates `[tool.macs-audit.<command>]` against it (settings/spec.py), the Python API takes its names as
keyword arguments, and docs/options.md is written from it. A test fails when a command declares an option
outside the table, or a default here differs from the core value it names (`core`).

Free of the models, torch and the audit: the commands that only read reports (gate, report, compare, init)
import it too. So a help text that lists a registry of the models or the training (the INT8 targets, the
objectives) writes it out here, and a test checks it against the registry."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from macs_audit.formats import EXTENSIONS, FORMATS
from macs_audit.settings.presets import PRESETS
from macs_audit.text import or_list
from macs_audit.views.corruptions.table import PARAMETER_SETS
from macs_audit.views.perturbation_params import TRAIN_BLUR_RANGE, TRAIN_NOISE_RANGE

# The help panels, in the order `--help` lists them (cli/panels.py); an option names one.
DATA, MODEL, TRAINING, VIEWS, ANALYSIS, GATE, OUTPUTS, RUNTIME = (
    "Data",
    "Model",
    "Training",
    "View",
    "Analysis",
    "Gate",
    "Output",
    "Runtime",
)
PANELS = (DATA, MODEL, TRAINING, VIEWS, ANALYSIS, GATE, OUTPUTS, RUNTIME)

# Where a value came from, lowest precedence last: a flag (or an API keyword) wins over the spec, the spec over a
# preset, a preset over the default.
FLAG, SPEC, PRESET, DEFAULT = "flag", "spec", "preset", "default"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option. `flags`: its spellings, the first the one messages name (`--augment/--no-augment` for a switch
    pair; an argument's placeholder, MODEL or REPORT.json); `kind`: the type of one value (str, int, float, bool,
    Path); `repeatable`: a list of them. `required`: a value must come from the command line or, where the option
    is `in_spec`, the spec (settings/resolve.py checks it). `reads`: a path the run reads (an input no output may
    replace). `in_spec`: settable in the spec (False for what only makes sense on one command line: --output,
    --quiet, --force). `core`: the core value this default must equal: "Class.field" of a core dataclass, or
    "module:NAME" of a constant. `per_command`: command -> {"help"/"default"/"required"/...} where one command's
    sense of the option differs (said in its help). `spec_table`, `spec_key`: the shared spec table and key that
    set it, where not the command's own table and the option's name."""

    name: str
    flags: tuple[str, ...]
    kind: type
    help: str
    panel: str
    commands: tuple[str, ...]
    default: Any = None
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    repeatable: bool = False
    argument: bool = False  # a positional argument (MODEL)
    reads: bool = False
    in_spec: bool = True
    core: str | None = None
    named_path: bool = False  # NAME=PATH values: a spec's relative PATH is from the spec's folder
    # A table the commands that take it share ([tool.macs-audit.mlflow]), where the option's key is `spec_key`,
    # in place of each command's own table: one setting for every command it applies to.
    spec_table: str | None = None
    spec_key: str | None = None
    per_command: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def flag(self) -> str:
        """The spelling messages name: --batch-size; MODEL for an argument; --augment for --augment/--no-augment."""
        return self.flags[0].split("/")[0]

    def of(self, command: str) -> Option:
        """This option as `command` takes it (its per-command differences applied)."""
        changes = self.per_command.get(command)
        return dataclasses.replace(self, per_command={}, **changes) if changes else self


def _opt(name: str, flags: str | tuple[str, ...], kind: type, help: str, panel: str, commands: str, **more: Any):
    """An Option with `commands` given as one space-separated string."""
    flags = (flags,) if isinstance(flags, str) else flags
    return Option(name, flags, kind, help, panel, tuple(commands.split()), **more)


# The audits a command runs besides evaluate's, by whose they are: an audit option's help there says so.
AUDIT_OF = {
    "finetune": "The before/after audits'",
    "calibrate": "The before/after audits'",
    "export": "The parity audit's",
}


def _in_audits(help: str, commands: str) -> dict[str, dict[str, Any]]:
    """per_command helps of an audit option as `commands` (of AUDIT_OF) take it: evaluate's help, said of their
    audits ("Perturbation views: ..." -> "The before/after audits' perturbation views: ...")."""
    return {command: {"help": f"{AUDIT_OF[command]} {help[0].lower()}{help[1:]}"} for command in commands.split()}


def _spec_help(command: str) -> str:
    """--config's help on a command that reads its options from the spec (evaluate also its gate's thresholds)."""
    tables = [command, *(["gate"] if command == "evaluate" else [])]
    thresholds = " and the gate's thresholds" if command == "evaluate" else ""
    return (
        f"The audit spec: a macs-audit.toml ({', '.join(f'[{t}]' for t in tables)}, ...) or a pyproject.toml "
        f"({', '.join(f'[tool.macs-audit.{t}]' for t in tables)}, ...): the command's options (a flag given "
        f"wins){thresholds}. Default: searched from the current directory."
    )


def _first_extensions() -> str:
    """Each format's first extension in EXTENSIONS, as --output's help lists them: '.json .md .xml .html .txt'."""
    first: dict[str, str] = {}
    for extension, name in EXTENSIONS.items():
        first.setdefault(name, extension)
    return " ".join(first.values())


def _sets_by(describe) -> str:
    """'A for x, B for y and z': the corruption parameter sets grouped by what `describe` says of each."""
    groups: dict[str, list[str]] = {}
    for pset in PARAMETER_SETS.values():
        groups.setdefault(describe(pset), []).append(pset.name)
    return ", ".join(f"{what} for {or_list(names, 'and')}" for what, names in groups.items())


def _tree_format(pset) -> str:
    fmt, _, save_args = pset.tree_format
    quality = save_args.get("quality")
    return f"{fmt} quality {quality}" if quality else fmt


AUDITS = "evaluate finetune calibrate export"  # the commands that load a model and audit it
BEFORE_AFTER = "finetune calibrate"  # the commands that audit a model before and after they change it
SPEC_COMMANDS = "evaluate finetune calibrate export corrupt"  # --config: the spec of their options
GATES = "gate report compare"  # --config: the spec file of the gate's thresholds
MODEL_HELP = (
    "Model: .onnx, TorchScript (.pt), a torch.export program (.pt2), a state dict (.pt/.pth/.safetensors) with "
    "--arch, a Hugging Face save_pretrained or timm save_for_hf folder, or hf-hub:ORG/NAME from the local cache. "
    "Default: the spec's model."
)
BATCH_SIZE_HELP = (
    "Images per model call. Default: by the model's input size, the largest of 500, 256, 128, 64, ... whose "
    "float32 inputs times 32 (for the activations) fit 2 GiB: 500 up to 96x96 (CIFAR's 32x32), 64 at 224x224. "
    "The report's runtime.batch_size records it."
)
CORRUPTION_SET_HELP = (
    "Corruption parameters: "
    + ", ".join(f"{pset.name} ({pset.size} px)" for pset in PARAMETER_SETS.values())
    + ", or auto (the set nearest the size of the images corrupted; an error when none is near)."
)
PERTURBATIONS_HELP = (
    "Perturbation views: noise, blur, noise+blur (comma-separated), all, or none. noise+blur gives the robust accuracy."
)
SENSITIVITY_SAMPLES_HELP = "Images (class-stratified) for the input sensitivity L^ (0 disables)."
CORRUPTIONS_HELP = "Corruption grid: all (the 19), benchmark (the 15), or names, comma-separated (default: none)."
SEVERITIES_HELP = "Corruption severities, e.g. 1-5 or 3 or 1,3,5."
GATE_CONFIG_HELP = (
    "The spec file whose gate table holds the thresholds: a macs-audit.toml ([gate]) or pyproject.toml "
    "([tool.macs-audit.gate]). Default: searched from the current directory."
)
REPORT_HELP = "A report written by `evaluate -o`."
MLFLOW_TABLE = "mlflow"  # [tool.macs-audit.mlflow]: the MLflow options of every command that logs
FINETUNE_PRESETS = PRESETS["finetune"]

OPTIONS: tuple[Option, ...] = (
    # The model and how its inputs are made.
    _opt(
        "model",
        "MODEL",
        Path,
        MODEL_HELP,
        MODEL,
        "evaluate finetune calibrate",
        argument=True,
        reads=True,
        per_command={
            "finetune": {
                "help": "PyTorch model: .safetensors/.pt state dict with --arch (or a sidecar JSON), or TorchScript. "
                "Default: the spec's model.",
                "required": True,
            },
            "calibrate": {"help": f"{MODEL_HELP} Not with --predictions, which fits a calibration map with no model."},
        },
    ),
    _opt(
        "checkpoint",
        "CHECKPOINT",
        Path,
        "PyTorch checkpoint: a .safetensors/.pt state dict (with --arch or a sidecar JSON), or a pickled module with "
        "--trust-pickled-model-code. Not TorchScript: torch.export cannot trace it (evaluate reads it as it is). "
        "With --precision fp16 or int8, also a float ONNX model. Default: the spec's checkpoint.",
        MODEL,
        "export",
        argument=True,
        required=True,
        reads=True,
    ),
    _opt(
        "arch",
        "--arch",
        str,
        "Architecture of a state dict / safetensors checkpoint: a timm name, torchvision:NAME, open_clip:NAME "
        "(with --class-prompts) or hf-hub:ORG/NAME (a timm config in the local Hugging Face cache).",
        MODEL,
        AUDITS,
    ),
    _opt("num_classes", "--num-classes", int, "Number of classes of the checkpoint.", MODEL, AUDITS, minimum=1),
    _opt(
        "input_size",
        "--input-size",
        str,
        "Model input size H,W (or one number).",
        MODEL,
        f"{AUDITS} corrupt",
        per_command={
            "corrupt": {
                "help": "Image folders: read the images at H,W (or one number), as evaluate does for a model of that "
                "input size. Default: the first image's size.",
                "panel": DATA,
            }
        },
    ),
    _opt(
        "crop_pct",
        "--crop-pct",
        float,
        "Image folders: resize the shorter side to input size / F, then centre-crop (timm's crop_pct, e.g. 0.875). "
        "Default: the model's sidecar or metadata, else resize whole.",
        MODEL,
        "evaluate calibrate export corrupt",
        per_command={
            "corrupt": {
                "help": "Image folders, with --input-size: resize the shorter side to size / F, then centre-crop, as "
                "evaluate does for a model with that crop_pct (ImageNet-C's pipeline: --input-size 224 --crop-pct "
                "0.875).",
                "panel": DATA,
            }
        },
    ),
    _opt(
        "interpolation",
        "--interpolation",
        str,
        "How images are resized to the input size: bilinear, bicubic (antialiased, as Pillow), "
        "bilinear-no-antialias, bicubic-no-antialias or nearest. Default: the model's config, else bilinear "
        "(bicubic with --crop-pct).",
        MODEL,
        "evaluate calibrate export",
    ),
    _opt("mean", "--mean", str, "Per-channel mean, e.g. 0.4914,0.4822,0.4465.", MODEL, AUDITS),
    _opt("std", "--std", str, "Per-channel std, e.g. 0.2470,0.2435,0.2616.", MODEL, AUDITS),
    _opt(
        "output_kind",
        "--model-output",
        str,
        "What the model returns: auto, logits or probabilities.",
        MODEL,
        "evaluate calibrate export",
    ),
    _opt(
        "trust_pickled",
        "--trust-pickled-model-code",
        bool,
        "Allow loading a fully pickled torch module. This RUNS CODE from the file: only for files you trust.",
        MODEL,
        AUDITS,
        default=False,
    ),
    _opt(
        "class_prompts",
        "--class-prompts",
        Path,
        'OpenCLIP zero-shot: a JSON file {"classes": [...], "templates": ["a photo of a {}.", ...]}.',
        MODEL,
        "evaluate export",
        reads=True,
    ),
    _opt(
        "opset",
        "--opset",
        int,
        "ONNX opset version, 18 to 25.",
        MODEL,
        "export",
        default=18,
        core="macs_audit.models.export:DEFAULT_OPSET",
    ),
    _opt(
        "precision",
        "--precision",
        str,
        "Torch models on CUDA: fp32 (the default), or bf16 / fp16 autocast for the audits (the model evaluated, "
        "or the before/after audits; a --reference runs at fp32). Recorded in the report's model.precision.",
        MODEL,
        f"{AUDITS}",
        default="fp32",
        core="AuditOptions.precision",
        per_command={
            # export builds a model at this precision; the others run one at it
            "export": {
                "help": "fp32 (the float export), fp16 (onnxruntime's float16 converter, float32 inputs and outputs) "
                "or int8 (onnxruntime's static quantizer: QDQ, per-channel weights; needs --calibration-data). A "
                "build is audited against the float model it was made from."
            }
        },
    ),
    _opt(
        "int8_target",
        "--int8-target",
        str,
        # INT8_TARGETS (models/precision.py) written out: tests/cli/test_help.py checks each is here.
        "INT8: the hardware the build is for, quantised as onnxruntime advises for it: x86 (for x86-64 CPUs, uint8 "
        "activations and 7-bit weights), x86-vnni (for x86-64 CPUs with VNNI only, uint8 activations and 8-bit "
        "weights), arm (for ARM CPUs, symmetric int8 activations and 8-bit weights) or gpu (for CUDA and TensorRT, "
        "symmetric int8 activations and 8-bit weights). Default: gpu with a GPU --provider, else x86 (8-bit "
        "weights saturate on x86-64 CPUs without VNNI).",
        MODEL,
        "export",
    ),
    _opt(
        "provider",
        "--provider",
        str,
        "onnxruntime execution provider of an ONNX MODEL: cpu, cuda or tensorrt (default: cuda on a GPU device, "
        "else cpu). The report's runtime records the one that ran.",
        MODEL,
        "evaluate export",
    ),
    _opt(
        "reference",
        "--reference",
        Path,
        "The model MODEL was made from (the float ONNX export of an FP16 or INT8 build, say): scored on the same "
        "images of every view in the same pass, for the report's parity section (agreement, flips, metric changes "
        "with paired intervals). The model flags apply to both; a setting one model declares and the other does "
        "not is taken by both (said in a warning); different declared ones are refused (see --reference-config).",
        MODEL,
        "evaluate",
        reads=True,
    ),
    _opt(
        "feature_layer",
        "--feature-layer",
        str,
        "The layer whose input are the features (--features): a module name of a torch model, a node or tensor name "
        "of an ONNX graph. Default: the model's final classifier layer, found by its source's rule.",
        MODEL,
        "evaluate export",
        per_command={
            "export": {
                "help": "The module whose input the exported file's `features` output is (evaluate reads it for "
                "--features). Default: the model's final classifier layer."
            }
        },
    ),
    _opt(
        "reference_predictions",
        "--reference-predictions",
        Path,
        "With --predictions: another model's saved predictions on the same samples (the production model's "
        "logged outputs, say), for the parity section of the clean view; paired by the files' ids where both have "
        "them (the same ids, in any order), else by row. Formats as --predictions.",
        MODEL,
        "evaluate",
        reads=True,
    ),
    _opt(
        "reference_config",
        "--reference-config",
        Path,
        "The --reference model's own settings as a sidecar JSON (mean, std, input_size, crop_pct, ...; checked "
        "as a sidecar is): they win over the model flags and the reference's sidecar or metadata. Needed where "
        "both models declare a different mean or std; a model that declares none takes the other's.",
        MODEL,
        "evaluate",
        reads=True,
    ),
    _opt(
        "reference_provider",
        "--reference-provider",
        str,
        "The --reference model's execution provider (as --provider).",
        MODEL,
        "evaluate export",
    ),
    # The data audited, trained or fitted on, or corrupted.
    _opt(
        "predictions",
        "--predictions",
        Path,
        "Audit saved predictions instead of a model: an .npz (as --save-predictions writes it), a .csv or a .parquet "
        "of logits or probabilities, labels and optional ids (docs/predictions.md). No model runs and torch is not "
        "imported; the report has every section predictions give and says why the others are absent.",
        DATA,
        "evaluate calibrate",
        reads=True,
        per_command={
            "calibrate": {
                "help": "Fit the calibrator on saved predictions (FILE as evaluate's --predictions: a held-out split "
                "the model was not trained on) and write a portable calibration map, OUT/calibration_map.json, which "
                "macs_audit.apply_calibration applies to logits and `calibrate MODEL --map` folds into a model."
            }
        },
    ),
    _opt(
        "label_column",
        "--label-column",
        str,
        "The label column of a --predictions CSV or Parquet table (the others: id, logit_<class> or "
        "prob_<class>, feature_<j>, and metadata).",
        DATA,
        "evaluate calibrate",
        default="label",
        core="macs_audit.predictions.files:LABEL_COLUMN",
    ),
    _opt(
        "map",
        "--map",
        Path,
        "Fold this calibration map (calibrate --predictions's calibration_map.json) into MODEL instead of fitting "
        "one on --data; the before/after audit runs as for a fitted map. Its classes must be MODEL's outputs.",
        MODEL,
        "calibrate",
        reads=True,
    ),
    _opt(
        "data",
        "--data",
        Path,
        "Data: .npz (x, y), CIFAR python-batches dir, ImageFolder dir, or WebDataset shards "
        "(shards-{000000..000099}.tar: images and .cls labels). Default: built-in CIFAR-10 test set.",
        DATA,
        "evaluate finetune calibrate export corrupt",
        reads=True,
        per_command={
            "finetune": {
                "help": "Training data (formats as evaluate's --data; a CIFAR python-batches dir's --split train).",
                "required": True,
            },
            "calibrate": {
                "help": "The fit data: images the model was not trained on, never the test set, that the "
                "calibrator is fitted (and chosen) on; formats as evaluate's --data. Required with MODEL but for "
                "--map; not with --predictions.",
            },
            "export": {
                "help": "The parity audit's data (formats as evaluate's; default: the built-in CIFAR-10 test set)."
            },
        },
    ),
    _opt(
        "data_format",
        "--data-format",
        str,
        "auto, builtin, npz, cifar, imagefolder or shards.",
        DATA,
        "evaluate finetune calibrate corrupt",
        default="auto",
    ),
    _opt(
        "split",
        "--split",
        str,
        "Split of a CIFAR python-batches directory: test or train.",
        DATA,
        "evaluate finetune calibrate corrupt",
        default="test",
        per_command={"finetune": {"default": "train"}},  # training data
    ),
    _opt(
        "limit",
        "--limit",
        int,
        "A class-stratified subset of N images of --data.",
        DATA,
        "evaluate calibrate export corrupt",
        minimum=1,
    ),
    _opt(
        "val_data",
        "--val-data",
        Path,
        "Images the start model never saw, the temperatures' fit data (same formats as --data); without it they "
        "are fitted on the validation split of --data, honest only if the start model was trained without that "
        "split.",
        DATA,
        "finetune",
        reads=True,
    ),
    _opt(
        "eval_data",
        "--eval-data",
        Path,
        "The data the before/after audits score (same formats as --data). Default: built-in CIFAR-10 test set.",
        DATA,
        BEFORE_AFTER,
        reads=True,
    ),
    _opt(
        "eval_limit",
        "--eval-limit",
        int,
        "A class-stratified subset of N images of --eval-data.",
        DATA,
        BEFORE_AFTER,
    ),
    _opt(
        "calibration_data",
        "--calibration-data",
        Path,
        "INT8: images to fit the activation ranges on (any --data format, or builtin: the built-in test set).",
        DATA,
        "export",
        reads=True,
    ),
    _opt(
        "calibration_images",
        "--calibration-images",
        int,
        # DEFAULT_CALIBRATION_IMAGES (models/precision.py) written out: tests/cli/test_help.py checks it.
        "INT8: how many class-stratified calibration images to draw. Default: 512, or every image of a smaller set.",
        DATA,
        "export",
    ),
    _opt(
        "skip_damaged_shards",
        "--skip-damaged-shards",
        bool,
        "Leave out a shard of --data that is cut short or not a whole tar, instead of failing; the report's "
        "data.damaged_shards_skipped counts them.",
        DATA,
        "evaluate",
        default=False,
    ),
    # Fine-tuning: the objective, its schedule and MaCS's terms (FinetuneOptions, finetune/options.py).
    _opt(
        "objective",
        "--objective",
        str,
        "macs, ce, focal, label-smoothing or mixup.",  # OBJECTIVES: tests/cli/test_help.py checks each is here
        TRAINING,
        "finetune",
        default="macs",
        core="FinetuneOptions.objective",
    ),
    _opt(
        "epochs",
        "--epochs",
        float,
        "Passes over the training split (fractions allowed).",
        TRAINING,
        "finetune",
        default=1.0,
        core="FinetuneOptions.epochs",
    ),
    _opt(
        "optimizer",
        "--optimizer",
        str,
        "sgd (Nesterov) or adamw.",
        TRAINING,
        "finetune",
        default="sgd",
        core="FinetuneOptions.optimizer",
    ),
    _opt(
        "lr",
        "--lr",
        float,
        "Peak learning rate (warm-up, then cosine to 0).",
        TRAINING,
        "finetune",
        default=0.02,
        core="FinetuneOptions.lr",
    ),
    _opt(
        "weight_decay",
        "--weight-decay",
        float,
        "Weight decay (not applied to biases and norm parameters).",
        TRAINING,
        "finetune",
        default=5e-4,
        core="FinetuneOptions.weight_decay",
    ),
    _opt(
        "warmup",
        "--warmup",
        float,
        "Fraction of the steps spent warming up.",
        TRAINING,
        "finetune",
        default=0.1,
        core="FinetuneOptions.warmup",
    ),
    _opt(
        "val_fraction",
        "--val-fraction",
        float,
        "Fraction of --data held out of training as the validation split (class-stratified): each epoch is "
        "scored on it, and the temperatures are fitted on it without --val-data.",
        TRAINING,
        "finetune",
        default=0.1,
        core="FinetuneOptions.val_fraction",
    ),
    _opt(
        "split_seed",
        "--split-seed",
        int,
        "Seed of the validation split.",
        TRAINING,
        "finetune",
        default=0,
        minimum=0,
        core="FinetuneOptions.split_seed",
    ),
    _opt(
        "augment",
        "--augment/--no-augment",
        bool,
        "Random crop + horizontal flip.",
        TRAINING,
        "finetune",
        default=True,
        core="FinetuneOptions.augment",
    ),
    _opt(
        "delta",
        "--delta",
        float,
        "MaCS target margin Delta.",
        TRAINING,
        "finetune",
        default=1.0,
        core="FinetuneOptions.delta",
    ),
    _opt(
        "lambda_m",
        "--lambda-m",
        float,
        "MaCS weight of the margin term.",
        TRAINING,
        "finetune",
        default=0.1,
        core="FinetuneOptions.lambda_m",
    ),
    _opt(
        "lambda_c",
        "--lambda-c",
        float,
        "MaCS weight of the consistency (KL) term.",
        TRAINING,
        "finetune",
        default=1.0,
        core="FinetuneOptions.lambda_c",
    ),
    _opt(
        "kl_direction",
        "--kl-direction",
        str,
        "clean||pert (KL(p || p~)) or pert||clean.",
        TRAINING,
        "finetune",
        default="clean||pert",
        core="FinetuneOptions.kl_direction",
    ),
    _opt(
        "stop_grad",
        "--stop-grad",
        str,
        "View detached inside the KL term: clean, pert or none.",
        TRAINING,
        "finetune",
        default="clean",
        core="FinetuneOptions.stop_grad",
    ),
    _opt(
        "ce_on_perturbed",
        "--ce-on-perturbed/--ce-on-clean",
        bool,
        "MaCS: the CE term also on the perturbed view (mean of the two), or on the clean view only.",
        TRAINING,
        "finetune",
        default=False,
        core="FinetuneOptions.ce_on_perturbed",
    ),
    _opt(
        "bn_stats",
        "--bn-stats",
        str,
        "MaCS: views whose batch statistics update batch norm's running statistics: clean or both.",
        TRAINING,
        "finetune",
        default="clean",
        core="FinetuneOptions.bn_stats",
    ),
    _opt(
        "blur_range",
        "--blur-range",
        str,
        "Per-sample blur sigma range of T(x), pixels of a 32 px image, scaled with the image side "
        f"(default {TRAIN_BLUR_RANGE[0]},{TRAIN_BLUR_RANGE[1]}).",
        TRAINING,
        "finetune",
    ),
    _opt(
        "noise_range",
        "--noise-range",
        str,
        f"Per-sample noise sigma range of T(x) (default {TRAIN_NOISE_RANGE[0]},{TRAIN_NOISE_RANGE[1]}).",
        TRAINING,
        "finetune",
    ),
    _opt(
        "focal_gamma",
        "--focal-gamma",
        float,
        "Focal loss gamma (--objective focal).",
        TRAINING,
        "finetune",
        default=3.0,
        core="FinetuneOptions.focal_gamma",
    ),
    _opt(
        "smoothing",
        "--smoothing",
        float,
        "Label smoothing epsilon.",
        TRAINING,
        "finetune",
        default=0.1,
        core="FinetuneOptions.smoothing",
    ),
    _opt(
        "mixup_alpha",
        "--mixup-alpha",
        float,
        "mixup Beta(alpha, alpha) (--objective mixup).",
        TRAINING,
        "finetune",
        default=0.2,
        core="FinetuneOptions.mixup_alpha",
    ),
    _opt(
        "from_scratch",
        "--from-scratch",
        bool,
        "Train MODEL's architecture from a random initialisation (seeded by --seed) with the sample model's "
        "schedule (16 epochs of 256, lr 0.2, 2 warm-up epochs; flags and the spec override it); MODEL's own "
        "weights are audited as the start model.",
        TRAINING,
        "finetune",
        default=False,
        core="FinetuneOptions.from_scratch",
    ),
    _opt(
        "temperature",
        "--temperature/--no-temperature",
        bool,
        "End calibrated: fold a temperature fitted on the validation split (or --val-data) into the written model.",
        TRAINING,
        "finetune",
        default=True,
    ),
    _opt(
        "force_temperature",
        "--force-temperature",
        bool,
        "Fold the temperature even when the data it is fitted on looks trained on (the run refuses otherwise); no "
        "'which fix' table is shown then.",
        TRAINING,
        "finetune",
        default=False,
        in_spec=False,
    ),
    _opt(
        "resume",
        "--resume",
        bool,
        "Continue from OUT/checkpoint.pt with the same settings.",
        TRAINING,
        "finetune",
        default=False,
        in_spec=False,
    ),
    _opt(
        "checkpoint_every",
        "--checkpoint-every",
        int,
        "Also write OUT/checkpoint.pt every N optimizer steps, not only at epoch ends (0: epoch ends only); "
        "--resume continues from the last one.",
        TRAINING,
        "finetune",
        default=0,
        minimum=0,
        core="FinetuneOptions.checkpoint_every",
    ),
    # Views: perturbations, corruptions, natural shift, relabelled data.
    _opt(
        "perturbations",
        "--perturbations",
        str,
        PERTURBATIONS_HELP,
        VIEWS,
        "evaluate finetune calibrate export",
        default="noise+blur",
        per_command=_in_audits(PERTURBATIONS_HELP, "finetune calibrate export"),
    ),
    _opt(
        "sensitivity_samples",
        "--sensitivity-samples",
        int,
        SENSITIVITY_SAMPLES_HELP,
        VIEWS,
        "evaluate finetune calibrate",
        default=500,
        minimum=0,
        per_command=_in_audits(SENSITIVITY_SAMPLES_HELP, BEFORE_AFTER),
    ),
    _opt(
        "sensitivity_directions",
        "--sensitivity-directions",
        int,
        "Random directions of the finite-difference estimate (ONNX models).",
        VIEWS,
        "evaluate",
        default=8,
        minimum=1,
        core="AuditOptions.sensitivity_directions",
    ),
    _opt(
        "corruptions",
        "--corruptions",
        str,
        CORRUPTIONS_HELP,
        VIEWS,
        "evaluate finetune calibrate export corrupt",
        per_command={
            **_in_audits(CORRUPTIONS_HELP, "finetune calibrate export"),
            # corrupt writes the grid, so its default is all of it
            "corrupt": {
                "default": "all",
                "help": "The corruptions written: all (the 19), benchmark (the 15), or names, comma-separated.",
            },
        },
    ),
    _opt(
        "severities",
        "--severities",
        str,
        SEVERITIES_HELP,
        VIEWS,
        "evaluate finetune calibrate export corrupt",
        default="1-5",
        per_command=_in_audits(SEVERITIES_HELP, "finetune calibrate export"),
    ),
    _opt(
        "layout",
        "--layout",
        str,
        f"auto: the layout the chosen set was released in ({_sets_by(lambda pset: pset.released_layout)}). npy: the "
        "CIFAR-C layout (<corruption>.npy + labels.npy, severities 1-5). tree: the ImageNet-C layout "
        f"<corruption>/<severity>/<class>/<n>.<ext>, as each set was released: {_sets_by(_tree_format)}; a rerun "
        "keeps the finished files.",
        OUTPUTS,
        "corrupt",
        default="auto",
    ),
    _opt(
        "corrupted_data",
        ("--corrupted-data", "--cifar-c"),
        Path,
        "Read released corruptions instead of generating them: a CIFAR-10-C/100-C directory (<corruption>.npy, "
        "labels.npy) or an ImageNet-C / Tiny-ImageNet-C tree (<corruption>/<severity>/<class>/<image>).",
        VIEWS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "frost_textures",
        "--frost-textures",
        Path,
        "Directory of frost images (default: built-in procedural textures).",
        VIEWS,
        "evaluate corrupt",
        reads=True,
    ),
    _opt(
        "corruption_set",
        "--corruption-set",
        str,
        CORRUPTION_SET_HELP,
        VIEWS,
        "evaluate corrupt",
        default="auto",
        core="AuditOptions.corruption_set",
    ),
    _opt(
        "corruption_baseline",
        "--corruption-baseline",
        Path,
        "A baseline report with the same corruptions, for CE and relative mCE.",
        VIEWS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "shift_data",
        "--shift-data",
        str,
        "A natural-shift set NAME=DIR (repeatable; e.g. imagenet-a=/data/imagenet-a): an ImageFolder whose "
        "classes (WordNet ids, the model's class names, or --class-map) map to the model's outputs; scored under "
        "the restricted and unrestricted conventions.",
        VIEWS,
        "evaluate",
        repeatable=True,
        named_path=True,
    ),
    _opt(
        "shift_predictions",
        "--shift-predictions",
        str,
        "With --predictions: a shifted set's saved predictions NAME=FILE (repeatable), with labels of the same "
        "classes, scored as a shift set (its classes are all of the predictions' classes: both conventions agree).",
        VIEWS,
        "evaluate",
        repeatable=True,
        named_path=True,
    ),
    _opt(
        "class_map",
        "--class-map",
        Path,
        "Map the classes of --data and of the --shift-data sets it names to model output indices: a JSON object "
        "{class: index} or CSV rows class,index (default: by the model's class names, WordNet id or output number).",
        VIEWS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "real_labels",
        "--real-labels",
        bool,
        "Score the clean view against the ImageNet ReaL labels too (an ImageNet validation folder as --data, its "
        "images under their own names): ReaL accuracy and calibration beside the original labels'; timm's copy.",
        VIEWS,
        "evaluate",
        default=False,
    ),
    _opt(
        "real_labels_file",
        "--real-labels-file",
        Path,
        "The ReaL labels' JSON (real.json) instead of timm's copy.",
        VIEWS,
        "evaluate",
        reads=True,
    ),
    # Analysis: the calibration split and what is fitted on it, intervals, trust; calibrate's choice of a map.
    _opt(
        "method",
        "--method",
        str,
        "temperature, vector, matrix, dirichlet, isotonic, histogram; several (comma-separated) or all: each "
        "fitted on the fit data less its --holdout part, scored on that part; the best by --select is written, "
        "fitted again on all of the fit data, if it beats the uncalibrated model there.",
        ANALYSIS,
        "calibrate",
        default="temperature",
    ),
    _opt(
        "select",
        "--select",
        str,
        "Choose between the methods and the uncalibrated model by nll, ece, smooth_ece, brier or accuracy.",
        ANALYSIS,
        "calibrate",
        default="nll",
        core="macs_audit.calibrators.selection:DEFAULT_SELECT",
    ),
    _opt(
        "holdout",
        "--holdout",
        float,
        "The fraction of the fit data (--data) the choice is scored on: the methods and the uncalibrated model, "
        "each fitted on the rest.",
        ANALYSIS,
        "calibrate",
        default=0.3,
        core="macs_audit.calibrators.selection:DEFAULT_HOLDOUT",
    ),
    _opt(
        "force_calibration",
        "--force-calibration",
        bool,
        "Write the calibrated model even when --data looks trained on (the model far more accurate there than on "
        "--eval-data, or a sharpening temperature on a model overconfident there) or no map beats the "
        "uncalibrated model on the --holdout part; refused otherwise.",
        ANALYSIS,
        "calibrate",
        default=False,
        in_spec=False,
    ),
    _opt(
        "calibration_split",
        "--calibration-split",
        float,
        "Fraction of the data the temperature (and the calibrators, the conformal sets) are fitted on, "
        "class-stratified; the rest is scored (0 disables).",
        ANALYSIS,
        "evaluate finetune calibrate",
        default=0.2,
        core="AuditOptions.calibration_split",
        per_command=_in_audits(
            "Fraction of the data the temperature is fitted on, class-stratified; the rest is scored (0 disables).",
            BEFORE_AFTER,
        ),
    ),
    _opt(
        "calibrators",
        "--calibrators",
        str,
        "Post-hoc calibrators fitted on the calibration split's fit part and scored on the rest, for "
        "information: all, none, or names (temperature, vector, matrix, dirichlet, isotonic, histogram).",
        ANALYSIS,
        "evaluate",
        default="all",
    ),
    _opt(
        "bootstrap",
        "--bootstrap",
        int,
        "Bootstrap resamples for 95% intervals (0 disables).",
        ANALYSIS,
        "evaluate finetune calibrate export",
        default=1000,
        minimum=0,
        core="AuditOptions.bootstrap",
        per_command={
            # finetune and calibrate audit two or three models a run (before, after, a temperature-only fix):
            # 200 resamples keep those audits quick.
            **{
                command: {"default": 200, "core": None, **values}
                for command, values in _in_audits(
                    "Bootstrap resamples for 95% intervals (0 disables).", BEFORE_AFTER
                ).items()
            },
            "export": {"help": "Bootstrap resamples of the parity audit's paired 95% intervals (0 disables)."},
        },
    ),
    _opt(
        "seed",
        "--seed",
        int,
        "Seed for subsets, splits and bootstrap.",
        ANALYSIS,
        "evaluate finetune calibrate export corrupt",
        default=0,
        minimum=0,
        core="AuditOptions.seed",
        per_command={
            "finetune": {
                "help": "Seed for data order, augmentation, perturbations and mixup.",
                "panel": TRAINING,
                "core": "FinetuneOptions.seed",
            },
            "export": {"help": "Seed of the calibration draw, subsets and bootstrap."},
            "corrupt": {"help": "Seed of the random corruptions (with --batch-size).", "panel": VIEWS},
        },
    ),
    _opt(
        "coverage",
        "--coverage",
        float,
        "Target coverage of the conformal prediction sets fitted on the calibration split.",
        ANALYSIS,
        "evaluate",
        default=0.9,
        core="AuditOptions.coverage",
    ),
    _opt(
        "conformal_split",
        "--conformal-split",
        float,
        "Fit the conformal sets on their own class-stratified fraction of the images the temperature is not "
        "fitted on (scored on the rest), instead of on the temperature's fit part.",
        ANALYSIS,
        "evaluate",
    ),
    _opt(
        "raps",
        "--raps",
        str,
        "RAPS's regularisation as K_REG,PENALTY (default: chosen by Angelopoulos et al.'s rule on 30% of the "
        "conformal fit part).",
        ANALYSIS,
        "evaluate",
    ),
    _opt(
        "features",
        "--features",
        str,
        "The penultimate features (the input of the model's last layer, read in the same pass as the logits) for "
        "the feature-space OOD scores and the representation shift: auto (where the model gives them: ONNX, timm, "
        "torchvision, Hugging Face, OpenCLIP, a predictions file's features), on (an error where it cannot), off.",
        ANALYSIS,
        "evaluate",
        default="auto",
    ),
    _opt(
        "feature_fit_data",
        "--feature-fit-data",
        Path,
        "The in-distribution images the feature-space OOD detectors are fitted on (a training set; formats as "
        "--data, labels needed). Default: the calibration split of --data, as the report says.",
        ANALYSIS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "metadata",
        "--metadata",
        Path,
        "Per-image metadata to slice the evaluated data by: CSV, JSON lines or Parquet, one row per image keyed by a "
        "column `path` (relative to an image folder --data), `key` (a WebDataset sample's key) or `index` (the "
        "position in --data, or the row of --predictions). Text columns slice by value, numeric ones by "
        "--slice-bins quantiles (docs/slices.md).",
        ANALYSIS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "image_slices",
        "--image-slices/--no-image-slices",
        bool,
        "Also slice by the images' brightness, contrast, sharpness and colourfulness (an image folder's also by "
        "original size and aspect ratio), read in the clean pass.",
        ANALYSIS,
        "evaluate",
        default=True,
        core="AuditOptions.image_slices",
    ),
    _opt(
        "slice_bins",
        "--slice-bins",
        int,
        "Quantile bins of a numeric slice column (5: quintiles).",
        ANALYSIS,
        "evaluate",
        default=5,
        minimum=2,
        core="AuditOptions.slice_bins",
    ),
    _opt(
        "min_slice_size",
        "--min-slice-size",
        int,
        "Images a slice needs to be scored; smaller slices are listed, not scored.",
        ANALYSIS,
        "evaluate",
        default=100,
        minimum=2,
        core="AuditOptions.min_slice_size",
    ),
    _opt(
        "slice_correction",
        "--slice-correction",
        str,
        "The multiple-comparison correction over every slice's tests: holm (Holm's step-down, the family-wise "
        "error rate) or bh (Benjamini-Hochberg, the false discovery rate).",
        ANALYSIS,
        "evaluate",
        default="holm",
        core="AuditOptions.slice_correction",
    ),
    _opt(
        "ood_data",
        "--ood-data",
        Path,
        "A second data set to tell apart from --data (OOD detection: AUROC, AUPR, FPR at 95% TPR); any format "
        "--data reads, labels not needed (an .npz with only x, a folder of images).",
        ANALYSIS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "ood_predictions",
        "--ood-predictions",
        Path,
        "With --predictions: the classifier's saved outputs on OOD samples (labels not needed), for OOD detection "
        "as --ood-data gives it. Formats as --predictions.",
        ANALYSIS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "unlabeled_predictions",
        "--unlabeled-predictions",
        Path,
        "With --predictions: its saved outputs on unlabeled target samples, whose accuracy is estimated without "
        "labels as with --unlabeled. Formats as --predictions.",
        ANALYSIS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "unlabeled",
        "--unlabeled",
        Path,
        "Unlabeled images whose accuracy is estimated without labels (ATC, DoC), fitted on --data; formats as "
        "--ood-data.",
        ANALYSIS,
        "evaluate",
        reads=True,
    ),
    _opt(
        "problem_bars",
        "--problem-bars",
        str,
        "The summary's bars, NAME=VALUE pairs over the built-in ones (fractions; see docs/report-schema.md): "
        "recorded in the report; a gate's thresholds are its own.",
        ANALYSIS,
        "evaluate",
    ),
    _opt(
        "audit",
        "--audit/--no-audit",
        bool,
        "Audit the build against the float model.",
        ANALYSIS,
        "export",
        default=True,
    ),
    # Saved reports: what gate, report, compare and init read.
    _opt(
        "report",
        "REPORT.json",
        Path,
        REPORT_HELP,
        GATE,
        "gate report init",
        argument=True,
        required=True,
        reads=True,
        in_spec=False,
        per_command={"init": {"help": f"{REPORT_HELP[:-1]}: its values give the thresholds, its settings the audit."}},
    ),
    _opt(
        "report_a",
        "A.json",
        Path,
        "The reference report (e.g. the main branch).",
        GATE,
        "compare",
        argument=True,
        required=True,
        reads=True,
        in_spec=False,
    ),
    _opt(
        "report_b",
        "B.json",
        Path,
        "The candidate report; deltas are B - A.",
        GATE,
        "compare",
        argument=True,
        required=True,
        reads=True,
        in_spec=False,
    ),
    # The gate, run on the report.
    _opt(
        "gate",
        "--gate",
        bool,
        "Gate the report on the spec's [gate] thresholds after the audit (exit 1 if a check fails).",
        GATE,
        "evaluate report compare",
        default=False,
        per_command={
            "report": {"help": "Include gate results (config searched as for `gate`)."},
            # compare gates by default where it finds a config: --no-gate is the way to run none
            "compare": {
                "flags": ("--gate/--no-gate",),
                "default": None,
                "help": "Run the gate on B (A its baseline where the config sets allowances): a regression is a "
                "check it fails. By default it runs where a config is found as `gate` finds one; --gate requires "
                "one, --no-gate runs none (worse rows are then counted as worse beyond the noise, none as a "
                "regression).",
            },
        },
    ),
    _opt(
        "baseline",
        "--baseline",
        Path,
        "A baseline report for the gate's regression checks ([gate.baseline]).",
        GATE,
        "evaluate gate report",
        reads=True,
        per_command={
            "report": {"help": "A baseline report for the gate's regression checks ([gate.baseline]). Implies --gate."}
        },
    ),
    _opt(
        "use_interval",
        "--use-interval/--point-estimate",
        bool,
        "Gate on the pessimistic end of the 95% interval instead of the point estimate (default: the gate "
        "table's use_interval).",
        GATE,
        "evaluate gate report",
    ),
    _opt(
        "margin",
        "--margin",
        float,
        "A flat allowance on fractions (accuracy, ECE, ...), 0.02 = 2 percentage points, in place of the noise of "
        "each estimate (default: sqrt(2) x its 95% interval's half-width).",
        GATE,
        "init",
        minimum=0,
        maximum=1,
    ),
    _opt(
        "relative_margin",
        "--relative-margin",
        float,
        "A flat allowance on the other metrics (NLL, ratios), 0.1 = 10% of the value, in place of the noise.",
        GATE,
        "init",
        minimum=0,
        maximum=1,
    ),
    # What is written.
    _opt(
        "out",
        ("--out", "-o"),
        Path,
        "Output directory (created if missing).",
        OUTPUTS,
        "finetune calibrate export corrupt",
        required=True,
        per_command={
            "finetune": {"help": "Output directory: weights, ONNX, config, checkpoint, before/after audit."},
            "calibrate": {"help": "Output directory: the calibrated model and the before/after audit."},
            "export": {"help": "ONNX file to write. Default: CHECKPOINT with .onnx.", "required": False},
        },
    ),
    _opt(
        "name",
        "--name",
        str,
        "File stem of the outputs (NAME.safetensors, NAME.onnx, NAME.json).",
        OUTPUTS,
        "finetune",
        default="model",
    ),
    _opt(
        "output",
        ("--output", "-o"),
        Path,
        "Write the report to this file (atomically); '-' is stdout (the tables then go to stderr). Repeatable: one "
        "file per format, e.g. -o audit.json -o audit.html.",
        OUTPUTS,
        "evaluate gate report compare init",
        repeatable=True,
        in_spec=False,
        per_command={
            **dict.fromkeys(
                GATES.split(),
                {
                    "help": "Write to this file (atomically) instead of stdout. Repeatable: pairs with --format in "
                    f"order, or the extension ({_first_extensions()}) names the format."
                },
            ),
            "init": {
                "flags": ("--output", "--out", "-o"),
                "repeatable": False,
                "help": "The TOML file: [tool.macs-audit.gate] (and [tool.macs-audit.evaluate]) added to any file "
                "(pyproject.toml), [gate] (and [evaluate]) to a macs-audit.toml; - prints them. Default: "
                "./pyproject.toml if it exists, else ./macs-audit.toml.",
            },
        },
    ),
    _opt(
        "format",
        ("--format", "-f"),
        str,
        "Format of the report: json (what gate, report and compare read), html, md or terminal. Repeatable: pairs "
        "with --output in order; without --output, to stdout. Default: --output's extension (.html, .md, .txt), "
        "else json.",
        OUTPUTS,
        "evaluate gate report compare",
        repeatable=True,
        in_spec=False,
        per_command=dict.fromkeys(GATES.split(), {"help": f"Output format: {or_list(FORMATS)}. Repeatable."}),
    ),
    _opt(
        "into",
        "--into",
        Path,
        "Merge a model card into this existing README.md and write it back (atomically; to --output where given): "
        "only its macs-audit section and the model-index results whose source is macs-audit are replaced, the "
        "rest of the text keeps its bytes. Implies --format model-card.",
        OUTPUTS,
        "report",
        reads=True,
        in_spec=False,
    ),
    _opt(
        "step_summary",
        "--step-summary/--no-step-summary",
        bool,
        "Append the Markdown to $GITHUB_STEP_SUMMARY when that is set.",
        OUTPUTS,
        "gate compare",
        default=True,
    ),
    _opt(
        "save_predictions",
        "--save-predictions",
        Path,
        "Write the logits, labels and class names (.npz) here, with the --ood-data and --unlabeled logits: "
        "`evaluate --predictions` of the file gives the same sections, bit for bit.",
        OUTPUTS,
        "evaluate",
        in_spec=False,
    ),
    _opt(
        "quiet",
        ("--quiet", "-q"),
        bool,
        "No progress (no bar on a terminal, no lines in a log). evaluate with --output: the verdict line alone, "
        "no tables and no notes of what was written (warnings and errors still show).",
        OUTPUTS,
        "evaluate finetune calibrate export corrupt",
        default=False,
        in_spec=False,
    ),
    _opt(
        "force",
        "--force",
        bool,
        "Replace outputs that already exist (never the command's own inputs).",
        OUTPUTS,
        "finetune calibrate export",
        default=False,
        in_spec=False,
    ),
    # MLflow (integrations/mlflow.py): set for every command that takes them in the spec's [mlflow] table.
    _opt(
        "mlflow",
        "--mlflow/--no-mlflow",
        bool,
        "Log the run to MLflow after its outputs are written (the mlflow extra): the metrics, the options as "
        "parameters, the verdict and the gate as tags, the reports, plots and predictions as artifacts "
        "(docs/mlflow.md). Into the active run where there is one, else a new run. A logging failure is exit 4; "
        "the outputs stay written.",
        OUTPUTS,
        "evaluate finetune calibrate",
        default=False,
        spec_table=MLFLOW_TABLE,
        spec_key="enabled",
    ),
    _opt(
        "mlflow_tracking_uri",
        "--mlflow-tracking-uri",
        str,
        "Where --mlflow logs: an MLflow tracking server (http://HOST:PORT) or store (sqlite:///mlflow.db). "
        "Default: $MLFLOW_TRACKING_URI, else MLflow's own default.",
        OUTPUTS,
        "evaluate finetune calibrate",
        spec_table=MLFLOW_TABLE,
        spec_key="tracking_uri",
    ),
    _opt(
        "mlflow_experiment",
        "--mlflow-experiment",
        str,
        "The MLflow experiment of a new run (created if missing). Default: the model's name.",
        OUTPUTS,
        "evaluate finetune calibrate",
        spec_table=MLFLOW_TABLE,
        spec_key="experiment",
    ),
    _opt(
        "mlflow_run_name",
        "--mlflow-run-name",
        str,
        "The name of a new MLflow run. Default: the model's name and the command (resnet9 evaluate).",
        OUTPUTS,
        "evaluate finetune calibrate",
        spec_table=MLFLOW_TABLE,
        spec_key="run_name",
    ),
    # Where the work runs.
    _opt(
        "batch_size",
        "--batch-size",
        int,
        BATCH_SIZE_HELP,
        RUNTIME,
        "evaluate finetune calibrate corrupt",
        minimum=1,
        per_command={
            "finetune": {
                "help": "Training batch size.",
                "default": 128,
                "minimum": 2,
                "panel": TRAINING,
                "core": "FinetuneOptions.batch_size",
            },
            # corrupt's batches draw the random corruptions: evaluate's batch size reproduces its views
            "corrupt": {
                "help": "Images per corruption batch (part of the seed: use evaluate's batch size, its report's "
                "runtime.batch_size, to reproduce its generated views). Default: evaluate's default for a model "
                "whose input is the images' size (500 at 32x32, 64 at 224x224).",
            },
        },
    ),
    _opt(
        "audit_batch_size",
        "--audit-batch-size",
        int,
        f"The before/after audits' batch size. {BATCH_SIZE_HELP}",
        RUNTIME,
        "finetune",
        minimum=1,
    ),
    _opt(
        "workers",
        "--workers",
        int,
        "Processes decoding ImageFolder images (default: min(8, cores per process); 0: in the main process).",
        RUNTIME,
        "evaluate",
        minimum=0,
    ),
    _opt(
        "device",
        "--device",
        str,
        "auto, cpu, cuda or cuda:N.",
        RUNTIME,
        "evaluate finetune calibrate corrupt",
        default="auto",
        per_command={"finetune": {"help": "auto, cpu, cuda or cuda:N (bf16 autocast + channels_last on CUDA)."}},
    ),
    # The spec itself and its presets.
    _opt(
        "config",
        ("--config", "-c"),
        Path,
        _spec_help("evaluate"),
        RUNTIME,
        f"{SPEC_COMMANDS} {GATES}",
        in_spec=False,
        per_command={
            **{command: {"help": _spec_help(command)} for command in SPEC_COMMANDS.split()[1:]},
            "gate": {"help": GATE_CONFIG_HELP, "panel": GATE},
            **dict.fromkeys(("report", "compare"), {"help": f"{GATE_CONFIG_HELP} Implies --gate.", "panel": GATE}),
        },
    ),
    _opt(
        "preset",
        "--preset",
        str,
        "Defaults under the spec and the flags: quick (a smoke test: 200 resamples, no "
        "perturbations or sensitivity, the temperature alone), full (every perturbation, the 15 benchmark "
        "corruptions), imagenet (the 15 benchmark corruptions with ImageNet-C's parameters, no sensitivity). "
        "The model's preprocessing is never a preset's: it comes from the model or its flags.",
        RUNTIME,
        "evaluate finetune",
        per_command={
            "finetune": {
                "help": "MaCS preset, a measured point of docs/finetune-experiment.md, under the spec and the flags: "
                "calibrated (the defaults: the least accuracy lost) or robust (more robustness for more accuracy "
                "and 3x the steps). "
                + "; ".join(
                    f"{name}: " + ", ".join(f"{key} {value}" for key, value in values.items())
                    for name, values in FINETUNE_PRESETS.items()
                )
                + ".",
                "default": "calibrated",
                "panel": TRAINING,
                "core": "FinetuneOptions.preset",
            }
        },
    ),
)

BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
MLFLOW_OPTIONS = tuple(option.name for option in OPTIONS if option.spec_table == MLFLOW_TABLE)
COMMANDS = ("evaluate", "finetune", "calibrate", "export", "corrupt", "gate", "report", "compare", "init")
# The spec's tables that are no command's: each holds the options that name it (Option.spec_table).
SHARED_TABLES: tuple[str, ...] = tuple(dict.fromkeys(o.spec_table for o in OPTIONS if o.spec_table is not None))


def options_of(command: str) -> tuple[Option, ...]:
    """The options `command` takes, in table order, each as that command takes it."""
    return tuple(option.of(command) for option in OPTIONS if command in option.commands)


def defaults_of(command: str) -> dict[str, Any]:
    """name -> default of every option `command` takes."""
    return {option.name: option.default for option in options_of(command)}
