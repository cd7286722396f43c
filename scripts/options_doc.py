"""Write docs/options.md, every command's options, from the options table (macs_audit/settings/table.py).

    python scripts/options_doc.py            # rewrite docs/options.md
    python scripts/options_doc.py --check    # exit 1 when docs/options.md differs from the table

tests/scripts/test_options_doc.py runs the check, so the page never drifts from the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "options.md"
sys.path.insert(0, str(ROOT))

from macs_audit.settings.presets import PRESETS  # noqa: E402
from macs_audit.settings.table import COMMANDS, Option, options_of  # noqa: E402

HEAD = """# Options

Every option of every command, from the one table that declares them (`macs_audit/settings/table.py`); this
page is written from it by `python scripts/options_doc.py`. The key of an option in the audit spec
(`[tool.macs-audit.<command>]` of a pyproject.toml, or `[<command>]` of a macs-audit.toml) and the keyword of
the Python API is its name; a value given on the command line wins over the spec, the spec over a preset, a
preset over the default. Relative paths in a spec are relative to the spec file's folder. Options marked
"command line only" are not read from a spec; an option whose help ends "(spec: KEY in [tool.macs-audit.TABLE])"
is set in that shared table, for every command that takes it.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(option: Option) -> str:
    if option.required:
        return "required"
    if option.default is None:
        return ""
    return f"`{str(option.default).lower()}`" if isinstance(option.default, bool) else f"`{option.default!r}`"


def render() -> str:
    lines = [HEAD]
    for command in COMMANDS:
        options = options_of(command)
        if not options:
            continue
        lines += [f"## {command}", "", "| name | flags | default | help |", "| --- | --- | --- | --- |"]
        for option in options:
            flags = option.name.upper() if option.argument else ", ".join(f"`{flag}`" for flag in option.flags)
            note = "" if option.in_spec else " (command line only)"
            if option.spec_table is not None:
                note = f" (spec: `{option.spec_key}` in `[tool.macs-audit.{option.spec_table}]`)"
            lines.append(f"| `{option.name}` | {flags} | {_default(option)} | {_cell(option.help)}{note} |")
        presets = PRESETS.get(command)
        if presets:
            lines += ["", 'Presets (`--preset`, or `preset = "..."` in the spec):', ""]
            for name, values in presets.items():
                settings = ", ".join(f"`{key} = {value!r}`" for key, value in values.items())
                lines.append(f"- `{name}`: {settings}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/options.md differs from the table")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
        if current != text:
            print("docs/options.md differs from the options table: run python scripts/options_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
