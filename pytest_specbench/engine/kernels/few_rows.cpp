// y = x @ w.T + bias for a few rows of x (float32 or bfloat16, CPU): each block of w's rows is read from
// memory once and used for every row of x, so a pass over one row or a few streams the weights at about
// the machine's read bandwidth. Each output is one dot product summed in float32 in a fixed order,
// whatever the row count or thread count. bfloat16 reads half the bytes: with AVX512_BF16 its pairs multiply
// in one dot-product instruction (denormal inputs count as zero); elsewhere they widen to float32 in
// registers (a shift: exact). Where the CPU has AMX, the "tiles" variant multiplies bfloat16 in tiles: many
// rows then cost little more than one, where the dot products are bound by their arithmetic.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;  // floats in one vector register
#else
constexpr int kLanes = 8;  // AVX2: registers of 8 floats, and half as many of them
#endif
typedef float lanes __attribute__((vector_size(kLanes * sizeof(float))));
constexpr int64_t kPrefetchBytes = 512;  // of each weight row, fetched ahead of the bytes in use
constexpr int kMaxRows = 32;

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

// Where the outputs go, row r's at r * N: float32, or bfloat16 rounded once from the float32 sum by c10's
// rounding (nearest even; NaN as 0x7FC0, where torch's vector conversion writes 0xFFFF), so a bfloat16 pass
// neither writes float32 outputs nor reads them again to convert them (9 rows of Gemma's head: 9.4 MB). The
// bias, in float32, joins the sum before it is rounded.
struct Outputs {
  float* f32;
  uint16_t* bf16;
  const float* bias;
  int64_t N;
  void put(int64_t r, int64_t n, float sum) const {
    if (bias) sum += bias[n];
    if (bf16) bf16[r * N + n] = c10::BFloat16(sum).x;
    else f32[r * N + n] = sum;
  }
#if defined(__AVX512F__)
  // 16 outputs of row r from n on, rounded as put rounds (c10's round_to_nearest_even; NaN as 0x7FC0): one
  // store, where 16 scalar ones to 9 rows cost a 9-row tile pass over Gemma's head 15% of its time.
  void put16(int64_t r, int64_t n, __m512 sums) const {
    if (bias) sums = _mm512_add_ps(sums, _mm512_loadu_ps(bias + n));
    if (!bf16) return _mm512_storeu_ps(f32 + r * N + n, sums);
    const __m512i bits = _mm512_castps_si512(sums);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
    rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(sums, sums, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bf16 + r * N + n), _mm512_cvtepi32_epi16(rounded));
  }
#endif
};

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
int64_t whole_x_bytes() {
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
// slower: the engine times both (engine/verify_forms.py) and keeps the faster. Same sums in the same order
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

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
// bfloat16 on a CPU with AMX: one tile multiply takes 16 weight rows by 32 of their columns, read in place a
// row's stride apart, against the same 32 columns of every row of x, repacked once as pairs. Each output is
// summed in float32 in AMX's fixed order, whatever the row or thread count (denormal inputs count as zero).
// One block of 16 weight rows at a time: two or four at once streamed slower (docs/results/2026-12-05-amx-tiles.md).
constexpr bool kTiles = true;
constexpr int kTileRows = 16;  // weight rows per tile, and the most rows of x

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Linux hands a process AMX's tile state only once it asks (ARCH_REQ_XCOMP_PERM for XTILEDATA).
constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
bool tiles_permitted() {
  static const bool permitted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return permitted;
}

// Whether the tiles variant runs here: built for AMX (this branch), and the system lets this process use its tiles.
bool tiles_available() { return tiles_permitted(); }

// The 16 x 16 floats at o (row i at o + 16 * i) as columns: t[c] lane i = o[16 * i + c], by unpacks and lane
// shuffles: faster than a gather per row of x (docs/results/2026-12-06-tile-outputs.md).
inline void transpose16(const float* o, __m512 (&t)[16]) {
  __m512 a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    const __m512 lo = _mm512_load_ps(o + 16 * i), hi = _mm512_load_ps(o + 16 * (i + 1));
    a[i] = _mm512_unpacklo_ps(lo, hi), a[i + 1] = _mm512_unpackhi_ps(lo, hi);  // pairs of rows i, i + 1
  }
  for (int g = 0; g < 16; g += 4) {  // fours of rows g to g + 3, one column per 128-bit lane
    const __m512d t0 = _mm512_castps_pd(a[g]), t1 = _mm512_castps_pd(a[g + 1]);
    const __m512d t2 = _mm512_castps_pd(a[g + 2]), t3 = _mm512_castps_pd(a[g + 3]);
    b[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)), b[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    b[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)), b[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int c = 0; c < 4; ++c) {  // column 4q + c: lane q of b[c], b[4 + c], b[8 + c], b[12 + c]
    const __m512 x01 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44), x23 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xEE);
    const __m512 y01 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
    const __m512 y23 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(x01, y01, 0x88), t[4 + c] = _mm512_shuffle_f32x4(x01, y01, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(x23, y23, 0x88), t[12 + c] = _mm512_shuffle_f32x4(x23, y23, 0xDD);
  }
}

