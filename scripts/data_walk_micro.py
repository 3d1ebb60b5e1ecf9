"""A deterministic micro run of the per-job data walks, to count under callgrind.

    PY=$(python -c "import sys; print(sys.executable)")   # valgrind cannot follow a shim
    PYTHONHASHSEED=0 PYTHONPATH=. valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.MODE "$PY" scripts/data_walk_micro.py MODE

MODE: ``build`` only builds the inputs (5 deep copies of a 1,000-job PUSHB message and
5,000 PUSH messages), to subtract; ``validated`` / ``validated_py`` validate each PUSHB
copy (the installed form / the Python walk alone); ``push`` / ``push_py`` each PUSH
message; ``bound`` / ``bound_py`` run job_data's _json_bound on each PUSHB job's data
(``bound_loop`` is that loop with a near-free C call, to subtract for the bound itself).
"""

from __future__ import annotations

import copy
import operator
import sys
from collections.abc import Callable
from typing import Any

from trioqueue.core import job_data
from trioqueue.transport.wire import datamodel

MODES: dict[str, Callable[..., Any] | None] = {
    "build": None, "validated": datamodel.validated, "validated_py": datamodel.validated_py,
    "push": datamodel.validated, "push_py": datamodel.validated_py,
    "bound": job_data._json_bound, "bound_py": job_data._json_bound_py,
    "bound_loop": operator.is_,
}


def main(mode: str) -> None:
    fn = MODES[mode]
    pushb = {"cmd": "PUSHB", "queue": "q", "reqId": "1",
             "jobs": [{"name": "j", "data": {"i": i, "nested": {"x": 1.5}},
                       "opts": {"attempts": 3}} for i in range(1000)]}
    copies = [copy.deepcopy(pushb) for _ in range(5)]
    pushes = [{"cmd": "PUSH", "queue": "q", "reqId": str(i), "name": "j", "data": {"i": i}}
              for i in range(5000)]
    if fn is None:
        return
    if mode.startswith("validated"):
        for message in copies:
            fn(message)
    elif mode.startswith("push"):
        for message in pushes:
            fn(message)
    else:
        for message in copies:
            for job in message["jobs"]:
                fn(job["data"], 0)


if __name__ == "__main__":
    main(sys.argv[1])
