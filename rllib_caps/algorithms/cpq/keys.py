"""Outputs of the CPQ module's ``_forward_train`` beyond the family's (``vae_actor_critic.keys``), and the batch
column of noise it adds; no Ray."""

OOD_KL = "ood_kl"  # VAE-encoder KL of the N policy samples per state, (N, B), detached
QC_OOD = "qc_ood"  # Q_c at those samples, (N, B): target critic, detached ("osrl"), or online critic ("paper")
OOD_NOISE = "ood_noise"  # batch column: standard-normal noise of those N policy samples per state, (N, B, A)
