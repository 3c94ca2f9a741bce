"""BC-All and BC-Safe (the paper's BC baseline, OSRL's ``bc_mode`` "all" and "safe") on RLlib's new API stack,
split like ``ray.rllib.algorithms.iql``:

- ``bc.py``: ``BCConfig``/``BC`` (every transition) and ``BCSafeConfig``/``BCSafe`` (episodes with cost ≤ κ);
- ``default_bc_rl_module.py``: the framework-agnostic module API;
- ``torch/``: the torch module and learner;
- ``losses.py``: the BC losses; ``episode_filter.py``: BC-Safe's episode filter (pure, no Ray; the per-episode
  totals are ``rllib_caps.data.episodes``).

The choices against OSRL and the paper are in docs/baselines.md.
"""
