"""Training outputs of the VAE actor-critic family (BEAR-Lag, CPQ) that their pure losses consume, and the batch
columns of standard-normal noise their forwards draw (``noise``); no Ray."""

VAE_RECON, VAE_MEAN, VAE_STD = "vae_recon", "vae_mean", "vae_std"  # (B, A), (B, 2A), (B, 2A)
Q_DATA, QC_DATA = "q_data", "qc_data"  # every critic net at the dataset's (s, a): (groups, 2, B)
Q_NEXT, QC_NEXT = "q_next", "qc_next"  # target critics at s' and next actions (shapes per algorithm)
Q_PI, QC_PI = "q_pi", "qc_pi"  # critics (parameters frozen) at the policy's action (shapes per algorithm)
LOG_ALPHA, PID_INTEGRAL, PID_ERROR = "log_alpha", "pid_integral", "pid_error"  # multiplier state before this step
# batch columns: standard-normal noise of the VAE's latent (B, 2A), the policy's samples at s and at s' (shapes per
# algorithm)
VAE_NOISE, ACTION_NOISE, NEXT_ACTION_NOISE = "vae_noise", "action_noise", "next_action_noise"
