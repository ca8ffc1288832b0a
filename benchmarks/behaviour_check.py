"""Behaviour check for refactors: what a run decodes, never how fast.

``capture OUT`` runs the plugin three times at one timed round and keeps, per case, every field that
does not depend on the clock (verdict, acceptance, tau, token counts, per-step lists):

- the embedded matrix (the main job's defaults);
- a tiny byte-level pair at batch 4;
- prompt lookup on the same tiny target.

``compare A B`` says which cases or fields differ between two captures (exit status 1 if any). Run
it at the commits before and after a change that must not change behaviour::

    python benchmarks/behaviour_check.py capture /tmp/before   # at the old commit
    python benchmarks/behaviour_check.py capture /tmp/after    # at the new one
    python benchmarks/behaviour_check.py compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_specbench.cli import load_run, run_results
from pytest_specbench.testing.tiny_models import byte_gpt2, byte_tokenizer, noisy_copy, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]

#: fields that a refactor must leave equal: all decided by the tokens, none by the clock
DETERMINISTIC = (
    "verdict",
    "lossless",
    "acceptance_rate",
    "tau",
    "drafted_tokens",
    "accepted_tokens",
    "new_tokens",
    "prompt_tokens",
    "target_forward_passes",
    "draft_forward_passes",
    "accepted_per_step",
    "drafted_per_step",
    "k_per_step",
    "position_acceptance",
    "accepted_length_histogram",
    "row_acceptance",
    "row_verdicts",
    "batch_prompt_ids",
    "batch_new_tokens",
    "first_divergence",
)

ONE_ROUND = ("--specbench-min-rounds=1", "--specbench-max-rounds=1", "--specbench-warmup=1", "-p", "no:cacheprovider")


def _tiny_pairs_file(root: Path) -> Path:
    target = byte_gpt2(seed=0)
    save_checkpoint(target, byte_tokenizer(), root / "target")
    save_checkpoint(noisy_copy(target, 0.01, seed=1, relative=False), byte_tokenizer(), root / "draft")
    pairs_file = root / "pairs.toml"
    pairs_file.write_text(
        '[pairs.tiny]\ntarget = "./target"\ndraft = "./draft"\n\n'
        '[pairs.tiny_pld]\ntarget = "./target"\ndrafter = "prompt_lookup"\n',
        encoding="utf-8",
    )
    return pairs_file


def _run(name: str, out: Path, *options: str) -> None:
    json_path = out / f"{name}.json"
    command = [sys.executable, "-m", "pytest", "bench_cases", *ONE_ROUND, f"--specbench-json={json_path}", *options]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=False)
    if not json_path.exists():
        raise SystemExit(f"{name}: the run wrote no {json_path}")


def capture(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        pairs_file = _tiny_pairs_file(Path(folder))
        tiny = (f"--specbench-pairs-file={pairs_file}", "--specbench-prompts=natural,code_python,repetitive")
        _run("batch4", out, *tiny, "--specbench-pairs=tiny", "--specbench-batch=4", "--specbench-k=2,4")
        _run("pld", out, *tiny, "--specbench-pairs=tiny_pld", "--specbench-k=1,4,8")
    _run("embedded", out)


def _cases(folder: Path) -> dict[str, dict]:
    """Per ``capture:case``, the clock-free fields of its row, read typed (a field a commit's rows lack reads as
    the schema's default)."""
    cases = {}
    for path in sorted(folder.glob("*.json")):
        for row in run_results(load_run(path)):
            cases[f"{path.stem}:{row.case}"] = {name: getattr(row, name) for name in DETERMINISTIC}
    return cases


def compare(before: Path, after: Path) -> int:
    old, new = _cases(before), _cases(after)
    problems = [f"only before: {case}" for case in sorted(old.keys() - new.keys())]
    problems += [f"only after: {case}" for case in sorted(new.keys() - old.keys())]
    for case in sorted(old.keys() & new.keys()):
        for name in DETERMINISTIC:
            if old[case][name] != new[case][name]:
                problems.append(f"{case}: {name} {old[case][name]!r} -> {new[case][name]!r}")
    print("\n".join(problems) or f"{len(old)} cases, {len(DETERMINISTIC)} fields each: identical")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("capture").add_argument("out", type=Path)
    compared = commands.add_parser("compare")
    compared.add_argument("before", type=Path)
    compared.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    raise SystemExit(main())
