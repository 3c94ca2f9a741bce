"""``matmul_precision`` (``rllib_caps.core.precision``): TF32 by default on CUDA, bf16 autocast where asked for, and
CPU learners in float32 whatever the setting."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.registry import build_config
from rllib_caps.core.precision import DEFAULT_MATMUL_PRECISION, MATMUL_PRECISIONS, autocast

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


@pytest.mark.parametrize("precision", MATMUL_PRECISIONS)
def test_cpu_learners_compute_in_float32_whatever_the_setting(precision: str) -> None:
    assert isinstance(autocast(precision, torch.device("cpu")), contextlib.nullcontext)


def test_bf16_autocasts_cuda_learners_only() -> None:
    with warnings.catch_warnings():  # on a machine without CUDA torch warns that it would disable the context
        warnings.simplefilter("ignore")
        assert isinstance(autocast("bf16", torch.device("cuda")), torch.autocast)
    assert isinstance(autocast("high", torch.device("cuda")), contextlib.nullcontext)


def test_the_default_is_tf32_and_every_precision_is_a_valid_setting() -> None:
    assert DEFAULT_MATMUL_PRECISION == "high"
    for precision in MATMUL_PRECISIONS:
        config = build_config("caps", "BallCircle", BUNDLED, steps=4, hidden=[8], batch_size=8, eval_episodes=0,
                              matmul_precision=precision)
        config.validate()
        assert config.matmul_precision == precision
    default = build_config("caps", "BallCircle", BUNDLED, steps=4, hidden=[8], batch_size=8, eval_episodes=0)
    assert default.matmul_precision == DEFAULT_MATMUL_PRECISION
