"""Ray started and stopped whole: ``init_ray`` (SIGINT and SIGTERM held while it starts, a local Ray's processes in a
session of their own, no credential in a runtime environment), ``ray_started`` and ``shutdown_ray``.

A local Ray's processes run in a session of their own, so a signal to the command's process group (Ctrl+C;
``kill -TERM -PGID``) reaches the command alone, which stops Tune and shuts Ray down in order
(``rllib_caps.interrupts``). Where Ray's processes are signalled too (Slurm's ``scancel`` and systemd signal every
process of the job), Ray's driver would wait a minute for its GCS before failing: once signalled, the command ends
within ``utils.signals.STOP_GRACE_S`` regardless.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rllib_caps.utils.signals import signals_held
from rllib_caps.utils.smoke import SMOKE_TEST_ENV, smoke_test


def init_ray(**options: Any) -> Any:
    """``ray.init(**options)`` with SIGINT and SIGTERM held until it returns (``signals_held``) and the SIGTERM
    handler kept (Ray's driver installs one of its own that aborts the process, exit -6, instead of letting
    ``interruptible`` shut Ray down). The processes of a local Ray start in a session of their own, so that a
    signal to this process's group (``kill -TERM -PGID``) reaches this process alone and Ray is shut down in order.
    No credential goes through a ``runtime_env`` (``core.secrets``). With ``RLLIB_CAPS_SMOKE_TEST`` set, the
    job's workers get it too: on a cluster this process joins, they have the environment their node started with,
    not this one's."""
    import ray

    from rllib_caps.core.ray_internals import ray_processes_in_own_session
    from rllib_caps.core.secrets import keep_secrets_out_of_tune

    keep_secrets_out_of_tune()
    if smoke_test():
        options.setdefault("runtime_env", {"env_vars": {SMOKE_TEST_ENV: os.environ[SMOKE_TEST_ENV]}})
    with signals_held(), ray_processes_in_own_session():
        return ray.init(**options)


@contextmanager
def ray_started(**options: Any) -> Iterator[None]:
    """Ray for the block: ``init_ray(**options)`` unless this process has Ray already, and at the end the Ray it
    started shut down (``shutdown_ray``), before the block's outputs are kept."""
    import ray

    started = not ray.is_initialized()
    if started:
        init_ray(**options)
    try:
        yield
    finally:
        if started:
            shutdown_ray()


def shutdown_ray() -> None:
    """``ray.shutdown()``, whole (``signals_held``), if Ray is imported and initialised in this process (it stops
    the processes it started)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with signals_held():
            ray.shutdown()
