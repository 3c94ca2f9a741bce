"""``RLLIB_CAPS_SMOKE_TEST``: when set (and not "0"), every training run and evaluation is tiny (evaluation
episodes of at most ``SMOKE_EPISODE_STEPS`` steps included), so a test can run every documented command as
printed (README, "Tests"). Ray-free."""

from __future__ import annotations

import os

SMOKE_TEST_ENV = "RLLIB_CAPS_SMOKE_TEST"
SMOKE_EPISODE_STEPS = 20  # an evaluation episode's time limit under the smoke test


def smoke_test() -> bool:
    """Whether ``RLLIB_CAPS_SMOKE_TEST`` asks for tiny runs."""
    return os.environ.get(SMOKE_TEST_ENV, "0") not in ("", "0")


def smoke_evaluation_env_config() -> dict[str, int]:
    """``make_env`` keyword arguments of an evaluation env: under the smoke test a time-out after
    ``SMOKE_EPISODE_STEPS`` steps (RLlib's evaluation EnvRunners and the Ray-free evaluation alike), else none."""
    return {"max_episode_steps": SMOKE_EPISODE_STEPS} if smoke_test() else {}
