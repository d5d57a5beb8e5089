"""Test-session set-up shared by every test module.

typer rebuilds autopar's whole click command tree from the annotated command functions on every
`app(...)` and `CliRunner().invoke(app, ...)` (typer 0.29: `typer.main.get_command`), ~0.16 s for the
~25 commands: three quarters of a small in-process command's time, and the tests make hundreds of such
calls (the fuzz tests one per example). The tree depends only on what is registered on the app, so it
is built once per registration state here; every invocation still parses, validates and runs exactly
as the console script does. Subprocess tests (tests/cli/test_startup.py, the console-script tests) run the
real entry point unmemoised.
"""

from __future__ import annotations

from typing import Any

import typer.main
import typer.testing

_build_command = typer.main.get_command
_commands: dict[tuple[int, ...], Any] = {}


def _registrations(app: typer.Typer) -> tuple[int, ...]:
    """What the built tree depends on: the app and each (sub-)app's registered commands and groups."""
    key = [id(app), len(app.registered_commands), len(app.registered_groups), id(app.registered_callback)]
    for group in app.registered_groups:
        if group.typer_instance is not None:
            key += _registrations(group.typer_instance)
    return tuple(key)


def _memoised_get_command(app: typer.Typer) -> Any:
    key = _registrations(app)
    if key not in _commands:
        _commands[key] = _build_command(app)
    return _commands[key]


typer.main.get_command = _memoised_get_command  # used by Typer.__call__ (autopar.cli.main)
typer.testing._get_command = _memoised_get_command  # used by typer.testing.CliRunner.invoke


