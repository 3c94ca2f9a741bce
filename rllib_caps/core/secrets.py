"""Credentials stay out of Ray's runtime environments: Ray's runtime-env agent writes every ``env_vars`` it sets
up to ``runtime_env_agent.log`` in the session's log directory, readable by every user of the machine. The
processes that need a credential read it from their own environment: a local Ray's processes inherit the driver's,
and W&B logs from the driver (``rllib_caps.sweeps.tracking``)."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)


def is_secret(name: str) -> bool:
    """Whether the environment variable ``name`` holds a credential (``WANDB_API_KEY``, ``AWS_*``, ``HF_TOKEN``,
    ``MLFLOW_TRACKING_PASSWORD``, ...), by its name."""
    return bool(SECRET_NAME.search(name))


def without_secrets(env: dict[str, str]) -> dict[str, str]:
    """``env`` less its credentials: what may go into a ``runtime_env``'s ``env_vars``."""
    return {name: value for name, value in env.items() if not is_secret(name)}


def keep_secrets_out_of_tune() -> None:
    """Tune passes none of the driver's credentials (``AWS_*``) to its trainables through ``runtime_env``: trials
    write to a local or mounted ``--storage``, and the trial processes of a local Ray inherit the driver's
    environment anyway."""
    from rllib_caps.core.ray_internals import stop_tune_forwarding

    stop_tune_forwarding(is_secret)
