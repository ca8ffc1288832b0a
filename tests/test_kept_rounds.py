"""Rounds that survive a stop: each finished round to the rounds file, a resumed block going on from them as if it
had never stopped, and timed afresh (saying why) where the rounds were timed under other kernels or cases."""

from __future__ import annotations

import json

import pytest
import torch

from pytest_specbench.engine.batched import BatchedGenerationResult
from pytest_specbench.engine.stats import DecodeStats, GenerationResult
from pytest_specbench.measure.blocks import time_block
from pytest_specbench.measure.kept_rounds import RoundKeeper, decoded, encoded
from pytest_specbench.results.round_log import append_round, read_rounds
from tests.test_blocks import Noise, _block, _config

STAMP = {"machine": {"cpu_model": "test"}, "few_rows_kernel": "built abc"}
FORMS = {"p-k1-natural": "t1/d1", "p-k2-natural": "t1/d1", "p-k4-natural": "t1/d1"}
SPEEDS = {1: 0.50, 2: 0.42, 4: 0.60}  # seconds of a run by k: k=4 is slower than k=2, and the race can drop it
KEY = "p/natural p-k1-natural,p-k2-natural,p-k4-natural"  # the block, and the cases timed in it
CONFIG = dict(min_rounds=3, max_rounds=9, ci_target=0.004, race=True, baseline_every=2)


class Stop(KeyboardInterrupt):
    """The signal, as the plugin's handler raises it, once a round has been kept."""


def _keeper(path, logged=None, forms=FORMS) -> tuple[RoundKeeper, object]:
    keeper = RoundKeeper(path, {"--specbench-k": [1, 2, 4]}, logged, path, stamp_now=lambda: STAMP)
    return keeper, keeper.begin("p/natural", forms, "rounds")


def _summary(block) -> list:
    return [
        (t.case.k, t.rounds, [r.stats.wall_time_s for r in t.runs], t.stop, t.eliminated_by) for t in block.cases
    ] + [block.rounds]


def test_a_block_stopped_after_three_rounds_goes_on_from_them_as_if_it_had_never_stopped(tmp_path) -> None:
    config = _config(**CONFIG)
    cases, baseline, _ = _block(SPEEDS, Noise(seed=3, run_sd=0.03))
    straight = time_block(cases, baseline, config, None)
    assert straight.rounds > 4 and {t.stop for t in straight.cases} != {None}  # more rounds than were kept below

    noise = Noise(seed=3, run_sd=0.03)
    cases, baseline, _ = _block(SPEEDS, noise)
    path = tmp_path / "log.jsonl.rounds"
    _, keeping = _keeper(path)

    def keep_then_stop(block, index, seconds):
        keeping.keep(block, index, seconds)
        if index == 2:
            raise Stop

    with pytest.raises(Stop):
        time_block(cases, baseline, config, None, keep_round=keep_then_stop)
    logged = read_rounds(path)
    assert [record["round"] for record in logged[KEY].rounds] == [0, 1, 2]

    cases, baseline, calls = _block(SPEEDS, noise)  # the machine goes on where it was
    keeper, keeping = _keeper(path, logged)
    assert keeping.retimed_why == "" and len(keeping.restored) == 3
    resumed = time_block(cases, baseline, config, None, restored=keeping.restored, keep_round=keeping.keep)
    assert resumed.resumed_rounds == 3
    assert _summary(resumed) == _summary(straight)
    later_runs = sum(len([index for index in t.rounds if index >= 3]) for t in straight.cases)
    assert sum(1 for call in calls if call != "base") == later_runs  # rounds 0 to 2 were not run again
    assert keeper.kept["p/natural"] == resumed.rounds
    # The file now holds the whole block, in one series: a second stop would lose none of it either.
    assert [record["round"] for record in read_rounds(path)[KEY].rounds] == list(range(resumed.rounds))


@pytest.mark.parametrize(
    ("forms", "pairing", "said"),
    [
        ({**FORMS, "p-k2-natural": "t2/d1"}, "rounds", "the kernel forms or inputs (p-k2-natural t1/d1 -> t2/d1)"),
        ({case: FORMS[case] for case in list(FORMS)[:2]}, "rounds", "the block's cases differ"),
        (FORMS, "interleaved", "the pairing (rounds -> interleaved)"),
    ],
    ids=["other-forms", "other-cases", "other-pairing"],
)
def test_rounds_timed_under_other_forms_cases_or_pairing_are_timed_again_and_the_rows_say_why(
    tmp_path, forms, pairing, said
) -> None:
    path = tmp_path / "log.jsonl.rounds"
    cases, baseline, _ = _block(SPEEDS, Noise(seed=1, run_sd=0.03))
    _, keeping = _keeper(path)
    time_block(cases, baseline, _config(**{**CONFIG, "max_rounds": 2}), None, keep_round=keeping.keep)
    keeper = RoundKeeper(path, {"--specbench-k": [1, 2, 4]}, read_rounds(path), path, stamp_now=lambda: STAMP)
    keeping = keeper.begin("p/natural", forms, pairing)
    assert keeping.restored == []
    assert keeping.retimed_why.startswith("2 round(s) a stopped run logged were timed again: ")
    assert said in keeping.retimed_why


