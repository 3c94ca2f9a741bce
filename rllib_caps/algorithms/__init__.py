"""The offline safe RL algorithms, one folder each (``caps/``), and the registry (``registry.py``) that the
sweeps, the report and the CLIs read. Adding an algorithm means its folder plus one registry entry."""
