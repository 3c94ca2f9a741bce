"""The networks of the VAE actor-critic family (BEAR-Lag, CPQ) without Ray: the RLModule
(``vae_actor_critic.vae_actor_critic``) and a plain PyTorch loop (the benchmark) build them with the same function,
and each algorithm's training forward (``algorithms/<name>/forward.py``) reads them by attribute name."""

from __future__ import annotations

import copy

from torch import nn

from rllib_caps.algorithms.cost_limited.lagrangian import MultiplierState
from rllib_caps.algorithms.vae_actor_critic.vae import ConditionalVAE
from rllib_caps.core.nets import QEnsemble, SquashedGaussianActor


def add_networks(owner: nn.Module, *, obs_dim: int, act_dim: int, hidden: list[int], vae_hidden: list[int],
                 critic_groups: int, inference_only: bool = False) -> None:
    """Sets ``owner.actor`` and, unless ``inference_only``, ``owner.vae``, ``owner.qr``, ``owner.qc`` (``QEnsemble``s
    of ``critic_groups`` twin pairs) and ``owner.duals`` (the multipliers' state)."""
    owner.actor = SquashedGaussianActor(obs_dim, act_dim, hidden)
    if not inference_only:
        owner.vae = ConditionalVAE(obs_dim, act_dim, vae_hidden)
        owner.qr = QEnsemble(obs_dim, act_dim, hidden, critic_groups)
        owner.qc = QEnsemble(obs_dim, act_dim, hidden, critic_groups)
        owner.duals = MultiplierState()


class VAEActorCriticNets(nn.Module):
    """The family's networks and target copies in a plain ``nn.Module`` (no RLlib), for a bare training loop.

    ``settings`` is the module's model config (``hidden``, ``vae_hidden``, ``num_samples``, ``implementation``);
    ``targets`` names the networks with a ``<name>_target`` copy.
    """

    def __init__(self, obs_dim: int, act_dim: int, settings: dict, critic_groups: int, targets: list[str]) -> None:
        super().__init__()
        self.act_dim, self.num_samples = act_dim, int(settings["num_samples"])
        self.osrl = settings["implementation"] == "osrl"
        self.target_names = list(targets)
        add_networks(self, obs_dim=obs_dim, act_dim=act_dim, hidden=list(settings["hidden"]),
                     vae_hidden=list(settings["vae_hidden"]), critic_groups=critic_groups)
        for name in self.target_names:
            target = copy.deepcopy(getattr(self, name))
            target.requires_grad_(False)
            setattr(self, f"{name}_target", target)

    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(self, name), getattr(self, f"{name}_target")) for name in self.target_names]
