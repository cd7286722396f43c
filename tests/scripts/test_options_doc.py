"""docs/options.md is the options table as scripts/options_doc.py writes it: a new option or a changed help text
fails here until the page is rewritten."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_options_page_is_written_from_the_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "options_doc.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
