"""SIGTERM and SIGINT end a run cleanly: what finished is in the log, the CSV and the JSON, the rest is named.

The runs are real ``python -m pytest`` processes on the tiny pair (conftest's ``held_run``): six
cases, the third held until the test lets it go, the signal sent once two are logged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import types

import pytest

from pytest_specbench.plugin.hooks import SessionHooks
from pytest_specbench.plugin.signals import SignalStop, Terminated


def assert_written_from_what_finished(held_run, signal_name: str) -> None:
    output = held_run.output()
    assert "specbench summary" in output, output
    assert f"run interrupted ({signal_name}) with 2 of 6 case(s) finished" in output
    assert f"no result for 4 case(s): {', '.join(held_run.UNFINISHED)}" in output
    assert "--specbench-resume=spec_results.jsonl" in output
    assert held_run.logged_cases() == held_run.FINISHED
    csv_lines = (held_run.path / "spec_results.csv").read_text().splitlines()
    assert [line.split(",")[5] for line in csv_lines[1:]] == held_run.FINISHED
    document = json.loads((held_run.path / "spec_results.json").read_text())
    assert [row["case"] for row in document["results"]] == held_run.FINISHED
    assert document["missing_cases"] == held_run.UNFINISHED
    assert document["interrupted"] == signal_name


@pytest.mark.slow
def test_sigterm_writes_what_finished_and_names_the_rest(held_run) -> None:
    process = held_run.start()
    process.send_signal(signal.SIGTERM)
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED
    assert_written_from_what_finished(held_run, "SIGTERM")


@pytest.mark.slow
def test_sigint_writes_what_finished_and_names_the_rest(held_run) -> None:
    process = held_run.start()
    process.send_signal(signal.SIGINT)
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED
    assert_written_from_what_finished(held_run, "SIGINT")


@pytest.mark.slow
def test_sigterm_to_the_xdist_controller_writes_what_finished_and_resume_ends_it(held_run, bench) -> None:
    process = held_run.start("-n", "2")
    process.send_signal(signal.SIGTERM)
    # The files are written before xdist waits for its busy worker; then that worker may go on.
    held_run.wait_for(lambda: (held_run.path / "spec_results.json").exists(), "the JSON")
    held_run.release()
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED
    assert_written_from_what_finished(held_run, "SIGTERM")

    # Every worker replays the logged cases (the same collection everywhere) and runs the rest.
    result = bench("--specbench-resume=spec_results.jsonl", "-n", "2", prompts=held_run.PROMPTS)
    result.assert_outcomes(passed=6)
    document = json.loads((held_run.path / "spec_results.json").read_text())
    assert len(document["results"]) == 6 and document["missing_cases"] == []
    assert document["resumed_cases"] == held_run.FINISHED


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_under_xdist(held_run) -> None:
    # What `timeout -s TERM` and many CI runners do: the workers get the signal too, and die of it.
    process = held_run.start("-n", "2", new_session=True)
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED
    assert_written_from_what_finished(held_run, "SIGTERM")


@pytest.mark.slow
def test_sigkill_leaves_every_finished_case_in_the_log(held_run) -> None:
    process = held_run.start()
    process.kill()
    process.wait(held_run.PATIENCE_S)
    lines = (held_run.path / "spec_results.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["specbench_log"] == 1
    assert [json.loads(line)["case"] for line in lines[1:]] == held_run.FINISHED
    assert not (held_run.path / "spec_results.csv").exists()  # the end of the session never came


SIGNAL_WHILE_WRITING = """
    import os
    import signal

    from pytest_specbench.results.run_files import RunFiles

    _write_outputs = RunFiles.write_outputs


    def _signalled_while_writing(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # as a CI timeout would, while the files are being written
        return _write_outputs(*args, **kwargs)


    RunFiles.write_outputs = _signalled_while_writing
"""


@pytest.mark.slow
def test_sigterm_while_the_files_are_written_completes_them_and_exits_interrupted(bench_process, pytester) -> None:
    pytester.makeconftest(SIGNAL_WHILE_WRITING)
    process = bench_process("-k", "k1 and natural")
    assert process.wait(300) == pytest.ExitCode.INTERRUPTED
    output = (pytester.path / "output.txt").read_text()
    said = "run interrupted (SIGTERM) while its files were written, with 1 of 1 case(s) finished"
    assert said in output, output
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert [row["case"] for row in document["results"]] == ["tiny-k1-natural"]
    assert len((pytester.path / "spec_results.csv").read_text().splitlines()) == 2
    assert "Traceback" not in output and "INTERNALERROR" not in output


# --- the handler itself -------------------------------------------------------------------------------


def test_a_signal_waits_until_the_result_is_recorded() -> None:
    stop = SignalStop()
    stop.install()
    try:
        recorded = []
        with pytest.raises(Terminated):
            with stop.held():
                os.kill(os.getpid(), signal.SIGTERM)
                recorded.append("row")  # still runs: the interruption waits for the end of the block
        assert recorded == ["row"] and stop.received == "SIGTERM"
    finally:
        stop.restore()


def test_while_finishing_a_signal_is_noted_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stop = SignalStop()
    stop.install()
    assert signal.getsignal(signal.SIGTERM) != before
    with stop.finishing():
        os.kill(os.getpid(), signal.SIGTERM)  # no exception: the files are being written
    os.kill(os.getpid(), signal.SIGTERM)  # nor after them: the summary is still to be printed
    assert stop.received == "SIGTERM"
    stop.restore()  # pytest's unconfigure
    assert signal.getsignal(signal.SIGTERM) == before


def _frame_without_a_line_number() -> tuple[types.FrameType, int]:
    """A live frame and an instruction offset of it that has no line number (CPython 3.11 exception cleanup)."""

    def cleanup_code() -> types.FrameType:
        with contextlib.nullcontext():
            try:
                pass
            except ValueError:
                pass
        return sys._getframe()

    frame = cleanup_code()
    offset = next((start for start, _, line in frame.f_code.co_lines() if line is None), None)
    if offset is None:
        pytest.skip("this Python gives every instruction a line number")
    return frame, offset


def test_an_interrupted_frame_without_a_line_number_does_not_crash_the_report() -> None:
    frame, offset = _frame_without_a_line_number()
    inner = types.TracebackType(None, frame, offset, -1)
    outer = types.TracebackType(inner, sys._getframe(), sys._getframe().f_lasti, sys._getframe().f_lineno)
    error = Terminated("received SIGTERM")
    excinfo = pytest.ExceptionInfo.from_exc_info((Terminated, error, outer))
    with pytest.raises(TypeError):
        excinfo.getrepr(funcargs=True)  # what pytest's terminal reporter does with an interruption
    SessionHooks(session=None).pytest_keyboard_interrupt(excinfo)
    assert "Terminated: received SIGTERM" in str(excinfo.getrepr(funcargs=True))


def test_only_the_first_signal_interrupts() -> None:
    stop = SignalStop()
    stop.install()
    try:
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the run is already ending: noted, not raised
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.received == "SIGTERM"
    finally:
        stop.restore()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "gaps"),
    [(signal.SIGTERM, (0.05,)), (signal.SIGTERM, (0.5,)), (signal.SIGINT, (0.2, 0.2, 0.2))],
    ids=["sigterm-twice-50ms-apart", "sigterm-twice-500ms-apart", "sigint-four-times"],
)
def test_a_signal_repeated_while_the_run_ends_changes_nothing(held_run, signum: int, gaps: tuple[float, ...]) -> None:
    process = held_run.start()
    process.send_signal(signum)
    for gap in gaps:
        time.sleep(gap)
        process.send_signal(signum)
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED, held_run.output()
    assert_written_from_what_finished(held_run, signal.Signals(signum).name)
    output = held_run.output()
    assert "Traceback" not in output and "INTERNALERROR" not in output
    assert output.count("specbench summary") == 1
    assert output.count("the same command with --specbench-resume=spec_results.jsonl") == 1


MID_BLOCK_CONFTEST = """
    import pathlib
    import time

    import pytest

    import pytest_specbench.plugin.block_runs as block_runs


    @pytest.fixture(autouse=True)
    def hold_the_dialogue_block_once_it_began(monkeypatch, request):
        # The dialogue block's timing begins, then waits while the file hold exists: a signal then lands mid-block.
        if "dialogue" in request.node.nodeid:
            timed = block_runs.measure_block

            def held(*args, **kwargs):
                pathlib.Path("in_block").touch()
                while pathlib.Path("hold").exists():
                    time.sleep(0.05)
                return timed(*args, **kwargs)

            monkeypatch.setattr(block_runs, "measure_block", held)
"""


@pytest.mark.slow
def test_sigterm_mid_block_keeps_the_finished_blocks_and_names_the_cases_the_block_lost(
    held_run, pytester, bench_process
) -> None:
    pytester.makeconftest(MID_BLOCK_CONFTEST)
    (pytester.path / "hold").touch()
    process = bench_process(prompts=held_run.PROMPTS)
    held_run.wait_for(lambda: (pytester.path / "in_block").exists() or process.poll() is not None, "the block")
    process.send_signal(signal.SIGTERM)
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED, held_run.output()
    lost = ["tiny-k1-dialogue", "tiny-k4-dialogue"]
    output = held_run.output()
    together = f"it stopped mid-block: {', '.join(lost)} are timed together and finish together"
    assert f"{together}; none of its rounds had finished" in output
    assert held_run.logged_cases() == held_run.FINISHED
    records = [json.loads(line) for line in (pytester.path / "spec_results.jsonl").read_text().splitlines()]
    assert records[-1]["lost_mid_block"] == lost and records[-1]["interrupted"] == "SIGTERM"
    document = json.loads((pytester.path / "spec_results.json").read_text())
    assert [row["case"] for row in document["results"]] == held_run.FINISHED
    assert document["lost_mid_block"] == lost and document["missing_cases"] == held_run.UNFINISHED


ROUND_HOLD_CONFTEST = """
    import pathlib
    import time

    from pytest_specbench.measure import blocks

    fits = blocks.round_fits


    def held(elapsed_s, rounds, budget_s, min_rounds):
        # Each round this process starts is noted; before a third, it waits while the file hold exists.
        with open("rounds_started", "a") as noted:
            noted.write(f"{rounds} ")
        if rounds == 2:
            pathlib.Path("in_round").touch()
            while pathlib.Path("hold").exists():
                time.sleep(0.05)
        return fits(elapsed_s, rounds, budget_s, min_rounds)


    blocks.round_fits = held
"""


@pytest.mark.slow
def test_sigterm_after_two_rounds_of_a_block_keeps_them_and_resume_goes_on_from_the_third(
    held_run, pytester, bench_process, bench
) -> None:
    pytester.makeconftest(ROUND_HOLD_CONFTEST)
    rounds = ("--specbench-min-rounds=4", "--specbench-max-rounds=4")
    (pytester.path / "hold").touch()
    process = bench_process(*rounds, prompts="dialogue")
    held_run.wait_for(lambda: (pytester.path / "in_round").exists() or process.poll() is not None, "round 2")
    process.send_signal(signal.SIGTERM)
    assert process.wait(held_run.PATIENCE_S) == pytest.ExitCode.INTERRUPTED, held_run.output()
    output = held_run.output()
    said = "its 2 rounds that finished are kept in spec_results.jsonl.rounds, and --specbench-resume goes on from them"
    assert said in output, output
    assert "to run only those: the same command with --specbench-resume=spec_results.jsonl" in output
    kept = [line for line in (pytester.path / "spec_results.jsonl.rounds").read_text().splitlines() if line]
    assert [json.loads(line)["round"] for line in kept] == [0, 1]
    assert (pytester.path / "rounds_started").read_text().split() == ["0", "1", "2"]

    (pytester.path / "rounds_started").unlink()
    (pytester.path / "hold").unlink()
    refused = bench(*rounds, prompts="dialogue")  # a new run would lose the kept rounds
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        ["*did not finish (2 finished round(s) of a block it was timing are kept in *spec_results.jsonl.rounds)*"]
    )
    resumed = bench_process(*rounds, "--specbench-resume=spec_results.jsonl", prompts="dialogue")
    assert resumed.wait(held_run.PATIENCE_S) == pytest.ExitCode.OK, held_run.output()
    assert (pytester.path / "rounds_started").read_text().split() == ["2", "3"]  # rounds 0 and 1 were kept
    document = json.loads((pytester.path / "spec_results.json").read_text())
    rows = {row["case"]: row for row in document["results"]}
    assert sorted(rows) == ["tiny-k1-dialogue", "tiny-k4-dialogue"]
    for case, row in rows.items():
        assert (row["resumed_rounds"], row["block_rounds"], row["rounds_retimed"]) == (2, [0, 1, 2, 3], "")
        kept_walls = [json.loads(line)["runs"][case]["run"]["stats"]["wall_time_s"] for line in kept]
        assert row["round_wall_s"][:2] == kept_walls  # the kept rounds' own runs, not new ones
    assert not (pytester.path / "spec_results.jsonl.rounds").exists()  # every case has its row: nothing to go on from
