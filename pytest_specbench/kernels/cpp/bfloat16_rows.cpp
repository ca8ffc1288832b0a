// bfloat16 weights: by AVX512_BF16's dot products where the build has them (x in bfloat16), else widened to
// float32 in registers (x in float32). The binding calls the one this build has.
#include <c10/util/Exception.h>

#include "loops.h"

namespace few_rows {

#if defined(__AVX512BF16__)
void bfloat16_rows(int64_t rows, const uint16_t* x, int64_t K, const uint16_t* w, const Outputs& y) {
  dispatch<1, false>(rows, x, K, w, y);
}
void float_rows(bool, int64_t, const float*, int64_t, const uint16_t*, const Outputs&) {
  TORCH_CHECK(false, "a build with AVX512_BF16 takes bfloat16 x to bfloat16 weights");
}
#else
void float_rows(bool hold, int64_t rows, const float* x, int64_t K, const uint16_t* w, const Outputs& y) {
  if (hold) return dispatch<1, true>(rows, x, K, w, y);
  dispatch<1, false>(rows, x, K, w, y);
}
void bfloat16_rows(int64_t, const uint16_t*, int64_t, const uint16_t*, const Outputs&) {
  TORCH_CHECK(false, "bfloat16 x takes a build with AVX512_BF16");
}
#endif

}  // namespace few_rows
