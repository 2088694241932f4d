// Reference kernels of a mixture-of-experts layer (docs/moe.md "In the runtime"): the router's
// top-k and its backward, and the moves of token rows between the token order and the experts'
// order. Templated on the element type (float, double) like kernels/reference/ops.h; indices are
// int32. Header-only: each is a loop.
//
// The router (Megatron-Core's default: `--moe-router-topk k`, softmax scores, not pre-softmax):
// the k largest of each token's E logits (the lower expert first on a tie), and their softmax over
// those k (Mixtral's, and Qwen3's with norm_topk_prob: the probabilities add up to 1).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace ptdp::kernels {

// The softmax of one row of E logits into s (double).
template <typename T>
void MoeRowSoftmax(std::vector<double>& s, const T* row, int64_t experts) {
  const double top = double(*std::max_element(row, row + experts));
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e) sum += s[size_t(e)] = std::exp(double(row[e]) - top);
  for (int64_t e = 0; e < experts; ++e) s[size_t(e)] /= sum;
}

// logits [n][E] -> index [n][k] (descending score, ties to the lower expert), probs [n][k]: the
// softmax over the k chosen logits, or with pre_softmax (Megatron-Core's --moe-router-pre-softmax,
// transformers' norm_topk_prob false) the softmax over all E, the chosen k's values as they are.
// The scores chosen by are the logits, or with pre_softmax that softmax (the same top k; group
// sums differ). Group-limited routing (groups > 0; Megatron-Core's group_limited_topk): the E
// experts fall into `groups` equal groups, each scored by the sum of its k / group_topk largest
// scores (at least one: Megatron-Core's k // group_topk is 0 for k < group_topk and scores every
// group 0), and the k come from the group_topk best groups (ties to the lower group).
template <typename T>
void MoeRouterTopK(T* probs, int32_t* index, const T* logits, int64_t n, int64_t experts, int64_t k,
                   int64_t groups = 0, int64_t group_topk = 0, bool pre_softmax = false) {
  std::vector<int32_t> order(static_cast<size_t>(experts));
  const int64_t per_group = groups > 0 ? experts / groups : experts;
  std::vector<double> group_score(static_cast<size_t>(groups > 0 ? groups : 0));
  std::vector<int32_t> group_order(group_score.size());
  std::vector<double> scores(static_cast<size_t>(per_group)), row(static_cast<size_t>(experts));
  for (int64_t r = 0; r < n; ++r) {
    const T* logit = logits + r * experts;
    if (pre_softmax) {
      MoeRowSoftmax(row, logit, experts);
    } else {
      for (int64_t e = 0; e < experts; ++e) row[size_t(e)] = double(logit[e]);
    }
    std::iota(order.begin(), order.end(), 0);
    auto larger = [&row](int32_t a, int32_t b) {
      return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b);
    };
    auto candidates = order.end();  // the experts of the chosen groups: [begin, candidates)
    if (groups > 0) {
      const int64_t summed = std::max<int64_t>(1, k / group_topk);
      for (int64_t g = 0; g < groups; ++g) {
        std::copy_n(row.begin() + g * per_group, per_group, scores.begin());
        std::partial_sort(scores.begin(), scores.begin() + summed, scores.end(),
                          [](double a, double b) { return a > b; });
        group_score[size_t(g)] = 0;
        for (int64_t j = 0; j < summed; ++j) group_score[size_t(g)] += scores[size_t(j)];
      }
      std::iota(group_order.begin(), group_order.end(), 0);
      std::partial_sort(group_order.begin(), group_order.begin() + group_topk, group_order.end(),
                        [&](int32_t a, int32_t b) {
                          return group_score[size_t(a)] > group_score[size_t(b)] ||
                                 (group_score[size_t(a)] == group_score[size_t(b)] && a < b);
                        });
      candidates = std::stable_partition(order.begin(), order.end(), [&](int32_t e) {
        const int32_t g = int32_t(e / per_group);
        return std::find(group_order.begin(), group_order.begin() + group_topk, g) !=
               group_order.begin() + group_topk;
      });
    }
    std::partial_sort(order.begin(), order.begin() + k, candidates, larger);
    // Softmax over the k chosen logits (the first is their maximum), or their full-softmax values.
    double sum = 0;
    const int32_t first = order[0];
    for (int64_t j = 0; j < k; ++j) {
      sum += std::exp(double(logit[order[size_t(j)]]) - double(logit[first]));
    }
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      index[r * k + j] = e;
      probs[r * k + j] = pre_softmax ? T(row[size_t(e)])
                                     : T(std::exp(double(logit[e]) - double(logit[first])) / sum);
    }
  }
}

// The router's backward into dlogits [n][E] (overwritten). The softmax over the k chosen: dl_j =
// p_j (dp_j - sum_i p_i dp_i) at the chosen, zero elsewhere. With pre_softmax, through the softmax
// over all E (s, from the logits): dl_e = s_e (g_e - sum_i p_i dp_i), g_e = dp at the chosen,
// zero elsewhere.
template <typename T>
void MoeRouterTopKBackward(T* dlogits, const T* dprobs, const T* probs, const int32_t* index,
                           const T* logits, int64_t n, int64_t experts, int64_t k,
                           bool pre_softmax = false) {
  std::fill(dlogits, dlogits + n * experts, T(0));
  std::vector<double> s(static_cast<size_t>(experts));
  for (int64_t r = 0; r < n; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += double(probs[r * k + j]) * double(dprobs[r * k + j]);
    if (pre_softmax) {
      MoeRowSoftmax(s, logits + r * experts, experts);
      for (int64_t e = 0; e < experts; ++e) dlogits[r * experts + e] = T(-s[size_t(e)] * dot);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = index[r * k + j];
        dlogits[r * experts + e] = T(s[size_t(e)] * (double(dprobs[r * k + j]) - dot));
      }
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      const double p = probs[r * k + j];
      dlogits[r * experts + index[r * k + j]] = T(p * (double(dprobs[r * k + j]) - dot));
    }
  }
}

