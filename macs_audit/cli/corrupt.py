"""`macs-audit corrupt`: write the corruptions of any data set (any parameter set) in the released CIFAR-C layout."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import Progress, handle_errors, show_progress, stderr
from macs_audit.cli.options import CORRUPTION_SET_OPTION


@handle_errors
def corrupt(
    out: Path = typer.Option(..., "--out", help="Output directory (<corruption>.npy per corruption + labels.npy)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Clean data (default: the built-in CIFAR-10 test set)."),
    data_format: str = typer.Option("auto", "--data-format", help="auto, builtin, npz, cifar or imagefolder."),
    split: str = typer.Option("test", "--split", help="Split of a CIFAR python-batches directory: test or train."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Corrupt a class-stratified subset of N images."),
    corruptions: str = typer.Option("cifar-c", "--corruptions", help="cifar-c (all 19), benchmark (the 15), or names."),
    severities: str = typer.Option("1-5", "--severities", help="Must be 1-5 for the released layout."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random corruptions (with --batch-size)."),
    batch_size: int = typer.Option(
        500,
        "--batch-size",
        min=1,
        help="Images per corruption batch (part of the seed: use evaluate's batch size to reproduce its "
        "generated views).",
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    frost_textures: Optional[Path] = typer.Option(
        None, "--frost-textures", help="Directory of frost images (default: procedural)."
    ),
    corruption_set: str = CORRUPTION_SET_OPTION,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress (no bar on a terminal, no lines in a log)."),
) -> None:
    """Generate the corruptions (19 x 5 severities, the parameter set of --corruption-set) into OUT in the
    CIFAR-C layout, written atomically."""
    from macs_audit.cli.options import parse_corruption_set, parse_corruptions, parse_severities
    from macs_audit.data.grid import write_corruption_grid
    from macs_audit.data.loading import DataSpec, load_data
    from macs_audit.data.released import output_names
    from macs_audit.errors import UsageError
    from macs_audit.models.predictor import resolve_device
    from macs_audit.outputs import check_folder
    from macs_audit.views.corruptions.table import choose_parameter_set
    from macs_audit.views.corruptions.weather import frost_texture_info

    if parse_severities(severities) != (1, 2, 3, 4, 5):
        raise UsageError("the released CIFAR-C layout holds all 5 severities: use --severities 1-5")
    requested_set = parse_corruption_set(corruption_set)
    names = parse_corruptions(corruptions)
    if not names:
        raise UsageError("--corruptions selects nothing")
    frost = str(frost_textures) if frost_textures else None
    if frost is not None:
        frost_texture_info(frost)  # a missing or empty folder fails now, not at the frost corruption
    check_folder(out, output_names(names), inputs=(data,))  # existing files are replaced, inputs never
    device = resolve_device(device)
    source, _ = load_data(DataSpec(data, data_format, split, limit, seed))
    height, width = source.image_size()
    pset, how = choose_parameter_set(requested_set, height, width)
    stderr.print(f"corruption parameters: {pset.name} set on {height}x{width} images ({how})", markup=False)
    with Progress(show_progress(quiet)) as progress:
        written = write_corruption_grid(
            out, source, names, seed, batch_size, device, frost, progress=progress, corruption_set=pset.name
        )
    frost_info = frost_texture_info(frost, pset.name) if "frost" in names else "not generated"
    stderr.print(
        f"wrote {len(written)} files to {out} ({len(source):,} images x 5 severities per corruption; "
        f"seed {seed}; frost: {frost_info})"
    )
