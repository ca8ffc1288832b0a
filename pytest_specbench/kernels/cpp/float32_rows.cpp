// float32 x against float32 weights: the loops' instances for 1 to kMaxRows rows, x folded or held.
#include "loops.h"

namespace few_rows {

void float_rows(bool hold, int64_t rows, const float* x, int64_t K, const float* w, const Outputs& y) {
  if (hold) return dispatch<1, true>(rows, x, K, w, y);
  dispatch<1, false>(rows, x, K, w, y);
}

}  // namespace few_rows
