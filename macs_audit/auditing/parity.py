"""Deployment parity: a reference model scored on the same images as the audited (candidate) model, in the same
pass over the data. `ParityRecorder` is an observer of the inference loop (`inference.evaluate_view`): for every
batch of every view the candidate predicts, it runs the reference on the same images and keeps both logits until
the view's pass is over; then the candidate's own bootstrap of the view (`inference.view_result`) runs the
two models' paired statistics on its resamples (metrics.bootstrap.paired_bootstrap: the candidate's intervals
are those of a solo audit), the recorder summarises the view from them (metrics.parity) and drops its logits,
so one view's logits are held at a time. `run_audit(..., reference=)` drives it and the Report's `parity` section
is its `section()`. A shift set is compared in the shift section's default, restricted convention.

Before any of it, `check_pair` makes the two models' preprocessing agree (`pair_preprocessing`): a side that
declares no setting takes the other's, two that declare different ones are refused, but for the reference's own
normalisation given with --reference-config; the section records both pipelines with where each value came from,
and the pairing's warnings. Each model's output kind is its own; on the first batch `check_outputs` refuses two
kinds that differ where either was detected, not declared."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.auditing.calibration import Split
from macs_audit.auditing.classes import restricted_accumulator
from macs_audit.auditing.inference import ScoredView
from macs_audit.auditing.options import AuditOptions
from macs_audit.data.label_space import MappedSource
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, bootstrap, conformal, parity, resampling
from macs_audit.metrics.resampling import PairedStatistic
from macs_audit.models.config import REFERENCE_CONFIG, ModelConfig, format_values
from macs_audit.models.predictor import Predictor, load_predictor
from macs_audit.models.preprocessing import CROP_DEFAULT, WHOLE_DEFAULT
from macs_audit.report import ModelInfo, Parity, ParityView
from macs_audit.views.view import View

REFERENCE_INFO = ("path", "format", "backend", "device", "provider", "sha256")


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (a copy of it is another file)."""
    try:
        return Path(a).resolve() == Path(b).resolve() or Path(a).samefile(b)
    except OSError:
        return False


def load_reference(path: Path, flags: dict[str, Any], settings: dict[str, Any], **kwargs: Any) -> Predictor:
    """The --reference model, loaded with the model flags and over them `settings` (`--reference-config`,
    models.config.read_reference_config), which its config then records as set by --reference-config: the
    reference's own, never inherited from the candidate nor refused for differing from it (`check_pair`)."""
    predictor = load_predictor(path, {**flags, **settings}, **kwargs)
    predictor.config.sources.update(dict.fromkeys(settings, REFERENCE_CONFIG))
    return predictor


def check_pair(reference: Predictor, candidate: Predictor) -> list[str]:
    """Fail unless the two models can be scored on the same images: other files, the same class count, and
    preprocessing that agrees (`pair_preprocessing`). The same file twice is a usage error (a copy of it is
    allowed and gives differences of zero). Returns the warnings of the pairing, for the caller to show. A side may
    take the other's crop or size here: a caller that reads image folders by the candidate's config pairs the two
    before it reads them (evaluate does; run_audit pairs them again, finding them agreed)."""
    ref_path, cand_path = reference.info.get("path"), candidate.info.get("path")
    if ref_path and cand_path and same_file(ref_path, cand_path):
        raise UsageError(f"--reference {ref_path} is the model being audited; give the model it was built from")
    if reference.num_classes is not None and candidate.num_classes is not None:
        if reference.num_classes != candidate.num_classes:
            raise InputError(
                f"the reference has {reference.num_classes} classes but the candidate has {candidate.num_classes}"
            )
    return pair_preprocessing(reference, candidate)


# The preprocessing of a parity pair (docs/report-schema.md, parity.*_preprocessing). GEOMETRY decides the images
# both models are fed: they are read once, by the candidate's pipeline, so both must agree, whoever set them.
# NORMALISATION is each model's own (its predictor applies it): the reference's may differ from the candidate's
# where --reference-config gives it. The output kind is each model's own too, and not inherited: each side's
# outputs become log-probabilities by its own kind, so a logits model and a probabilities model compare as they
# are; only a kind read from the outputs ('auto') can be wrong unseen, which `check_outputs` catches.
GEOMETRY = ("input_size", "crop_pct", "crop_offset", "interpolation")
NORMALISATION = ("mean", "std")
PREPROCESSING = GEOMETRY + NORMALISATION
# The source of CIFAR-10's built-in mean/std for a model known to fit them (ModelConfig.known_to_fit_cifar10): set
# by nobody, yet not a guess, so a pairing treats them as declared (compared, never replaced by the other side's).
KNOWN_FIT = "default, known to fit"
SIDES = ("reference", "candidate")
REFERENCE_SAID = "the reference: "  # a pairing warning that is the reference's own (its normalisation warning)
INHERITED = "inherited from the "  # the source of a setting a side took from the other: "... candidate's metadata"


