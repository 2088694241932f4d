// Causal attention of one context-parallel rank's queries against the keys and values of every
// rank of its group (kernels/reference/ops.h ContextAttentionForward/Backward). The arithmetic of
// attention.cc (scores and sums in double, keys in increasing global position), so a layout with
// cp > 1 rounds as the whole-sequence kernel does up to the order of the gradient sums.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference/context_chunks.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/qkv_layout.h"

namespace ptdp::kernels {
namespace {

// Offsets of query head hh's query in qkv [b][S][QkvLayout width], and of the key (part 0) or
// value (part 1) it reads in a key-value pack [b][S][h / group][2][d].
struct QueryIndex {
  int64_t S;
  QkvLayout row;
  int64_t operator()(int64_t bi, int64_t t, int64_t hh) const {
    return (bi * S + t) * row.Width() + row.Q(hh);
  }
};
struct PackIndex {
  int64_t S, kv_heads, d, group;
  int64_t operator()(int64_t bi, int64_t t, int64_t hh, int part) const {
    return ((bi * S + t) * kv_heads + hh / group) * 2 * d + part * d;
  }
};

// The dropout of probability (query at global position qi, key at kj) as the whole-sequence
// mask indexes it: 1/(1-p) or 0, or 1 without dropout.
double MaskValue(const ContextAttentionDims& a, int64_t bi, int64_t hh, int64_t qi, int64_t kj) {
  if (a.p <= 0) return 1.0;
  const uint64_t index = static_cast<uint64_t>(
      (((a.batch_begin + bi) * a.heads_total + a.head_begin + hh) * a.s + qi) * a.s + kj);
  return DropoutMaskValue<double>(a.key, index, a.p);
}

template <typename T>
double Dot(const T* x, const T* y, int64_t d) {
  double dot = 0.0;
  for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(x[e]) * y[e];
  return dot;
}

}  // namespace

template <typename T>
void ContextKvPack(T* kv, const T* qkv, int64_t rows, int64_t h, int64_t d, int64_t group) {
  const QkvLayout row{h, d, group};
  const int64_t kvh = row.KvHeads();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < kvh; ++g) {  // a key and its value are adjacent in the row
      const T* from = qkv + r * row.Width() + row.KvOf(g);
      std::copy(from, from + 2 * d, kv + (r * kvh + g) * 2 * d);
    }
  }
}

template <typename T>
void ContextKvUnpack(T* dqkv, const T* dkv, int64_t rows, int64_t h, int64_t d, int64_t group) {
  const QkvLayout row{h, d, group};
  const int64_t kvh = row.KvHeads();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < kvh; ++g) {
      const T* from = dkv + (r * kvh + g) * 2 * d;
      std::copy(from, from + 2 * d, dqkv + r * row.Width() + row.KvOf(g));
    }
  }
}

template <typename T>
void ContextAttentionForward(T* out, T* lse, const T* qkv, const T* kv_all,
                             const ContextAttentionDims& a) {
  const ContextChunks chunks{a.s, a.cp, a.rank};
  const int64_t S = chunks.Local(), h = a.h, d = a.d;
  const QkvLayout row{h, d, a.group};
  const QueryIndex q_at{S, row};
  const PackIndex kv_at{S, row.KvHeads(), d, a.group};
  const int64_t rank_stride = a.b * S * row.KvHeads() * 2 * d;  // one rank's pack in kv_all
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> score(static_cast<size_t>(a.s)), acc(static_cast<size_t>(d));
  // Key (or value, part 1) of global position g of sequence bi, head hh.
  auto key = [&](int64_t bi, int64_t g, int64_t hh, int part) {
    return kv_all + chunks.Owner(g) * rank_stride + kv_at(bi, chunks.LocalOf(g), hh, part);
  };
  for (int64_t bi = 0; bi < a.b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t t = 0; t < S; ++t) {
        const int64_t qi = chunks.Position(t);
        const T* q = qkv + q_at(bi, t, hh);
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= qi; ++j) {
          score[j] = Dot(q, key(bi, j, hh, 0), d) * scale;
          row_max = std::max(row_max, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= qi; ++j) {
          score[j] = std::exp(score[j] - row_max);
          sum += score[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= qi; ++j) {
          const double w = score[j] / sum * MaskValue(a, bi, hh, qi, j);
          const T* v = key(bi, j, hh, 1);
          for (int64_t e = 0; e < d; ++e) acc[e] += w * v[e];
        }
        T* o = out + (bi * S + t) * h * d + hh * d;
        for (int64_t e = 0; e < d; ++e) o[e] = static_cast<T>(acc[e]);
        lse[(bi * h + hh) * S + t] = static_cast<T>(row_max + std::log(sum));
      }
    }
  }
}

// With P = exp(score - lse), M the mask and D_i = dout_i . out_i (= sum_j P_ij M_ij dout_i . v_j):
//   dv_j += P_ij M_ij dout_i;  dS_ij = P_ij (M_ij dout_i . v_j - D_i);
//   dq_i += scale dS_ij k_j;   dk_j += scale dS_ij q_i   (attention.cc's backward, per key rank).
template <typename T>
void ContextAttentionBackward(T* dqkv, T* dkv_src, const T* dout, const T* out, const T* qkv,
                              const T* kv_src, const T* lse, const ContextAttentionDims& a,
                              int src) {
  const ContextChunks mine{a.s, a.cp, a.rank}, theirs{a.s, a.cp, src};
  const int64_t S = mine.Local(), h = a.h, d = a.d;
  const QkvLayout row{h, d, a.group};
  const QueryIndex q_at{S, row};
  const PackIndex kv_at{S, row.KvHeads(), d, a.group};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::fill(dkv_src, dkv_src + a.b * S * row.KvHeads() * 2 * d, T(0));
  for (int64_t bi = 0; bi < a.b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t t = 0; t < S; ++t) {
        const int64_t qi = mine.Position(t);
        const T* q = qkv + q_at(bi, t, hh);
        T* dq = dqkv + q_at(bi, t, hh);
        const T* doi = dout + (bi * S + t) * h * d + hh * d;
        const double D = Dot(doi, out + (bi * S + t) * h * d + hh * d, d);
        const double row_lse = lse[(bi * h + hh) * S + t];
        for (int64_t u = 0; u < S; ++u) {  // src's keys in increasing global position
          const int64_t kj = theirs.Position(u);
          if (kj > qi) continue;
          const T* k = kv_src + kv_at(bi, u, hh, 0);
          const T* v = kv_src + kv_at(bi, u, hh, 1);
          T* dk = dkv_src + kv_at(bi, u, hh, 0);
          T* dv = dkv_src + kv_at(bi, u, hh, 1);
          const double p = std::exp(Dot(q, k, d) * scale - row_lse);
          const double m = MaskValue(a, bi, hh, qi, kj);
          const double ds = p * (m * Dot(doi, v, d) - D) * scale;
          for (int64_t e = 0; e < d; ++e) {
            dv[e] += static_cast<T>(p * m * doi[e]);
            dq[e] += static_cast<T>(ds * k[e]);
            dk[e] += static_cast<T>(ds * q[e]);
          }
        }
      }
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                 \
  template void ContextKvPack<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t);         \
  template void ContextKvUnpack<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t);       \
  template void ContextAttentionForward<T>(T*, T*, const T*, const T*,                      \
                                           const ContextAttentionDims&);                    \
  template void ContextAttentionBackward<T>(T*, T*, const T*, const T*, const T*, const T*, \
                                            const T*, const ContextAttentionDims&, int);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
