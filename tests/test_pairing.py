"""The pairing strategy: which pairing a block runs, the reason named for each cause that keeps it from
interleaving, and the row that records both."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_specbench.measure import pairing
from pytest_specbench.measure.pairing import Pairing, choose_pairing
from pytest_specbench.settings.config import parse_settings


def _config(**settings):
    return dataclasses.replace(parse_settings({}), **settings)


def test_a_block_every_case_of_which_can_interleave_interleaves_with_no_reason():
    chosen = choose_pairing(_config(), [None, None])
    assert chosen.kind == "interleaved" and chosen.interleaved and chosen.paired
    assert chosen.reasons == () and chosen.reason == ""


@pytest.mark.parametrize(
    ("settings", "refusals", "reason"),
    [
        ({}, [None, pairing.HF_WHOLE_RUNS], pairing.HF_WHOLE_RUNS),
        ({}, [pairing.BATCHED_RUNS, pairing.BATCHED_RUNS], pairing.BATCHED_RUNS),
        ({"compile_steps": True}, [None], pairing.COMPILED_STEPS),
    ],
    ids=["hf engine", "batch", "compile"],
)
def test_a_block_that_cannot_interleave_runs_rounds_and_names_why(settings, refusals, reason):
    chosen = choose_pairing(_config(**settings), refusals)
    assert chosen.kind == "rounds" and not chosen.interleaved and chosen.paired
    assert chosen.reasons == (reason,) and chosen.reason == reason  # named once, however many cases give it


def test_each_cause_is_named_once_in_the_reason():
    chosen = choose_pairing(_config(compile_steps=True), [None, pairing.HF_WHOLE_RUNS, pairing.HF_WHOLE_RUNS])
    assert chosen.reasons == (pairing.COMPILED_STEPS, pairing.HF_WHOLE_RUNS)
    assert chosen.reason == f"{pairing.COMPILED_STEPS}; {pairing.HF_WHOLE_RUNS}"


def test_rounds_asked_runs_rounds_with_its_reason_and_no_row_reason():
    chosen = choose_pairing(_config(pairing="rounds"), [None, pairing.HF_WHOLE_RUNS])
    assert chosen.kind == "rounds" and chosen.reasons == (pairing.ROUNDS_ASKED, pairing.HF_WHOLE_RUNS)
    assert chosen.reason == ""  # the asked pairing ran


def test_baseline_once_runs_unpaired_with_its_reason_and_no_row_reason():
    config = _config(baseline_once=True, pairing="baseline-once")  # as the config records it
    chosen = choose_pairing(config, [None])
    assert chosen.kind == "baseline-once" and not chosen.paired and not chosen.interleaved
    assert chosen.reasons == (pairing.BASELINE_ONCE_ASKED,) and chosen.reason == ""


def test_calibration_interleaves_a_case_that_can_unless_the_settings_forbid_it():
    block = choose_pairing(_config(), [None, pairing.HF_WHOLE_RUNS])
    assert block.kind == "rounds" and block.interleaves(None) and not block.interleaves(pairing.HF_WHOLE_RUNS)
    assert not choose_pairing(_config(compile_steps=True), [None]).interleaves(None)


def test_every_kind_is_listed():
    assert pairing.PAIRING_KINDS == ("interleaved", "rounds", "baseline-once", "own-baseline")
    assert Pairing().kind in pairing.PAIRING_KINDS


@pytest.mark.parametrize("asked", [dict(), dict(pairing="rounds"), dict(baseline_once=True, pairing="baseline-once")])
def test_a_block_of_cases_on_different_inputs_records_the_own_baseline_pairing_it_runs(asked):
    # A served engine's block: whatever was asked, each case's run follows a baseline of its own input.
    chosen = choose_pairing(_config(**asked), [pairing.SERVED_WHOLE_RUNS], shared_input=False)
    assert chosen.kind == "own-baseline" and chosen.paired and not chosen.interleaved
    assert chosen.reason.endswith(pairing.OWN_INPUTS)
