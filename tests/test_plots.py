"""The report's figures, read from their matplotlib objects (no PNG decoding): the head-usage bars grouped under
each configuration's registry label with a colour per configuration and head, and only for algorithms that report
head usage; reward and cost against κ on panels of their own; normalised reward and cost on linear axes in the
learning curves. Rows come from the stored CAPS sweep of test_report.py, plus one BC-Safe row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from rllib_caps.algorithms.registry import ALGORITHMS
from rllib_caps.report import load_trials, summarize
from rllib_caps.report.curves import Curve
from rllib_caps.report.plots import head_usage_plot, kappa_plot, learning_curves_plot
from rllib_caps.report.tables import Row

FIXTURE = Path(__file__).parent / "fixtures" / "report_results" / "experiment"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    """BallCircle's CAPS rows (K=2 and K=4, labelled by the registry) and a BC-Safe row, which has no heads."""
    records, _ = load_trials(FIXTURE)
    caps = [r for r in summarize(records) if r.task == "BallCircle"]
    bc_safe = dataclasses.replace(caps[0], config="BC-Safe", label="BC-Safe", algo="bc-safe", head_usage={},
                                  per_threshold={10.0: (0.3, 0.1), 20.0: (0.35, 0.2), 40.0: (0.4, 0.3)})
    return [*caps, bc_safe]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_head_usage_groups_each_configuration_under_its_label_with_colours_of_its_own(rows) -> None:
    caps = [r for r in rows if r.algo == "caps"]
    expected = [ALGORITHMS["caps"].label({"num_heads": k}) for k in (2, 4)]  # the registry's K axis label
    assert [r.config for r in caps] == expected == ["K=2", "K=4"]
    figure = head_usage_plot(rows).figure
    (ax,) = [a for a in figure.axes if a.get_visible()]
    assert [t.get_text() for t in ax.texts] == expected  # one group label per configuration, none for BC-Safe
    assert [t.get_text() for t in ax.get_xticklabels()] == ["κ=10", "κ=20", "κ=40"] * 2
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "K=2 head 0 (reward)", "K=2 head 1 (cost)",
        "K=4 head 0 (reward)", "K=4 head 1", "K=4 head 2", "K=4 head 3 (cost)"]  # no "head 0 of 1" of BC-Safe
    colours = {tuple(h.get_facecolor()) for h in legend.legend_handles}
    assert len(colours) == 6  # one per (configuration, head)
    bars = [p for p in ax.patches if p.get_height() > 0]
    assert {round(p.get_x() + p.get_width() / 2) for p in bars} == {0, 1, 2, 4, 5, 6}  # 3 κ each, a gap between


def test_kappa_puts_reward_and_cost_on_panels_of_their_own(rows) -> None:
    figure = kappa_plot(rows, [], None).figure
    reward_ax, cost_ax = figure.axes
    assert (reward_ax.get_ylabel(), cost_ax.get_ylabel()) == ("normalised reward", "normalised cost")
    assert reward_ax.get_shared_x_axes().joined(reward_ax, cost_ax)
    assert not reward_ax.get_shared_y_axes().joined(reward_ax, cost_ax)
    for ax, index in ((reward_ax, 0), (cost_ax, 1)):
        lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if line.get_label() in
                 {r.config for r in rows}}
        assert lines == {r.config: [v[index] for v in r.per_threshold.values()] for r in rows}
    assert [list(line.get_ydata()) for line in cost_ax.get_lines() if line.get_linestyle() == ":"] == [[1.0, 1.0]]
    highest_reward = max(v[0] for r in rows for v in r.per_threshold.values())
    assert reward_ax.get_ylim()[1] < 1.2 * highest_reward  # the costs (up to 1.38) do not flatten them


def test_learning_curves_keep_normalised_values_linear_and_losses_spanning_decades_logarithmic() -> None:
    steps = (100, 200, 300)
    curve = Curve(seed=0, losses={"qc_loss": (steps, (50.0, 2.0, 0.1))}, reward=(steps, (0.003, 0.05, 0.5)),
                  cost=(steps, (0.01, 0.5, 3.0)))
    axes = {ax.get_title(): ax for ax in learning_curves_plot("BallCircle", {"K=2": [curve]}).figure.axes
            if ax.get_visible()}
    assert {title: ax.get_yscale() for title, ax in axes.items()} == {
        "normalised reward": "linear", "normalised cost": "linear", "qc loss": "log"}
