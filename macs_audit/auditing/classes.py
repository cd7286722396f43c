"""How the audited data's classes meet the model's outputs (data/label_space.py's rules, the ones --shift-data
follows): by name, by output index, by --class-map or by position.

Where the data's classes are the model's outputs in order, the audit scores the model's logits as they are.
Otherwise the predictor is wrapped (`RestrictedPredictor`): its logits are the data's classes' columns, in the
data's class order, before every accumulator, calibrator and conformal set, so that every metric is the
restricted convention's (the shift sets' default). A data set of a subset of the outputs is also scored
unrestricted, over every output with the labels as output indices (`MappedAccumulator`): each view's
`unrestricted` metrics.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from macs_audit.data.label_space import BY_POSITION, LabelSpace, MappedSource, label_space, model_names
from macs_audit.data.sources import Source
from macs_audit.errors import InputError
from macs_audit.metrics import accumulators, selective
from macs_audit.models.predictor import Predictor

CHUNK = 4096  # images whose restricted logits are scored at once (bounds the float64 softmax's memory)
CONVENTION = (
    "the data holds a subset of the model's outputs: every metric, the temperature, the calibrators and the "
    "conformal sets are the restricted convention's (softmax and argmax over the logits of the data's classes "
    "only, labels as the data's classes; the gate reads these); each view's `unrestricted` holds its metrics over "
    "every output, labels as output indices, a top-1 outside the data's classes counting as wrong"
)


def match_classes(
    predictor: Predictor, source: Source, class_map: dict[str, int] | None = None, class_map_name: str = "--class-map"
) -> LabelSpace:
    """The map of `source`'s classes to `predictor`'s outputs (label_space's rules; `class_map` where it names
    every class of the data); InputError, naming the data and saying what to pass, where they do not match."""
    num_outputs = predictor.num_classes or source.num_classes
    if source.num_classes > num_outputs:
        names = model_names(predictor.config.class_names, num_outputs) if source.named else None
        unknown = [c for c in source.class_names if c not in names] if names else []
        which = f" (not among its names: {', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''})"
        raise InputError(
            f"the model has {num_outputs} classes but the data set has {source.num_classes} ({source.name}): "
            f"the data holds classes the model does not output{which if unknown else ''}; leave them out of --data"
        )
    try:
        return label_space(
            list(source.class_names),
            num_outputs,
            model_classes=predictor.config.class_names,
            class_map=class_map,
            class_map_name=class_map_name,
            named=source.named,
        )
    except InputError as exc:
        raise InputError(f"{source.name}: {exc}") from None


def in_model_order(predictor: Predictor, source: Source) -> tuple[Source, LabelSpace]:
    """`source` as a fit reads it (calibrate, finetune): its labels as `predictor`'s output indices and its class
    names in the model's output order (`match_classes`), with the map it was matched by. Classes in another
    order are converted (`space.outputs[labels]`); InputError for data of a subset of the outputs, which a fit of
    every output cannot read."""
    space = match_classes(predictor, source)
    if space.is_subset:
        raise InputError(
            f"the model has {space.num_outputs} classes but the data set has {len(space.classes)} ({source.name}): "
            "fitting needs data of every output; `evaluate --data` scores a subset of the model's classes"
        )
    if space.is_identity:
        return source, space
    names = [""] * space.num_outputs
    for name, output in zip(space.classes, space.outputs.tolist(), strict=True):
        names[output] = name
    return dataclasses.replace(source, labels=space.model_labels(source.labels), class_names=names), space


def check_classes(predictor: Predictor, source: Source) -> int:
    """The number of the model's outputs, where the data holds every one of them (in any order it is matched in,
    `in_model_order`); InputError for a subset. For a caller that reads no label as an output index (INT8
    calibration's class-stratified sample); one that does takes `in_model_order`'s source."""
    return in_model_order(predictor, source)[1].num_outputs


def matching_note(space: LabelSpace, source: Source) -> str:
    """One line saying how a fit's data met the model's outputs, where they were not the outputs in order."""
    return (
        f"{source.name}: the data's classes are the model's outputs in another order, matched by "
        f"{space.mapped_by}; each label is read as its class's output"
    )


def matching_record(space: LabelSpace, predictor: Predictor, source: Source) -> dict[str, Any]:
    """The report's `data.class_matching`: the rule, how it read the names, each data class's output."""
    record: dict[str, Any] = {
        "by": space.by,
        "mapped_by": space.mapped_by,
        "num_outputs": space.num_outputs,
        "outputs": space.outputs.tolist(),
        "restricted": not space.is_identity and space.is_subset,
    }
    if space.by == BY_POSITION:
        record["reason"] = position_reason(predictor, source, space.num_outputs)
    return record


def position_reason(predictor: Predictor, source: Source, num_outputs: int) -> str:
    """Why classes went by position: which side names none."""
    if not source.named:
        return "the data names no classes"
    if predictor.config.class_names and model_names(predictor.config.class_names, num_outputs) is None:
        return "the model's class names are its output numbers"
    return "the model names no classes"


class RestrictedPredictor:
    """`inner` with its logits restricted to the data's classes, in the data's class order (`space.restrict`);
    everything else is the inner predictor's. `forward` (torch models: the sensitivity's gradients) likewise."""

    def __init__(self, inner: Predictor, space: LabelSpace):
        self.inner, self.space = inner, space
        self.backend, self.device = inner.backend, inner.device
        self.config, self.output, self.info = inner.config, inner.output, inner.info

    @property
    def num_classes(self) -> int:
        return len(self.space.classes)

    def predict(self, images: np.ndarray) -> np.ndarray:
        return self.space.restrict(self.inner.predict(images))

    def predict_with_features(self, images: Any) -> tuple[np.ndarray, np.ndarray]:
        """The restricted logits and the inner model's features (models/features.py), in one call."""
        logits, features = self.inner.predict_with_features(images)  # type: ignore[attr-defined]
        return self.space.restrict(logits), features

    def forward(self, images: Any, amp: bool | None = None) -> Any:
        import torch

        logits = self.inner.forward(images, amp=amp)  # type: ignore[attr-defined]
        return logits[:, torch.as_tensor(self.space.outputs, device=logits.device)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def restricted(predictor: Predictor, space: LabelSpace) -> Predictor:
    """`predictor` as the audit scores it on data of `space`: itself where the data's classes are its outputs in
    order, else its logits restricted to them (`RestrictedPredictor`)."""
    return predictor if space.is_identity else RestrictedPredictor(predictor, space)


def scores_unrestricted(predictor: Predictor) -> RestrictedPredictor | None:
    """The predictor whose views are scored unrestricted too: one restricted to a subset of its outputs."""
    if isinstance(predictor, RestrictedPredictor) and predictor.space.is_subset:
        return predictor
    return None


class MappedAccumulator(accumulators.CalibrationAccumulator):
    """A view's accumulator of the restricted logits (the data's classes, the data's labels), with the
    unrestricted one (every output, the labels as output indices) beside it, filled from the same batches."""

    __slots__ = ("space", "unrestricted")

    def __init__(self, space: LabelSpace):
        super().__init__(len(space.classes))
        self.space = space
        self.unrestricted = accumulators.CalibrationAccumulator(space.num_outputs)

    def update_both(self, full: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Add a batch of every output's logits `full`; return its restricted logits."""
        logits = self.space.restrict(full)
        self.update(logits, labels)
        self.unrestricted.update(full, self.space.model_labels(labels))
        return logits

    def reduce(self, starts: list[int], ctx: Any) -> MappedAccumulator:
        super().reduce(starts, ctx)
        self.unrestricted.reduce(starts, ctx)
        return self


def unrestricted_metrics(acc: accumulators.CalibrationAccumulator) -> dict[str, float] | None:
    """A view's metrics over every output (`MappedAccumulator`), None for a view scored one way."""
    if not isinstance(acc, MappedAccumulator) or acc.unrestricted.count == 0:
        return None
    samples = acc.unrestricted.samples()
    return {
        **acc.unrestricted.compute(),
        **selective.selective_metrics(samples["confidence"], samples["correct"]),
    }


def restricted_accumulator(
    mapped: MappedSource, logits: np.ndarray, labels: np.ndarray
) -> accumulators.CalibrationAccumulator:
    """A shift set's view in the restricted convention (auditing/shift.py): the set's classes' logits against the
    set's labels; the parity section compares both models' restricted views with it."""
    acc = accumulators.CalibrationAccumulator(len(mapped.space.classes))
    for start in range(0, len(labels), CHUNK):
        acc.update(mapped.space.restrict(logits[start : start + CHUNK]), labels[start : start + CHUNK])
    return acc
