"""Figures and the Markdown report: written at the end of a run, readable, and generated from the numbers."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from factory import case_result

from pytest_specbench.report.analysis import FIGURES, analyse_prompts
from pytest_specbench.report.markdown import pair_findings, report_markdown


@pytest.mark.slow
def test_a_run_writes_every_figure_and_a_report_that_links_them(bench, pytester: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image

    result = bench("--specbench-plots=figures", "--specbench-report=out/report.md")
    result.assert_outcomes(passed=4)
    figures = Path(pytester.path) / "figures"
    expected = [f"{figure}_tiny.png" for figure in FIGURES] + ["speedup_by_category.png", "request_acceptance_tiny.png"]
    assert sorted(path.name for path in figures.iterdir()) == sorted(expected)
    for name in expected:
        image = matplotlib.image.imread(figures / name)
        assert image.shape[0] > 200 and image.shape[1] > 300, name
    report_path = Path(pytester.path) / "out" / "report.md"
    report = report_path.read_text()
    assert "## Headline" in report and "## Pair `tiny`" in report and "recommended k" in report
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert len(links) == len(expected)
    assert all((report_path.parent / link).is_file() for link in links)  # relative to the report
    result.stdout.fnmatch_lines(["*results written to figures*", "*results written to out*report.md*"])


@pytest.mark.slow
def test_pytest_start_up_does_not_import_matplotlib() -> None:
    code = (
        "import sys, pytest_specbench.plugin.hooks, pytest_specbench.plugin.session, pytest_specbench.report.markdown; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _row(prompt: str, k: int, speedup: float, low: float, high: float, **extra):
    """A typed row of pair ``p`` with the figures the report reads; the rest from the default run's row."""
    row = {
        "case": f"p-k{k}-{prompt}",
        "pair": "p",
        "prompt": prompt,
        "k": k,
        "decode_speedup": speedup,
        "decode_speedup_ci_low": low,
        "decode_speedup_ci_high": high,
        "speedup": speedup,
        "speedup_ci_low": low,
        "speedup_ci_high": high,
        "acceptance_rate": 0.5,
        "tau": 1.5,
        "verdict": "lossless",
        "target": "t",
        "draft": "d",
        "drafter": "model",
        "device": "cpu",
        "dtype": "float32",
        "new_tokens": 32,
        "drafted_per_step": [0, k, k],
        "accepted_per_step": [0, k, 0],
        "verify_costs_ms": [10.0, 11.0, 12.0, 30.0, 40.0],
        "cost_ratio": 0.1,
        "draft_token_ms": 1.0,
    }
    return case_result(**{**row, **extra})


def test_findings_say_which_prompts_gain_and_lose_and_how_often_the_model_agrees() -> None:
    rows = [
        _row("code", 1, 1.4, 1.2, 1.6, efficiency=0.9),
        _row("code", 2, 1.8, 1.6, 2.0, efficiency=0.5),
        _row("chat", 1, 0.7, 0.6, 0.8, efficiency=1.0),
        _row("chat", 2, 0.6, 0.5, 0.7, efficiency=1.1),
    ]
    sentences = pair_findings(analyse_prompts(rows), rows)
    text = " ".join(sentences)
    assert "Gains" in text and "code (1.80 [1.60, 2.00] at k=2)" in text
    assert "Losses" in text and "chat (0.70 [0.60, 0.80] at k=1)" in text
    assert "Undecided" not in text
    # Each prompt pools its steps over k (alpha 3/5) and gets a recommended k from the curve.
    assert "of 2 prompt types" in text
    assert "Median efficiency (measured / predicted decode speedup): 0.95 over 4 cases" in text
    assert "1 case(s) reach less than 80%" in text
    assert "A verify pass over 5 positions costs 4.00 times" in text
    report = report_markdown(rows, {"specbench_k": "1,2"}, {"fingerprint": {"cpu_model": "x"}, "versions": {}})
    assert "**1.80 [1.60, 2.00]** with pair `p`" in report and "| specbench_k" in report


