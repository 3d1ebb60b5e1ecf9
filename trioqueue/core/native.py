"""Whether the package loads its C extensions.

Each extension has a Python twin that defines what it does; a user without a compiler
gets the twins silently. ``TRIOQUEUE_PURE_PYTHON=1`` (any value but empty or ``0``)
makes every loader take the twin even where the extensions are built, so that path can
be run as a whole (CI runs the suite so) and a suspected extension bug ruled out.
"""

from __future__ import annotations

import os
from importlib import import_module
from types import ModuleType
from typing import Final

__all__ = ["ENV_VARIABLE", "PURE_PYTHON", "extension"]

ENV_VARIABLE: Final = "TRIOQUEUE_PURE_PYTHON"
#: Read once, at import: a process runs one form throughout.
PURE_PYTHON: Final = os.environ.get(ENV_VARIABLE, "") not in ("", "0")


def extension(name: str) -> ModuleType | None:
    """The built extension ``name`` (``"trioqueue.core._split_dict"``), or None where it
    is not built or the environment asks for pure Python."""
    if PURE_PYTHON:
        return None
    try:
        return import_module(name)
    except ImportError:  # no compiler where the package was installed
        return None
