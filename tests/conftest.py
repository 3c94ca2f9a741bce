"""Shared fixtures (one real local Ray per test session for the integration tests) and the suite's time budget.

The budget (docs/testing.md): every test, setup and teardown included, takes at most ``TEST_BUDGET_S`` on the
2-core machine, unloaded, except the few named in ``LONG_TESTS`` with the reason and a budget of their own. A test
that takes longer than its budget times ``LOAD_MARGIN`` fails, named, at its teardown: the margin is there so that
load alone does not trip the guard, and a test that needs it is a test to make cheaper.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

pytest_plugins = ["pytester"]  # tests/test_budget.py runs the guard below on a suite of its own

os.environ.setdefault("DSRL_SUPPRESS_IMPORT_ERROR", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# One intra-op thread: with 2 cores shared by Ray workers and simulators, torch's OpenMP threads
# spin against each other (a 256x128 matmul measured 50x slower with 2 threads under load).
torch.set_num_threads(1)

TEST_BUDGET_S = float(os.environ.get("RLLIB_CAPS_TEST_BUDGET_S", "60"))
LOAD_MARGIN = float(os.environ.get("RLLIB_CAPS_TEST_LOAD_MARGIN", "3"))


@dataclass(frozen=True)
class LongTest:
    budget_s: float
    reason: str


# Node-id prefixes (a test and all its parameters) -> their own budget and why they cannot be cheaper. At most 10.
LONG_TESTS: dict[str, LongTest] = {
    "tests/test_docs.py::test_docs_run_as_printed": LongTest(
        360, "every block of one page as printed, each a process of its own (torch, RLlib, Ray joined), trainings, "
             "sweeps and reports among them"),
    "tests/test_cdt.py::test_a_lower_cost_target_gives_a_lower_realised_cost": LongTest(
        120, "a learning property: CDT must be trained (3000 steps) before its cost follows the cost-to-go token"),
    "tests/test_caps_algorithm.py::test_learning_on_bundled_dataset": LongTest(
        120, "a learning property: CAPS(IQL) trained 3000 steps is safe at every κ and its cost grows with κ"),
    "tests/test_caps_algorithm.py::test_sacbc_learns_on_bundled_dataset_safe_at_every_threshold": LongTest(
        120, "a learning property: CAPS(SAC+BC) trained 3000 steps is safe at every κ"),
    "tests/test_plugin_algorithm.py::test_a_plugged_algorithm_trains_evaluates_sweeps_and_reports": LongTest(
        120, "a copy of the package with a plugged algorithm: train, evaluate, tune and report as CLIs, with a Ray "
             "of their own (the shared one's workers would import the installed package)"),
    "tests/test_multinode.py::test_two_node_sweep_uses_both_nodes_and_resumes_after_the_driver_is_killed": LongTest(
        120, "a two-node Ray cluster of its own, a sweep on it, the driver killed and the sweep resumed"),
    "tests/test_fault_injection.py::test_an_interrupted_packed_search_resumes_with_its_samples_and_their_scores":
        LongTest(120, "an Optuna search of 3 samples x 2 seeds packed in populations, on a Ray of its own, stopped by "
                      "SIGTERM and resumed on the shared one"),
    "tests/test_fault_injection.py::test_sigterm_to_every_process_of_a_sweep_ends_it_within_the_grace_and_it_resumes":
        LongTest(120, "a sweep on a Ray of its own, every process of it sent SIGTERM as Slurm does: the driver ends "
                      "only after its grace (STOP_GRACE_S, 20 s) by design; then resumed on the shared Ray"),
    "tests/test_packing.py::test_an_evaluation_during_training_rolls_out_while_the_population_trains_on": LongTest(
        120, "the same packed trial three times (pipelined, in place, resumed), each with remote evaluation runners"),
    "tests/test_packing.py::test_a_packed_sweep_reports_what_the_unpacked_sweep_does": LongTest(
        120, "the same 8 trials (CAPS: 2 seeds, BC-Safe: 2 seeds x 3 κ) unpacked and packed in 2 populations, "
             "compared member by member"),
}


def budget_of(nodeid: str) -> tuple[float, str | None]:
    """The budget of the test ``nodeid`` and, for a listed one, the prefix that lists it."""
    for prefix, long_test in LONG_TESTS.items():
        if nodeid == prefix or nodeid.startswith((prefix + "[", prefix + "::")):
            return long_test.budget_s, prefix
    return TEST_BUDGET_S, None


_TIMES: dict[str, float] = {}
_OVER: list[tuple[str, float, float]] = []  # (nodeid, seconds, budget) of the tests over budget within the margin


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    _TIMES[item.nodeid] = _TIMES.get(item.nodeid, 0.0) + call.duration
    if report.when != "teardown":
        return
    took = _TIMES.pop(item.nodeid)
    budget, _ = budget_of(item.nodeid)
    if took <= budget:
        return
    if took <= budget * LOAD_MARGIN:  # said at the end of the run (by the controller, under pytest-xdist)
        report.user_properties.append(("over_budget", (took, budget)))
        return
    report.outcome = "failed"
    report.longrepr = (f"{item.nodeid} took {took:.0f} s, over its {budget:g} s budget times the load margin "
                       f"{LOAD_MARGIN:g} ({budget * LOAD_MARGIN:.0f} s): make it cheaper (docs/testing.md), or name "
                       "it in tests/conftest.py's LONG_TESTS with the reason")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "over_budget":
            _OVER.append((report.nodeid, *value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for nodeid, took, budget in _OVER:
        terminalreporter.write_line(f"over budget (within the load margin): {nodeid} took {took:.0f} s of "
                                    f"{budget:.0f} s", yellow=True)


@pytest.fixture(scope="session")
def ray_session():
    """A new local Ray with 2 CPUs and no dashboard (never another process's cluster), started once (or reused if a
    test module started one)."""
    import ray

    for attempt in range(3):  # a loaded machine sometimes times out while the node starts
        if ray.is_initialized():
            break
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_address(ray_session) -> str:
    """The shared local Ray's GCS address, for sweeps that join it (``--address``)."""
    return ray_session.get_runtime_context().gcs_address
