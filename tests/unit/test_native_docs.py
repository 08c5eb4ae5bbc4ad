"""``help()`` on the native classes a user imports from ``ferrokafka`` shows what the stubs say.

``_native.pyi`` is the documentation source (editors and type checkers read it, and
tests/test_docstrings.py runs its examples), but Python never imports it: ``help(Client)`` and
``Client.read_topic.__doc__`` come from the Rust doc comments. This test holds the two equal
for every class ``ferrokafka`` exports from the native module, its methods and its documented
properties, so neither can drift or be left empty.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import ferrokafka
import ferrokafka._native

STUBS = Path(ferrokafka.__file__).with_name("_native.pyi")


def _stub_docs() -> dict[str, str | None]:
    """``Class`` and ``Class.member`` of the public native classes -> their stub docstring."""
    public = {
        name
        for name in ferrokafka.__all__
        if inspect.isclass(getattr(ferrokafka, name))
        and getattr(ferrokafka, name) is getattr(ferrokafka._native, name, None)
    }
    docs: dict[str, str | None] = {}
    for node in ast.parse(STUBS.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name in public:
            docs[node.name] = ast.get_docstring(node)
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and not member.name.startswith("_"):
                    docs[f"{node.name}.{member.name}"] = ast.get_docstring(member)
    return docs


STUB_DOCS = _stub_docs()


def test_every_public_native_class_is_covered() -> None:
    assert {"Client", "Message", "Batch", "DeadlineQueue", "ClusterMetadata"} <= STUB_DOCS.keys()


@pytest.mark.parametrize("name", sorted(STUB_DOCS))
def test_the_runtime_docstring_is_the_stubs(name: str) -> None:
    obj: object = ferrokafka._native
    for part in name.split("."):
        obj = getattr(obj, part)
    runtime = inspect.cleandoc(obj.__doc__) if obj.__doc__ else None
    # A property the stubs leave undocumented (``id``, ``host``) may say nothing at run time.
    assert runtime == STUB_DOCS[name]
