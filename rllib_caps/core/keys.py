"""Batch columns that the evaluation connector adds and module outputs that evaluation reads (no Ray import).

Dataset columns (``obs``, ``costs``, ``t``, ...) are in ``rllib_caps.data.schema``.
"""

COST_SPENT = "cost_spent"  # c_<t: undiscounted cost incurred so far in the episode
STEP = "step"  # t: 0-based step index within the episode
HEAD = "head"  # extra model output: which policy head acted (0 for single-policy algorithms)
RESULTS_KEY = "dsrl"  # evaluation/dsrl/...: the DSRL-scored results per threshold (rllib_caps.core.evaluation)
EVALUATION_FILE = "evaluation.json"  # in a checkpoint of the train CLI: its evaluation/dsrl results
TIME_LIMITS = ("bootstrap", "terminal", "time_aware")  # how critics treat time-outs (rllib_caps.core.time_limit)

# Training outputs of the VAE actor-critic family (BEAR-Lag, CPQ) that their pure losses consume.
VAE_RECON, VAE_MEAN, VAE_STD = "vae_recon", "vae_mean", "vae_std"  # (B, A), (B, 2A), (B, 2A)
Q_DATA, QC_DATA = "q_data", "qc_data"  # every critic net at the dataset's (s, a): (groups, 2, B)
Q_NEXT, QC_NEXT = "q_next", "qc_next"  # target critics at s' and next actions (shapes per algorithm)
Q_PI, QC_PI = "q_pi", "qc_pi"  # critics (parameters frozen) at the policy's action (shapes per algorithm)
LOG_ALPHA, PID_INTEGRAL, PID_ERROR = "log_alpha", "pid_integral", "pid_error"  # multiplier state before this step
