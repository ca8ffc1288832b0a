// The few-rows kernel's loops, y = x @ w.T + bias for a few rows of x, as templates for each part to instantiate
// (few_rows.h). Each block of w's rows is read from memory once and used for every row of x; each output is one
// dot product summed in float32 in a fixed order, whatever the row count or thread count.
#pragma once

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "few_rows.h"

namespace few_rows {

#if defined(__AVX512F__)
constexpr int kLanes = 16;  // floats in one vector register
#else
constexpr int kLanes = 8;  // AVX2: registers of 8 floats, and half as many of them
#endif
typedef float lanes __attribute__((vector_size(kLanes * sizeof(float))));
constexpr int64_t kPrefetchBytes = 512;  // of each weight row, fetched ahead of the bytes in use

inline lanes load(const float* p) {
  lanes v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

// bfloat16 is float32's upper half: widening is a shift, exact (one zero-extending load and a shift).
inline lanes load(const uint16_t* p) {
#if defined(__AVX512F__)
  const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
#else
  const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
#endif
  lanes v;
  __builtin_memcpy(&v, &w, sizeof(v));
  return v;
}

inline float widen(float v) { return v; }
inline float widen(uint16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

// Each output's lanes are summed by one tree of halving adds: the upper half of the lanes added to the lower,
// down to one lane (with 16 lanes: eight[i] = v[i] + v[i + 8], four[i] = eight[i] + eight[i + 4], then
// (four[0] + four[2]) + (four[1] + four[3])). A short weight row, a small model's width, ends in many of these.
// lane_sums(v, out) sums C vectors: with AVX-512, 16 at a time, each level's adds taking two vectors' halves
// (quarters, pairs) in one register. One at a time, the sums took about 15% of a 9-row block's time at Gemma's
// width (docs/results/2026-12-06-lane-sums.md).
#if defined(__AVX512F__)
inline void lane_sums16(const __m512* v, float* out) {
  __m512 eight[8], four[4], two[2];  // each level's sums, two vectors' (then four's, eight's) in one register
  for (int i = 0; i < 8; ++i)
    eight[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    four[i] = _mm512_add_ps(_mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], 0x88),
                            _mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)  // (four[0] + four[2]) and (four[1] + four[3])
    two[i] = _mm512_add_ps(_mm512_shuffle_ps(four[2 * i], four[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(four[2 * i], four[2 * i + 1], 0xEE));
  const __m512 one = _mm512_add_ps(_mm512_shuffle_ps(two[0], two[1], 0x88), _mm512_shuffle_ps(two[0], two[1], 0xDD));
  // one's lane 4q + i holds vector q + 4i's sum
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, one));
}

template <int C, typename Acc>
void lane_sums(const Acc* v, float* out) {
  constexpr int whole = C / 16 * 16;
  for (int i = 0; i < whole; i += 16) lane_sums16(reinterpret_cast<const __m512*>(v + i), out + i);
  if constexpr (C > whole) {
    __m512 rest[16];
    float sums[16];
    for (int i = 0; i < 16; ++i) rest[i] = whole + i < C ? (__m512)v[whole + i] : _mm512_setzero_ps();
    lane_sums16(rest, sums);
    for (int i = whole; i < C; ++i) out[i] = sums[i - whole];
  }
}
#else
inline float lane_sum(lanes v) {
#if defined(__clang__) || __GNUC__ >= 12
  typedef float lanes4 __attribute__((vector_size(16)));
  const lanes4 four = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  return (four[0] + four[2]) + (four[1] + four[3]);
#else  // the same tree, without the shuffles
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) v[i] += v[i + width];
  return v[0];
#endif
}

template <int C, typename Acc>
void lane_sums(const Acc* v, float* out) {
  for (int i = 0; i < C; ++i) out[i] = lane_sum((lanes)v[i]);
}
#endif

// A thread's outputs, staged kColumns to a row of x and stored 16 at a time (put16), as the tiles store
// theirs: a block of NB weight rows would otherwise make NB scalar stores to each of M rows of y. kColumns is
// a multiple of every block's weight rows (1, 2, 3, 4 or 6), so a run of blocks fills it whole. Where
// AVX-512 is not, the staged outputs are stored one at a time.
template <int M>
struct StagedOutputs {
  static constexpr int kColumns = 48;
  const Outputs& y;
  int64_t first = 0;  // the output staged in column 0
  int count = 0;      // columns staged
  alignas(64) float staged[M][kColumns];