def declared_source(cfg: ModelConfig, key: str) -> str | None:
    """Where `cfg`'s preprocessing `key` was declared (a flag, a sidecar, metadata, the model's own description,
    --reference-config, the other side of a pair; KNOWN_FIT), or None for a default that nobody set."""
    if key in cfg.sources:
        return cfg.sources[key]
    if key in NORMALISATION and cfg.known_to_fit_cifar10():
        return KNOWN_FIT
    return None


def pair_preprocessing(reference: Predictor, candidate: Predictor) -> list[str]:
    """Make the two models' preprocessing one that parity can compare, or fail in one line. Key by key of
    PREPROCESSING: a side that declares nothing takes the other side's declared value (its config then says
    "inherited from the candidate's metadata", ...); where both declare, the values must agree, but for a
    normalisation the reference's --reference-config gives. Returns a warning line per side that took the
    other's, and one for a reference left with CIFAR-10's built-in mean/std it is not known to fit: nothing
    falls back to a default in silence. The lines are read from the configs as paired, so pairing the two again
    (evaluate pairs them before reading the data, run_audit again) returns the same lines."""
    configs = {"reference": reference.config, "candidate": candidate.config}
    warned = {side: configs[side].normalisation_warning() for side in SIDES}
    taken: dict[str, list[str]] = {side: [] for side in SIDES}
    for key in PREPROCESSING:
        found = {side: declared_source(configs[side], key) for side in SIDES}
        values = {side: getattr(configs[side], key) for side in SIDES}
        for side, other in (SIDES, SIDES[::-1]):
            if found[side] is None and key in configs[other].sources:  # set by someone: KNOWN_FIT is a default
                setattr(configs[side], key, values[other])
                configs[side].sources[key] = f"{INHERITED}{other}'s {found[other]}"
                taken[side].append(key)
        if None in found.values() or _same(values["reference"], values["candidate"]):
            continue
        if key == "crop_offset" and candidate.config.crop_pct is None:
            continue  # no centre crop (both take the same crop_pct by now): nothing is offset
        if key in NORMALISATION and found["reference"] == REFERENCE_CONFIG:
            continue  # the reference's own, given explicitly: each model normalises as it was trained
        raise _mismatch(key, values, found)
    said = []
    for side, other in (SIDES, SIDES[::-1]):
        if taken[side]:
            _drop_warning(reference if side == "reference" else candidate, warned[side])
        cfg = configs[side]
        inherited = [key for key in PREPROCESSING if cfg.sources.get(key, "").startswith(INHERITED)]
        if inherited:
            settings = ", ".join(
                f"{key} {_shown(getattr(cfg, key))} ({cfg.sources[key].removeprefix(INHERITED)})" for key in inherited
            )
            said.append(f"the {side} declares no {_listed(inherited)}: it takes the {other}'s, {settings}")
    warning = reference.config.normalisation_warning()
    return said + ([f"{REFERENCE_SAID}{warning}"] if warning else [])


def _listed(keys: list[str]) -> str:
    """'mean', 'mean or std', 'input_size, mean or std'."""
    return " or ".join([", ".join(keys[:-1]), keys[-1]] if len(keys) > 1 else keys)


