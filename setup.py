"""Build configuration beyond pyproject.toml: the optional C extension ``sealbox._speedups``.

``optional=True``: where no C compiler is available the extension is skipped and Sealbox runs
on the pure-Python reference (``sealbox.canonical.SPEEDUPS`` is False); nothing else changes.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("sealbox._speedups", ["src/sealbox/_speedups.c"], optional=True,
                             extra_compile_args=["-O2"])])
