"""`macs-audit corrupt`: write the corruptions of any data set (any parameter set) in a released layout: the
CIFAR-C `.npy` files or the ImageNet-C / Tiny-ImageNet-C image tree."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import handle_errors, note
from macs_audit.cli.options import CORRUPTION_SET_OPTION, QUIET_OPTION
from macs_audit.cli.progress import Progress, show_progress
from macs_audit.text import or_list
from macs_audit.views.corruptions.table import PARAMETER_SETS


def _sets_by(describe) -> str:
    """'A for x, B for y and z': the parameter sets grouped by what `describe` says of each, in table order."""
    groups: dict[str, list[str]] = {}
    for pset in PARAMETER_SETS.values():
        groups.setdefault(describe(pset), []).append(pset.name)
    return ", ".join(f"{what} for {or_list(names, 'and')}" for what, names in groups.items())


def _released_layouts() -> str:
    return _sets_by(lambda pset: pset.released_layout)


def _tree_formats() -> str:
    def described(pset) -> str:
        fmt, _, save_args = pset.tree_format
        quality = save_args.get("quality")
        return f"{fmt} quality {quality}" if quality else fmt

    return _sets_by(described)


@handle_errors
def corrupt(
    out: Path = typer.Option(..., "--out", readable=False, help="Output directory (created if missing)."),
    layout: str = typer.Option(
        "auto",
        "--layout",
        help=f"auto: the layout the chosen set was released in ({_released_layouts()}). npy: the CIFAR-C layout "
        "(<corruption>.npy + labels.npy, severities 1-5). tree: the ImageNet-C layout "
        f"<corruption>/<severity>/<class>/<n>.<ext>, as each set was released: {_tree_formats()}; a rerun keeps "
        "the finished files.",
    ),
    data: Optional[Path] = typer.Option(
        None, "--data", readable=False, help="Clean data (default: the built-in CIFAR-10 test set)."
    ),
    data_format: str = typer.Option("auto", "--data-format", help="auto, builtin, npz, cifar or imagefolder."),
    split: str = typer.Option("test", "--split", help="Split of a CIFAR python-batches directory: test or train."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Corrupt a class-stratified subset of N images."),
    input_size: Optional[str] = typer.Option(
        None,
        "--input-size",
        help="Image folders: read the images at H,W (or one number), as evaluate does for a model of that input "
        "size. Default: the first image's size.",
    ),
    crop_pct: Optional[float] = typer.Option(
        None,
        "--crop-pct",
        help="Image folders, with --input-size: resize the shorter side to size / F, then centre-crop, as evaluate "
        "does for a model with that crop_pct (ImageNet-C's pipeline: --input-size 224 --crop-pct 0.875).",
    ),
    corruptions: str = typer.Option(
        "all", "--corruptions", help="all (the 19; cifar-c is an alias), benchmark (the 15), or names."
    ),
    severities: str = typer.Option("1-5", "--severities", help="Severities; the npy layout holds all of 1-5."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random corruptions (with --batch-size)."),
    batch_size: Optional[int] = typer.Option(
        None,
        "--batch-size",
        min=1,
        help="Images per corruption batch (part of the seed: use evaluate's batch size, its report's "
        "runtime.batch_size, to reproduce its generated views). Default: evaluate's default for a model whose input "
        "is the images' size (500 at 32x32, 64 at 224x224).",
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    frost_textures: Optional[Path] = typer.Option(
        None, "--frost-textures", readable=False, help="Directory of frost images (default: procedural)."
    ),
    corruption_set: str = CORRUPTION_SET_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Generate the corruptions (19 x 5 severities, the parameter set of --corruption-set) into OUT in the
    CIFAR-C layout or the ImageNet-C image tree (--layout), written atomically."""
    from macs_audit.cli.options import parse_corruption_set, parse_corruptions, parse_severities, parse_size
    from macs_audit.data.grid import Grid, write_corruption_grid, write_corruption_tree
    from macs_audit.data.loading import DataSpec, load_data
    from macs_audit.devices import resolve_device
    from macs_audit.errors import UsageError
    from macs_audit.outputs import check_folder
    from macs_audit.views.corruptions.table import choose_parameter_set
    from macs_audit.views.corruptions.weather import frost_texture_info

    if layout not in ("auto", "npy", "tree"):
        raise UsageError(f"--layout must be auto, npy or tree, got {layout!r}")
    levels = parse_severities(severities)
    size = parse_size(input_size)
    if crop_pct is not None and (size is None or not 0 < crop_pct <= 1):
        raise UsageError(f"--crop-pct needs --input-size and a value in (0, 1], got {crop_pct}")
    requested_set = parse_corruption_set(corruption_set)
    names = parse_corruptions(corruptions)
    if not names:
        raise UsageError("--corruptions selects nothing")
    frost = str(frost_textures) if frost_textures else None
    if frost is not None:
        frost_texture_info(frost)  # a missing or empty folder fails now, not at the frost corruption

    if layout != "auto":
        _check_outputs(layout, out, names, levels, data)
    else:  # the layout follows the images' size; whether OUT can be written does not wait for it
        check_folder(out, [])
    device = resolve_device(device)
    source, _ = load_data(
        DataSpec(data, data_format, split, limit, seed), (size[0], size[1]) if size else None, crop_pct
    )
    height, width = source.image_size()
    pset, how = choose_parameter_set(requested_set, height, width)
    if layout == "auto":  # the layout the set was released in, known once the images' size is
        layout = pset.released_layout
        _check_outputs(layout, out, names, levels, data)
    note(f"corruption parameters: {pset.name} set on {height}x{width} images ({how}); {layout} layout")
    if batch_size is None:  # evaluate's default for these images (audit.options.default_batch_size)
        from macs_audit.audit import default_batch_size

        batch_size = default_batch_size((height, width))
    grid = Grid(source, seed, batch_size, device, frost, pset.name)
    with Progress(show_progress(quiet)) as progress:
        if layout == "npy":
            files = write_corruption_grid(out, grid, names, progress)
            wrote = f"wrote {len(files)} files"
        else:
            written, kept = write_corruption_tree(out, grid, names, levels, progress)
            wrote = f"wrote {written:,} image files" + (f" (kept {kept:,} finished ones)" if kept else "")
    frost_info = f"; frost: {frost_texture_info(frost, pset.name)}" if "frost" in names else ""  # where asked
    note(
        f"{wrote} to {out} ({len(source):,} images x {len(levels)} severities per corruption; seed {seed}{frost_info})"
    )


def _check_outputs(layout: str, out: Path, names: tuple[str, ...], levels: tuple[int, ...], data: Path | None) -> None:
    """Before anything is generated: the npy layout holds all 5 severities; its existing files are replaced,
    inputs never; a tree is not written inside the data folder."""
    from macs_audit.data.npy_layout import output_names
    from macs_audit.errors import UsageError
    from macs_audit.inputs import run_inputs
    from macs_audit.outputs import check_folder

    if layout == "npy" and levels != (1, 2, 3, 4, 5):
        raise UsageError("the released CIFAR-C layout holds all 5 severities: use --severities 1-5 (or --layout tree)")
    if layout == "npy":
        check_folder(out, output_names(names), inputs=run_inputs(data=[data]))  # every file of the data
    else:
        check_folder(out, [])
        if data is not None and data.is_dir() and out.resolve().is_relative_to(data.resolve()):
            raise UsageError(f"--out {out} is inside the data folder {data}; choose a folder outside it")
