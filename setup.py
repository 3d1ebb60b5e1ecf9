"""The one C extension: trioqueue.core._split_dict (see trioqueue/core/split_dict.py).

Optional: where it cannot be built the package uses the same algorithm in Python, which
is correct but costs a broker about 12% more per job; tests/core/test_split_dict.py
fails then, so CI tells.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("trioqueue.core._split_dict",
                             ["trioqueue/core/_split_dict.c"], optional=True)])
