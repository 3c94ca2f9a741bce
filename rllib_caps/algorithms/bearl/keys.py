"""Outputs of the BEAR-Lag module's ``_forward_train`` beyond the family's (``vae_actor_critic.keys``); no Ray."""

VAE_SAMPLES = "vae_samples"  # pre-tanh VAE samples at s, (B, N, A), detached
ACTOR_SAMPLES = "actor_samples"  # pre-tanh policy samples at s, (B, N, A)
