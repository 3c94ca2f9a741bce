"""Outputs of the COptiDICE module's ``_forward_train`` that ``losses.coptidice_losses`` consumes, and the batch
column of sampled initial observations; no Ray."""

INIT_OBS = "init_obs"  # batch column ("paper"): observations of initial transitions sampled from the data, (B, O)
NU, NU_NEXT, NU_INIT = "nu", "nu_next", "nu_init"  # ν(s), ν(s′) and the per-row initial-state term, each (B,)
CHI, CHI_NEXT, CHI_INIT = "chi", "chi_next", "chi_init"  # the same for the cost network χ
LAGRANGE, TEMPERATURE = "lagrange", "temperature"  # λ and τ (softplus of their raw parameters), scalars
LOG_PROB = "log_prob"  # log-likelihood of the (noised) dataset action under the actor, (B,)