  // staged is left unset (6 KB at 32 rows): each column is put before it is stored
  explicit StagedOutputs(const Outputs& outputs) : y(outputs) {}

  // Makes room for NB outputs from n: what is staged is stored first if they would not fit, or would not
  // continue it (blocks_of_rows gives each thread's blocks in order, but a column must never be guessed).
  void begin(int64_t n, int NB) {
    if (count && (count + NB > kColumns || n != first + count)) flush();
    if (!count) first = n;
    count += NB;
  }
  void put(int r, int64_t n, float sum) { staged[r][n - first] = sum; }
  void flush() {
    for (int r = 0; r < M; ++r) {
      int c = 0;
#if defined(__AVX512F__)
      for (; c + 16 <= count; c += 16) y.put16(r, first + c, _mm512_load_ps(staged[r] + c));
#endif
      for (; c < count; ++c) y.put(r, first + c, staged[r][c]);
    }
    count = 0;
  }
};

// One block's outputs, from its accumulators: each one's lanes summed, then the columns past the last whole
// step, in order; the outputs' stores add the bias and round.
template <int M, int NB, typename Acc, typename X, typename W>
void write_block(const Acc (&acc)[M][NB], const X* x, int64_t K, int64_t whole, const W* w, int64_t n,
                 StagedOutputs<M>& staged) {
  staged.begin(n, NB);
  float sums[M * NB];
  lane_sums<M * NB>(&acc[0][0], sums);
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < NB; ++j) {
      float sum = sums[r * NB + j];
      for (int64_t t = whole; t < K; ++t) sum += widen(x[r * K + t]) * widen(w[(n + j) * K + t]);
      staged.put(r, n + j, sum);
    }
}

constexpr int kChunkRows = 5;          // the fewest rows of float32 x taken in chunks of columns
constexpr int64_t kChunkBytes = 18432;  // of x, all its rows, per chunk at most
constexpr int kChunkBlocks = 8;         // blocks of weight rows that use one chunk in turn

// The most bytes of x (all its rows) taken whole, up to 14 rows: 5/6 of the level-1 data cache (a chosen
// margin for the weights' stream, not a measured one). x that fits streams faster whole than in chunks
// (docs/results/2026-12-06-whole-rows.md). 32 KB where the system does not say.
inline int64_t whole_x_bytes() {
  static const int64_t bytes = [] {
    long level1 = 0;
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    level1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#endif
    return int64_t(level1 > 0 ? level1 : 32768) * 5 / 6;
  }();
  return bytes;
}

// Whether M rows of x may run in chunks of columns: float32 x (bfloat16 x is half as wide) from kChunkRows rows,
// below which chunks cost more than they saved (docs/results/2026-12-05-column-chunks.md).
template <typename X, int M>
constexpr bool kTakesChunks = std::is_same_v<X, float> && M >= kChunkRows;

// The rows of x that one pass over a chunk takes: with AVX-512, up to 14 rows, blocks of two weight rows keep
// every row's accumulators in registers; past that, a block would have one weight row and the loads of x set
// the pace, so the rows run in passes of at most 9 (blocks of 3 weight rows; of one with AVX2) over each
// chunk, the block's weights then in the level-1 cache.
constexpr int kOnePassRows = 14, kPassRows = 9;

// The size of each of as few parts of at most `most` as `total` splits into, near equal, the last no longer.
constexpr int64_t near_equal_part(int64_t total, int64_t most) {
  const int64_t parts = std::max<int64_t>((total + most - 1) / most, 1);  // at least one: total may be 0
  return (total + parts - 1) / parts;
}

constexpr int rows_per_pass(int rows, bool chunked) {
  return !chunked || rows <= kOnePassRows ? rows : int(near_equal_part(rows, kPassRows));
}

