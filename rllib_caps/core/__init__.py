"""What every offline safe algorithm on RLlib shares (docs/architecture.md): the offline base config and algorithm,
the in-memory learner, the cost budget and its connector, evaluation at thresholds, nets, shared losses, scoring,
time-limit handling, checkpoint manifests and atomic writes."""
