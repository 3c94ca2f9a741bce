"""COptiDICE (Lee et al., ICLR 2022, as OSRL builds it) on RLlib's new API stack, split like
``ray.rllib.algorithms.iql``:

- ``coptidice.py``: ``COptiDICEConfig`` and ``COptiDICE``;
- ``default_coptidice_rl_module.py``: the framework-agnostic module API;
- ``torch/``: the torch module and learner;
- ``nets.py``: the networks without Ray; ``forward.py``: the training forward as a function of them;
- ``losses.py``: the COptiDICE losses (pure functions, no Ray); ``keys.py``: the module's training outputs.
"""
