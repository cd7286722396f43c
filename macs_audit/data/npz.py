"""Reading the arrays of a user's .npz file without trusting it.

An .npz is a zip archive of .npy members. `np.load` believes each member's header: a header that claims
10^9 images allocates terabytes before a byte is read, a file cut short or a damaged member surfaces as
zipfile's own exceptions, and a file that is no zip at all is taken for a pickle. Here every member's
header is read first and checked against what the member holds and against MAX_ARRAY_BYTES, before any
memory is allocated; each failure is an InputError that names the file, the array and what to do.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from macs_audit.errors import InputError

# The most one array of an .npz may hold. An .npz is read whole into memory (it cannot be memory-mapped),
# so its arrays must fit in RAM: 32 GiB holds ImageNet's 50,000 validation images four times over at 224 px.
# Larger sets belong in an image folder or the memory-mapped CIFAR-C layout (`<corruption>.npy`).
MAX_ARRAY_BYTES = 32 * 2**30
ZIP_MAGIC = b"PK\x03\x04"
NPY_MAGIC = b"\x93NUMPY"
DAMAGED = "re-download the file or save it again with np.savez"


def size_text(nbytes: int) -> str:
    """2.79 TiB, 150.0 MiB, 512 bytes."""
    value = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{nbytes} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def npy_header(fh: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the .npy array `fh` is at the start of, leaving `fh` at its data.
    Raises ValueError (or EOFError) for bytes that are not a .npy header."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    return tuple(int(d) for d in shape), bool(fortran), dtype


def data_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """How many bytes an array of `shape` and `dtype` holds (Python integers: no overflow)."""
    count = 1
    for dim in shape:
        count *= dim
    return count * dtype.itemsize


class NpzArchive:
    """The arrays of an .npz file, read one at a time with `read(key)`; a context manager (closes the file)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile:
            raise InputError(f"cannot read {path} as .npz: {_not_a_zip(path)}") from None
        except OSError as exc:
            raise InputError(f"cannot read data {path}: {exc.strerror or exc}") from None
        self.keys = {name[:-4] for name in self._zip.namelist() if name.endswith(".npy")}

    def __enter__(self) -> NpzArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    def read(self, key: str) -> np.ndarray:
        """The array `key`: its header checked against the member's size and MAX_ARRAY_BYTES first; an object
        array (loading it would run pickle) is refused."""
        where = f"'{key}' of {self.path}"
        info = self._zip.getinfo(f"{key}.npy")
        try:
            with self._zip.open(info) as fh:
                try:
                    shape, fortran, dtype = npy_header(fh)  # type: ignore[arg-type]
                except (ValueError, EOFError, SyntaxError) as exc:
                    raise InputError(f"cannot read {where}: it is not a .npy array ({exc}); {DAMAGED}") from None
                if dtype.hasobject:
                    raise InputError(
                        f"cannot read {where}: it is an object array (pickled), which is never loaded; "
                        "save plain numeric or string arrays"
                    )
                nbytes = data_bytes(shape, dtype)
                if nbytes > MAX_ARRAY_BYTES:
                    raise InputError(
                        f"cannot read {where}: its shape {shape} needs {size_text(nbytes)}, more than the "
                        f"{size_text(MAX_ARRAY_BYTES)} an .npz array may hold; store large sets as an image folder"
                    )
                held = info.file_size - fh.tell()
                if held != nbytes:
                    raise InputError(
                        f"cannot read {where}: its header describes shape {shape} ({size_text(nbytes)}) but it "
                        f"holds {size_text(max(0, held))}: the file is damaged or cut short; {DAMAGED}"
                    )
                try:
                    buffer = np.empty(nbytes, dtype=np.uint8)  # not zeroed: only the pages read are touched
                except MemoryError:
                    raise InputError(
                        f"cannot read {where}: its {size_text(nbytes)} do not fit in the memory free; "
                        "use a machine with more memory, or an image folder"
                    ) from None
                if fh.readinto(buffer) != nbytes:  # type: ignore[attr-defined]
                    raise InputError(f"cannot read {where}: the file ends early; {DAMAGED}")
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:  # a bad CRC, a damaged compressed member
            raise InputError(f"cannot read {where}: the archive is damaged ({exc}); {DAMAGED}") from None
        except OSError as exc:
            raise InputError(f"cannot read {where}: {exc.strerror or exc}") from None
        if dtype.itemsize == 0:  # e.g. strings of length 0: no bytes to view
            return np.empty(shape, dtype=dtype)
        array = buffer.view(dtype)
        return array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)


def _not_a_zip(path: Path) -> str:
    """Why zipfile refused `path`: a single .npy, a zip archive cut short, or no archive at all."""
    try:
        with open(path, "rb") as fh:
            start = fh.read(8)
    except OSError:
        start = b""
    if start.startswith(NPY_MAGIC):
        return "it is a single .npy array, not an .npz archive; save the arrays with np.savez(path, x=..., y=...)"
    if start.startswith(ZIP_MAGIC):
        return f"the archive is incomplete (cut short or damaged: its zip directory is missing); {DAMAGED}"
    return "not an .npz (zip) archive; np.savez writes one"


def open_npz(path: Path) -> NpzArchive:
    """The .npz at `path`, opened for `read`; InputError for a file that is no complete zip archive."""
    return NpzArchive(path)
