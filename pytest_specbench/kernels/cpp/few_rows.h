// The few-rows kernel's parts as the binding (few_rows.cpp) calls them. The loops (loops.h) compile in files of
// their own, float32 weights, bfloat16 weights and AMX tiles, so that a build compiles them on every core beside
// the binding, whose torch headers alone take about 25 s.
#pragma once

#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cstdint>

namespace few_rows {

constexpr int kMaxRows = 32;   // rows of x one call takes
constexpr int kTileRows = 16;  // weight rows per AMX tile, and the most rows of x the tiles take

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

// float32 x against float32 weights (float32_rows.cpp), or against bfloat16 weights widened in registers where
// the CPU has no AVX512_BF16 (bfloat16_rows.cpp); hold: each vector of x held in a register (same sums).
void float_rows(bool hold, int64_t rows, const float* x, int64_t K, const float* w, const Outputs& y);
void float_rows(bool hold, int64_t rows, const float* x, int64_t K, const uint16_t* w, const Outputs& y);
// bfloat16 x and weights by AVX512_BF16's dot products, in a build for a CPU that has them (bfloat16_rows.cpp).
void bfloat16_rows(int64_t rows, const uint16_t* x, int64_t K, const uint16_t* w, const Outputs& y);

// AMX tiles (tiles.cpp): whether this build has them, whether they run here (built, and the system lets this
// process use them), and bfloat16 rows through them (1 to kTileRows rows; only where available).
bool tiles_built();
bool tiles_available();
void tiles_outputs(int64_t rows, const uint16_t* x, int64_t K, const uint16_t* w, const Outputs& y);

}  // namespace few_rows
