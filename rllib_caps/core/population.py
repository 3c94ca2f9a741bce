"""A population: P members of one algorithm on one dataset trained as one vmapped program, with one set of kernels
for all of them (``torch.func.stack_module_state`` + ``functional_call`` + ``vmap``), the way JAX libraries train
seeds as a batch dimension.

Each member is a full trial: its own initial weights (the member module it was built from) and its own minibatch
stream (its own generator, seeded as that trial's learner would seed it), so member i trains as it would alone,
step for step, up to the rounding of batched against single matrix products. The members' parameters are stacked
into one tensor per parameter, ``(P, ...)``; every member module keeps views into those stacks, so reading member
i's module (its ``state_dict``, a checkpoint of it, a policy) always gives its current weights. Adam is elementwise
(AdamW's decoupled weight decay too), so one Adam over the stacks is P independent Adams; the Polyak step is one
``lerp`` over the stacked targets; a clip by global norm is not elementwise, so each member's gradients are clipped to
their own norm.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from torch import nn

from rllib_caps.core.captured_step import NonFiniteSkip
from rllib_caps.core.learner import assign_state, step_engine
from rllib_caps.core.losses import total_loss
from rllib_caps.core.optim import adam, clip_global_norm_per_member_
from rllib_caps.core.precision import DEFAULT_MATMUL_PRECISION, autocast
from rllib_caps.core.ray_internals import foreach_lerp_
from rllib_caps.data import MinibatchDraw

# (module, minibatch, its hyperparameters) -> the member's loss terms, each a scalar: what one member's gradient step
# minimises. The hyperparameters are the member's own tensors of those in which the members differ (may be none).
MemberLoss = Callable[[nn.Module, dict[str, torch.Tensor], dict[str, torch.Tensor]], dict[str, torch.Tensor]]
# () -> the random draws of one member's next minibatch, from its own generator (and of its own dataset, e.g.
# BC-Safe's per κ): ``MinibatchDraw.stacked`` gathers the members' rows at once.
Sampler = Callable[[], MinibatchDraw]


# Settings in which any population's members may differ: the seed, and κ where it only selects a member's data
# (BC-Safe, at its learner's build). Losses read the first member's config, so an algorithm whose losses read κ
# declares it among its config's ``member_hyperparameters`` (COptiDICE: its threshold) to get each member's own.
MEMBER_SETTINGS = frozenset({"seed", "cost_limit"})


def _config_differences(first: Any, other: Any) -> set[str]:
    """Names of the settings in which two algorithm configs differ."""
    a, b = first.to_dict(), other.to_dict()
    return {key for key in a.keys() | b.keys() if repr(a.get(key)) != repr(b.get(key))}


def member_hyperparameters(configs: Sequence[Any], device: torch.device | str) -> dict[str, torch.Tensor]:
    """The ``member_hyperparameters`` in which the members' configs differ, each stacked ``(P, ...)`` (float32, on
    ``device``): what each member's losses take as its own. Those all members share stay in the config."""
    values = [config.member_hyperparameters() for config in configs]
    return {name: torch.tensor([own[name] for own in values], dtype=torch.float32, device=device)
            for name in values[0] if any(repr(own[name]) != repr(values[0][name]) for own in values)}


def _optimizers(learner: Any) -> dict[str, torch.optim.Optimizer]:
    return dict(learner.get_optimizers_for_module(DEFAULT_MODULE_ID))


class _MemberStep(nn.Module):
    """``module.forward_train`` followed by the loss: the function ``functional_call`` runs for one member."""

    def __init__(self, module: nn.Module, loss: MemberLoss) -> None:
        super().__init__()
        self.module, self.loss = module, loss

    def forward(self, batch: dict[str, torch.Tensor], hyperparameters: dict[str, torch.Tensor]
                ) -> dict[str, torch.Tensor]:
        return self.loss(self.module, batch, hyperparameters)


