"""The option parsers (settings/parse.py): one meaning for a value wherever it is given."""

import pytest

from macs_audit.errors import UsageError
from macs_audit.settings.parse import (
    parse_corruptions,
    parse_perturbations,
    parse_severities,
)


def test_parsers():
    assert parse_severities("1-5") == (1, 2, 3, 4, 5)
    assert parse_severities("3, 1") == (1, 3)
    assert parse_corruptions("all") == parse_corruptions("cifar-c") and len(parse_corruptions("all")) == 19
    assert len(parse_corruptions("benchmark")) == 15
    assert parse_perturbations("none") == () and len(parse_perturbations("all")) == 3
    for bad in (
        lambda: parse_severities("0-6"),
        lambda: parse_severities("x"),
        lambda: parse_corruptions("rain"),
        lambda: parse_perturbations("fog"),
    ):
        with pytest.raises(UsageError):
            bad()
