"""BEAR-Lag (BEAR with a PID-Lagrangian cost constraint, as OSRL builds it) on RLlib's new API stack, split like
``ray.rllib.algorithms.iql``:

- ``bearl.py``: ``BEARLConfig`` and ``BEARL`` (on ``rllib_caps.algorithms.vae_actor_critic.vae_actor_critic``);
- ``default_bearl_rl_module.py``: the framework-agnostic module API;
- ``torch/``: the torch module and learner;
- ``losses.py``: the BEAR-Lag losses (pure functions, no Ray); ``keys.py``: the module's training outputs.
"""