class Population:
    """P members trained together.

    ``members`` are built modules of one class and shape with their target networks made (``TargetNetworkAPI``);
    ``samplers`` draw each member's minibatches; ``loss(module, batch, hyperparameters)`` returns one member's loss
    terms, ``hyperparameters`` being the member's rows of ``hyperparameters`` (each stacked ``(P, ...)``: e.g. the
    β and λ_k of an Optuna search's samples);
    ``precision`` is the learners' ``matmul_precision`` (``rllib_caps.core.precision``: "bf16" runs the losses
    under bf16 autocast); ``compile_backend`` (None: eager) runs the vmapped forward pass and losses (and their
    backward pass) as ``torch.compile``d programs of that backend, whose fused kernels read and write the
    ``(P, B, hidden)`` activations far fewer times than the eager ops;
    ``optimizer_groups`` maps an optimiser's name to (member 0's parameters it steps, learning rate, AdamW's decoupled
    weight decay or None for Adam), as the algorithm's learner registers them; ``gradient_clips`` are (optimiser
    names, max norm): each member's gradients of those optimisers' parameters clipped to that global norm of its own
    (``clip_global_norm_per_member_``); ``schedule_learning_rates`` sets the optimisers' rates before each step
    (the learner's ``schedule_learning_rates``); ``target_pairs`` names each (online, target) submodule pair, whose
    targets take a Polyak step with ``tau`` after every gradient step; ``state_buffers`` (loss term -> buffer name, the
    learner's ``STATE_BUFFERS``) are buffers that take each member's value of their loss term after every step.
    """

    def __init__(self, members: Sequence[nn.Module], samplers: Sequence[Sampler], loss: MemberLoss, *,
                 optimizer_groups: Mapping[str, tuple[Sequence[nn.Parameter], float, float | None]], tau: float,
                 target_pairs: Sequence[tuple[str, str]], generators: Sequence[torch.Generator] = (),
                 hyperparameters: Mapping[str, torch.Tensor] | None = None, captured: bool = False,
                 compile_backend: str | None = None, precision: str = DEFAULT_MATMUL_PRECISION,
                 state_buffers: Mapping[str, str] | None = None,
                 gradient_clips: Sequence[tuple[Sequence[str], float]] = (),
                 schedule_learning_rates: Callable[[Mapping[str, torch.optim.Optimizer]], None] | None = None) -> None:
        if len(members) != len(samplers) or not members:
            raise ValueError(f"a population needs one sampler per member, got {len(members)} members and "
                             f"{len(samplers)} samplers")
        self.members, self.samplers, self.tau, self.precision = list(members), list(samplers), tau, precision
        self.params, self.buffers = torch.func.stack_module_state(self.members)
        self.hyperparameters = dict(hyperparameters or {})
        self.state_buffers = dict(state_buffers or {})
        self._share_storage()
        names = {id(p): name for name, p in self.members[0].named_parameters()}
        self.device = device = next(iter(self.params.values())).device
        self.optimizers = {group: adam([self.params[names[id(p)]] for p in params], lr, weight_decay=weight_decay)
                           for group, (params, lr, weight_decay) in optimizer_groups.items()}
        self.gradient_clips = [([p for name in groups for p in self.optimizers[name].param_groups[0]["params"]],
                                max_norm) for groups, max_norm in gradient_clips]
        self.schedule_learning_rates = schedule_learning_rates
        self.non_finite = None
        if captured:  # the step replays as a CUDA graph; non-finite steps are skipped on the device
            self.non_finite = NonFiniteSkip(device)
            self.non_finite.attach(list(self.optimizers.values()))
        self._run = step_engine(self.step, captured=captured, generators=generators)
        self.target_pairs = [([self.params[n] for n in self.params if n.startswith(online + ".")],
                              [self.params[n] for n in self.params if n.startswith(target + ".")])
                             for online, target in target_pairs]
        step = _MemberStep(self.members[0], loss)
        self._losses = torch.func.vmap(
            lambda params, buffers, batch, hyperparameters: torch.func.functional_call(
                step, ({f"module.{n}": p for n, p in params.items()}, {f"module.{n}": b for n, b in buffers.items()}),
                (batch, hyperparameters)),
            randomness="error")  # every random draw comes from the members' samplers, none from torch's global one
        self.compiled = compile_backend is not None
        if self.compiled:  # one fused program for the vmapped forward pass and losses, and one for their backward pass
            self._losses = torch.compile(self._losses, fullgraph=True, dynamic=False, backend=compile_backend)

    @classmethod
    def of_learners(cls, learners: Sequence[Any], captured: bool = False) -> Population:
        """The population of these built learners' modules: one ``OfflineSafeTorchLearner`` per trial, each built
        from that trial's config (its seed; for BC-Safe its κ, which only selects its data; for CAPS its β and
        λ_k, the config's ``member_hyperparameters``, which its losses take as the member's own tensors). The first
        learner gives the losses (``member_losses``), the optimiser groups and τ; the others may differ from it in
        those settings alone. ``captured`` (CUDA) replays the population's step as a CUDA graph
        (``rllib_caps.core.captured_step``); the config's ``torch_compile_learner`` compiles its losses
        (``compiled``)."""
        first = learners[0]
        if type(first).population_blocker:
            raise ValueError(f"{type(first).__name__} cannot train as a population: {type(first).population_blocker}")
        configs = [learner.config.get_config_for_module(DEFAULT_MODULE_ID) for learner in learners]
        allowed = MEMBER_SETTINGS | set(configs[0].member_hyperparameters())
        for learner in learners[1:]:
            differing = _config_differences(first.config, learner.config) - allowed
            if differing:
                raise ValueError(f"population members must differ only in {sorted(allowed)}; these differ: "
                                 f"{', '.join(sorted(differing))}")
        modules = [learner.module[DEFAULT_MODULE_ID].unwrapped() for learner in learners]
        names = {id(submodule): name for name, submodule in modules[0].named_modules()}
        groups = {name: (optimizer.param_groups[0]["params"], optimizer.param_groups[0]["lr"],
                         optimizer.defaults["weight_decay"] if isinstance(optimizer, torch.optim.AdamW) else None)
                  for name, optimizer in _optimizers(first).items()}
        config = configs[0]
        return cls(modules, [functools.partial(learner.draw_minibatch, config.train_batch_size_per_learner,
                                               learner._generator) for learner in learners],
                   functools.partial(first.module_losses, config=config),
                   optimizer_groups=groups, tau=config.tau,
                   target_pairs=[(names[id(online)], names[id(target)])
                                 for online, target in (modules[0].get_target_network_pairs()
                                                        if isinstance(modules[0], TargetNetworkAPI) else ())],
                   generators=[learner._generator for learner in learners],
                   hyperparameters=member_hyperparameters(configs, first.device), captured=captured,
                   compile_backend=(config.torch_compile_learner_dynamo_backend if config.torch_compile_learner
                                    else None), precision=config.matmul_precision,
                   state_buffers=first.STATE_BUFFERS, gradient_clips=first.population_gradient_clips(),
                   schedule_learning_rates=first.schedule_learning_rates)

    def save_optimizer_states(self, learners: Sequence[Any]) -> None:
        """Writes each member's slice of the population's Adam states into its own learner's optimisers (the
        learners the population was built from, in order), so that saving a member's learner saves a complete
        trial, whose optimiser state an ordinary learner continues from."""
        for i, learner in enumerate(learners):
            for group, optimizer in _optimizers(learner).items():
                stacked = self.optimizers[group]
                for member_param, stack in zip(optimizer.param_groups[0]["params"], stacked.param_groups[0]["params"],
                                               strict=True):
                    state = stacked.state.get(stack)
                    if state:
                        optimizer.state[member_param] = {
                            "step": torch.tensor(float(state["step"])),
                            **{key: state[key][i].clone() for key in ("exp_avg", "exp_avg_sq")}}

    def load_optimizer_states(self, learners: Sequence[Any]) -> None:
        """The reverse of ``save_optimizer_states``: the population's Adam states stacked from its members'
        learners' optimisers (after those learners were restored from a checkpoint)."""
        member_optimizers = [_optimizers(learner) for learner in learners]
        for group, stacked in self.optimizers.items():
            mine = [optimizers[group] for optimizers in member_optimizers]
            for j, stack in enumerate(stacked.param_groups[0]["params"]):
                states = [optimizer.state.get(optimizer.param_groups[0]["params"][j]) for optimizer in mine]
                if not all(states):
                    continue
                step = states[0]["step"]
                stacked.state[stack] = {
                    "step": torch.as_tensor(float(step), dtype=torch.float32,
                                            device=stack.device if stacked.defaults.get("capturable") else "cpu"),
                    **{key: torch.stack([state[key] for state in states]).to(stack.device)
                       for key in ("exp_avg", "exp_avg_sq")}}

    def __len__(self) -> int:
        return len(self.members)

    def _share_storage(self) -> None:
        """Points every member's parameters and buffers at its slice of the stacks."""
        for i, member in enumerate(self.members):
            for name, p in member.named_parameters():
                p.data = self.params[name].data[i]
            for name, b in member.named_buffers():
                b.data = self.buffers[name][i]

    def sample(self) -> dict[str, torch.Tensor]:
        """Every member's next minibatch, stacked: each column ``(P, B, ...)``."""
        return MinibatchDraw.stacked([sampler() for sampler in self.samplers])

    def step(self, batch: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """One gradient step of every member (on ``batch``, or a fresh ``sample()``): the vmapped losses, one
        backward pass, the optimisers, the Polyak step, then the members' new state (``state_buffers``). Returns
        each loss term per member, shape ``(P,)``."""
        batch = self.sample() if batch is None else batch
        with autocast(self.precision, self.device):
            losses = self._losses(self.params, self.buffers, batch, self.hyperparameters)
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)
        total_loss({name: term.sum() for name, term in losses.items()}).backward()
        if self.non_finite is not None:
            self.non_finite.check([p.grad for p in self.params.values() if p.grad is not None])
        for params, max_norm in self.gradient_clips:
            clip_global_norm_per_member_([p.grad for p in params if p.grad is not None], max_norm)
        if self.schedule_learning_rates is not None:
            self.schedule_learning_rates(self.optimizers)
        for optimizer in self.optimizers.values():
            optimizer.step()
        with torch.no_grad():
            for online, target in self.target_pairs:
                foreach_lerp_(target, online, self.tau)
        assign_state(self.buffers, self.state_buffers, losses)
        return {name: term.detach() for name, term in losses.items()}

    def __call__(self, n: int) -> dict[str, torch.Tensor]:
        """``n`` gradient steps of every member (the learners' ``step_engine``: eager, or replays of the captured
        step); the last step's loss terms."""
        return self._run(n)

