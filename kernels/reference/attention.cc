// Causal multi-head self-attention, explicit (materialised probabilities), forward and backward.
// qkv [b*s][QkvLayout width] (h query heads, h / group key/value heads); out [b*s][h*d]; att and
// dropout_mask [b][h][s][s] (upper triangle 0).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference/ops.h"
#include "kernels/reference/qkv_layout.h"

namespace ptdp::kernels {
namespace {

// Offsets into qkv for (batch bi, position i, query head hh, part 0=q 1=k 2=v): the part head hh
// reads (a key or value shared by the heads of its group).
struct QkvIndex {
  int64_t s, h, d, group;
  int64_t operator()(int64_t bi, int64_t i, int64_t hh, int part) const {
    const QkvLayout row{h, d, group};
    const int64_t in_row = part == 0 ? row.Q(hh) : part == 1 ? row.K(hh) : row.V(hh);
    return (bi * s + i) * row.Width() + in_row;
  }
};

// The first key query i attends: i - window with a window (model.window_size), else 0.
int64_t FirstKey(int64_t i, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, i - window) : 0;
}

}  // namespace

template <typename T>
void AttentionForward(T* out, T* att, const T* qkv, const T* dropout_mask, int64_t b, int64_t s,
                      int64_t h, int64_t d, int64_t group, int64_t window) {
  const QkvIndex at{s, h, d, group};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> acc(d);
  std::vector<double> score(s);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      T* p = att + (bi * h + hh) * s * s;
      const T* mask = dropout_mask ? dropout_mask + (bi * h + hh) * s * s : nullptr;
      for (int64_t i = 0; i < s; ++i) {
        const T* q = qkv + at(bi, i, hh, 0);
        T* prow = p + i * s;
        const int64_t j0 = FirstKey(i, window);
        double row_max = -std::numeric_limits<double>::infinity();
        for (int64_t j = j0; j <= i; ++j) {
          const T* k = qkv + at(bi, j, hh, 1);
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * k[e];
          score[j] = dot * scale;
          row_max = std::max(row_max, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = j0; j <= i; ++j) {
          score[j] = std::exp(score[j] - row_max);
          sum += score[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < s; ++j) {
          if (j > i || j < j0) {
            prow[j] = T(0);
            continue;
          }
          const double pij = score[j] / sum;
          prow[j] = static_cast<T>(pij);
          const double w = mask ? pij * mask[i * s + j] : pij;
          const T* v = qkv + at(bi, j, hh, 2);
          for (int64_t e = 0; e < d; ++e) acc[e] += w * v[e];
        }
        T* o = out + (bi * s + i) * h * d + hh * d;
        for (int64_t e = 0; e < d; ++e) o[e] = static_cast<T>(acc[e]);
      }
    }
  }
}

// With P the saved probabilities, M the mask and Pd = P * M:
//   dv_j = sum_i Pd_ij dout_i;  dP_ij = M_ij (dout_i . v_j);
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq_i = scale sum_j dS_ij k_j;  dk_j = scale sum_i
//   dS_ij q_i.
template <typename T>
void AttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* att, const T* dropout_mask,
                       int64_t b, int64_t s, int64_t h, int64_t d, int64_t group) {
  const QkvIndex at{s, h, d, group};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // A group's key and value gradients sum over its query heads.
  for (int64_t i = 0; i < b * s * QkvLayout{h, d, group}.Width(); ++i) dqkv[i] = T(0);
  std::vector<double> dp(s);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      const T* p = att + (bi * h + hh) * s * s;
      const T* mask = dropout_mask ? dropout_mask + (bi * h + hh) * s * s : nullptr;
      for (int64_t i = 0; i < s; ++i) {
        const T* doi = dout + (bi * s + i) * h * d + hh * d;
        const T* prow = p + i * s;
        double dot_pdp = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const T* v = qkv + at(bi, j, hh, 2);
          T* dv = dqkv + at(bi, j, hh, 2);
          const double m = mask ? static_cast<double>(mask[i * s + j]) : 1.0;
          double dov = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            dov += static_cast<double>(doi[e]) * v[e];
            dv[e] += static_cast<T>(prow[j] * m * doi[e]);
          }
          dp[j] = dov * m;
          dot_pdp += prow[j] * dp[j];
        }
        const T* q = qkv + at(bi, i, hh, 0);
        T* dq = dqkv + at(bi, i, hh, 0);
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = prow[j] * (dp[j] - dot_pdp) * scale;
          const T* k = qkv + at(bi, j, hh, 1);
          T* dk = dqkv + at(bi, j, hh, 1);
          for (int64_t e = 0; e < d; ++e) {
            dq[e] += static_cast<T>(ds * k[e]);
            dk[e] += static_cast<T>(ds * q[e]);
          }
        }
      }
    }
  }
}

namespace {

// Scaled scores q_i . k_j / sqrt(d) of row i for j0 <= j <= i into score[j0..i].
template <typename T>
void RowScores(double* score, const T* qkv, const QkvIndex& at, int64_t bi, int64_t hh, int64_t i,
               int64_t j0) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(at.d));
  const T* q = qkv + at(bi, i, hh, 0);
  for (int64_t j = j0; j <= i; ++j) {
    const T* k = qkv + at(bi, j, hh, 1);
    double dot = 0.0;
    for (int64_t e = 0; e < at.d; ++e) dot += static_cast<double>(q[e]) * k[e];
    score[j] = dot * scale;
  }
}

}  // namespace

template <typename T>
void AttentionLogSumExp(T* lse, const T* qkv, int64_t b, int64_t s, int64_t h, int64_t d,
                        int64_t group, int64_t window) {
  const QkvIndex at{s, h, d, group};
  std::vector<double> score(s);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t i = 0; i < s; ++i) {
        const int64_t j0 = FirstKey(i, window);
        RowScores(score.data(), qkv, at, bi, hh, i, j0);
        const double row_max = *std::max_element(score.begin() + j0, score.begin() + i + 1);
        double sum = 0.0;
        for (int64_t j = j0; j <= i; ++j) sum += std::exp(score[j] - row_max);
        lse[(bi * h + hh) * s + i] = static_cast<T>(row_max + std::log(sum));
      }
    }
  }
}

template <typename T>
void AttentionProbsFromLse(T* att, const T* qkv, const T* lse, int64_t b, int64_t s, int64_t h,
                           int64_t d, int64_t group, int64_t window) {
  const QkvIndex at{s, h, d, group};
  std::vector<double> score(s);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t i = 0; i < s; ++i) {
        const int64_t j0 = FirstKey(i, window);
        RowScores(score.data(), qkv, at, bi, hh, i, j0);
        const double row_lse = lse[(bi * h + hh) * s + i];
        T* prow = att + ((bi * h + hh) * s + i) * s;
        for (int64_t j = 0; j < s; ++j) {
          prow[j] = j <= i && j >= j0 ? static_cast<T>(std::exp(score[j] - row_lse)) : T(0);
        }
      }
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                        \
  template void AttentionForward<T>(T*, T*, const T*, const T*, int64_t, int64_t, int64_t,         \
                                    int64_t, int64_t, int64_t);                                    \
  template void AttentionBackward<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, int64_t);                                   \
  template void AttentionLogSumExp<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t,   \
                                      int64_t);                                                    \
  template void AttentionProbsFromLse<T>(T*, const T*, const T*, int64_t, int64_t, int64_t,        \
                                         int64_t, int64_t, int64_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
