// The tiles variant: bfloat16 rows through AMX tiles, where the build and the CPU have them.
#include <c10/util/Exception.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

#include "loops.h"

namespace few_rows {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
// bfloat16 on a CPU with AMX: one tile multiply takes 16 weight rows by 32 of their columns, read in place a
// row's stride apart, against the same 32 columns of every row of x, repacked once as pairs. Each output is
// summed in float32 in AMX's fixed order, whatever the row or thread count (denormal inputs count as zero).
// One block of 16 weight rows at a time: two or four at once streamed slower (docs/results/2026-12-05-amx-tiles.md).
constexpr bool kTiles = true;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Linux hands a process AMX's tile state only once it asks (ARCH_REQ_XCOMP_PERM for XTILEDATA).
constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
static bool tiles_permitted() {
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
static void tile_rows(const uint16_t* pairs, const uint16_t* x, int M, int64_t K, const uint16_t* w, int64_t n0,
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
static void remaining_rows(const uint16_t* x, int M, int64_t K, const uint16_t* w, int64_t n0, const Outputs& y) {
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
void tiles_outputs(int64_t, const uint16_t*, int64_t, const uint16_t*, const Outputs&) {
  TORCH_CHECK(false, "the tiles form is not in this build");
}
#endif

bool tiles_built() { return kTiles; }

}  // namespace few_rows
