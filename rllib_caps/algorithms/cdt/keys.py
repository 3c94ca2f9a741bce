"""Outputs of the CDT module's forward that ``losses.cdt_losses`` consumes; its inputs are the window columns of
``rllib_caps.data.sequences`` (the learner's samples, and the evaluation connector's context). No Ray."""

ACTION_MEAN = "action_mean"  # μ of the action read off each state token, (B, L, A)
ACTION_LOG_STD = "action_log_std"  # log σ of the Gaussian head (unclamped, as OSRL), (B, L, A); stochastic only
COST_LOG_PROBS = "cost_log_probs"  # log-softmax of the 2-class cost prediction read off each action token, (B, L, 2)
LOG_TEMPERATURE = "log_temperature"  # log of the entropy temperature T_ent (stochastic only), scalar
