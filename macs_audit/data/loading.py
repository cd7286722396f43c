"""What a command reads: a data source opened by format and split, optionally cut to a class-stratified,
seeded subset (`--limit`), with the facts about that choice that the report records."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

from macs_audit.data.shards import FORMAT as SHARDS
from macs_audit.data.shards import ShardFetch, is_shard_spec, load_shards
from macs_audit.data.sources import Source, load_source
from macs_audit.data.splits import stratified_subset
from macs_audit.models.config import ModelConfig
from macs_audit.models.preprocessing import batch_description, fit_description


@dataclasses.dataclass(frozen=True)
class DataSpec:
    path: Path | None = None  # None: the built-in CIFAR-10 test set
    format: str = "auto"  # auto, builtin, npz, cifar, imagefolder or shards (data/shards.py)
    split: str = "test"  # of a CIFAR python-batches directory
    limit: int | None = None  # a class-stratified subset of this many images
    seed: int = 0  # of that subset
    labeled: bool = True  # False: labels are not needed (sources.UNLABELED where the data has none)
    skip_damaged_shards: bool = False  # shards: leave a damaged shard out (counted in the report) instead of failing


def load_data(
    spec: DataSpec,
    image_size: tuple[int, int] | None = None,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    sources: dict[str, str] | None = None,
    crop_offset: str = "round",
) -> tuple[Source, dict]:
    """The source `spec` names (ImageFolder images resized to `image_size`, or resized and centre-cropped
    with `crop_pct`, by `interpolation`) and its data facts for the report (`pipeline`: how image-folder images
    were sized, with where each value came from when `sources`, a ModelConfig's, is given). `crop_offset`: how an
    image folder's or a shard set's centre crop rounds an odd margin (models/preprocessing.fit_image)."""
    shards = spec.path is not None and (spec.format == SHARDS or spec.format == "auto" and is_shard_spec(spec.path))
    if shards:  # WebDataset tar shards, decoded by the image folders' pipeline
        source = load_shards(
            str(spec.path), image_size, spec.labeled, crop_pct, interpolation, crop_offset, spec.skip_damaged_shards
        )
    else:
        source = load_source(
            spec.path, spec.format, spec.split, image_size, spec.labeled, crop_pct, interpolation, crop_offset
        )
    # The split a source was read from, where it has one: --split of CIFAR python batches, the built-in set's
    # test split; an .npz, an image folder or shards have none (recording --split's default would say "test").
    split = spec.split if source.format == "cifar" else "test" if source.format == "builtin" else None
    info: dict = {"split": split, "limit": spec.limit}
    if shards and spec.skip_damaged_shards:
        info["damaged_shards_skipped"] = len(cast(ShardFetch, source.fetch).index.skipped)
    if source.format in ("imagefolder", SHARDS) and image_size is not None:
        info["pipeline"] = fit_description(image_size, crop_pct, interpolation, sources, crop_offset)
    elif image_size is not None and len(source) and source.image_size() != tuple(image_size):
        # arrays at another size than the model's: resized whole in the predictor, by the same rule
        info["pipeline"] = batch_description(source.image_size(), image_size, interpolation, sources)
    if spec.limit is not None:
        source = source.subset(stratified_subset(source.labels, spec.limit, spec.seed))
        info["limit_seed"] = spec.seed
    return source, info


def load_model_data(spec: DataSpec, config: ModelConfig) -> tuple[Source, dict]:
    """`load_data` for a model: its input size, crop_pct and interpolation, and the report's pipeline with where
    each of them came from (the model's ModelConfig)."""
    return load_data(spec, config.input_size, config.crop_pct, config.interpolation, config.sources, config.crop_offset)
