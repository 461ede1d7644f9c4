"""The fault scripts: ``<name>.py`` is the fault ``name`` (``FAULT`` and ``main``), ``_*.py`` the pieces several
scripts share. The convention is :mod:`workbench_zoo`'s."""
