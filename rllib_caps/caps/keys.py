"""String keys shared by the CAPS module, learner, connector and losses (no Ray import).

Batch keys equal RLlib's ``Columns`` values, so the losses can run on plain dicts without Ray.
"""

OBS, NEXT_OBS, ACTIONS, REWARDS, TERMINATEDS, COSTS = "obs", "new_obs", "actions", "rewards", "terminateds", "costs"

# Columns the env-to-module connector adds for the switching rule.
COST_SPENT = "cost_spent"  # c_<t: undiscounted cost incurred so far in the episode
STEP = "step"  # t: 0-based step index within the episode
# Extra model output: which head acted.
HEAD = "head"

# Outputs of `_forward_train` consumed by the losses.
HEAD_MEANS = "head_means"  # (B, K, A)
HEAD_LOG_STD = "head_log_std"  # broadcastable to (B, K, A)
QR_PREDS, QR_TWIN_PREDS, QR_TARGET_PREDS, QR_TARGET_TWIN_PREDS = "qr", "qr_twin", "qr_target", "qr_target_twin"
QC_PREDS, QC_TWIN_PREDS, QC_TARGET_PREDS, QC_TARGET_TWIN_PREDS = "qc", "qc_twin", "qc_target", "qc_target_twin"
VR_PREDS, VR_PREDS_NEXT, VC_PREDS, VC_PREDS_NEXT = "vr", "vr_next", "vc", "vc_next"
