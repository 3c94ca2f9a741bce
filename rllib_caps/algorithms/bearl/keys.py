"""Outputs of the BEAR-Lag module's ``_forward_train`` beyond the family's (``vae_actor_critic.keys``), and the
batch column of noise it adds; no Ray."""

VAE_SAMPLES = "vae_samples"  # pre-tanh VAE samples at s, (B, N, A), detached
ACTOR_SAMPLES = "actor_samples"  # pre-tanh policy samples at s, (B, N, A)
PRIOR_NOISE = "prior_noise"  # batch column: standard-normal latents of the VAE samples (before their clip), (B, N, 2A)
