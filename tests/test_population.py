"""Populations (``rllib_caps.core.population``): P trials trained as one vmapped program, where member i trains as
trial i would alone, step for step, and stays an ordinary module to read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.registry import build_config
from rllib_caps.bench import local_learner
from rllib_caps.core.learner import STEPS_PER_CALL
from rllib_caps.core.population import Population

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
STEPS = STEPS_PER_CALL + 6  # the solo learners cross an update call


def _learner(algo: str, seed: int, device: str = "cpu", **settings):
    """A local learner on ``device``; on CUDA in IEEE fp32 (``matmul_precision="highest"``): TF32 rounds the
    population's batched products and a lone learner's products differently, and Adam carries that apart."""
    on_gpu = {"num_gpus_per_learner": 1, "matmul_precision": "highest"} if device == "cuda" else {}
    config = build_config(algo, "BallCircle", BUNDLED, steps=STEPS, hidden=[16, 16], batch_size=32,
                          eval_episodes=0, seed=seed, **on_gpu, **settings)
    config.validate()
    return local_learner(config)


MEMBERS = {  # algorithm, settings shared by the members, and each member's own settings
    "caps-iql": ("caps", {"heads": 3}, [{"seed": 0}, {"seed": 10}, {"seed": 20}]),
    "caps-sacbc": ("caps", {"heads": 2, "backbone": "sacbc"}, [{"seed": 0}, {"seed": 10}, {"seed": 20}]),
    # an Optuna search's samples: members that differ in β and λ_k (same seed: only the hyperparameters tell them
    # apart), the population passing each its own as tensors
    "caps-iql-search": ("caps", {"heads": 3}, [{"seed": 0, "awr_beta": 1.0, "lambdas": [0.3]},
                                               {"seed": 0, "awr_beta": 6.0, "lambdas": [2.0]}, {"seed": 10}]),
    "caps-sacbc-search": ("caps", {"heads": 3, "backbone": "sacbc"}, [{"seed": 0, "lambdas": [0.3]},
                                                                      {"seed": 0, "lambdas": [2.5]}]),
    # COptiDICE per κ: its λ and τ are each member's own parameters, its κ the λ loss's threshold (a member tensor)
    "coptidice-per-kappa": ("coptidice", {}, [{"seed": 0, "cost_limit": 10}, {"seed": 0, "cost_limit": 40},
                                              {"seed": 10, "cost_limit": 20}]),
    "coptidice-paper-per-kappa": ("coptidice", {"implementation": "paper"}, [{"seed": 0, "cost_limit": 10},
                                                                            {"seed": 0, "cost_limit": 40}]),
    "bc-safe-per-kappa": ("bc-safe", {}, [{"seed": 0, "cost_limit": 10}, {"seed": 0, "cost_limit": 20},
                                          {"seed": 10, "cost_limit": 40}]),
    "bc-all": ("bc-all", {}, [{"seed": 0}, {"seed": 10}]),
    # BEAR-Lag and CPQ per κ: their multipliers' state is each member's own buffers, their noise each member's
    # generator's, their κ the losses' q̄_c (a member tensor)
    "bearl-per-kappa": ("bearl", {"vae_hidden": [16, 16]}, [{"seed": 0, "cost_limit": 10},
                                                            {"seed": 0, "cost_limit": 40},
                                                            {"seed": 10, "cost_limit": 20}]),
    "cpq-per-kappa": ("cpq", {"vae_hidden": [16, 16]}, [{"seed": 0, "cost_limit": 10}, {"seed": 0, "cost_limit": 40},
                                                        {"seed": 10, "cost_limit": 20}]),
    # CDT at OSRL's dropout 0.1: each member's masks drawn with its windows from its generator; each member's
    # transformer gradients clipped to their own global norm, its AdamW warmed up as a learner's (warm-up 8 steps,
    # so the members cross it)
    "cdt": ("cdt", {"embedding_dim": 16, "num_layers": 2, "attention_heads": 2, "seq_len": 4, "warmup_steps": 8,
                    "grad_clip": 0.05}, [{"seed": 0}, {"seed": 10}, {"seed": 20}]),
}


def _train_both(case: str, device: str = "cpu", captured: bool = False, compile_backend: str | None = None
                ) -> tuple[Population, list]:
    """The population of ``case``'s members (its losses compiled with ``compile_backend``, if given) and its
    members as trials alone (eager), each trained ``STEPS`` steps from the same start."""
    algo, shared, members = MEMBERS[case]
    compiled = {"compile": True, "compile_backend": compile_backend} if compile_backend else {}
    packed = [_learner(algo, device=device, **compiled, **shared, **own) for own in members]
    alone = [_learner(algo, device=device, **shared, **own) for own in members]
    for a, b in zip(alone, packed, strict=True):  # the same start, targets included
        a.module["default_policy"].load_state_dict(b.module["default_policy"].state_dict())
    population = Population.of_learners(packed, captured=captured)
    population(STEPS)
    for learner in alone:
        learner.update_from_dataset(num_updates=STEPS)
    return population, alone


def _assert_members_equal_trials_alone(population: Population, alone: list) -> None:
    for i, learner in enumerate(alone):
        expected, learned = learner.module["default_policy"].state_dict(), population.members[i].state_dict()
        assert expected.keys() == learned.keys()
        for name in expected:
            torch.testing.assert_close(learned[name], expected[name], rtol=1e-4, atol=1e-5,
                                       msg=lambda m, i=i, name=name: f"member {i} {name}: {m}")
    first = population.members[0].state_dict()
    assert any(not torch.equal(first[n], population.members[1].state_dict()[n]) for n in first)


@pytest.mark.parametrize("case", list(MEMBERS))
def test_member_i_trains_as_trial_i_alone_step_for_step(case: str) -> None:
    _assert_members_equal_trials_alone(*_train_both(case))


@pytest.mark.cuda
@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
@pytest.mark.parametrize("case", list(MEMBERS))
def test_member_i_trains_as_trial_i_alone_on_cuda(case: str, captured: bool) -> None:
    _assert_members_equal_trials_alone(*_train_both(case, device="cuda", captured=captured))


@pytest.mark.slow
def test_a_compiled_population_trains_as_its_members_alone() -> None:
    """``torch_compile_learner``: the population's vmapped losses run as one ``fullgraph`` program, and member i
    still trains as trial i does alone (eager, uncompiled). On CPU the graph is captured with ``aot_eager`` (the same
    capture, forward and backward, without generating C++ kernels); the CUDA test below compiles with inductor."""
    population, alone = _train_both("caps-iql", compile_backend="aot_eager")
    assert population.compiled
    _assert_members_equal_trials_alone(population, alone)


@pytest.mark.cuda
@pytest.mark.parametrize("case", ["caps-iql", "caps-sacbc"])
def test_a_compiled_captured_population_trains_as_its_members_alone_on_cuda(case: str) -> None:
    _assert_members_equal_trials_alone(*_train_both(case, device="cuda", captured=True,
                                                                  compile_backend="inductor"))


def test_members_are_views_of_the_stacks_and_act_as_ordinary_modules() -> None:
    learners = [_learner("caps", seed, heads=2) for seed in (0, 1)]
    population = Population.of_learners(learners)
    population(3)
    member = population.members[1]
    stacked = population.params["actor.bodies.0.0.weight"]
    assert torch.equal(member.actor.bodies[0][0].weight, stacked[1])
    fresh = learners[1].config.get_rl_module_spec().build()
    fresh.make_target_networks()
    fresh.load_state_dict(member.state_dict())  # an ordinary checkpointable state
    obs = learners[1].dataset.tensors["obs"][:5]
    torch.testing.assert_close(fresh.forward_inference({"obs": obs})["actions"],
                               member.forward_inference({"obs": obs})["actions"])


def test_members_that_differ_in_more_than_seed_cost_limit_and_hyperparameters_are_refused() -> None:
    with pytest.raises(ValueError, match=r"differ only in \['awr_beta', 'cost_limit', 'lambdas', 'seed'\]; these "
                                         "differ: expectile_reward"):
        Population.of_learners([_learner("caps", 0, heads=2), _learner("caps", 1, heads=2, expectile_reward=0.8)])
    with pytest.raises(ValueError, match=r"differ only in \['cost_limit', 'seed'\]; these differ: .*actor_lr"):
        Population.of_learners([_learner("bc-safe", 0, cost_limit=20), _learner("bc-safe", 1, cost_limit=20,
                                                                                 actor_lr=1e-4)])


def test_only_the_hyperparameters_the_members_differ_in_become_their_tensors() -> None:
    population = Population.of_learners([_learner("caps", 0, heads=4, awr_beta=1.0),
                                         _learner("caps", 1, heads=4, awr_beta=2.5)])
    assert population.hyperparameters.keys() == {"awr_beta"}  # λ_k are the same default for both: config values
    torch.testing.assert_close(population.hyperparameters["awr_beta"], torch.tensor([1.0, 2.5]))
    assert Population.of_learners([_learner("caps", s, heads=2) for s in (0, 1)]).hyperparameters == {}


def test_a_learner_that_declares_a_population_blocker_trains_alone() -> None:
    """An algorithm's learner whose step cannot vmap (say, it draws from torch's global generator) declares why
    (``population_blocker``): sweeps then keep its trials alone, and a population of it is refused by that reason."""
    from rllib_caps.core.learner import forms_populations

    learner = _learner("bc-all", 0)
    blocked = type("GlobalNoiseLearner", (type(learner),), {"population_blocker": "its step draws global noise"})
    assert forms_populations(type(learner)) and not forms_populations(blocked)
    learner.__class__ = blocked
    with pytest.raises(ValueError, match="GlobalNoiseLearner cannot train as a population: its step draws global"):
        Population.of_learners([learner, _learner("bc-all", 1)])


def test_every_algorithm_that_sweeps_pack_is_shown_to_train_as_its_trials_alone() -> None:
    """Sweeps pack every algorithm that forms populations (``packing.packable``), and an algorithm trained per κ
    with members that differ in κ. Its losses then must take each member's κ (a member hyperparameter, as
    COptiDICE's threshold, or the member's own data, as BC-Safe's), which only member-equals-alone shows: so each
    has a case above, and one trained per κ a case whose members differ in κ."""
    from rllib_caps.algorithms.registry import ALGORITHMS, trained_per_threshold
    from rllib_caps.sweeps.packing import packable

    cases = {algo for algo, _, _ in MEMBERS.values()}
    kappa_cases = {algo for algo, _, own in MEMBERS.values() if len({m.get("cost_limit") for m in own}) > 1}
    packed = [name for name in ALGORITHMS if packable(name)]
    assert {"caps", "bc-safe", "coptidice"} <= set(packed)
    assert [name for name in packed if name not in cases] == []
    assert [name for name in packed if trained_per_threshold(ALGORITHMS[name]) and name not in kappa_cases] == []
