// The kernels of Llama-style layers (kernels/reference/ops.h): RMSNorm, SwiGLU and the rotary
// position embedding, in double inside, each output rounded once.
#include <cmath>
#include <vector>

#include "kernels/reference/context_chunks.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/qkv_layout.h"

namespace ptdp::kernels {

template <typename T>
void RmsNormForward(T* out, T* rstd, const T* x, const T* weight, int64_t n, int64_t c,
                    double eps) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;
    double sq = 0.0;
    for (int64_t i = 0; i < c; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(c) + eps);
    T* o = out + r * c;
    for (int64_t i = 0; i < c; ++i) o[i] = static_cast<T>(xr[i] * rs * weight[i]);
    rstd[r] = static_cast<T>(rs);
  }
}

// With g = dout * weight: dx = rstd (g - x rstd^2 mean(g x)), dweight += dout x rstd.
template <typename T>
void RmsNormBackward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const T* rstd,
                     int64_t n, int64_t c) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;
    const T* dr = dout + r * c;
    const double rs = rstd[r];
    double gx_mean = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      gx_mean += static_cast<double>(dr[i]) * weight[i] * xr[i];
      dweight[i] += static_cast<T>(dr[i] * xr[i] * rs);
    }
    gx_mean /= static_cast<double>(c);
    T* dxr = dx + r * c;
    for (int64_t i = 0; i < c; ++i) {
      const double g = static_cast<double>(dr[i]) * weight[i];
      dxr[i] = static_cast<T>(rs * (g - xr[i] * rs * rs * gx_mean));
    }
  }
}

namespace {
double Sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}
}  // namespace

template <typename T>
void SwigluForward(T* out, const T* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double gate = in[2 * i], up = in[2 * i + 1];
    out[i] = static_cast<T>(gate * Sigmoid(gate) * up);
  }
}

// d gate = dout up silu'(gate), silu'(z) = sig(z) (1 + z (1 - sig(z))); d up = dout silu(gate).
template <typename T>
void SwigluBackward(T* din, const T* in, const T* dout, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double gate = in[2 * i], up = in[2 * i + 1], g = dout[i];
    const double sig = Sigmoid(gate);
    din[2 * i] = static_cast<T>(g * up * sig * (1.0 + gate * (1.0 - sig)));
    din[2 * i + 1] = static_cast<T>(g * gate * sig);
  }
}

template <typename T>
void SquaredReluForward(T* out, const T* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double r = in[i] > 0 ? static_cast<double>(in[i]) : 0.0;
    out[i] = static_cast<T>(r * r);
  }
}

template <typename T>
void SquaredReluBackward(T* din, const T* in, const T* dout, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double r = in[i] > 0 ? static_cast<double>(in[i]) : 0.0;
    din[i] = static_cast<T>(2.0 * r * static_cast<double>(dout[i]));
  }
}

template <typename T>
void RotaryEmbedding(T* qkv, const RotaryDims& r, bool inverse) {
  const ContextChunks chunks{r.s, r.cp, r.rank};
  const QkvLayout row{r.h, r.d, r.group};
  // Pairs (e, e + half) of the rotated features; partial rotation leaves the rest of a head.
  const int64_t rotated = RotatedFeatures(r.d, r.rope), half = rotated / 2, S = chunks.Local();
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t e = 0; e < half; ++e) {
    inv_freq[size_t(e)] = RopeInvFreq<double>(e, rotated, r.rope);
  }
  // The inverse turns back and scales alike: the transpose of attention_factor times a rotation.
  const double sign = inverse ? -1.0 : 1.0, scale = r.rope.attention_factor;
  auto turn = [&](T* x, double pos) {
    for (int64_t e = 0; e < half; ++e) {
      const double angle = pos * inv_freq[size_t(e)];
      const double cs = scale * std::cos(angle), sn = scale * sign * std::sin(angle);
      const double x1 = x[e], x2 = x[e + half];
      x[e] = static_cast<T>(x1 * cs - x2 * sn);
      x[e + half] = static_cast<T>(x2 * cs + x1 * sn);
    }
  };
  for (int64_t bi = 0; bi < r.b; ++bi) {
    for (int64_t t = 0; t < S; ++t) {
      T* x = qkv + (bi * S + t) * row.Width();
      const double pos = static_cast<double>(chunks.Position(t));
      for (int64_t hh = 0; hh < r.h; ++hh) turn(x + row.Q(hh), pos);
      for (int64_t g = 0; g < row.KvHeads(); ++g) turn(x + row.KvOf(g), pos);
    }
  }
}

// Slot u of key/value head g: its u-th query head (u < group) or, at u = group, its key. A slot
// is d features at (g (group + 2) + u) d in a qkv row and at (g (group + 1) + u) d in qk_in's.
template <typename T>
void QkNormForward(T* qkv, T* qk_in, T* rstd, const T* q_w, const T* k_w, int64_t rows,
                   const QkvLayout& row, double eps) {
  const int64_t d = row.d, slots = row.group + 1, kv = row.KvHeads();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < kv; ++g) {
      for (int64_t u = 0; u < slots; ++u) {
        T* x = qkv + r * row.Width() + (g * (row.group + 2) + u) * d;
        const int64_t slot = (r * kv + g) * slots + u;
        T* saved = qk_in + slot * d;
        for (int64_t e = 0; e < d; ++e) saved[e] = x[e];
        RmsNormForward(x, rstd + slot, saved, u < row.group ? q_w : k_w, 1, d, eps);
      }
    }
  }
}

template <typename T>
void QkNormBackward(T* dqkv, T* dq_w, T* dk_w, const T* qk_in, const T* rstd, const T* q_w,
                    const T* k_w, int64_t rows, const QkvLayout& row) {
  const int64_t d = row.d, slots = row.group + 1, kv = row.KvHeads();
  std::vector<T> dx(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < kv; ++g) {
      for (int64_t u = 0; u < slots; ++u) {
        T* dy = dqkv + r * row.Width() + (g * (row.group + 2) + u) * d;
        const int64_t slot = (r * kv + g) * slots + u;
        const bool query = u < row.group;
        RmsNormBackward(dx.data(), query ? dq_w : dk_w, dy, qk_in + slot * d, query ? q_w : k_w,
                        rstd + slot, 1, d);
        for (int64_t e = 0; e < d; ++e) dy[e] = dx[size_t(e)];
      }
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                    \
  template void RmsNormForward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);       \
  template void RmsNormBackward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t,    \
                                   int64_t);                                                   \
  template void SwigluForward<T>(T*, const T*, int64_t);                                       \
  template void SwigluBackward<T>(T*, const T*, const T*, int64_t);                            \
  template void SquaredReluForward<T>(T*, const T*, int64_t);                                  \
  template void SquaredReluBackward<T>(T*, const T*, const T*, int64_t);                       \
  template void RotaryEmbedding<T>(T*, const RotaryDims&, bool);                               \
  template void QkNormForward<T>(T*, T*, T*, const T*, const T*, int64_t, const QkvLayout&,    \
                                 double);                                                      \
  template void QkNormBackward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, int64_t, \
                                  const QkvLayout&);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