// Outputs [n0, n1) of all M rows: tile 0 accumulates 16 weight rows by M rows of x; steps of 32 columns take
// the weights and the pairs of x into tiles 1 and 2, and 3 and 4, in turn: tiles are not renamed, so with one
// pair the next step's loads waited on the multiply before them (docs/results/2026-12-06-paired-tiles.md).
// Same sums in the same order. Each weight row's line is fetched kPrefetchBytes ahead, and the same line of
// the next block's rows into the level-2 cache, as in weight_rows.
void tile_rows(const uint16_t* pairs, const uint16_t* x, int M, int64_t K, const uint16_t* w, int64_t n0,
               int64_t n1, const Outputs& y) {
  constexpr int64_t ahead = kPrefetchBytes / sizeof(uint16_t);
  const int64_t whole = K / 32 * 32;
  TileConfig config;
  config.rows[0] = kTileRows, config.colsb[0] = M * 4;
  config.rows[1] = kTileRows, config.colsb[1] = 64;
  config.rows[2] = 16, config.colsb[2] = M * 4;
  config.rows[3] = kTileRows, config.colsb[3] = 64;
  config.rows[4] = 16, config.colsb[4] = M * 4;
  _tile_loadconfig(&config);
  // A block's outputs are read after the next block's tile store: read right after their own, the loads waited for it.
  alignas(64) float out[2][kTileRows * kTileRows] = {};  // weight row i's outputs at [16 * i], one per row of x
  const auto put_block = [&](float* o, int64_t n) {
    if (whole < K)
      for (int i = 0; i < kTileRows; ++i)
        for (int r = 0; r < M; ++r)
          for (int64_t c = whole; c < K; ++c) o[i * kTileRows + r] += widen(x[r * K + c]) * widen(w[(n + i) * K + c]);
    __m512 sums[kTileRows];
    transpose16(o, sums);
    for (int r = 0; r < M; ++r) y.put16(r, n, sums[r]);
  };
  int64_t held = -1;  // the first weight row of the block whose outputs wait in out[half ^ 1]
  int half = 0;
  for (int64_t n = n0; n + kTileRows <= n1; n += kTileRows) {
    _tile_zero(0);
    const uint16_t* block = w + n * K;
    const auto fetch = [&](int64_t k) {
      for (int j = 0; j < kTileRows; ++j) {
        __builtin_prefetch(block + j * K + k + ahead, 0, 3);
        __builtin_prefetch(block + (kTileRows + j) * K + k, 0, 2);
      }
    };
    int64_t k = 0;
    for (; k + 64 <= whole; k += 64) {
      fetch(k);
      fetch(k + 32);
      _tile_loadd(2, pairs + k * M, M * 4);
      _tile_loadd(1, block + k, K * 2);
      _tile_loadd(4, pairs + (k + 32) * M, M * 4);
      _tile_loadd(3, block + k + 32, K * 2);
      _tile_dpbf16ps(0, 1, 2);
      _tile_dpbf16ps(0, 3, 4);
    }
    if (k < whole) {
      fetch(k);
      _tile_loadd(2, pairs + k * M, M * 4);
      _tile_loadd(1, block + k, K * 2);
      _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, out[half], kTileRows * 4);
    if (held >= 0) put_block(out[half ^ 1], held);
    held = n, half ^= 1;
  }
  if (held >= 0) put_block(out[half ^ 1], held);
  _tile_release();
}

// The last N % 16 weight rows: dot products in float32, in order.
void remaining_rows(const uint16_t* x, int M, int64_t K, const uint16_t* w, int64_t n0, const Outputs& y) {
  for (int64_t n = n0; n < y.N; ++n)
    for (int r = 0; r < M; ++r) {
      float sum = 0;
      for (int64_t c = 0; c < K; ++c) sum += widen(x[r * K + c]) * widen(w[n * K + c]);
      y.put(r, n, sum);
    }
}

