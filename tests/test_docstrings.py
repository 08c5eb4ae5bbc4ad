"""The examples in the docstrings run: every ``>>>`` of the installed package's modules and of
``_native.pyi`` (the native module's documentation source, which Python never imports, so
``--doctest-modules`` cannot see it; pydantic-core's tests/test_docstrings.py is the model).

An example's ``127.0.0.1:9092`` is the reader's broker: here it becomes the test broker, so the
examples that name it talk to a real one. Examples marked ``# doctest: +SKIP`` need state the
docstring does not build (a running group, a topic with reports) and are shown, not run.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
from pathlib import Path
from typing import Any

import pytest

import ferrokafka
import ferrokafka._native

pytestmark = pytest.mark.kafka

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
STUBS = Path(ferrokafka.__file__).with_name("_native.pyi")
# Modules whose import needs an extra this suite may not have, or that start a program.
NOT_IMPORTED = {"ferrokafka.__main__"}


def module_tests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests: list[doctest.DocTest] = []
    names = ["ferrokafka"] + [
        info.name
        for info in pkgutil.walk_packages(ferrokafka.__path__, "ferrokafka.")
        if info.name not in NOT_IMPORTED
    ]
    for name in names:
        tests.extend(t for t in finder.find(importlib.import_module(name)) if t.examples)
    return tests


def stub_tests() -> list[doctest.DocTest]:
    """One test per documented class, method and function of the stubs, run against the native
    module's namespace."""
    parser = doctest.DocTestParser()
    tree = ast.parse(STUBS.read_text())
    tests: list[doctest.DocTest] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                docstring = ast.get_docstring(child, clean=True)
                if docstring and ">>>" in docstring:
                    test = parser.get_doctest(
                        docstring,
                        dict(vars(ferrokafka._native)),
                        f"_native.{name}",
                        str(STUBS),
                        child.lineno,
                    )
                    tests.append(test)
                visit(child, f"{name}.")

    visit(tree, "")
    return tests


TESTS = module_tests() + stub_tests()


@pytest.mark.parametrize("test", TESTS, ids=[t.name for t in TESTS])
def test_docstring_examples_run(test: doctest.DocTest, kafka_bootstrap: str) -> None:
    for example in test.examples:
        example.source = example.source.replace("127.0.0.1:9092", kafka_bootstrap)
    globs: dict[str, Any] = dict(test.globs)
    test.globs = globs
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    runner.run(test, out=report.append, clear_globs=True)
    assert runner.failures == 0, "".join(report)


def test_the_stubs_and_the_modules_have_examples() -> None:
    """Guards the collection itself: a parser change that found nothing would pass vacuously."""
    assert len(stub_tests()) >= 20
    assert len(module_tests()) >= 20
