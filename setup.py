"""The optional C part of the collectors (pyproject.toml holds everything else): the step context's common path,
``collectors/_fast_step.c``. Where it cannot be built (no C compiler or Python headers) the install goes on and the
collectors use the same path in Python (``collector.STEP_IMPLS``; fingerprint.json ``step_context``)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("workbench.collectors._fast_step", ["collectors/_fast_step.c"],
                             extra_compile_args=["-O2"], optional=True)])
