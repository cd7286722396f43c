"""open_image: the one way a user's image file is opened, with its pixel limit checked before decoding."""

import re
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

from macs_audit.errors import InputError
from macs_audit.images import MAX_IMAGE_PIXELS, open_image


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height; its pixel data is a few bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(bytes(16))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def test_an_image_opens_as_rgb(tmp_path):
    Image.fromarray(np.full((5, 7), 200, np.uint8)).save(tmp_path / "grey.png")
    image = open_image(tmp_path / "grey.png")
    assert image.mode == "RGB" and image.size == (7, 5)


@pytest.mark.parametrize(
    "width,height,message",
    [
        (12_000, 12_000, "is 12000x12000 (144,000,000 pixels)"),  # Pillow would warn
        (100_000, 100_000, "has 10,000,000,000 pixels"),  # Pillow would refuse inside Image.open
        (MAX_IMAGE_PIXELS + 1, 1, f"more than the {MAX_IMAGE_PIXELS:,} an image may have"),
    ],
)
def test_an_image_past_the_limit_is_refused_from_its_header_and_pillow_stays_silent(tmp_path, width, height, message):
    (tmp_path / "big.png").write_bytes(png_header(width, height))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning from Pillow fails the test
        with pytest.raises(InputError, match=re.escape(message)):
            open_image(tmp_path / "big.png", "image")


def test_a_file_that_is_no_image_is_named(tmp_path):
    (tmp_path / "x.png").write_bytes(b"not an image")
    with pytest.raises(InputError, match=r"cannot read frost texture .*x\.png"):
        open_image(tmp_path / "x.png", "frost texture")


def test_the_limit_is_pillows_own_threshold():
    """Below it Pillow neither warns nor refuses, so no warning of its own reaches the terminal."""
    assert MAX_IMAGE_PIXELS == Image.MAX_IMAGE_PIXELS
