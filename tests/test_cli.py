"""Shards of one sweep merged back into one run; merge refusals; compare of two runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_specbench.results import schema
from pytest_specbench.cli import MergeError, compare_lines, main, merge_runs
from pytest_specbench.measure.matrix import shard_pairs
from pytest_specbench.measure.pairs import PairSpec

# Fields that do not depend on timing: identical in every run of the same sweep on any machine.
TIMING_FREE = tuple(f.name for f in dataclasses.fields(schema.CaseResult)
                    if f.metadata["group"] in (schema.IDENTITY, schema.ACCEPTANCE, schema.VERDICT)
                    and f.name not in ("target", "draft")) + ("alpha", "predicted_tau", "target_params",
                                                               "draft_params")


@pytest.fixture(scope="module")
def two_pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from factory import write_tiny_pair

    root = tmp_path_factory.mktemp("two_pairs")
    for name, noise in (("tiny_a", 0.01), ("tiny_b", 0.05)):
        write_tiny_pair(root / name, name=name, noise=noise)
    pairs_file = root / "pairs.toml"
    pairs_file.write_text("".join(f'[pairs.{name}]\ntarget = "./{name}/target"\ndraft = "./{name}/draft"\n'
                                  for name in ("tiny_a", "tiny_b")), encoding="utf-8")
    return pairs_file


def test_shards_deal_the_pairs_by_name_and_cover_each_once():
    pairs = [PairSpec(name, "t", "d") for name in ("c", "a", "d", "b", "e")]
    shards = [[pair.name for pair in shard_pairs(pairs, i, 3)] for i in (1, 2, 3)]
    assert shards == [["a", "d"], ["b", "e"], ["c"]]
    assert [pair.name for pair in shard_pairs(pairs, 1, 1)] == ["c", "a", "d", "b", "e"]


def test_two_shards_merged_give_the_rows_of_the_unsplit_run(bench, pytester, two_pairs_file, capsys):
    common = ("--specbench-pairs=tiny_a,tiny_b", "--specbench-plots=")
    for shard in ("1/2", "2/2"):
        name = shard.replace("/", "of")
        bench(*common, f"--specbench-shard={shard}", f"--specbench-json={name}.json", pairs_file=two_pairs_file
              ).assert_outcomes(passed=4)
    bench(*common, "--specbench-json=whole.json", pairs_file=two_pairs_file).assert_outcomes(passed=8)
    path = Path(pytester.path)
    shard_pairs_seen = [{row["pair"] for row in json.loads((path / f"{n}.json").read_text())["results"]}
                        for n in ("1of2", "2of2")]
    assert shard_pairs_seen == [{"tiny_a"}, {"tiny_b"}]
    assert main(["merge", str(path / "1of2.json"), str(path / "2of2.json"), "--json", str(path / "merged.json"),
                 "--csv", str(path / "merged.csv"), "--report", str(path / "merged.md")]) == 0
    merged = json.loads((path / "merged.json").read_text())
    whole = json.loads((path / "whole.json").read_text())

    def by_case(document):
        return {row["case"]: {name: row[name] for name in TIMING_FREE} for row in document["results"]}

    assert by_case(merged) == by_case(whole) and len(merged["results"]) == 8
    assert (path / "merged.csv").read_text().count("\n") == 9
    assert "## Pair `tiny_a`" in (path / "merged.md").read_text()
    # compare: every case of one run against the other, with a per-pair line.
    assert main(["compare", str(path / "whole.json"), str(path / "merged.json")]) == 0
    out = capsys.readouterr().out
    assert "tiny_a-k4-natural" in out and "+0.000" in out and "geomean decode speedup old" in out


def _run(cases, **options):
    rows = [{"case": case, "pair": case.split("-")[0], "acceptance_rate": 0.5, "decode_speedup": 1.0,
             "decode_speedup_ci_low": 0.9, "decode_speedup_ci_high": 1.1} for case in cases]
    return {"options": {"specbench_k": "1,4", "specbench_max_new_tokens": "32", **options}, "results": rows}


def test_merge_refuses_runs_whose_options_make_numbers_incomparable():
    with pytest.raises(MergeError, match=r"specbench_max_new_tokens: a has '32', b has '128'"):
        merge_runs([_run(["p-k1-x"]), _run(["q-k1-x"], specbench_max_new_tokens="128")], ["a", "b"])
    with pytest.raises(MergeError, match="case p-k1-x is in both a and b"):
        merge_runs([_run(["p-k1-x"]), _run(["p-k1-x"])], ["a", "b"])
    # Output paths and the shard itself may differ.
    merged = merge_runs([_run(["p-k1-x"], specbench_shard="1/2", specbench_json="a.json"),
                         _run(["q-k1-x"], specbench_shard="2/2", specbench_json="b.json")], ["a", "b"])
    assert [row["case"] for row in merged["results"]] == ["p-k1-x", "q-k1-x"]
    assert [source["shard"] for source in merged["merged_from"]] == ["1/2", "2/2"]


def test_merge_exits_2_with_the_reason(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_run(["p-k1-x"])))
    b.write_text(json.dumps(_run(["q-k1-x"], specbench_k="1,2")))
    assert main(["merge", str(a), str(b)]) == 2
    assert "not comparable (specbench_k" in capsys.readouterr().err


def test_compare_marks_a_speedup_beyond_noise():
    old, new = _run(["p-k1-x", "p-k4-x"]), _run(["p-k1-x", "p-k4-x"])
    new["results"][1].update(decode_speedup=1.5, decode_speedup_ci_low=1.3, decode_speedup_ci_high=1.7,
                             acceptance_rate=0.6)
    text = "\n".join(compare_lines(old, new))
    assert "within noise" in text and "faster" in text and "+0.100" in text