void tiles_outputs(int64_t rows, const uint16_t* x, int64_t K, const uint16_t* w, const Outputs& y) {
  TORCH_CHECK(rows <= kTileRows, "the tiles form takes 1 to 16 rows, got ", rows);
  const int M = int(rows);
  const int64_t whole = K / 32 * 32;
  // x as pairs: pair p of row r at [p][r], as a tile multiply takes its second operand (a loop: torch's copy
  // of the transposed view cost more than a pass at 16 rows).
  std::vector<uint32_t> pairs(whole / 2 * M);
  for (int r = 0; r < M; ++r)
    for (int64_t p = 0; p < whole / 2; ++p) __builtin_memcpy(&pairs[p * M + r], x + r * K + 2 * p, 4);
  const auto* p16 = reinterpret_cast<const uint16_t*>(pairs.data());
  const int64_t blocks = y.N / kTileRows;
  at::parallel_for(0, blocks, 8, [&](int64_t b0, int64_t b1) {
    tile_rows(p16, x, M, K, w, b0 * kTileRows, b1 * kTileRows, y);
  });
  remaining_rows(x, M, K, w, blocks * kTileRows, y);
}
#else
constexpr bool kTiles = false;
bool tiles_available() { return false; }
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

template <typename W>
void float_rows(bool hold, int64_t rows, const float* x, int64_t K, const W* w, const Outputs& y) {
  if (hold) return dispatch<1, true>(rows, x, K, w, y);
  dispatch<1, false>(rows, x, K, w, y);
}

// variant: "rows" (AVX-512 or AVX2), "held" (float32 x held in registers) or "tiles" (bfloat16 in AMX tiles).
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const c10::optional<torch::Tensor>& bias,
                     const std::string& variant) {
  const auto dtype = weight.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16, "float32 or bfloat16 weights only");
  TORCH_CHECK(x.scalar_type() == dtype, "x must have the weight's dtype");
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "x's last dimension must be weight's second");
  TORCH_CHECK(variant == "rows" || variant == "held" || variant == "tiles", "variant must be rows, held or tiles, got ",
              variant);
  TORCH_CHECK(variant != "tiles" || (dtype == torch::kBFloat16 && tiles_available()),
              "the tiles variant takes bfloat16 on a CPU with AMX, in a build for it, where the system lets this "
              "process use its tiles");
  const torch::Tensor w = weight.contiguous();
  const int64_t rows = x.numel() / x.size(-1), K = x.size(-1), N = w.size(0);
  TORCH_CHECK(rows >= 1 && rows <= kMaxRows, "1 to 32 rows, got ", rows);
  // One row runs as two copies of it: the two-row loop streams the weights faster than the one-row loop does
  // once the next block is prefetched, and the copy costs nothing beside the weights. Same sums, same order.
  const int64_t run_rows = rows == 1 && variant != "tiles" ? 2 : rows;
  const torch::Tensor x_rows = x.reshape({rows, K}).expand({run_rows, K});
  const bool has_bias = bias.has_value() && bias->defined();
  TORCH_CHECK(!has_bias || (bias->dim() == 1 && bias->size(0) == N && bias->device().is_cpu()),
              "bias must be a CPU vector of one value per output (", N, ")");
  const torch::Tensor bias32 = has_bias ? bias->to(torch::kFloat32).contiguous() : torch::Tensor();
  torch::Tensor y = torch::empty({run_rows, N}, x.options());
  const bool f32 = dtype == torch::kFloat32;
  const Outputs out{f32 ? y.data_ptr<float>() : nullptr,
                    f32 ? nullptr : reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>()),
                    has_bias ? bias32.data_ptr<float>() : nullptr, N};
  if (f32) {
    const torch::Tensor rows_x = x_rows.contiguous();
    float_rows(variant == "held", run_rows, rows_x.data_ptr<float>(), K, w.data_ptr<float>(), out);
  } else {
    const auto* w16 = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
#if defined(__AVX512BF16__)
    const torch::Tensor rows_x = x_rows.contiguous();
    const auto* x16 = reinterpret_cast<const uint16_t*>(rows_x.data_ptr<at::BFloat16>());
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
    if (variant == "tiles") tiles_outputs(run_rows, x16, K, w16, out);
    else
#endif
      dispatch<1, false>(run_rows, x16, K, w16, out);
#else
    // x is a few rows: widened to float32 once; the sums run in float32 and round once at the end.
    const torch::Tensor rows_x = x_rows.to(torch::kFloat32).contiguous();
    float_rows(variant == "held", run_rows, rows_x.data_ptr<float>(), K, w16, out);
#endif
  }
  if (run_rows != rows) y = y.narrow(0, 0, rows);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = N;
  return y.reshape(shape);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, "x @ weight.T + bias for 1 to 32 rows of x (float32 or bfloat16, CPU); variant: rows, held "
        "(float32 x held in registers: same results) or tiles (bfloat16 in AMX tiles, 1 to 16 rows)",
        pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("variant") = "rows");
  m.def("tiles_available", &tiles_available, "whether the tiles variant runs here (AMX built and permitted)");
  m.attr("max_rows") = kMaxRows;
  m.attr("tile_rows") = 16;
  m.attr("tiles_built") = kTiles;
}
