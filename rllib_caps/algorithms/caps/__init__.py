"""CAPS on RLlib's new API stack, split like ``ray.rllib.algorithms.iql``:

- ``caps.py``: ``CAPSConfig`` and ``CAPS`` (on ``rllib_caps.core.offline``);
- ``default_caps_rl_module.py``: the framework-agnostic module API;
- ``torch/``: the torch module and learner;
- ``losses.py``: the CAPS(IQL) losses; ``switching.py``: the switching rule (pure functions, no Ray);
- ``policy.py``: ``CAPSPolicy``, Ray-free deployment;
- ``export.py``: the switching policy as one ONNX graph, and its policy card;
- ``fqe.py``: FQE critics of the heads for the switching rule (the paper's FQE ablation, no Ray);
- ``keys.py``: the module's training outputs.
"""
