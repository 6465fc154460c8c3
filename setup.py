"""The one C extension, protocol._record_columns (the rest of the metadata is in pyproject.toml).

``optional=True``: without a C compiler the install still succeeds and protocol.record_columns
falls back to its pure-Python walker."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("protocol._record_columns", ["protocol/_record_columns.c"],
                             extra_compile_args=["-O2"], optional=True)])
