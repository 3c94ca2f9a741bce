"""Fused critics (``rllib_caps.core.nets``): one ensemble per critic pair computes the same functions, with the
same gradients, as the separate MLPs it replaces, and initialises each member as ``nn.Linear`` does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.caps.iql.losses import caps_iql_losses
from rllib_caps.algorithms.caps.keys import QC_PREDS, QR_TWIN_PREDS, VC_PREDS, VR_PREDS_NEXT
from rllib_caps.algorithms.registry import build_config
from rllib_caps.core.nets import EnsembleLinear, MLPPair, OutputLinear, TwinQ
from rllib_caps.data import TransitionDataset

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in module.named_parameters()}


def test_fused_twin_q_same_outputs_and_gradients_as_the_unfused_pair() -> None:
    torch.manual_seed(0)
    twin = TwinQ(obs_dim=5, act_dim=2, hidden=[16, 8])
    fused = twin.fused_copy()
    obs, actions = torch.randn(7, 3, 5), torch.randn(7, 3, 2)  # (batch, heads, dim), as head_values calls it
    out, fused_out = twin(obs, actions), fused(obs, actions)
    for a, b in zip(out, fused_out, strict=True):
        assert a.shape == b.shape == (7, 3)
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)

    (out[0].square().mean() + 2 * out[1].mean()).backward()
    (fused_out[0].square().mean() + 2 * fused_out[1].mean()).backward()
    grads, fused_grads = _grads(twin), _grads(fused)
    for member in range(2):
        for layer in range(3):  # Sequential indices 0, 2, 4 are the Linear layers
            linear = f"members.{member}.{2 * layer}"
            torch.testing.assert_close(grads[f"{linear}.weight"].T,
                                       fused_grads[f"ensemble.layers.{layer}.weight"][member], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(grads[f"{linear}.bias"],
                                       fused_grads[f"ensemble.layers.{layer}.bias"][member, 0], rtol=1e-5, atol=1e-6)


def test_fused_copy_of_a_fused_pair_is_an_error() -> None:
    with pytest.raises(ValueError, match="already fused"):
        MLPPair(3, [4], fused=True).fused_copy()


def test_ensemble_members_initialise_like_nn_linear() -> None:
    torch.manual_seed(1)
    layer = EnsembleLinear(in_dim=64, out_dim=256, members=4)
    bound = 1 / 64**0.5  # nn.Linear: weight and bias uniform in ±1/sqrt(fan_in)
    for tensor in (layer.weight, layer.bias):
        assert tensor.abs().max() <= bound
    for member in layer.weight:  # uniform(-b, b) has std b/sqrt(3); each member is drawn independently
        assert member.std().item() == pytest.approx(bound / 3**0.5, rel=0.05)
    assert not torch.equal(layer.weight[0], layer.weight[1])


def test_fused_caps_module_matches_unfused_module_under_the_same_weights() -> None:
    """The whole CAPS forward_train and its IQL losses, fused vs unfused critics, from the same weights."""
    configs = {fused: build_config("caps", "BallCircle", BUNDLED, heads=3, hidden=[16, 16], eval_episodes=0,
                                   fused_critics=fused) for fused in (False, True)}
    modules = {}
    for fused, config in configs.items():
        config.validate()
        modules[fused] = config.get_rl_module_spec().build()
        modules[fused].make_target_networks()
    unfused = modules[False]
    state = dict(unfused.state_dict())
    for name in ("qr", "qc", "qr_target", "qc_target", "values"):
        fused_pair = getattr(unfused, name).fused_copy()
        state = {k: v for k, v in state.items() if not k.startswith(f"{name}.")}
        state.update({f"{name}.{k}": v for k, v in fused_pair.state_dict().items()})
    modules[True].load_state_dict(state)

    batch = TransitionDataset.from_parquet(configs[False].input_).sample(64, torch.Generator().manual_seed(0))
    outs = {fused: module.forward_train(batch) for fused, module in modules.items()}
    for key in (QR_TWIN_PREDS, QC_PREDS, VC_PREDS, VR_PREDS_NEXT):
        torch.testing.assert_close(outs[True][key], outs[False][key], rtol=1e-5, atol=1e-6, msg=key)
    settings = configs[False].loss_settings()
    losses = {fused: caps_iql_losses(out, batch, settings) for fused, out in outs.items()}
    for name, value in losses[False].items():
        torch.testing.assert_close(losses[True][name], value, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused"])
def test_under_bf16_autocast_hidden_layers_compute_in_bf16_and_outputs_in_float32(fused: bool) -> None:
    """``matmul_precision="bf16"`` (``rllib_caps.core.precision``): a critic's hidden layers run in bf16, its output
    layer (``OutputLinear``, or the ensemble's last ``EnsembleLinear``) in float32 on bf16-rounded features; without
    autocast the networks are unchanged. CPU autocast stands in for CUDA's here."""
    torch.manual_seed(0)
    twin = TwinQ(obs_dim=5, act_dim=2, hidden=[16, 8], fused=fused)
    obs, actions = torch.randn(7, 5), torch.randn(7, 2)
    exact = twin(obs, actions)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = twin(obs, actions)
    for e, m in zip(exact, mixed, strict=True):
        assert m.dtype == torch.float32 and e.dtype == torch.float32
        assert not torch.equal(m, e)  # the hidden layers' bf16 rounding shows
        torch.testing.assert_close(m, e, rtol=0.05, atol=0.05)
    assert torch.is_autocast_enabled("cpu") is False


def test_output_linear_is_nn_linear_without_autocast() -> None:
    torch.manual_seed(0)
    layer = OutputLinear(4, 3)
    plain = torch.nn.Linear(4, 3)
    plain.load_state_dict(layer.state_dict())  # the same parameters and state-dict keys
    x = torch.randn(6, 4)
    assert torch.equal(layer(x), plain(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert plain(x).dtype == torch.bfloat16 and layer(x).dtype == torch.float32
