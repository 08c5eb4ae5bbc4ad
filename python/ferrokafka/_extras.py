"""What to install for a module that needs an optional dependency.

``pip install ferrokafka`` brings no dependency: the Spark helpers, the dashboard and the
share-group backend each need the packages of an extra (``spark``, ``dashboard``, ``share`` in
pyproject.toml), and without them say which extra to install instead of a bare
``ModuleNotFoundError``.
"""

from __future__ import annotations


def install_hint(extra: str, *modules: str) -> str:
    """``needs <modules>, from the '<extra>' extra: pip install 'ferrokafka[<extra>]'``."""
    needs = ", ".join(modules)
    return f"needs {needs}, from the '{extra}' extra: pip install 'ferrokafka[{extra}]'"


def missing_extra(what: str, extra: str, error: ModuleNotFoundError) -> ImportError:
    """The error of ``what`` (a module, a backend), which cannot import ``error.name``."""
    module = error.name or str(error)
    return ImportError(f"{what} {install_hint(extra, module)}", name=error.name)
