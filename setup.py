"""The C extensions: trioqueue.core._split_dict (see trioqueue/core/split_dict.py) and
trioqueue.core._job_slots (see trioqueue/core/job_plan.py).

Optional: where they cannot be built the package uses the same algorithms in Python,
which are correct but cost a broker more per job (about 12% for the split dicts);
tests/core/test_split_dict.py and tests/core/test_job_slots.py fail then, so CI tells.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("trioqueue.core._split_dict", ["trioqueue/core/_split_dict.c"], optional=True),
    Extension("trioqueue.core._job_slots", ["trioqueue/core/_job_slots.c"], optional=True),
])
