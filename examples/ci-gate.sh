#!/usr/bin/env bash
# A CI job: benchmark a small embedded matrix on CPU and fail when acceptance
# regresses against the committed baseline. Needs no GPU and no model hub.
# One timed round per case: the gate reads acceptance, not speed.
#
#   bash examples/ci-gate.sh          # gate against examples/specbench_baseline.json
#   bash examples/ci-gate.sh --save   # (re)write that baseline, then commit it
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d .venv ]; then
    python3 -m venv .venv
fi
. .venv/bin/activate
pip install torch==2.13.0
pip install -e '.[embedded]'

baseline=examples/specbench_baseline.json
matrix=(
    --specbench-pairs=gemma3_int8,gemma3_pld
    --specbench-k=4
    --specbench-prompts=natural,code_python,repetitive,list_items
    --specbench-max-new-tokens=32
    --specbench-dtype=float32
    --specbench-min-rounds=1
    --specbench-max-rounds=1
    --specbench-gpu=cpu
    --benchmark-disable
    -p no:cacheprovider
)
if [ "${1:-}" = "--save" ]; then
    pytest bench_cases "${matrix[@]}" --specbench-save-baseline="$baseline"
else
    # Acceptance is gated: per case on the machine that wrote the baseline, per pair (pooled over its
    # cases) on another machine (the gate reads both fingerprints). Speed is not gated on a shared runner.
    pytest bench_cases "${matrix[@]}" --specbench-baseline="$baseline" --specbench-max-acceptance-drop=0.02
fi