def _same(a: Any, b: Any) -> bool:
    """Two settings' values equal (per-channel numbers to 1e-6: the same values written by two tools)."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= 1e-6
    return bool(a == b)


def _shown(value: Any) -> str:
    """A setting's value as the options take it: 0.5,0.5,0.5; 224x224; 0.875; bicubic."""
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value) if all(isinstance(v, int) for v in value) else format_values(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _mismatch(key: str, values: dict[str, Any], found: dict[str, str | None]) -> InputError:
    """The one-line error of a pair whose declared `key` differs."""
    ref, cand = values["reference"], values["candidate"]
    if key == "input_size":
        return InputError(
            f"the reference takes {ref[0]}x{ref[1]} images but the candidate takes {cand[0]}x{cand[1]}: parity "
            "compares the two on the same images"
        )
    option = "--" + key.replace("_", "-")
    both = (
        f"the reference's {key} {_shown(ref)} ({found['reference']}) differs from the candidate's "
        f"{_shown(cand)} ({found['candidate']})"
    )
    if key in GEOMETRY:
        return InputError(f"{both}: parity feeds both models the same images; give the one they share with {option}")
    return InputError(
        f"{both}: give the reference's with {REFERENCE_CONFIG} FILE (a sidecar JSON), or both models' with {option}"
    )


def check_outputs(reference: Predictor, candidate: Predictor) -> None:
    """Fail where the two models' output kinds (each read once both have scored a batch) differ and either was
    detected ('auto'): a build whose softmax rows no longer sum to 1 within the detection's tolerance (FP16, INT8)
    reads as logits, and its softmax would be compared unseen. Two declared kinds (a flag, a sidecar, metadata,
    --reference-config) are each model's own and compare as they are: both become log-probabilities."""
    kinds = {side: p.output for side, p in zip(SIDES, (reference, candidate), strict=True)}
    if None in (kinds["reference"].kind, kinds["candidate"].kind):
        return
    if kinds["reference"].kind == kinds["candidate"].kind or not any(o.detected for o in kinds.values()):
        return
    raise InputError(
        f"the reference outputs {kinds['reference'].describe()} but the candidate {kinds['candidate'].describe()}: "
        "a detected kind may be misread; declare each model's with --output (the reference's own with "
        f"{REFERENCE_CONFIG} FILE)"
    )


def _drop_warning(predictor: Predictor, warning: str | None) -> None:
    """Take the CIFAR-10 normalisation warning off a predictor's recorded warnings once a pairing gave it
    declared values."""
    if warning is None or predictor.config.normalisation_warning() is not None:
        return
    kept = [w for w in predictor.info.get("warnings", []) if w != warning]
    if kept:
        predictor.info["warnings"] = kept
    else:
        predictor.info.pop("warnings", None)


def preprocessing_record(predictor: Predictor) -> dict[str, Any]:
    """A model's preprocessing as the parity section records it: the values it ran with (the interpolation
    resolved: bilinear whole, bicubic for a crop_pct pipeline; the output kind as taken), and `sources`, where
    each came from (`declared_source`; "default" where nobody set it; the output "detected" from the outputs)."""
    cfg = predictor.config
    output = predictor.output
    sources = {key: declared_source(cfg, key) or "default" for key in PREPROCESSING}
    sources["output"] = "detected" if output.detected else cfg.sources.get("output", "default")
    return {
        "input_size": list(cfg.input_size),
        "crop_pct": cfg.crop_pct,
        "crop_offset": cfg.crop_offset,
        "interpolation": cfg.interpolation or (CROP_DEFAULT if cfg.crop_pct is not None else WHOLE_DEFAULT),
        "mean": list(cfg.mean),
        "std": list(cfg.std),
        "output": output.kind or cfg.output,
        "sources": sources,
    }


class SavedReference:
    """A reference known by its saved logits (`evaluate --predictions --reference-predictions`), scored as the
    recorder scores a model: `predict` takes the rows of the audited predictions (the "images" an audit of saved
    logits passes) and returns the reference's logits of those rows, paired with them by the caller."""

    backend = "predictions"

    def __init__(self, logits: np.ndarray, info: dict[str, Any], paired_by: str):
        self.logits, self.info, self.paired_by = logits, info, paired_by  # paired_by: "id" or "row"

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return self.logits[rows]


@dataclasses.dataclass(frozen=True)
class _Pending:
    """What a view's summary needs once its paired statistic has run (`ParityRecorder.summarise`)."""

    view: View
    reference_acc: accumulators.CalibrationAccumulator
    per_sample: dict[str, np.ndarray]  # metrics.parity.agreement's columns
    statistic: PairedStatistic
    sets: dict | None  # the view's conformal entries at both models' thresholds
    set_columns: tuple[str, ...]  # their per-image difference columns, named as the statistic names them


class ParityRecorder:
    """The reference's half of the audit, an observer of the inference loop (inference.ViewObserver): called
    with every batch the candidate scored (`observe`), it scores the same images with the reference; once the
    view's pass is over it gives its paired statistic (`paired_statistic`), which the candidate's bootstrap runs
    on its own resamples, and summarises the view from the values (`summarise`). `labels`: the audited data's;
    `split`: its calibration split, on which both models' conformal sets are fitted; `options`: the audit's
    (its coverage, bootstrap resamples and seed). `shift_sets`: the shift sets the audit scores, whose views are
    compared restricted to their classes (auditing/classes.py's `restricted_accumulator`, the shift section's: a
    copy of the candidate then gives the same sums). `candidate`: the audited model, whose output kind the first
    batch checks against the reference's (`check_outputs`) and whose preprocessing the section records;
    `warnings`: what pairing the two said (`check_pair`), which the section records."""

    def __init__(
        self,
        reference: Predictor | SavedReference,
        labels: np.ndarray,
        split: Split | None,
        options: AuditOptions,
        *,
        shift_sets: tuple[MappedSource, ...] = (),
        candidate: Predictor | None = None,
        warnings: list[str] | None = None,
    ):
        self.reference, self.labels = reference, np.asarray(labels)
        self.candidate = candidate  # the audited model: the section records its preprocessing beside the reference's
        self.warnings = list(warnings or [])
        self._outputs_checked = candidate is None
        self.split, self.coverage, self.resamples, self.seed = split, options.coverage, options.bootstrap, options.seed
        self.shift_sets = {mapped.name: mapped for mapped in shift_sets}
        self.thresholds: dict[str, dict[str, float]] | None = None
        self.views: list[ParityView] = []
        self._view: View | None = None
        self._batches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []  # (start, ref, cand, labels)
        self._pending: _Pending | None = None  # the view whose paired statistic is out, until it is summarised

    def observe(self, view: View, start: int, images: np.ndarray, labels: np.ndarray, logits: np.ndarray) -> None:
        """One batch of `view` at data-set position `start`, and the candidate's logits on it."""
        if self._view is not None and view.name != self._view.name:
            raise AssertionError(f"parity: view {self._view.name} was scored but not summarised")
        self._view = view
        if not isinstance(images, np.ndarray) and self.reference.backend != "torch":
            images = images.cpu().numpy()  # a torch candidate's device-resident batch, for onnxruntime
        reference = self.reference.predict(images)
        if not self._outputs_checked and self.candidate is not None:  # both kinds are known from the first batch
            assert not isinstance(self.reference, SavedReference)  # a saved reference comes with no candidate model
            check_outputs(self.reference, self.candidate)
            self._outputs_checked = True
        if reference.shape != logits.shape:
            raise InputError(f"the reference outputs {reference.shape[1]} classes but the candidate {logits.shape[1]}")
        self._batches.append((start, reference, np.asarray(logits), np.asarray(labels)))

    def paired_statistic(
        self, view: View, acc: accumulators.CalibrationAccumulator, resamples: int
    ) -> PairedStatistic | None:
        """The paired statistic of `view` (both models' differences, agreement and the conformal sets' columns,
        metrics.parity.paired_statistic), for the candidate's bootstrap of it (`acc`, `resamples`) to run on its
        own resamples (inference.view_result); None for a view the reference did not score. The view's
        logits are dropped here: what `summarise` needs of them is kept until it is handed the values."""
        if self._view is None or view.name != self._view.name:
            return None
        batches = sorted(self._batches, key=lambda b: b[0])
        self._view, self._batches = None, []
        reference = np.concatenate([b[1] for b in batches])
        candidate = np.concatenate([b[2] for b in batches])
        labels = np.concatenate([b[3] for b in batches])  # the batches' own: a view may read another source
        if view.kind == "clean" and self.split is not None:
            self.thresholds = {
                side: conformal.fit_thresholds(logits[self.split.fit], labels[self.split.fit], self.coverage)
                for side, logits in (("reference", reference), ("candidate", candidate))
            }
        sets, set_columns, within = self._sets(view, reference, candidate, labels)
        mapped = self.shift_sets.get(view.name) if view.kind == "shift" else None
        if mapped is not None:
            # The restricted convention: the set's classes' logits, the labels as the set's classes.
            to_class = np.full(mapped.space.num_outputs, -1)
            to_class[mapped.space.outputs] = np.arange(len(mapped.space.outputs))
            labels = to_class[labels]
            reference_acc = restricted_accumulator(mapped, reference, labels)
            reference, candidate = mapped.space.restrict(reference), mapped.space.restrict(candidate)
        else:  # batch by batch, as the loop accumulated the candidate's: a copy of it gives the same sums
            reference_acc = accumulators.CalibrationAccumulator(acc.num_classes)
            for _, logits, _, batch_labels in batches:
                reference_acc.update(logits, batch_labels)
        per_sample = parity.agreement(reference, candidate, labels)
        statistic = parity.paired_statistic(
            reference_acc,
            acc,
            errors=resamples > 0,
            columns={"agreement": per_sample["agree"], **set_columns},
            within=dict.fromkeys(set_columns, within),
        )
        self._pending = _Pending(view, reference_acc, per_sample, statistic, sets, tuple(set_columns))
        return statistic

    def summarise(self, scored: ScoredView) -> None:
        """The parity view of the view whose statistic went out last, from the statistic's values on the
        candidate's resamples (`scored`, with the candidate's metrics). A grid cell's candidate gets no intervals
        (no resamples): both models' means are then resampled `self.resamples` times from the seed."""
        pending, self._pending = self._pending, None
        if pending is None or pending.view.name != scored.result.name:
            raise AssertionError(f"parity: view {scored.result.name} was summarised without its paired statistic")
        view = pending.view
        estimates, resampled = scored.result.metrics, scored.paired
        n = len(pending.per_sample["agree"])
        if not resampled and self.resamples > 0 and n >= bootstrap.MIN_BOOTSTRAP_SAMPLES:
            # A grid cell, which the candidate does not resample: the means alone, on draws of the same seed.
            statistic = pending.statistic
            resampled = resampling.resampled(n, self.resamples, self.seed, lambda counts: statistic(counts, {}))
        sets = pending.sets
        if sets is not None:
            parity.add_set_intervals(sets, {k: v for k, v in resampled.items() if k in pending.set_columns})
        summary = parity.agreement_summary(pending.per_sample)
        self.views.append(
            ParityView.of(
                name=view.name,
                kind=view.kind,
                corruption=view.corruption,
                severity=view.severity,
                n=n,
                agreement=summary["agreement"],
                agreement_interval=parity.column_interval(resampled["agreement"]) if "agreement" in resampled else None,
                correct_to_wrong=summary["correct_to_wrong"],
                wrong_to_correct=summary["wrong_to_correct"],
                mean_abs_logit_difference=summary["mean_abs_logit_difference"],
                max_abs_logit_difference=summary["max_abs_logit_difference"],
                mean_kl=summary["mean_kl"],
                metrics=parity.differences(pending.reference_acc.compute(), estimates, resampled),
                conformal=sets,
            )
        )

    def _sets(self, view: View, reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray) -> tuple:
        """(the view's conformal entries, their per-image difference columns, the images they are over) at both
        models' thresholds, or (None, {}, None) without a calibration split: the split's scored part of a view of
        the clean images, every image of a shift set (scored on every output, as the shift section scores them)."""
        if self.thresholds is None or self.split is None:
            return None, {}, None
        within = np.zeros(len(labels), dtype=bool)
        if view.kind == "shift":
            within[:] = True
        elif len(labels) == len(self.labels):
            within[self.split.scored] = True
        else:
            return None, {}, None
        sets, columns = parity.conformal_sets(reference, candidate, labels, self.thresholds, within)
        return sets, columns, within

    def section(self) -> Parity:
        """The Report's parity section, the views in the order they were summarised."""
        return Parity.of(
            reference=ModelInfo.of(**{k: self.reference.info[k] for k in REFERENCE_INFO if k in self.reference.info}),
            bootstrap_resamples=self.resamples,
            seed=self.seed,
            views=self.views,
            # A saved reference ran no preprocessing here: it has none to record.
            reference_preprocessing=None
            if isinstance(self.reference, SavedReference)
            else preprocessing_record(self.reference),
            **({} if self.candidate is None else {"candidate_preprocessing": preprocessing_record(self.candidate)}),
            **({"warnings": self.warnings} if self.warnings else {}),
            **({"paired_by": self.reference.paired_by} if isinstance(self.reference, SavedReference) else {}),
        )
