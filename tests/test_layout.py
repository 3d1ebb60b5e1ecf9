"""The package's shape limits: no function over cyclomatic complexity 15. Checked in
every test run, so CI enforces it. (A module is as long as its one concern needs: a
line cap only made modules split where no concern ends.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trioqueue"
MAX_COMPLEXITY = 15


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
