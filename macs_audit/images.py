"""Image files: the suffixes that name one, and opening one (one function, with a pixel limit checked before
the image is decoded), for the data sources and the frost textures alike.

Pillow reads an image's size from its header and decodes only on demand; a header may claim any size
(a few bytes of PNG can claim 10^10 pixels). Pillow's own guard warns on stderr above its limit and raises
DecompressionBombError above twice that; here both are one InputError that names the file, raised
before any pixel is decoded, and Pillow's warning never reaches the terminal.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError

# The file endings read as images: image folders' files, frost textures.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm")
# The most pixels an input image may have: Pillow's own decompression-bomb threshold (Image.MAX_IMAGE_PIXELS,
# 2^30 // 4 // 3, about 89 megapixels: a quarter of a GiB at 3 bytes a pixel), so Pillow never warns or refuses
# on its own. An RGB image this big decodes to 256 MiB; classifier inputs are a few hundred pixels a side.
MAX_IMAGE_PIXELS = 89_478_485


def open_image(path: str | Path, what: str = "image") -> Any:
    """The image at `path` decoded as an RGB PIL image. InputError (naming `what` and `path`) for a file that
    is no image, is damaged, or has more than MAX_IMAGE_PIXELS pixels (refused from its header, undecoded)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our limit is checked below
        try:
            with Image.open(path) as im:
                width, height = im.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise InputError(_too_big(what, path, f"is {width}x{height} ({width * height:,} pixels)"))
                return im.convert("RGB")
        except Image.DecompressionBombError as exc:  # over twice Pillow's limit: refused inside Image.open
            claimed = re.search(r"\((\d+) pixels\)", str(exc))
            size = f"has {int(claimed.group(1)):,} pixels" if claimed else "has too many pixels"
            raise InputError(_too_big(what, path, size)) from None
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read {what} {path}: {exc}") from None


def _too_big(what: str, path: str | Path, size: str) -> str:
    return (
        f"{what} {path} {size}, more than the {MAX_IMAGE_PIXELS:,} an image may have; resize it "
        "(the model's input is far smaller) or leave it out"
    )
