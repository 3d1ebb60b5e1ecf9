"""TRIOQUEUE_PURE_PYTHON=1 makes the package load none of its C extensions and reach
into no interpreter internals, so the path a user without a compiler gets can be run as
a whole; unset, the extensions built here are the ones in use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trioqueue.core import native

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = {"trioqueue.core._split_dict", "trioqueue.core._data_walk",
              "trioqueue.core._job_slots", "trioqueue.core._presized",
              "trioqueue.transport._pieces"}

# Imports every Python module of the package (as a broker and a client would, and more),
# then prints which extension modules are loaded and what each loader chose.
PROBE = """
import importlib, importlib.util, json, pkgutil, sys
import trioqueue
for info in pkgutil.walk_packages(trioqueue.__path__, "trioqueue."):
    source = str(importlib.util.find_spec(info.name).origin)
    if source.endswith(".py") and not info.name.endswith("__main__"):
        importlib.import_module(info.name)
from trioqueue.core import job, job_data, presized, split_dict
from trioqueue.transport.wire import datamodel
from trioqueue.transport.large import long_strings
from trioqueue.utf8_views import utf8_view
loaded = sorted(name for name, module in sys.modules.items()
                if name.startswith("trioqueue.")
                and str(getattr(module, "__file__", "")).endswith((".so", ".pyd")))
print(json.dumps({
    "loaded": loaded,
    "forms": [split_dict.IMPLEMENTATION, job.IMPLEMENTATION, presized.IMPLEMENTATION,
              job_data.IMPLEMENTATION, datamodel.IMPLEMENTATION,
              "C" if long_strings.HAVE_PIECES else "Python"],
    "view": utf8_view("abc") is not None,
}))
"""


def probe(pure: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != native.ENV_VARIABLE}
    if pure is not None:
        env[native.ENV_VARIABLE] = pure
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_pure_python_loads_no_extension_and_no_interpreter_internals() -> None:
    seen = probe("1")
    assert seen == {"loaded": [], "forms": ["Python"] * 6, "view": False}


def test_unset_or_zero_the_built_extensions_are_in_use() -> None:
    for value in (None, "0"):
        seen = probe(value)
        built = {name for name in EXTENSIONS
                 if list((ROOT / Path(*name.split(".")[:-1])).glob(
                     name.rsplit(".", 1)[-1] + ".*.so"))}
        assert set(seen["loaded"]) == built  # type: ignore[arg-type]
        assert seen["view"] is True
        if built == EXTENSIONS:
            assert seen["forms"] == ["C"] * 6


def test_this_process_runs_the_form_the_variable_names() -> None:
    # the suite runs once with the variable set (CI) and once without
    from trioqueue.core import job, split_dict

    expected = "Python" if native.PURE_PYTHON else "C"
    assert split_dict.IMPLEMENTATION == job.IMPLEMENTATION == expected
