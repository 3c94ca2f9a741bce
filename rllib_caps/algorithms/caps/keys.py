"""Outputs of the CAPS module's ``_forward_train`` that the CAPS losses consume, and of its inference that CAPS's
evaluation metrics read (no Ray import)."""

HEAD_MEANS = "head_means"  # (B, K, A)
HEAD_LOG_STD = "head_log_std"  # broadcastable to (B, K, A)
QR_PREDS, QR_TWIN_PREDS, QR_TARGET_PREDS, QR_TARGET_TWIN_PREDS = "qr", "qr_twin", "qr_target", "qr_target_twin"
QC_PREDS, QC_TWIN_PREDS, QC_TARGET_PREDS, QC_TARGET_TWIN_PREDS = "qc", "qc_twin", "qc_target", "qc_target_twin"
VR_PREDS, VR_PREDS_NEXT, VC_PREDS, VC_PREDS_NEXT = "vr", "vr_next", "vc", "vc_next"

# CAPS(SAC+BC) only (rllib_caps.algorithms.caps.sacbc.losses); "(B, K)" pairs are the twins of one critic.
PI_ACTIONS, PI_LOG_PROBS = "pi_actions", "pi_log_probs"  # ã_k ~ π_k(·|s) (B, K, A), log π_k(ã_k|s) (B, K)
QR_PI, QR_PI_TWIN, QC_PI, QC_PI_TWIN = "qr_pi", "qr_pi_twin", "qc_pi", "qc_pi_twin"  # frozen critics at (s, ã_k)
NEXT_LOG_PROBS = "next_log_probs"  # log π_k(a'_k|s') of the heads' next actions a'_k ~ π_k(·|s'), (B, K)
QR_NEXT, QR_NEXT_TWIN, QC_NEXT, QC_NEXT_TWIN = "qr_next", "qr_next_twin", "qc_next", "qc_next_twin"  # targets
LOG_ALPHA = "log_alpha"  # the shared entropy temperature, log α (a scalar parameter)
# Minibatch columns of CAPS(SAC+BC): the standard-normal noise ε of the heads' sampled actions at s and at s',
# each (B, K, A), drawn with the minibatch from the learner's generator (so a trial's draws are its own).
PI_NOISE, NEXT_PI_NOISE = "pi_noise", "next_pi_noise"
# Extra outputs of inference (the module's ``_forward_inference``, ``CAPSPolicy.last_outputs``), per step:
HEAD = "head"  # which head acted
PREDICTED_COST = "predicted_cost"  # Q^c(s, a) of the action taken, as the rule reads it (CAPSPolicy: first step)
# A minibatch column, (B,) float: 1 on the rows of the episodes the cost head learns from, 0 elsewhere; present only
# with ``cost_head_episode_limit`` (``training_data.training_dataset``).
COST_HEAD_ROWS = "cost_head_rows"