# Tests of 4 s or more on this 2-core machine (`pytest --durations=60`, 2026-12-07): end-to-end runs, fuzzing
# rounds, real servers, browsers and the frameworks' own parsers. They are marked `slow`, so
# `python -m pytest -m "not slow"` is the quick developer loop; scripts/test.sh (the README's test command) and
# CI run every test. A node id starting with one of these is slow (a module, a test, or one parametrisation).
SLOW_TESTS = (
    "tests/reports/test_browser_report.py",
    "tests/calibration/test_apply.py::test_cli_fit_with_own_cluster_and_report",
    "tests/dryrun/test_dryrun.py::test_parallel_layers_compute_the_unsharded_loss_and_gradients",
    "tests/dryrun/test_dryrun.py::test_cpu_dryrun_end_to_end_and_its_record_ingests_once",
    "tests/cli/test_fuzz_cli.py::test_fuzz_run_records",
    "tests/cli/test_fuzz_cli.py::test_fuzz_calibrate_args",
    "tests/cli/test_fuzz_cli.py::test_fuzz_optimize_args",
    "tests/cli/test_fuzz_inputs.py::test_ingest_killed_at_random_points_then_rerun_equals_clean",
    "tests/launch/test_frameworks.py",
    "tests/launch/test_megatron_parser.py",
    "tests/perf/test_moe_fabric.py::test_optimize_qwen3_235b_on_64_gb200_feasible_and_domain_aware",
    "tests/calibration/test_own_logs.py::test_worse_fit_warns_and_never_silently_replaces_a_model",
    "tests/search/test_postgres_workers.py",
    "tests/project/test_readme.py::test_readme_command_runs[python bench/",
    "tests/project/test_readme.py::test_readme_command_runs[autopar dryrun",
    # the record dryrun wrote
    "tests/project/test_readme.py::test_readme_command_runs[autopar calibrate ingest dryrun.csv",
    "tests/project/test_readme.py::test_readme_command_runs[autopar whatif --tokens 1T --deadline",
    "tests/search/test_recommend_correction.py::test_flipped_ranking_is_reported_and_a_lead_inside_the_band_is_a_tie",
    "tests/calibration/test_run_store_postgres.py",
    "tests/service/test_browser.py",
    "tests/service/test_slow_client.py",
    "tests/search/test_study_faults.py::test_signals_stop_workers_without_orphans",
    "tests/search/test_sweep.py::test_sweep_over_several_hardware_options",
    "tests/tune/test_cli.py::test_dryrun_runner_on_cpu_measures_stops_and_reports",
    "tests/tune/test_cli.py::test_a_tune_killed_with_sigkill_is_resumed_and_its_run_reattached",
    "tests/tune/test_cli.py::test_two_tunes_on_one_study_share_the_work_and_launch_nothing_twice",
    "tests/tune/test_fuzz.py::test_tune_killed_at_seeded_moments_then_resumed_ends_consistent",
    "tests/tune/test_fuzz.py::test_a_run_ignoring_sigterm_is_killed_with_its_group_and_the_tune_ends",
    "tests/tune/test_fuzz.py::test_a_tune_killed_before_it_stored_the_runs_handle_still_reattaches",
    "tests/tune/test_fuzz.py::test_a_run_lost_while_the_tune_was_killed_is_stale_and_never_relaunched",
    "tests/reports/test_verdict_first.py::test_report_first_screen_shows_the_verdict",
    # 2.5 s or more each in the developer loop (pytest --durations): exhaustive oracles and array-vs-scalar
    # sweeps, fuzz rounds, service jobs, fits; CI runs them (issue 48: the loop under 5 minutes)
    "tests/search/test_space.py::test_unvalidated_strategies_equal_validated_ones",
    "tests/core/test_ep_overlap_rules.py::test_arrays_equal_the_scalar_model_with_overlap_requested",
    "tests/calibration/test_corrector.py::test_conformal_band_covers_nominal_share_of_new_groups",
    "tests/calibration/test_corrector.py::test_nested_gate_validates_the_selection_redone_without_each_group",
    "tests/cli/test_fuzz_cli.py::test_fuzz_whatif_args",
    "tests/tune/test_fuzz.py::test_a_tune_killed_before_it_launched_leaves_the_candidate_open",
    "tests/service/test_service.py::test_an_optimize_job_keeps_its_study_to_follow_and_report",
    "tests/service/test_service.py::test_a_training_log_in_then_a_fit_says_what_it_changed",
    "tests/service/test_service.py::test_optimize_job_answers_the_verdict_and_its_report",
    "tests/launch/test_schema.py::test_sweep_every_pareto_point_valid_for_every_framework[qwen3-235b-a22b-GB200",
    "tests/core/test_layouts.py::test_oracle_per_stack_capabilities",
    "tests/core/test_layouts.py::test_oracle_dense_space_including_zero_and_recompute",
    "tests/search/test_sweep.py::test_sweep_finds_the_classic_front",
    "tests/search/test_sweep.py::test_sweep_counts_reach_the_cli_summary",
    "tests/search/test_constraints.py::test_fix_tp_and_forbid_cp_reach_every_pareto_row",
    "tests/search/test_study.py::test_nsga2_with_budget_of_space_size_finds_exhaustive_front",
    "tests/search/test_study_storage.py::test_stored_study_is_native_optuna[sqlite]",
    "tests/cli/test_startup.py::test_optimize_json_loads_no_table_or_plotting_library",
    "tests/calibration/test_apply.py::test_shipped_default_matches_a_fresh_fit",
    "tests/calibration/test_own_logs.py::test_examples_summary_ratio_by_hand",
    "tests/calibration/test_own_logs.py::test_a_new_group_name_fits_all_your_runs_as_one_cluster",
    "tests/tune/test_leftovers.py::test_a_job_timeout_counts_from_when_it_runs_not_its_queue_wait",
    "tests/tune/test_leftovers.py::test_a_hanging_slurm_call_times_out",
)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark the SLOW_TESTS `slow` (a prefix match on the node id, relative to the repository root)."""
    import pytest

    for item in items:
        node = item.nodeid if item.nodeid.startswith("tests/") else f"tests/{item.nodeid}"
        if node.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
