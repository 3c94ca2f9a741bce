"""Outputs of the CAPS module's ``_forward_train`` that the CAPS losses consume (no Ray import)."""

HEAD_MEANS = "head_means"  # (B, K, A)
HEAD_LOG_STD = "head_log_std"  # broadcastable to (B, K, A)
QR_PREDS, QR_TWIN_PREDS, QR_TARGET_PREDS, QR_TARGET_TWIN_PREDS = "qr", "qr_twin", "qr_target", "qr_target_twin"
QC_PREDS, QC_TWIN_PREDS, QC_TARGET_PREDS, QC_TARGET_TWIN_PREDS = "qc", "qc_twin", "qc_target", "qc_target_twin"
VR_PREDS, VR_PREDS_NEXT, VC_PREDS, VC_PREDS_NEXT = "vr", "vr_next", "vc", "vc_next"
