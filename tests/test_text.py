"""printable(): the one rule for showing strings from the data (macs_audit/text.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from macs_audit.text import or_list, printable


@pytest.mark.parametrize(
    "text, shown",
    [
        ("airplane", "airplane"),
        ("chien, café, 猫, 🐈", "chien, café, 猫, 🐈"),  # letters and emoji are kept
        ("C:\\models\\net.onnx", "C:\\models\\net.onnx"),  # so are backslashes
        ("\x1b[2Jcat", "\\x1b[2Jcat"),
        ("two\nlines\r\tand a tab", "two\\nlines\\r\\tand a tab"),
        ("\x00\x07\x7f\x9b", "\\x00\\x07\\x7f\\x9b"),  # NUL, BEL, DEL and the C1 CSI
        ("abc\u202edef\u200b", "abc\\u202edef\\u200b"),  # a bidirectional override, a zero-width space
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
        (5, "5"),
    ],
)
def test_printable_writes_unprintable_characters_as_python_escapes(text, shown):
    assert printable(text) == shown


def test_printable_text_is_one_line_and_fits_in_xml():
    every = "".join(map(chr, range(0x10000)))  # the basic multilingual plane, surrogates included
    shown = printable(every)
    assert shown.isprintable()
    element = ET.Element("x", {"v": shown})
    element.text = shown
    assert ET.fromstring(ET.tostring(element, encoding="unicode")).text == shown


def test_or_list_names_every_entry_once_in_order():
    assert or_list(["a"]) == "a"
    assert or_list(("a", "b")) == "a or b"
    assert or_list({"a": 1, "b": 2, "c": 3}, "and") == "a, b and c"
