"""Outputs of the COptiDICE module's ``_forward_train`` that ``losses.coptidice_losses`` consumes, and the batch
columns its minibatch adds (sampled initial observations, the BC noise); no Ray."""

INIT_OBS = "init_obs"  # batch column ("paper"): observations of initial transitions sampled from the data, (B, O)
# batch columns: the weighted BC's standard-normal noise of the observation (B, O) and the action (B, A)
OBS_NOISE, ACTION_NOISE = "obs_noise", "action_noise"
NU, NU_NEXT, NU_INIT = "nu", "nu_next", "nu_init"  # ν(s), ν(s′) and the per-row initial-state term, each (B,)
CHI, CHI_NEXT, CHI_INIT = "chi", "chi_next", "chi_init"  # the same for the cost network χ
LAGRANGE, TEMPERATURE = "lagrange", "temperature"  # λ and τ (softplus of their raw parameters), scalars
LOG_PROB = "log_prob"  # log-likelihood of the (noised) dataset action under the actor, (B,)
