"""``RLLIB_CAPS_SMOKE_TEST``: when set (and not "0"), every training run and evaluation is tiny, so a test can
run every documented command as printed (README, "Tests"). Ray-free."""

from __future__ import annotations

import os

SMOKE_TEST_ENV = "RLLIB_CAPS_SMOKE_TEST"


def smoke_test() -> bool:
    """Whether ``RLLIB_CAPS_SMOKE_TEST`` asks for tiny runs."""
    return os.environ.get(SMOKE_TEST_ENV, "0") not in ("", "0")
