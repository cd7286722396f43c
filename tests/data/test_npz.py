"""The .npz reader (data.npz) against files written by numpy, and against damaged and hostile ones."""

import re
import zipfile

import numpy as np
import pytest

from macs_audit.data import npz
from macs_audit.data.npz import open_npz
from macs_audit.errors import InputError

ARRAYS = {
    "fortran": np.asfortranarray(np.arange(24).reshape(2, 3, 4)),
    "big_endian": np.arange(5, dtype=">i4"),
    "strings": np.array(["ab", "c"]),
    "bytes": np.array([b"x", b"yz"]),
    "scalar": np.array(3.5),
    "empty": np.zeros((0, 4)),
    "records": np.zeros(3, dtype=[("u", "i4"), ("v", "f8")]),
    "images": np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3),
}


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_every_array_reads_back_as_numpy_saved_it(tmp_path, save):
    save(tmp_path / "a.npz", **ARRAYS)
    with open_npz(tmp_path / "a.npz") as archive:
        assert archive.keys == set(ARRAYS)
        for key, expected in ARRAYS.items():
            got = archive.read(key)
            assert got.dtype == expected.dtype and got.shape == expected.shape and got.flags.writeable
            np.testing.assert_array_equal(got, expected)


def test_a_header_is_checked_before_anything_is_allocated(tmp_path, monkeypatch):
    """The limit applies to the size the header claims: nothing of that size is ever asked for."""
    monkeypatch.setattr(npz, "MAX_ARRAY_BYTES", 1000)
    np.savez(tmp_path / "a.npz", x=np.zeros(1001, np.uint8), y=np.zeros(1000, np.uint8))
    allocated = []
    real_empty = np.empty
    monkeypatch.setattr(np, "empty", lambda n, *a, **k: allocated.append(n) or real_empty(n, *a, **k))
    with open_npz(tmp_path / "a.npz") as archive:
        assert len(archive.read("y")) == 1000
        with pytest.raises(InputError, match=r"needs 1001 bytes, more than the 1000 bytes an \.npz array may hold"):
            archive.read("x")
    assert allocated == [1000]


@pytest.mark.parametrize(
    "content,message",
    [
        (b"\x93NUMPY\x01\x00" + b" " * 20, "a single .npy array, not an .npz archive"),
        (b"PK\x03\x04" + b"\x00" * 40, "the archive is incomplete"),
        (b"plain text, no archive", "not an .npz (zip) archive"),
    ],
)
def test_a_file_that_is_no_complete_zip_says_what_it_is(tmp_path, content, message):
    (tmp_path / "a.npz").write_bytes(content)
    with pytest.raises(InputError, match=re.escape(message)):
        open_npz(tmp_path / "a.npz")


def test_a_damaged_compressed_member_is_named(tmp_path):
    np.savez_compressed(tmp_path / "a.npz", x=np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8))
    data = bytearray((tmp_path / "a.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        start = archive.getinfo("x.npy").header_offset + 100  # inside the member's deflated bytes
    for i in range(start, start + 50):
        data[i] ^= 0x5A
    (tmp_path / "b.npz").write_bytes(bytes(data))
    with open_npz(tmp_path / "b.npz") as archive, pytest.raises(InputError, match=r"cannot read 'x' of .*b\.npz: "):
        archive.read("x")


def test_an_object_array_is_refused_from_its_header(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.array([1, "a"], dtype=object), allow_pickle=True)
    with open_npz(tmp_path / "a.npz") as archive, pytest.raises(InputError, match="object array"):
        archive.read("x")


def test_size_text():
    assert [npz.size_text(n) for n in (512, 3072, 3 * 2**40)] == ["512 bytes", "3.00 KiB", "3.00 TiB"]
