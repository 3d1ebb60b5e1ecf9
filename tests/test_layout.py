"""The package's shape limits (issue 11): modules under 500 lines (the C extensions'
sources too), no function over cyclomatic complexity 15. Checked in every test run, so
CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trioqueue"
MAX_MODULE_LINES = 500
MAX_COMPLEXITY = 15


def test_no_module_is_over_500_lines() -> None:
    sources = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c"), *PACKAGE.rglob("*.h")]
    long = {str(p.relative_to(PACKAGE)): n for p in sources
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_complexity_15() -> None:
    ruff = shutil.which("ruff")
    command = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    if not ruff and subprocess.run([*command, "--version"], capture_output=True).returncode:
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    done = subprocess.run(
        [*command, "check", "--select", "C901", "--config",
         f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", str(PACKAGE)],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
