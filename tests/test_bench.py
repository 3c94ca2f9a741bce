"""``python -m rllib_caps.bench``: the matrix prints as JSON, and flag combinations that would time the wrong thing
are refused."""

from __future__ import annotations

import json

import pytest

from rllib_caps.bench import main, merged_populations


def test_cpu_clock_is_refused_where_cpu_time_is_not_the_steps_time(capsys: pytest.CaptureFixture) -> None:
    assert main(["--clock", "cpu", "--threads", "2"]) == 2
    assert "--clock cpu needs --device cpu and --threads 1" in capsys.readouterr().err


@pytest.mark.slow
def test_matrix_by_cpu_time_as_json(capsys: pytest.CaptureFixture) -> None:
    assert main(["--hidden", "16", "--heads", "2", "--batch", "8", "--steps", "2", "--repetitions", "1",
                 "--warmup", "1", "--clock", "cpu", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["setup"]["clock"] == "cpu"
    (row,) = printed["rows"]
    assert (row["hidden"], row["heads"]) == (16, 2)
    assert all(row[f"{loop}_median"] > 0 for loop in ("rllib_unfused", "plain_unfused", "rllib_fused", "plain_fused"))
    assert "compiled_unfused_median" not in row


@pytest.mark.slow
def test_compile_adds_the_compiled_learner_beside_the_eager_loops(capsys: pytest.CaptureFixture) -> None:
    # aot_eager: the same fullgraph capture as inductor, without building C++ kernels on the CPU
    assert main(["--compile", "--compile-backend", "aot_eager", "--hidden", "16", "--heads", "2", "--batch", "8",
                 "--steps", "2", "--repetitions", "1", "--warmup", "1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["setup"]["compile_backend"] == "aot_eager"
    (row,) = printed["rows"]
    assert all(row[f"compiled_{variant}_vs_plain"] == row[f"compiled_{variant}_median"]
               / row[f"plain_{variant}_median"] > 0 for variant in ("unfused", "fused"))


@pytest.mark.slow
def test_population_rows_compare_a_population_with_separate_learners(capsys: pytest.CaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")
    assert main(["--population", "1", "3", "--hidden", "16", "--heads", "2", "--batch", "8", "--steps", "2",
                 "--repetitions", "1", "--warmup", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["population"] for row in rows] == [1, 3]
    assert all(row["population_median"] > 0 and row["separate_median"] > 0 for row in rows)
    assert rows[0]["datasets_mib"] == rows[1]["datasets_mib"] > 0  # the members hold one copy of the dataset
    assert main(["--population", "2", "--fused-critics", "--hidden", "16", "--heads", "2", "--batch", "8",
                 "--steps", "2", "--repetitions", "1", "--warmup", "1"]) == 0
    assert "| 2 | 16 | 2 | 8 | highest | fused | eager | seed |" in capsys.readouterr().out
    assert main(["--population", "2", "--search-members", "--hidden", "16", "--heads", "3", "--batch", "8",
                 "--steps", "2", "--repetitions", "1", "--warmup", "1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["search_members"] and row["population_median"] > 0
    assert main(["--search-members", "--hidden", "16"]) == 2  # only with --population
    assert "--search-members applies to --population" in capsys.readouterr().err


@pytest.mark.slow
def test_grid_projection_counts_the_papers_trials(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path) -> None:
    monkeypatch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")  # tiny networks: the measured speeds are not the point here
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"ms_per_step": {"bullet": 1.0, "safetygym": 2.0, "velocity": 1.0,
                                                 "metadrive": 3.0}}))
    assert main(["--project-grid", "--eval-costs", str(costs), "--steps", "1", "--repetitions", "1",
                 "--warmup", "1", "--merged-population", "4", "--json"]) == 0
    rows = {row["algorithm"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert set(rows) == {"caps", "bc-all", "bc-safe", "bearl", "cpq", "coptidice", "cdt"}
    assert rows["caps"]["trials"] == 38 * 3 and rows["bearl"]["trials"] == 38 * 3 * 3
    assert rows["bc-safe"]["population_member_steps_per_s"] > 0 and rows["caps"]["merged_member_steps_per_s"] > 0
    assert rows["bearl"]["population_member_steps_per_s"] > 0 and rows["cpq"]["population_member_steps_per_s"] > 0
    assert rows["cdt"]["population_member_steps_per_s"] > 0 and rows["cdt"]["merged_member_steps_per_s"] > 0
    assert all(row["train_gpu_hours"] > 0 and row["eval_cpu_hours"] > 0 and row["train_gpu_hours_merged"] > 0
               for row in rows.values())


def test_the_grids_populations_merge_across_tasks_of_matching_sizes_up_to_the_most_a_sweep_packs() -> None:
    from rllib_caps.envs.tasks import TASKS

    populations = merged_populations(TASKS.values(), 3, 32)
    assert sorted(member.name for members in populations for member in members) == sorted(
        name for name in TASKS for _ in range(3))  # every trial once
    assert all(len({(t.obs_dim, t.act_dim) for t in members}) == 1 for members in populations)
    metadrive = [len(members) for members in populations if members[0].suite == "metadrive"]
    assert metadrive == [27]  # its 9 tasks share their sizes: one population of 9 x 3 members
    assert sorted(len(m) for m in merged_populations(TASKS.values(), 9, 32) if m[0].suite == "metadrive") == [
        27, 27, 27]  # 81 members, at most 32 each, as even as can be


def test_missing_eval_costs_file_is_named(capsys: pytest.CaptureFixture) -> None:
    assert main(["--project-grid", "--eval-costs", "no/such.json"]) == 2
    assert "--eval-costs no/such.json: no such file" in capsys.readouterr().err