// One block's rows [R0, M) over columns [k0, k1), R rows per pass; saved holds their accumulators.
template <int R0, int M, int R, int NB, typename Acc, typename Step>
inline void passes_over_chunk(Acc (&saved)[M][NB], bool fresh, int64_t n, int64_t k0, int64_t k1, int64_t step,
                              Step& add_step) {
  if constexpr (R0 < M) {
    constexpr int rows = std::min(R, M - R0);
    Acc acc[rows][NB];
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < NB; ++j) acc[r][j] = fresh ? Acc{} : saved[R0 + r][j];
    for (int64_t k = k0; k < k1; k += step) add_step.template operator()<R0, rows>(acc, n, k);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < NB; ++j) saved[R0 + r][j] = acc[r][j];
    passes_over_chunk<R0 + rows, M, R, NB>(saved, fresh, n, k0, k1, step, add_step);
  }
}

// Outputs [n0, n1) of all M rows, NB weight rows (a block) at a time: add_step<R0, R>(acc, n, k) adds one step
// of columns from k of the block at weight row n to rows [R0, R0 + R), finish(acc, n) writes its outputs. From
// kChunkRows rows of float32 x, x and the weights' stream crowd the level-1 cache (9 rows of 1536 floats are
// 55 KB), and loads of x from level 2 set the pace: the columns then run in chunks that kChunkBlocks blocks
// take in turn, each block's accumulators kept between chunks, so each chunk of x is loaded from level 2 once
// per kChunkBlocks blocks; x that fits the level-1 cache beside the stream stays whole, one block at a time.
// Same sums in the same order either way (docs/results/2026-12-05-column-chunks.md).
template <int M, int NB, typename Acc, typename X, typename Step, typename Finish>
void blocks_of_rows(int64_t whole, int64_t step, int64_t n0, int64_t n1, Step add_step, Finish finish) {
  constexpr bool chunked = kTakesChunks<X, M>;
  constexpr int group = chunked ? kChunkBlocks : 1;
  const bool takes_whole = M <= kOnePassRows && M * whole * int64_t(sizeof(X)) <= whole_x_bytes();
  // chunks of whole steps, near equal: the 1.5B's 9 rows take 3 of 512 columns (not 448, 448, 448 and 192),
  // its 14 rows 320, 320, 320, 320 and 256
  const int64_t most_steps = std::max<int64_t>(kChunkBytes / (M * int64_t(sizeof(X))) / step, 1);
  const int64_t chunk = chunked && !takes_whole ? near_equal_part(whole / step, most_steps) * step : whole;
  Acc saved[group][M][NB];
  const int64_t in_group = takes_whole ? 1 : group;  // whole x: one block's accumulators, not 8, share the cache
  for (int64_t first = n0; first + NB <= n1; first += in_group * NB) {
    const int blocks = int(std::min<int64_t>(in_group, (n1 - first) / NB));
    int64_t k0 = 0;
    do {
      const int64_t k1 = std::min(whole, k0 + chunk);
      for (int b = 0; b < blocks; ++b)
        passes_over_chunk<0, M, rows_per_pass(M, chunked), NB>(saved[b], k0 == 0, first + b * NB, k0, k1, step,
                                                                add_step);
      k0 = k1;
    } while (k0 < whole);
    for (int b = 0; b < blocks; ++b) finish(saved[b], first + b * NB);
  }
}

