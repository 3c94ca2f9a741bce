"""COptiDICE's training forward as a function of the networks (``nets.add_networks``; no Ray): what
``losses.coptidice_losses`` consumes. The RLModule's ``_forward_train`` and a plain loop both call it."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.coptidice import keys as ck
from rllib_caps.core.nets import squashed_log_prob
from rllib_caps.data import TransitionDataset, schema


def coptidice_minibatch(dataset: TransitionDataset, batch_size: int, generator: torch.Generator, implementation: str
                        ) -> dict[str, torch.Tensor]:
    """A COptiDICE step's minibatch, all drawn from ``generator``: uniformly sampled transitions, then
    ``coptidice_extras``, so a step's randomness is its trial's own (a population's members each draw theirs)."""
    return dataset.sample(batch_size, generator) | coptidice_extras(dataset, batch_size, generator, implementation)


def coptidice_extras(dataset: TransitionDataset, batch_size: int, generator: torch.Generator, implementation: str
                     ) -> dict[str, torch.Tensor]:
    """A step's draws besides its transitions, from ``generator``: for "paper" ``INIT_OBS`` (initial observations
    from the data), then the weighted BC's noise (``OBS_NOISE``, ``ACTION_NOISE``, shaped as the batch's columns)."""
    extras = {ck.INIT_OBS: dataset.sample_initial_obs(batch_size, generator)} if implementation == "paper" else {}
    for key, column in ((ck.OBS_NOISE, schema.OBS), (ck.ACTION_NOISE, schema.ACTIONS)):
        extras[key] = torch.randn((batch_size, *dataset.tensors[column].shape[1:]), generator=generator,
                                  device=generator.device)
    return extras


def coptidice_training_outputs(nets: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ν and χ at s and s′, their initial-state terms, λ and τ, and the actor's log-likelihood of the dataset
    action.

    Initial states: "osrl" (``nets.osrl``) estimates E[ν(s₀)] on the uniform batch as mean(ν(s) 1[t = 0]) / p_init;
    "paper" evaluates ν at the batch's ``INIT_OBS``, initial observations sampled from the data.
    Weighted BC: observation and action are noised by ``data_noise`` × the data's std (OSRL's 0.1) × the batch's
    standard-normal ``OBS_NOISE`` and ``ACTION_NOISE`` (``coptidice_minibatch``); "osrl" scores
    the action under the pre-tanh Gaussian (as OSRL does, though it acts with tanh μ), "paper" under the
    tanh-squashed policy it acts with (``core.nets.squashed_log_prob``).
    """
    obs, next_obs, actions = batch[schema.OBS], batch[schema.NEXT_OBS], batch[schema.ACTIONS]
    out = {ck.NU: nets.nu(obs), ck.NU_NEXT: nets.nu(next_obs), ck.CHI: nets.chi(obs), ck.CHI_NEXT: nets.chi(next_obs),
           ck.LAGRANGE: nets.lagrange(), ck.TEMPERATURE: nets.temperature()}
    if nets.osrl:
        first = (batch[schema.T] == 0).to(obs.dtype) / nets.stats.init_fraction
        out[ck.NU_INIT], out[ck.CHI_INIT] = out[ck.NU] * first, out[ck.CHI] * first
    else:
        out[ck.NU_INIT], out[ck.CHI_INIT] = nets.nu(batch[ck.INIT_OBS]), nets.chi(batch[ck.INIT_OBS])
    noisy_obs = obs + batch[ck.OBS_NOISE] * nets.stats.obs_std * nets.data_noise
    noisy_actions = actions + batch[ck.ACTION_NOISE] * nets.stats.act_std * nets.data_noise
    dist = nets.actor(noisy_obs)
    out[ck.LOG_PROB] = (dist.log_prob(noisy_actions).sum(-1) if nets.osrl
                        else squashed_log_prob(dist, noisy_actions))
    return out
