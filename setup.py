"""The C extensions: trioqueue.core._split_dict (see trioqueue/core/split_dict.py),
trioqueue.core._data_walk (the common case of transport/wire/datamodel.py's validated and of
core/job_data.py's _json_bound) and trioqueue.core._job_slots (a job's record, wire dict
and admission; see trioqueue/core/job_plan.py), trioqueue.core._presized (an empty
dict sized for a known count; see trioqueue/core/presized.py) and trioqueue.transport._pieces (long
strings of a large frame made a piece at a time; see transport/large/long_strings.py).

Optional: where they cannot be built the package uses the same algorithms in Python,
which are correct but cost a broker more per job (about 12% for the split dict);
tests/core/test_split_dict.py, test_data_walk.py and test_job_slots.py fail then, so CI
tells. TRIOQUEUE_PURE_PYTHON=1 makes the package load none of them even where built
(trioqueue/core/native.py): CI runs the suite once more so.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("trioqueue.core._split_dict", ["trioqueue/core/_split_dict.c"], optional=True),
    Extension("trioqueue.core._data_walk", ["trioqueue/core/_data_walk.c"], optional=True),
    Extension("trioqueue.core._job_slots",
              ["trioqueue/core/_job_slots.c", "trioqueue/core/_job_slots_plan.c"],
              depends=["trioqueue/core/_job_slots.h"], optional=True),
    Extension("trioqueue.core._presized", ["trioqueue/core/_presized.c"], optional=True),
    Extension("trioqueue.transport._pieces", ["trioqueue/transport/_pieces.c"], optional=True),
])
