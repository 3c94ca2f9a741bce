"""The suite's time budget (tests/conftest.py, docs/testing.md): the list of tests allowed over 60 s stays short and
names real tests with reasons, and the guard fails a test over its budget times the load margin, naming it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import LONG_TESTS, budget_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_long_list_is_short_and_names_existing_tests_with_reasons() -> None:
    assert len(LONG_TESTS) <= 10
    for prefix, long_test in LONG_TESTS.items():
        path, _, name = prefix.partition("::")
        functions = {node.name for node in ast.walk(ast.parse((ROOT / path).read_text()))
                     if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{prefix}: no such test"
        assert len(long_test.reason) > 20 and long_test.budget_s > 60, prefix
        assert budget_of(prefix + "[x]") == (long_test.budget_s, prefix)
    assert budget_of("tests/test_scoring.py::test_x") == (60.0, None)


def test_the_guard_fails_a_test_over_its_budget_and_names_it(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the conftest with a 0.2 s budget and a margin of 2: a test of 0.3 s passes and is listed as over
    budget, one of 0.6 s fails, named, with the way out."""
    monkeypatch.setenv("RLLIB_CAPS_TEST_BUDGET_S", "0.2")
    monkeypatch.setenv("RLLIB_CAPS_TEST_LOAD_MARGIN", "2")
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text().replace('pytest_plugins = ["pytester"]', ""))
    pytester.makepyfile(test_timed="""
        import time

        def test_within_the_margin():
            time.sleep(0.3)

        def test_over_the_margin():
            time.sleep(0.6)

        def test_quick():
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*test_timed.py::test_over_the_margin took * s, over its 0.2 s budget times the load "
                                 "margin 2*LONG_TESTS*",
                                 "*over budget (within the load margin): test_timed.py::test_within_the_margin*"])
