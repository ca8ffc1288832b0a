"""The few-rows kernel as it is against its source at an earlier commit, alternated in one process.

Both builds run on the same weights of each shape (float32 or bfloat16), at each row count, in alternating
order over the rounds (the first round warms up and is not kept); each shape has as many copies as fit in 800 MB (at
least one), taken in turn, so that every call reads its weights from memory; with --huge-pages moved into 2 MB
pages as the engine moves a model's (those of 2 MB or more, where the system gives them; it prints what it
got). Prints each build's median time and the per-round ratio, now over then (median and range). The two
must give equal results: the script stops if they do not.
Run alone, from the repository root, in the project's environment:
    python benchmarks/kernel_sources.py 90ef0e0 --shapes 262144x640,2048x640 --rows 1,9
    python benchmarks/kernel_sources.py b78c935 --dtype bfloat16 --variant tiles --rows 1,9 --huge-pages
"""

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from pytest_specbench.kernels import few_rows
from pytest_specbench.models.weight_pages import into_huge_pages


def build(sources: list[Path], label: str):
    flags = few_rows.compile_flags()
    return load(f"kernel_sources_{label}", [str(s) for s in sources], extra_cflags=flags, extra_ldflags=["-fopenmp"])


#: where the kernel's sources were before the kernels had a layer of their own
EARLIER_FOLDER = Path("pytest_specbench/engine/kernels")


def paged_as_the_engine_does(shape: str, copies: list[torch.Tensor]) -> list[torch.Tensor]:
    """The copies moved by the engine's own rule (``into_huge_pages``), and what the system gave, printed."""
    holder = torch.nn.Module()
    for index, weight in enumerate(copies):
        holder.register_buffer(f"copy{index}", weight)
    print(f"{shape:>11s}: {into_huge_pages(holder)}")
    return [getattr(holder, f"copy{index}") for index in range(len(copies))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the earlier commit whose kernel source to build")
    parser.add_argument("--shapes", default="262144x640", help="weights as OUTPUTSxINPUTS, comma-separated")
    parser.add_argument("--rows", default="1,9", help="row counts of x, comma-separated")
    parser.add_argument("--rounds", type=int, default=9, help="kept rounds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", default="rows", choices=["rows", "held", "tiles"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--huge-pages", action="store_true", help="weights into 2 MB pages as the engine moves a model's"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if args.variant == "tiles" and dtype != torch.bfloat16:
        parser.error("--variant tiles takes --dtype bfloat16")

    current = few_rows.SOURCES[0].parent.relative_to(Path.cwd())
    git = ["git", "-C", str(Path.cwd())]
    commit = subprocess.run([*git, "rev-parse", "--short", args.commit], capture_output=True, text=True, check=True)
    then = commit.stdout.strip()
    now = subprocess.run([*git, "describe", "--always", "--dirty"], capture_output=True, text=True, check=True)
    for kernels in (current, EARLIER_FOLDER):  # the folder moved from the engine to the kernels' layer
        listed = subprocess.run([*git, "ls-tree", "--name-only", f"{then}:{kernels}"], capture_output=True, text=True)
        if listed.returncode == 0:
            break
    with tempfile.TemporaryDirectory() as folder:
        then_sources = []
        for name in listed.stdout.split():  # the kernel's files then: one source, or a binding and its parts
            text = subprocess.run(
                [*git, "show", f"{then}:{kernels}/{name}"], capture_output=True, text=True, check=True
            )
            (Path(folder) / name).write_text(text.stdout)
            if name.endswith(".cpp"):
                then_sources.append(Path(folder) / name)
        builds = {"then": build(then_sources, then), "now": build(list(few_rows.SOURCES), "now")}

    print(
        f"{args.threads} threads, {args.dtype}, variant {args.variant}, {args.rounds} rounds, "
        f"{'2 MB pages as the engine asks for them' if args.huge_pages else 'pages as allocated'}; "
        f"then {then}, now {now.stdout.strip()}"
    )
    for shape in args.shapes.split(","):
        outputs, inputs = (int(v) for v in shape.split("x"))
        size = dtype.itemsize
        copies = [
            torch.randn(outputs, inputs).to(dtype) for _ in range(max(1, int(800e6 // (outputs * inputs * size))))
        ]
        if args.huge_pages:
            copies = paged_as_the_engine_does(shape, copies)
        for m in (int(v) for v in args.rows.split(",")):
            x = torch.randn(m, inputs).to(dtype)
            results = [b.linear(x, copies[0], None, args.variant) for b in builds.values()]
            if not torch.equal(*results):
                raise SystemExit(f"{shape} at {m} rows: the two builds' results differ")
            times = {name: [] for name in builds}
            for round_index in range(args.rounds + 1):
                order = list(builds) if round_index % 2 else list(builds)[::-1]
                for name in order:
                    start = time.perf_counter()
                    for weight in copies:
                        builds[name].linear(x, weight, None, args.variant)
                    if round_index:
                        times[name].append((time.perf_counter() - start) / len(copies))
            ratios = sorted(n / t for n, t in zip(times["now"], times["then"]))
            print(
                f"{shape:>11s} m={m:2d}: then {1e3 * statistics.median(times['then']):8.3f} ms, "
                f"now {1e3 * statistics.median(times['now']):8.3f} ms, now/then {statistics.median(ratios):.2f} "
                f"[{ratios[0]:.2f}, {ratios[-1]:.2f}]"
            )


if __name__ == "__main__":
    main()