def test_one_interval_format_for_the_table_the_report_and_compare() -> None:
    from pytest_specbench.cli import compare_lines
    from pytest_specbench.report.formatting import with_interval

    row = _row("code", 1, 1.4, 1.2, 1.6)
    assert with_interval(row) == "1.40 [1.20, 1.60]"
    no_interval = dataclasses.replace(row, decode_speedup_ci_low=None, decode_speedup_ci_high=None)
    assert with_interval(no_interval) == "1.40 [no interval]"
    assert with_interval(row, "speedup", ".1f") == "1.4 [1.2, 1.6]"
    assert "1.40 [1.20, 1.60]" in report_markdown([row], {}, {})
    assert any("1.40 [1.20, 1.60]" in line for line in compare_lines([row], [row]))


def test_a_category_of_several_prompts_is_their_geometric_mean_with_a_t_interval_over_them(tmp_path) -> None:
    from scipy import stats

    from pytest_specbench.report.analysis import best_category_speedups, category_speedups

    code = {"py": (1.2, 1.8), "rust": (1.5, 1.6), "go": (1.0, 2.0)}  # prompt: speedup at k=1, k=2
    rows = [
        _row(prompt, k, s[k - 1], s[k - 1] * 0.9, s[k - 1] * 1.1, category="code")
        for prompt, s in code.items()
        for k in (1, 2)
    ]
    rows += [
        _row("chat", 1, 0.8, 0.7, 0.9, category="chat"),
        _row("chat", 4, 3.0, 2.0, 4.0, category="chat"),
        _row("poem", 4, 5.0, 4.0, 6.0, category="chat"),
    ]  # k=4 did not run on every chat prompt
    by_key = {(item.category, item.k): item for item in category_speedups(rows)}
    logs = [math.log(s[1]) for s in code.values()]
    low, high = stats.ttest_1samp(logs, 0.0).confidence_interval(0.95)
    at_2 = by_key["code", 2]
    assert at_2.prompts == 3 and at_2.speedup == pytest.approx(math.exp(sum(logs) / 3))
    assert (at_2.low, at_2.high) == (pytest.approx(math.exp(low)), pytest.approx(math.exp(high)))
    single = by_key["chat", 1]  # one prompt at k=1: its own interval
    assert by_key["chat", 4].prompts == 2 and (single.prompts, single.low, single.high) == (1, 0.7, 0.9)
    best = {item.category: item for item in best_category_speedups(rows)}
    assert best["code"].k == 2 and best["chat"].k == 4
    report = report_markdown(rows, {}, {})
    assert "## Decode speedup by prompt category" in report
    assert re.search(rf"\| p +\| code +\| 3 +\| 2 +\| {at_2.speedup:.2f} \[{at_2.low:.2f}, {at_2.high:.2f}\] ", report)
    pytest.importorskip("matplotlib")
    from pytest_specbench.report.plots import speedup_by_category

    assert speedup_by_category(rows, tmp_path).is_file()


@pytest.mark.slow
def test_each_dtype_has_its_own_figures_named_as_its_case_ids(tmp_path) -> None:
    from pytest_specbench.report.plots import write_plots

    rows = [case_result(k=k, dtype=dtype, case=f"x-k{k}-{dtype}") for dtype in ("float32", "bfloat16") for k in (1, 4)]
    names = {path.name for path in write_plots(rows, tmp_path / "two")}
    pair = rows[0].pair
    assert {f"speedup_vs_k_{pair}.png", f"speedup_vs_k_{pair}-bf16.png"} <= names
    assert {"speedup_by_category.png", "speedup_by_category-bf16.png"} <= names
    one = {path.name for path in write_plots(rows[:2], tmp_path / "one")}
    assert f"speedup_vs_k_{pair}.png" in one and not any("bf16" in name for name in one)
