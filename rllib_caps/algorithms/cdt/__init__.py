"""CDT (Constrained Decision Transformer, Liu et al., ICML 2023, as OSRL builds it) on RLlib's new API stack, split
like ``ray.rllib.algorithms.iql``:

- ``cdt.py``: ``CDTConfig`` and ``CDT``;
- ``default_cdt_rl_module.py``: the framework-agnostic module API (κ at deployment);
- ``torch/``: the torch module and learner (episode windows and their relabelled copies sampled on device);
- ``nets.py``: the transformer without Ray; ``losses.py``: the losses (pure functions); ``keys.py``: the
  module's training outputs;
- ``relabel.py``: Pareto-frontier relabelling and episode weights; ``targets.py``: OSRL's per-task return
  targets and their interpolation in κ;
- ``context.py``: the running context window at deployment, kept by ``connector.py`` (EnvRunners) and
  ``policy.py`` (``CDTPolicy``, Ray-free).
"""
