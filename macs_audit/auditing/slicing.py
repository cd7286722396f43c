"""The slice section of the audit: the columns the evaluated images are cut by (a metadata file's and the data's
own, data/metadata.py; the images' properties read in the clean pass, metrics/image_properties.py), and the
statistics of every slice against the rest (metrics/slices.py). The model audit and the audit of saved predictions
both build it in `logits_sections`, from the clean view's per-image scores."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from macs_audit.auditing.options import AuditOptions
from macs_audit.data.metadata import MetadataColumns, MetadataTable, join_metadata, unsliceable
from macs_audit.data.sources import Source
from macs_audit.metrics import conformal, image_properties, slices
from macs_audit.metrics.image_properties import original_sizes
from macs_audit.progress import Stage
from macs_audit.report import SliceResult, Slices

IMAGE = "image"  # where an image property's column came from (a metadata column's: data/metadata.py's origins)
SLICES_STAGE = Stage("slices", "")


@dataclasses.dataclass(frozen=True)
class SliceColumns:
    """Per image of the evaluated data, in its order: the columns to slice by (float64 with NaN for a missing
    value, or str with None), where each came from (`origins`: its metadata's place, or IMAGE), how a metadata
    file met the data (`metadata`: data/metadata.py's record, None without a file) and the columns not sliced
    with why (`skipped`)."""

    columns: dict[str, np.ndarray]
    origins: dict[str, str]
    metadata: dict[str, Any] | None = None
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def joined(cls, joined: MetadataColumns, with_file: bool) -> SliceColumns:
        """The metadata columns of a join (data/metadata.py), its record kept where a file was joined."""
        described = joined.record.get("columns", {})
        origins = {name: described[name]["from"] for name in joined.columns}
        skipped = dict(joined.record.get("skipped", {}))
        counts = {key: value for key, value in joined.record.items() if key not in ("columns", "skipped")}
        return cls(dict(joined.columns), origins, counts if with_file else None, skipped)

    def missing(self, name: str) -> int:
        values = self.columns[name]
        if values.dtype.kind == "f":
            return int(np.isnan(values).sum())
        return int(sum(v is None for v in values))


def slice_columns(
    source: Source, table: MetadataTable | None, properties: dict[str, np.ndarray] | None
) -> SliceColumns | None:
    """The columns `source`'s images are sliced by: `table`'s (a --metadata file) and the source's own, joined by
    data/metadata.py, then the images' `properties` read in the clean pass and, for an image folder, the original
    sizes from the files' headers; None when there is none of these."""
    found = SliceColumns.joined(join_metadata(table, source), table is not None)
    columns, origins, skipped = found.columns, found.origins, found.skipped
    image = dict(properties or {})
    if properties is not None and source.format == "imagefolder":
        files = source.fetch.files  # type: ignore[attr-defined]  # an image folder's fetch (data/sources.py)
        sizes = original_sizes(files if source.indices is None else [files[i] for i in source.indices])
        image.update(sizes)
    for name, values in image.items():
        if name in columns or name in skipped:  # a metadata column of that name keeps it; the property is prefixed
            name = f"{IMAGE}_{name}"
        reason = unsliceable(values)
        if reason is not None:
            skipped[name] = reason
        else:
            columns[name], origins[name] = values, IMAGE
    if not columns and not skipped:
        return None
    return found


def slices_conventions(section: Slices | None) -> dict[str, Any]:
    """The report's conventions of the slice section: its statistics', the image properties' it slices by."""
    if section is None:
        return {}
    out: dict[str, Any] = {**slices.CONVENTIONS, "slice_correction": correction_text(section.correction)}
    for name, info in section.columns.items():
        if info["source"] == IMAGE:
            prefixed = name.removeprefix(f"{IMAGE}_")
            out[f"image_property_{prefixed}"] = image_properties.CONVENTIONS[prefixed]
    return out


def correction_text(correction: str) -> str:
    """'Holm (family-wise error rate), over every test of every scored slice': the report's convention."""
    name, rate = slices.CORRECTIONS[correction]
    return f"{name} ({rate}), over the two tests of every scored slice together"


def slices_section(
    samples: dict[str, np.ndarray],
    logits: np.ndarray,
    sets: conformal.SplitConformal | None,
    columns: SliceColumns | None,
    options: AuditOptions,
) -> Slices | None:
    """The slice section of the clean view (`samples`: its accumulator's per-image arrays, `logits` its logits, the
    conformal `sets` scored on the calibration split's scored part), or None without a column to slice by."""
    if columns is None or not (columns.columns or columns.skipped):
        return None
    slices.check_slice_settings(options.slice_bins, options.min_slice_size, options.slice_correction)
    scores = slices.Scores(
        confidence=samples["confidence"],
        correct=samples["correct"],
        nll=samples["nll"],
        covered=sets.covered(logits) if sets is not None else {},
        scored=sets.scored if sets is not None else None,
    )
    defined = slices.define_slices(columns.columns, options.slice_bins)
    analysed = slices.analyse_slices(
        scores,
        defined,
        min_size=options.min_slice_size,
        correction=options.slice_correction,
        resamples=options.bootstrap,
        seed=options.seed,
    )
    return Slices.of(
        columns={
            name: {
                "source": columns.origins[name],
                "kind": "numeric" if values.dtype.kind == "f" else "categorical",
                "missing": columns.missing(name),
            }
            for name, values in columns.columns.items()
        },
        metadata=columns.metadata,
        skipped=dict(columns.skipped),
        bins=options.slice_bins,
        min_size=options.min_slice_size,
        correction=options.slice_correction,
        level=slices.LEVEL,
        tests=analysed["tests"],
        bootstrap_resamples=options.bootstrap,
        seed=options.seed,
        slices=[SliceResult.of(**record) for record in analysed["scored"]],
        small=analysed["small"],
        multicalibration=analysed["multicalibration"],
    )
