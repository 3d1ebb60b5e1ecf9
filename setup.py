"""The C extensions: trioqueue.core._split_dict (see trioqueue/core/split_dict.py) and
trioqueue.core._data_walk (the common case of transport/datamodel.py's validated and of
core/job_data.py's _json_bound).

Optional: where they cannot be built the package uses the same algorithms in Python,
which are correct but cost a broker more per job (about 12% for the split dict);
tests/core/test_split_dict.py and tests/core/test_data_walk.py fail then, so CI tells.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("trioqueue.core._split_dict", ["trioqueue/core/_split_dict.c"], optional=True),
    Extension("trioqueue.core._data_walk", ["trioqueue/core/_data_walk.c"], optional=True),
])
