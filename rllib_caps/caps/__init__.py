"""CAPS on RLlib's new API stack, split like ``ray.rllib.algorithms.iql``:

- ``caps.py``: ``CAPSConfig`` and ``CAPS``;
- ``caps_learner.py``: the framework-agnostic learner (in-memory dataset, per-step Polyak targets);
- ``default_caps_rl_module.py``: the framework-agnostic module API;
- ``torch/``: the torch module and learner;
- ``keys.py``: batch and output keys (no Ray import, shared with the pure losses).
"""
