"""Shared fixtures: one real local Ray per test session for the integration tests."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("DSRL_SUPPRESS_IMPORT_ERROR", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# One intra-op thread: with 2 cores shared by Ray workers and simulators, torch's OpenMP threads
# spin against each other (a 256x128 matmul measured 50x slower with 2 threads under load).
torch.set_num_threads(1)


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
