// An experiment, not shipped: the few-rows product over weights repacked into panels of 32 output columns
// ([N/32][K][32], bfloat16 as [N/32][K/2][32][2]), x broadcast one element at a time. Each panel is one
// contiguous stream. AVX-512 with AVX512_BF16 only. Timed by benchmarks/weight_layouts.py.
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <immintrin.h>
#include <cstdint>
#include <algorithm>
namespace {
typedef float lanes __attribute__((vector_size(64)));
constexpr int64_t kPanel = 32;  // output columns per packed panel (two vectors)
inline lanes load(const float* p) { lanes v; __builtin_memcpy(&v, p, 64); return v; }
inline void store(float* p, lanes v) { __builtin_memcpy(p, &v, 64); }

// w [N, K] -> panels [ceil(N/32)][K][32], zero columns past N
torch::Tensor pack_f32(const torch::Tensor& w) {
  const int64_t N = w.size(0), K = w.size(1), P = (N + kPanel - 1) / kPanel;
  auto wp = torch::zeros({P * kPanel, K}, w.options());
  wp.narrow(0, 0, N).copy_(w);
  return wp.view({P, kPanel, K}).transpose(1, 2).contiguous();
}
// bf16: panels [P][K/2][32][2] (pairs of k interleaved per column), K padded to even
torch::Tensor pack_bf16(const torch::Tensor& w) {
  const int64_t N = w.size(0), K = w.size(1), P = (N + kPanel - 1) / kPanel, K2 = (K + 1) / 2;
  auto wp = torch::zeros({P * kPanel, K2 * 2}, w.options());
  wp.narrow(0, 0, N).narrow(1, 0, K).copy_(w);
  return wp.view({P, kPanel, K2, 2}).permute({0, 2, 1, 3}).contiguous();
}

template <int M, int PG>
void panels_f32(const float* xT, int64_t K, const float* wp, int64_t p0, int64_t p1, float* y, int64_t Np) {
  for (int64_t p = p0; p < p1; p += PG) {
    lanes acc[M][PG][2];
    for (int r = 0; r < M; ++r) for (int g = 0; g < PG; ++g) acc[r][g][0] = acc[r][g][1] = lanes{};
    const float* base[PG];
    for (int g = 0; g < PG; ++g) base[g] = wp + (p + g) * K * kPanel;
    for (int64_t k = 0; k < K; ++k) {
      lanes wv[PG][2];
      for (int g = 0; g < PG; ++g) {
        __builtin_prefetch(base[g] + (k + 16) * kPanel, 0, 3);
        __builtin_prefetch(base[g] + (k + 16) * kPanel + 16, 0, 3);
        wv[g][0] = load(base[g] + k * kPanel); wv[g][1] = load(base[g] + k * kPanel + 16);
      }
      for (int r = 0; r < M; ++r) {
        const lanes xb = lanes{} + xT[k * M + r];
        for (int g = 0; g < PG; ++g) { acc[r][g][0] += xb * wv[g][0]; acc[r][g][1] += xb * wv[g][1]; }
      }
    }
    for (int r = 0; r < M; ++r) for (int g = 0; g < PG; ++g) {
      store(y + r * Np + (p + g) * kPanel, acc[r][g][0]); store(y + r * Np + (p + g) * kPanel + 16, acc[r][g][1]);
    }
  }
}

template <int M, int PG>
void panels_bf16(const uint32_t* xT, int64_t K2, const uint16_t* wp, int64_t p0, int64_t p1, float* y, int64_t Np) {
  for (int64_t p = p0; p < p1; p += PG) {
    __m512 acc[M][PG][2];
    for (int r = 0; r < M; ++r) for (int g = 0; g < PG; ++g) acc[r][g][0] = acc[r][g][1] = _mm512_setzero_ps();
    const uint16_t* base[PG];
    for (int g = 0; g < PG; ++g) base[g] = wp + (p + g) * K2 * kPanel * 2;
    for (int64_t k = 0; k < K2; ++k) {
      __m512bh wv[PG][2];
      for (int g = 0; g < PG; ++g) {
        __builtin_prefetch(base[g] + (k + 16) * kPanel * 2, 0, 3);
        __builtin_prefetch(base[g] + (k + 16) * kPanel * 2 + 32, 0, 3);
        wv[g][0] = (__m512bh)_mm512_loadu_si512(base[g] + k * kPanel * 2);
        wv[g][1] = (__m512bh)_mm512_loadu_si512(base[g] + k * kPanel * 2 + 32);
      }
      for (int r = 0; r < M; ++r) {
        const __m512bh xb = (__m512bh)_mm512_set1_epi32(xT[k * M + r]);
        for (int g = 0; g < PG; ++g) {
          acc[r][g][0] = _mm512_dpbf16_ps(acc[r][g][0], xb, wv[g][0]);
          acc[r][g][1] = _mm512_dpbf16_ps(acc[r][g][1], xb, wv[g][1]);
        }
      }
    }
    for (int r = 0; r < M; ++r) for (int g = 0; g < PG; ++g) {
      _mm512_storeu_ps(y + r * Np + (p + g) * kPanel, acc[r][g][0]); _mm512_storeu_ps(y + r * Np + (p + g) * kPanel + 16, acc[r][g][1]);
    }
  }
}

constexpr int group_for(int M) { return M <= 2 ? 4 : M <= 4 ? 3 : M <= 6 ? 2 : 1; }

template <int M, typename X, typename W, typename F>
void run_all(const X* xT, int64_t K, const W* wp, int64_t P, float* y, int64_t Np, F) {
  constexpr int PG = group_for(M);
  const int64_t groups = P / PG;
  at::parallel_for(0, groups, 4, [&](int64_t g0, int64_t g1) {
    if constexpr (std::is_same<W, float>::value) panels_f32<M, PG>(xT, K, wp, g0 * PG, g1 * PG, y, Np);
    else panels_bf16<M, PG>(xT, K, wp, g0 * PG, g1 * PG, y, Np);
  });
  if (groups * PG < P) {
    if constexpr (std::is_same<W, float>::value) panels_f32<M, 1>(xT, K, wp, groups * PG, P, y, Np);
    else panels_bf16<M, 1>(xT, K, wp, groups * PG, P, y, Np);
  }
}
template <int M, typename X, typename W>
void dispatch(int64_t rows, const X* xT, int64_t K, const W* wp, int64_t P, float* y, int64_t Np) {
  if constexpr (M <= 14) {
    if (rows == M) return run_all<M>(xT, K, wp, P, y, Np, 0);
    return dispatch<M + 1>(rows, xT, K, wp, P, y, Np);
  }
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& wp, int64_t N) {
  const int64_t rows = x.numel() / x.size(-1), K = x.size(-1), P = wp.size(0), Np = P * kPanel;
  torch::Tensor y = torch::empty({rows, Np}, x.options().dtype(torch::kFloat32));
  if (wp.scalar_type() == torch::kFloat32) {
    auto xT = x.reshape({rows, K}).t().contiguous();
    dispatch<1>(rows, xT.data_ptr<float>(), K, wp.data_ptr<float>(), P, y.data_ptr<float>(), Np);
  } else {
    const int64_t K2 = (K + 1) / 2;
    auto xp = torch::zeros({rows, K2 * 2}, x.options());
    xp.narrow(1, 0, K).copy_(x.reshape({rows, K}));
    auto xT = xp.view({rows, K2, 2}).transpose(0, 1).contiguous();  // [K2][rows][2]
    dispatch<1>(rows, reinterpret_cast<const uint32_t*>(xT.data_ptr<at::BFloat16>()), K2,
                reinterpret_cast<const uint16_t*>(wp.data_ptr<at::BFloat16>()), P, y.data_ptr<float>(), Np);
  }
  return y.narrow(1, 0, N).to(x.scalar_type());
}
torch::Tensor pack(const torch::Tensor& w) { return w.scalar_type() == torch::kFloat32 ? pack_f32(w) : pack_bf16(w); }
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("linear", &linear); m.def("pack", &pack); }
