"""The 38 DSRL tasks as gymnasium 1.x envs: the task registry (``tasks``), ``make_env``/``register_envs``
(``make``), the MetaDrive tasks (``metadrive``) and the simulator compatibility fixes (``compat/``).

Importing this package does not import Ray or any simulator.
"""

from rllib_caps.envs.make import make_env, register_envs
from rllib_caps.envs.tasks import SUITES, TASKS, TaskSpec, get_task, select_tasks

__all__ = ["SUITES", "TASKS", "TaskSpec", "get_task", "make_env", "register_envs", "select_tasks"]
