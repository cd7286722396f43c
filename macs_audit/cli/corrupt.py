"""`macs-audit corrupt`: write the corruptions of any data set (any parameter set) in a released layout: the
CIFAR-C `.npy` files or the ImageNet-C / Tiny-ImageNet-C image tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from macs_audit.cli.console import handle_errors, note
from macs_audit.cli.parameters import given_values, takes_options
from macs_audit.cli.progress import Progress, show_progress


@handle_errors
@takes_options("corrupt")
def corrupt(**values: Any) -> None:
    """Generate the corruptions (19 x 5 severities, the parameter set of --corruption-set) into OUT in the
    CIFAR-C layout or the ImageNet-C image tree (--layout), written atomically. Options not given come from the
    spec (its corrupt table; see --config)."""
    from macs_audit.data.grid import Grid
    from macs_audit.data.loading import DataSpec, load_data
    from macs_audit.devices import resolve_device
    from macs_audit.errors import UsageError
    from macs_audit.outputs import check_folder
    from macs_audit.settings.parse import parse_corruption_set, parse_corruptions, parse_severities, parse_size
    from macs_audit.settings.resolve import resolve
    from macs_audit.views.corruptions.table import choose_parameter_set
    from macs_audit.views.corruptions.weather import frost_texture_info

    r = resolve("corrupt", *given_values(values))
    out, layout, data, crop_pct, seed = r["out"], r["layout"], r["data"], r["crop_pct"], r["seed"]
    if layout not in ("auto", "npy", "tree"):
        raise UsageError(f"--layout must be auto, npy or tree, got {layout!r}")
    levels = parse_severities(r["severities"])
    size = parse_size(r["input_size"])
    if crop_pct is not None and (size is None or not 0 < crop_pct <= 1):
        raise UsageError(f"--crop-pct needs --input-size and a value in (0, 1], got {crop_pct}")
    requested_set = parse_corruption_set(r["corruption_set"])
    names = parse_corruptions(r["corruptions"])
    if not names:
        raise UsageError("--corruptions selects nothing")
    frost = str(r["frost_textures"]) if r["frost_textures"] else None
    if frost is not None:
        frost_texture_info(frost)  # a missing or empty folder fails now, not at the frost corruption

    if layout != "auto":
        _check_outputs(layout, out, names, levels, data)
    else:  # the layout follows the images' size; whether OUT can be written does not wait for it
        check_folder(out, [])
    device = resolve_device(r["device"])
    source, _ = load_data(
        DataSpec(data, r["data_format"], r["split"], r["limit"], seed), (size[0], size[1]) if size else None, crop_pct
    )
    height, width = source.image_size()
    pset, how = choose_parameter_set(requested_set, height, width)
    if layout == "auto":  # the layout the set was released in, known once the images' size is
        layout = pset.released_layout
        _check_outputs(layout, out, names, levels, data)
    note(f"corruption parameters: {pset.name} set on {height}x{width} images ({how}); {layout} layout")
    batch_size = r["batch_size"]
    if batch_size is None:  # evaluate's default for these images (audit.options.default_batch_size)
        from macs_audit.auditing import default_batch_size

        batch_size = default_batch_size((height, width))
    grid = Grid(source, seed, batch_size, device, frost, pset.name)
    with Progress(show_progress(r["quiet"])) as progress:
        wrote = _write(layout, out, grid, names, levels, progress)
    frost_info = f"; frost: {frost_texture_info(frost, pset.name)}" if "frost" in names else ""  # where asked
    note(
        f"{wrote} to {out} ({len(source):,} images x {len(levels)} severities per corruption; seed {seed}{frost_info})"
    )


def _write(layout: str, out: Path, grid, names: tuple[str, ...], levels: tuple[int, ...], progress) -> str:
    """The corruptions of `grid` written into OUT in `layout`; what was written, in words."""
    from macs_audit.data.grid import write_corruption_grid, write_corruption_tree

    if layout == "npy":
        files = write_corruption_grid(out, grid, names, progress)
        return f"wrote {len(files)} files"
    written, kept = write_corruption_tree(out, grid, names, levels, progress)
    return f"wrote {written:,} image files" + (f" (kept {kept:,} finished ones)" if kept else "")


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