// x in float32. Hold: each vector of x is held in a register for the NB multiply-adds that use it, where the
// compiler would fold its load into each of them. On a CPU that loads one 512-bit vector a cycle (Zen 4) the
// loads then no longer set the pace of many rows in cache, but streaming some shapes from memory it ran
// slower: the engine times both (kernels/verify_forms.py) and keeps the faster. Same sums in the same order
// either way. Each step takes U vectors of every weight row (two for bfloat16; a cache line with AVX-512), with
// one prefetch per step, and fetches the same line of the weight rows about 4*NB*K bytes on into the level-2
// cache: the next block's rows start where a row's own prefetch does not reach, and at many rows the
// arithmetic leaves the stream idle there.
template <int M, int NB, bool Hold, typename W>
void weight_rows(const float* x, int64_t K, const W* w, int64_t n0, int64_t n1, const Outputs& y) {
  constexpr int64_t ahead = kPrefetchBytes / sizeof(W);
  constexpr int U = sizeof(float) / sizeof(W);
  constexpr int64_t step = kLanes * U;
  const int64_t whole = K / step * step;
  const auto add_step = [&]<int R0, int R>(lanes(&acc)[R][NB], int64_t n, int64_t k) {
    if constexpr (R0 == 0)  // the first pass over a chunk fetches ahead for all
      for (int j = 0; j < NB; ++j) {
        __builtin_prefetch(w + (n + j) * K + k + ahead, 0, 3);
        __builtin_prefetch(w + (n + U * NB + j) * K + k, 0, 2);
      }
    for (int u = 0; u < U; ++u) {
      lanes wv[NB];
      for (int j = 0; j < NB; ++j) wv[j] = load(w + (n + j) * K + k + u * kLanes);
      for (int r = 0; r < R; ++r) {
        lanes xv = load(x + (R0 + r) * K + k + u * kLanes);
        if constexpr (Hold) asm("" : "+v"(xv));
        for (int j = 0; j < NB; ++j) acc[r][j] += xv * wv[j];
      }
    }
  };
  StagedOutputs<M> staged{y};
  const auto finish = [&](const lanes(&acc)[M][NB], int64_t n) { write_block(acc, x, K, whole, w, n, staged); };
  blocks_of_rows<M, NB, lanes, float>(whole, step, n0, n1, add_step, finish);
  staged.flush();
}

// Enough weight rows per block to reuse each x load, few enough to keep the accumulators in registers
// (AVX-512 has 32 vector registers, AVX2 16).
#if defined(__AVX512F__)
constexpr int block_for(int rows) { return rows <= 4 ? 6 : rows <= 6 ? 4 : rows <= 9 ? 3 : rows <= 14 ? 2 : 1; }
#else
constexpr int block_for(int rows) { return rows <= 2 ? 4 : rows <= 4 ? 3 : rows <= 6 ? 2 : 1; }
#endif

#if defined(__AVX512BF16__)
// bfloat16 x and weights on a CPU with AVX512_BF16: one dot-product instruction takes 32 of each, products
// exact, sums in float32 (a pair summed before it joins the accumulator).
template <int M, int NB, bool Hold>  // Hold: no difference here, x is loaded once per row already
void weight_rows(const uint16_t* x, int64_t K, const uint16_t* w, int64_t n0, int64_t n1, const Outputs& y) {
  constexpr int64_t ahead = kPrefetchBytes / sizeof(uint16_t), step = 32;
  const int64_t whole = K / step * step;
  const auto add_step = [&]<int R0, int R>(__m512(&acc)[R][NB], int64_t n, int64_t k) {
    __m512bh wv[NB];
    for (int j = 0; j < NB; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(w + (n + j) * K + k);
      __builtin_prefetch(w + (n + j) * K + k + ahead, 0, 3);
      __builtin_prefetch(w + (n + 2 * NB + j) * K + k, 0, 2);
    }
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + (R0 + r) * K + k);
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
    }
  };
  StagedOutputs<M> staged{y};
  const auto finish = [&](const __m512(&acc)[M][NB], int64_t n) { write_block(acc, x, K, whole, w, n, staged); };
  blocks_of_rows<M, NB, __m512, uint16_t>(whole, step, n0, n1, add_step, finish);
  staged.flush();
}
#endif

template <int M, bool Hold, typename X, typename W>
void all_outputs(const X* x, int64_t K, const W* w, const Outputs& y) {
  constexpr int NB = block_for(rows_per_pass(M, kTakesChunks<X, M>));
  const int64_t blocks = y.N / NB;
  at::parallel_for(
      0, blocks, 16, [&](int64_t b0, int64_t b1) { weight_rows<M, NB, Hold>(x, K, w, b0 * NB, b1 * NB, y); });
  if (blocks * NB < y.N) weight_rows<M, 1, Hold>(x, K, w, blocks * NB, y.N, y);
}

template <int M, bool Hold, typename X, typename W>
void dispatch(int64_t rows, const X* x, int64_t K, const W* w, const Outputs& y) {
  if constexpr (M <= kMaxRows) {
    if (rows == M) return all_outputs<M, Hold>(x, K, w, y);
    return dispatch<M + 1, Hold>(rows, x, K, w, y);
  }
}

}  // namespace few_rows
