"""How the numbers a report holds are written for people: one rule per kind of number, used by every format
(terminal, Markdown, HTML, JUnit), compare, the gate's checks and `init`'s comments.

- A metric's value, or a bound on one (`format_value`): a fraction-style metric (accuracy, ECE, ...) as a
  percent with 2 decimals, `92.31%`; any other (NLL, Brier, ratios) with 4 decimals, `0.4312`. A gate
  check's observed value and threshold are of this kind, so a value reads the same in a report's table
  and in the check on it (`0.4300 <= 0.4730`, not `0.43 <= 0.473`), and columns of values line up.
- A change in a metric (`format_change`): percentage points for a fraction-style metric, `+1.25 pp`, else
  4 decimals, `+0.0123`; signed for a difference (compare's B - A), unsigned for an amount (a baseline
  check's allowance).

An absent value is `-`. A message that echoes a number from the user's input keeps its own form (`:g`).
"""

from __future__ import annotations


def value_digits(percent: bool) -> tuple[int, int]:
    """(scale, decimals) a metric's value is written with: a fraction-style metric x100 with 2 decimals, any
    other x1 with 4; format_value, format_values, format_change and shown_value all read them here."""
    return (100, 2) if percent else (1, 4)


def format_value(value: float | None, percent: bool) -> str:
    """A metric's value (or a bound on it): `92.31%` for a fraction-style metric, else `0.4312`; `-` if absent."""
    if value is None:
        return "-"
    scale, decimals = value_digits(percent)
    return f"{scale * value:.{decimals}f}" + ("%" if percent else "")


def shown_value(value: float, percent: bool) -> float:
    """The number format_value writes for `value` (92.31 for 0.923149 as a percent), as a number: values that
    read the same compare equal, whatever the text around the digits."""
    scale, decimals = value_digits(percent)
    return round(scale * value, decimals)


def format_values(values: tuple[float, float], percent: bool, most_decimals: int = 8) -> tuple[str, str]:
    """Two values shown side by side (a gate check's observed value and its bound): format_value's decimals,
    more where those show two different values as the same (`17.38% <= 17.38%` for 0.17384 and 0.17380
    reads `17.384% <= 17.380%`), up to `most_decimals`."""
    a, b = values
    scale, base = value_digits(percent)
    for decimals in range(base, most_decimals + 1):
        shown = (f"{scale * a:.{decimals}f}", f"{scale * b:.{decimals}f}")
        if shown[0] != shown[1] or a == b:
            break
    suffix = "%" if percent else ""
    return shown[0] + suffix, shown[1] + suffix


def format_change(change: float | None, percent: bool, signed: bool = True) -> str:
    """A change in a metric: `+1.25 pp` (percentage points) for a fraction-style metric, else `+0.0123`;
    without the sign for an amount such as an allowance; `-` if absent."""
    if change is None:
        return "-"
    sign = "+" if signed else ""
    scale, decimals = value_digits(percent)
    return f"{scale * change:{sign}.{decimals}f}" + (" pp" if percent else "")
