// y = x @ w.T + bias for a few rows of x (float32 or bfloat16, CPU): each block of w's rows is read from
// memory once and used for every row of x, so a pass over one row or a few streams the weights at about
// the machine's read bandwidth. Each output is one dot product summed in float32 in a fixed order,
// whatever the row count or thread count. bfloat16 reads half the bytes: with AVX512_BF16 its pairs multiply
// in one dot-product instruction (denormal inputs count as zero); elsewhere they widen to float32 in
// registers (a shift: exact). Where the CPU has AMX, the "tiles" variant multiplies bfloat16 in tiles: many
// rows then cost little more than one, where the dot products are bound by their arithmetic.
//
// This file is the binding: tensors in, checked, to the loops' parts (few_rows.h) compiled apart.
#include <torch/extension.h>

#include <string>
#include <vector>

#include "few_rows.h"

namespace {

using namespace few_rows;

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
    if (variant == "tiles") tiles_outputs(run_rows, x16, K, w16, out);
    else bfloat16_rows(run_rows, x16, K, w16, out);
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
  m.attr("tile_rows") = kTileRows;
  m.attr("tiles_built") = tiles_built();
}
