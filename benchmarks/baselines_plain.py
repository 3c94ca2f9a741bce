"""BEAR-Lag and CPQ in a plain PyTorch loop (no Ray import): the same networks (``VAEActorCriticNets``), training
forwards, losses, Adam per network and Polyak step as their RLlib learners, in a bare loop. It is the reference of
the learners' step-for-step test and of their speed benchmark (``benchmarks.bench_baselines_bearl_cpq``), and runs
where Ray is not installed (a GPU machine) from a JSON plan the benchmark writes."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rllib_caps.algorithms.bearl import forward as bearl_forward
from rllib_caps.algorithms.bearl.losses import BEARLLossSettings, bearl_losses
from rllib_caps.algorithms.cost_limited.lagrangian import PIDGains
from rllib_caps.algorithms.cpq import forward as cpq_forward
from rllib_caps.algorithms.cpq.losses import CPQLossSettings, cpq_losses
from rllib_caps.algorithms.vae_actor_critic.nets import VAEActorCriticNets
from rllib_caps.algorithms.vae_actor_critic.noise import standard_normal_draws
from rllib_caps.core.losses import polyak_update
from rllib_caps.core.optim import adam
from rllib_caps.data import TransitionDataset

FAMILY = {  # algorithm -> (training forward, its noise, losses, loss settings class, critic groups, targets)
    "bearl": (bearl_forward.bearl_training_outputs, bearl_forward.bearl_noise_shapes, bearl_losses,
              BEARLLossSettings, bearl_forward.CRITIC_GROUPS, bearl_forward.TARGETS),
    "cpq": (cpq_forward.cpq_training_outputs, cpq_forward.cpq_noise_shapes, cpq_losses, CPQLossSettings,
            cpq_forward.CRITIC_GROUPS, cpq_forward.TARGETS),
}
NETWORK_LRS = {"actor": "actor_lr", "vae": "vae_lr", "qr": "critic_lr", "qc": "critic_lr"}


def run_spec(algo: str, config: Any) -> dict[str, Any]:
    """Everything a plain loop needs from an algorithm's config, as JSON-able values (the config is the one home
    of the defaults; ``PlainLoop.from_spec`` reads this where Ray is absent)."""
    return {
        "algo": algo, "obs_dim": int(config.observation_space.shape[0]),
        "act_dim": int(config.action_space.shape[0]),
        "model": {key: config.model_config[key] for key in ("hidden", "vae_hidden", "num_samples", "implementation")},
        "loss_settings": dataclasses.asdict(config.loss_settings()),
        "lrs": {name: getattr(config, attr) for name, attr in NETWORK_LRS.items()},
        "tau": config.tau, "batch_size": config.train_batch_size_per_learner, "data": str(config.input_),
        "steps": config.num_gradient_steps, "seed": config.seed, "cost_limit": config.cost_limit,
    }


class PlainLoop:
    """The learner's step in a bare loop: the minibatch and its noise from one generator, forward, losses, one
    backward, Adam steps, Polyak, then the multipliers' new state."""

    def __init__(self, spec: dict[str, Any], *, device: str = "cpu", initial_state: dict | None = None,
                 data_seed: int = 0) -> None:
        self.spec = spec
        self.forward, self.noise_shapes, self.losses, settings_class, groups, targets = FAMILY[spec["algo"]]
        settings = dict(spec["loss_settings"])
        if "pid" in settings:
            settings["pid"] = PIDGains(**settings["pid"])
        self.settings = settings_class(**settings)
        self.nets = VAEActorCriticNets(spec["obs_dim"], spec["act_dim"], spec["model"], groups, targets)
        if initial_state is not None:
            self.nets.load_state_dict(initial_state)
        self.nets.to(device)
        self.optimizers = [adam(getattr(self.nets, name).parameters(), lr)
                           for name, lr in spec["lrs"].items()]
        self.dataset = TransitionDataset.from_parquet(spec["data"], device=device)
        self.generator = torch.Generator(device=device).manual_seed(data_seed)
        self.metrics: dict[str, float] = {}

    def __call__(self, n: int) -> None:
        for _ in range(n):
            size = self.spec["batch_size"]
            batch = self.dataset.sample(size, self.generator) | standard_normal_draws(
                self.noise_shapes(self.nets, size), self.generator)
            losses, metrics, state = self.losses(self.forward(self.nets, batch), batch, self.settings)
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            for optimizer in self.optimizers:
                optimizer.step()
            for online, target in self.nets.get_target_network_pairs():
                polyak_update(online, target, self.spec["tau"])
            self.nets.duals.assign(**state)
        self.metrics = {name: float(value.detach()) for name, value in (losses | metrics).items()}
