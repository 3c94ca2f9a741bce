"""Outputs of the CPQ module's ``_forward_train`` beyond the family's (``vae_actor_critic.keys``); no Ray."""

OOD_KL = "ood_kl"  # VAE-encoder KL of the N policy samples per state, (N, B), detached
QC_OOD = "qc_ood"  # Q_c at those samples, (N, B): target critic, detached ("osrl"), or online critic ("paper")
