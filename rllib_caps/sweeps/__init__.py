"""Ray Tune sweeps (docs/sweeps.md): options, one trial's config and trainable, resources, running and resuming,
and the Optuna search. ``python -m rllib_caps.tune`` is the CLI."""
