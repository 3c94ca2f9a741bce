"""What is not RL: atomic writes (``atomic``), checkpoint manifests (``manifest``), the checks of user input that the
CLIs and the sweep YAML share (``checks``), console output (``console``), local paths (``paths``) and the
``RLLIB_CAPS_SMOKE_TEST`` switch (``smoke``). No Ray import."""
