"""The VAE actor-critic family that BEAR-Lag and CPQ share: the conditional VAE (``vae``), the networks built by one
function for the RLModule and a plain loop (``nets``), the family's config, RLModule and learner
(``vae_actor_critic``), the outputs of its ``_forward_train`` (``keys``) and its noise, drawn with each minibatch
(``noise``)."""
