"""The README's quickstart runs as shown (in a fresh interpreter, embedded broker)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_quickstart_runs() -> None:
    text = README.read_text()
    match = re.search(r"## Quickstart \(the Python client\)\n\n```python\n(.*?)```", text,
                      re.S)
    assert match is not None, "the README lost its quickstart"
    done = subprocess.run([sys.executable, "-c", match[1]], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "{'sent': 'a@b.c'}"
