"""How much of a float32 pass's arithmetic can this CPU hide under its weight reads?

A loop reads a buffer the size of Gemma 3 270M's output head (262,144 x 640 float32, 671 MB) once, in order,
and does m multiply-adds per 64-byte line on registers, independent of what it read: the count a pass over
m rows of x does per line of weights, and nothing else (no loads of x, no sums across lanes). It runs with no
software prefetch and with one per line, 4 KB ahead, into level 1 or level 2. Beside it, in the same rounds:
the multiply-adds alone, and the few-rows kernel over a weight of the same shape at 1 and 9 rows.

Every figure is a ratio to the plain read in the same round (median and range over the kept rounds), so the
machine's drift cancels. Run alone, from the repository root, in the project's environment:
    python benchmarks/stream_overlap.py --rounds 11
"""

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils.cpp_extension import load_inline

from pytest_specbench.kernels import few_rows

SOURCE = r"""
#include <ATen/Parallel.h>
#include <torch/extension.h>

namespace {
constexpr int kLanes = 16, kChains = 12;  // floats per 64-byte line; independent multiply-add chains
typedef float lanes __attribute__((vector_size(kLanes * sizeof(float))));

// Lines [begin, end) of p, four a step: read them (unless !Read) and do 4 * M multiply-adds on registers.
template <int M, int Hint, bool Read>
float part(const float* p, int64_t begin, int64_t end, int64_t ahead) {
  lanes acc[kChains], sum0 = {}, sum1 = {};
  for (int j = 0; j < kChains; ++j) acc[j] = lanes{} + 0.001f * j;
  const lanes scale = lanes{} + 1.0000001f, shift = lanes{} + 1e-9f;
  for (int64_t line = begin; line + 4 <= end; line += 4) {
    const float* q = p + line * kLanes;
    if constexpr (Read) {
      if constexpr (Hint >= 0)
        for (int i = 0; i < 4; ++i) __builtin_prefetch(q + i * kLanes + ahead, 0, Hint);
      lanes v[4];
      __builtin_memcpy(v, q, sizeof(v));
      sum0 += v[0] + v[2];
      sum1 += v[1] + v[3];
    }
#pragma GCC unroll 64
    for (int f = 0; f < 4 * M; ++f) acc[f % kChains] = acc[f % kChains] * scale + shift;
  }
  lanes total = sum0 + sum1;
  for (int j = 0; j < kChains; ++j) total += acc[j];
  float out = 0;
  for (int i = 0; i < kLanes; ++i) out += total[i];
  return out;
}

template <int M, int Hint, bool Read>
double run(const float* p, int64_t lines, int64_t ahead) {
  std::vector<float> sinks(at::get_num_threads(), 0.f);
  at::parallel_for(0, lines, lines / at::get_num_threads() + 1, [&](int64_t b, int64_t e) {
    sinks[at::get_thread_num()] += part<M, Hint, Read>(p, b, e, ahead);
  });
  double s = 0;
  for (float v : sinks) s += v;
  return s;
}

template <int Hint, bool Read>
double by_rows(int64_t m, const float* p, int64_t lines, int64_t ahead) {
  switch (m) {
    case 0: return run<0, Hint, Read>(p, lines, ahead);
    case 1: return run<1, Hint, Read>(p, lines, ahead);
    case 2: return run<2, Hint, Read>(p, lines, ahead);
    case 3: return run<3, Hint, Read>(p, lines, ahead);
    case 5: return run<5, Hint, Read>(p, lines, ahead);
    case 9: return run<9, Hint, Read>(p, lines, ahead);
  }
  TORCH_CHECK(false, "m must be 0, 1, 2, 3, 5 or 9, got ", m);
}
}  // namespace

// hint: -1 no prefetch, 3 into level 1, 2 into level 2; read false: the multiply-adds alone.
double stream(const torch::Tensor& buffer, int64_t m, int64_t hint, int64_t ahead_bytes, bool read) {
  const float* p = buffer.data_ptr<float>();
  const int64_t lines = buffer.numel() / kLanes, ahead = ahead_bytes / 4;
  if (!read) return by_rows<-1, false>(m, p, lines, ahead);
  if (hint == 3) return by_rows<3, true>(m, p, lines, ahead);
  if (hint == 2) return by_rows<2, true>(m, p, lines, ahead);
  return by_rows<-1, true>(m, p, lines, ahead);
}
"""

HINTS = {"none": -1, "level 1": 3, "level 2": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="kept rounds (one more warms up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shape", default="262144,640", help="the weight's rows,columns (float32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows, columns = (int(v) for v in args.shape.split(","))
    extension = load_inline(
        "stream_overlap",
        cpp_sources=SOURCE,
        functions=["stream"],
        extra_cflags=[*few_rows.compile_flags(), "-ffp-contract=fast"],  # the kernel's flags; the FMAs fused
        extra_ldflags=["-fopenmp"],
    )
    kernel = few_rows.kernel()
    weight = torch.randn(rows, columns)
    x = {m: torch.randn(m, columns) for m in (1, 9)}

    variants: dict[str, Callable[[], object]] = {"read": lambda: extension.stream(weight, 0, -1, 0, True)}
    for hint_name, hint in HINTS.items():
        for m in (1, 2, 3, 5, 9):
            variants[f"read + {m} per line, prefetch {hint_name}"] = lambda m=m, hint=hint: extension.stream(
                weight, m, hint, 4096, True
            )
    variants["9 per line, no read"] = lambda: extension.stream(weight, 9, -1, 0, False)
    if kernel is not None:
        for m in (1, 9):
            variants[f"few-rows kernel, {m} rows"] = lambda m=m: kernel.linear(x[m], weight, None, "rows")

    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    with torch.inference_mode():
        for round_index in range(args.rounds + 1):
            for name in names if round_index % 2 else names[::-1]:
                start = time.perf_counter()
                variants[name]()
                if round_index:
                    times[name].append(time.perf_counter() - start)

    def ratios(name: str, over: str) -> str:
        """Median [range] of the rounds' ratios of one variant's time to another's."""
        each = sorted(a / b for a, b in zip(times[name], times[over]))
        return f"{statistics.median(each):.2f} [{each[0]:.2f}, {each[-1]:.2f}]"

    megabytes = weight.numel() * 4 / 1e6
    print(f"{rows} x {columns} float32 ({megabytes:.0f} MB), {args.threads} threads, {args.rounds} rounds")
    print(f"kernel: {few_rows.identity()}")
    print(f"read alone: {1e3 * statistics.median(times['read']):.1f} ms")
    for name in names[1:]:
        print(f"{name:42s} {1e3 * statistics.median(times[name]):7.1f} ms  of the read {ratios(name, 'read')}")

    pairs = [("read + 9 per line, prefetch level 2", "read + 1 per line, prefetch level 2")]
    if kernel is not None:
        pairs.append(("few-rows kernel, 9 rows", "few-rows kernel, 1 rows"))
    for nine, one in pairs:
        print(f"{nine} over 1: {ratios(nine, one)} (per-round ratios)")


if __name__ == "__main__":
    main()