def test_rounds_of_another_machine_are_timed_again(tmp_path) -> None:
    path = tmp_path / "log.jsonl.rounds"
    cases, baseline, _ = _block(SPEEDS)
    _, keeping = _keeper(path)
    time_block(cases, baseline, _config(**{**CONFIG, "max_rounds": 1}), None, keep_round=keeping.keep)
    other = {**STAMP, "machine": {"cpu_model": "another"}}
    keeper = RoundKeeper(path, {"--specbench-k": [1, 2, 4]}, read_rounds(path), path, stamp_now=lambda: other)
    assert "machine or libraries" in keeper.begin("p/natural", FORMS, "rounds").retimed_why


def test_a_run_and_its_turns_or_rows_come_back_as_they_were() -> None:
    stats = DecodeStats(new_tokens=3, wall_time_s=0.1 + 1e-17, drafted_per_step=[2, 1], k_per_step=[2, 2])
    turn = GenerationResult(torch.tensor([[5, 6, 7, 8]]), 2, stats)
    joined = GenerationResult(torch.tensor([[5, 6, 7, 8, 9]]), 2, stats, [turn, turn])
    batch = BatchedGenerationResult([turn, joined], stats, padded_prompt_length=4, layout="packed")
    for result in (turn, joined, batch):
        back = decoded(json.loads(json.dumps(encoded(result))))
        assert type(back) is type(result) and encoded(back) == encoded(result)
    assert decoded(encoded(joined)).turns[1].token_ids == [7, 8]
    assert decoded(encoded(batch)).token_ids == [[7, 8], [7, 8, 9]]


def test_the_rounds_file_gives_each_block_its_latest_series_from_round_0_without_a_gap(tmp_path) -> None:
    path = tmp_path / "rounds"
    for block, series, index in [("a", "s1", 0), ("a", "s1", 1), ("a", "s1", 2), ("a", "s2", 0), ("b", "s3", 0)]:
        append_round(path, {"block": block, "series": series, "round": index, "at": f"{series}-{index}"})
    append_round(path, {"block": "b", "series": "s3", "round": 2})  # round 1 was never written: 2 is not taken
    with path.open("a") as file:
        file.write('{"block": "b", "series": "s3", "round": 1, "cut sh')  # a kill mid-line
    blocks = read_rounds(path)
    assert [record["at"] for record in blocks["a"].rounds] == ["s2-0"] and blocks["a"].series == "s2"
    assert [record["round"] for record in blocks["b"].rounds] == [0]
    assert read_rounds(tmp_path / "none") == {}


def test_a_round_that_cannot_be_read_is_timed_again_and_says_so(tmp_path) -> None:
    path = tmp_path / "log.jsonl.rounds"
    settings = RoundKeeper(None, {"--specbench-k": [1, 2, 4]}).settings
    stamp = {**STAMP, "settings": settings, "pairing": "rounds", "forms": FORMS}
    append_round(path, {"block": KEY, "series": "s", "round": 0, "stamp": stamp})  # a round without its runs
    keeper = RoundKeeper(path, {"--specbench-k": [1, 2, 4]}, read_rounds(path), path, stamp_now=lambda: STAMP)
    keeping = keeper.begin("p/natural", FORMS, "rounds")
    assert keeping.restored == [] and "a round that cannot be read (KeyError" in keeping.retimed_why


def test_a_rounds_file_that_cannot_be_written_stops_the_keeping_not_the_block(tmp_path) -> None:
    path = tmp_path / "no such folder" / "log.jsonl.rounds"
    cases, baseline, _ = _block(SPEEDS)
    keeper, keeping = _keeper(path)
    with pytest.warns(UserWarning, match="rounds are no longer kept"):
        block = time_block(cases, baseline, _config(**{**CONFIG, "max_rounds": 2}), None, keep_round=keeping.keep)
    assert block.rounds == 2 and keeper.path is None and keeper.kept["p/natural"] == 0
