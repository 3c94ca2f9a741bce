"""CPQ (Constraints Penalized Q-learning, Xu et al., AAAI 2022, as OSRL builds it) on RLlib's new API stack, split
like ``ray.rllib.algorithms.iql``:

- ``cpq.py``: ``CPQConfig`` and ``CPQ`` (on ``rllib_caps.algorithms.vae_actor_critic.vae_actor_critic``);
- ``default_cpq_rl_module.py``: the framework-agnostic module API;
- ``torch/``: the torch module and learner;
- ``losses.py``: the CPQ losses (pure functions, no Ray); ``keys.py``: the module's training outputs.
"""
