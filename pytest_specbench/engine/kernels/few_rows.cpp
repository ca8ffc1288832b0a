// y = x @ w.T + bias for a few rows of x (float32, CPU): each block of w's rows is read from memory once
// and used for every row of x, so a pass over a few rows streams the weights about as fast as a pass over
// one. Each output is one dot product summed in a fixed order, whatever the row count or thread count.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;  // floats in one vector register
#else
constexpr int kLanes = 8;  // AVX2: registers of 8 floats, and half as many of them
#endif
typedef float lanes __attribute__((vector_size(kLanes * sizeof(float))));
constexpr int64_t kPrefetchAhead = 128;  // floats of each weight row fetched ahead of the one in use
constexpr int kMaxRows = 32;

inline lanes load(const float* p) {
  lanes v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

// A tree of halving adds: a short weight row (a small model's width) ends in many of these sums.
inline float lane_sum(lanes v) {
#if defined(__clang__) || __GNUC__ >= 12
  typedef float lanes4 __attribute__((vector_size(16)));
#if defined(__AVX512F__)
  typedef float lanes8 __attribute__((vector_size(32)));
  const lanes8 eight = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                       __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
  const lanes eight = v;
#endif
  const lanes4 four = __builtin_shufflevector(eight, eight, 0, 1, 2, 3) + __builtin_shufflevector(eight, eight, 4, 5, 6, 7);
  return (four[0] + four[2]) + (four[1] + four[3]);
#else
  float sum = 0;
  for (int i = 0; i < kLanes; ++i) sum += v[i];
  return sum;
#endif
}

// Outputs [n0, n1) of all M rows, NB weight rows at a time.
template <int M, int NB>
void weight_rows(const float* x, int64_t K, const float* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  const int64_t whole = K / kLanes * kLanes;
  for (int64_t n = n0; n + NB <= n1; n += NB) {
    lanes acc[M][NB];
    for (int r = 0; r < M; ++r)
      for (int j = 0; j < NB; ++j) acc[r][j] = lanes{};
    for (int64_t k = 0; k < whole; k += kLanes) {
      lanes wv[NB];
      for (int j = 0; j < NB; ++j) {
        wv[j] = load(w + (n + j) * K + k);
        __builtin_prefetch(w + (n + j) * K + k + kPrefetchAhead, 0, 3);
      }
      for (int r = 0; r < M; ++r) {
        const lanes xv = load(x + r * K + k);
        for (int j = 0; j < NB; ++j) acc[r][j] += xv * wv[j];
      }
    }
    for (int r = 0; r < M; ++r)
      for (int j = 0; j < NB; ++j) {
        float sum = lane_sum(acc[r][j]);
        for (int64_t t = whole; t < K; ++t) sum += x[r * K + t] * w[(n + j) * K + t];
        y[r * N + n + j] = sum;
      }
  }
}

// Enough weight rows per block to reuse each x load, few enough to keep the accumulators in registers
// (AVX-512 has 32 vector registers, AVX2 16).
#if defined(__AVX512F__)
constexpr int block_for(int rows) { return rows <= 4 ? 6 : rows <= 9 ? 4 : rows <= 14 ? 2 : 1; }
#else
constexpr int block_for(int rows) { return rows <= 2 ? 4 : rows <= 4 ? 3 : rows <= 6 ? 2 : 1; }
#endif

template <int M>
void all_outputs(const float* x, int64_t K, const float* w, int64_t N, float* y) {
  constexpr int NB = block_for(M);
  const int64_t blocks = N / NB;
  at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) { weight_rows<M, NB>(x, K, w, b0 * NB, b1 * NB, y, N); });
  if (blocks * NB < N) weight_rows<M, 1>(x, K, w, blocks * NB, N, y, N);
}

template <int M>
void dispatch(int64_t rows, const float* x, int64_t K, const float* w, int64_t N, float* y) {
  if constexpr (M <= kMaxRows) {
    if (rows == M) return all_outputs<M>(x, K, w, N, y);
    return dispatch<M + 1>(rows, x, K, w, N, y);
  }
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32, "float32 only");
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "x's last dimension must be weight's second");
  const torch::Tensor rows_x = x.reshape({-1, x.size(-1)}).contiguous();
  const torch::Tensor w = weight.contiguous();
  const int64_t rows = rows_x.size(0), K = rows_x.size(1), N = w.size(0);
  TORCH_CHECK(rows >= 1 && rows <= kMaxRows, "1 to 32 rows, got ", rows);
  torch::Tensor y = torch::empty({rows, N}, rows_x.options());
  dispatch<1>(rows, rows_x.data_ptr<float>(), K, w.data_ptr<float>(), N, y.data_ptr<float>());
  if (bias.has_value() && bias->defined()) y.add_(*bias);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = N;
  return y.reshape(shape);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, "x @ weight.T + bias for 1 to 32 rows of x (float32, CPU)");
  m.attr("max_rows") = kMaxRows;
}