// The router's z-loss (ST-MoE; Megatron-Core's z_loss_func): z = sum over the n rows of lse_r^2,
// lse_r = log sum_e exp(l_re), into *sum_sq (T wide, overwritten), and its gradient times `scale`
// into dlogits [n][E] (accumulated): dl_re += scale 2 lse_r softmax_re.
template <typename T>
void MoeZLossBackward(T* dlogits, T* sum_sq, const T* logits, double scale, int64_t n,
                      int64_t experts) {
  double z = 0;
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * experts;
    const double top = double(*std::max_element(row, row + experts));
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(double(row[e]) - top);
    const double lse = top + std::log(sum);
    z += lse * lse;
    for (int64_t e = 0; e < experts; ++e) {
      dlogits[r * experts + e] += T(scale * 2 * lse * std::exp(double(row[e]) - lse));
    }
  }
  *sum_sq = T(z);
}

// The auxiliary load-balancing loss's gradient (Megatron-Core's switch_load_balancing_loss_func,
// Switch Transformer's: aux = coeff E / (T^2 k) sum_e P_e c_e, P_e the sum over the T tokens of
// the softmax over all E logits, c_e the tokens routed to e, constant) into dlogits [n][E]
// (accumulated), `scale` holding coeff E / (T^2 k) and the objective's weight:
// dl_j += scale p_j (c_j - sum_e p_e c_e).
template <typename T, typename W>
void MoeAuxLossBackward(T* dlogits, const T* logits, const W* counts, double scale, int64_t n,
                        int64_t experts) {
  std::vector<double> p(static_cast<size_t>(experts));
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * experts;
    const double top = double(*std::max_element(row, row + experts));
    double sum = 0, dot = 0;
    for (int64_t e = 0; e < experts; ++e) sum += p[size_t(e)] = std::exp(double(row[e]) - top);
    for (int64_t e = 0; e < experts; ++e) dot += (p[size_t(e)] /= sum) * double(counts[e]);
    for (int64_t e = 0; e < experts; ++e) {
      dlogits[r * experts + e] += T(scale * p[size_t(e)] * (double(counts[e]) - dot));
    }
  }
}

// out[e] = sum over the n rows of the softmax over all E logits (the auxiliary loss's P_e).
template <typename T, typename W>
void MoeRouterProbSums(W* out, const T* logits, int64_t n, int64_t experts) {
  std::vector<double> sums(static_cast<size_t>(experts), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * experts;
    const double top = double(*std::max_element(row, row + experts));
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(double(row[e]) - top);
    for (int64_t e = 0; e < experts; ++e) sums[size_t(e)] += std::exp(double(row[e]) - top) / sum;
  }
  for (int64_t e = 0; e < experts; ++e) out[e] = W(sums[size_t(e)]);
}

// out[i][:] = x[rows[i]][:] for i < n (the dispatch: token rows into the experts' order).
template <typename T>
void MoePermuteRows(T* out, const T* x, const int32_t* rows, int64_t n, int64_t width) {
  for (int64_t i = 0; i < n; ++i) std::copy_n(x + int64_t(rows[i]) * width, width, out + i * width);
}

// out[rows[i]][:] += y[i][:] for i < n (the combine, and the dispatch's backward), in order of i.
template <typename T>
void MoeUnpermuteAddRows(T* out, const T* y, const int32_t* rows, int64_t n, int64_t width) {
  for (int64_t i = 0; i < n; ++i) {
    T* o = out + int64_t(rows[i]) * width;
    const T* src = y + i * width;
    for (int64_t c = 0; c < width; ++c) o[c] += src[c];
  }
}

// out[i][:] = in[i][:] * weight[slot[i]] (the expert's activation times its token's probability;
// out may be in).
template <typename T, typename W>
void MoeScaleRows(T* out, const T* in, const W* weight, const int32_t* slot, int64_t n,
                  int64_t width) {
  for (int64_t i = 0; i < n; ++i) {
    const T w = T(weight[slot[i]]);
    for (int64_t c = 0; c < width; ++c) out[i * width + c] = in[i * width + c] * w;
  }
}

// out[slot[i]] = sum_c a[i][c] b[i][c] for i < n (a probability's gradient from its expert's
// activation; the slots not named keep their values).
template <typename T, typename W>
void MoeRowDots(W* out, const T* a, const T* b, const int32_t* slot, int64_t n, int64_t width) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t c = 0; c < width; ++c) s += double(a[i * width + c]) * double(b[i * width + c]);
    out[slot[i]] = W(s);
  }
}

// The shared expert's gate (Qwen2-MoE's shared_expert_gate, Megatron-Core's
// --moe-shared-expert-gate): gate[i] = sigmoid(logit[i]) in the wide type W, and its backward
// dlogit[i] = dgate[i] gate[i] (1 - gate[i]).
template <typename T, typename W>
void MoeGateSigmoid(W* gate, const T* logit, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = W(1.0 / (1.0 + std::exp(-double(logit[i]))));
}
template <typename T, typename W>
void MoeGateSigmoidBackward(T* dlogit, const W* gate, const W* dgate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = double(gate[i]);
    dlogit[i] = T(double(dgate[i]) * g * (1.0 - g));
  }
}

}  // namespace ptdp::kernels
