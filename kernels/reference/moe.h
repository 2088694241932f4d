// Reference kernels of a mixture-of-experts layer (docs/moe.md "In the runtime"): the router's
// top-k and its backward, and the moves of token rows between the token order and the experts'
// order. Templated on the element type (float, double) like kernels/reference/ops.h; indices are
// int32. Header-only: each is a loop.
//
// The router (Megatron-Core's default: `--moe-router-topk k`, softmax scores, not pre-softmax):
// the k largest of each token's E logits (the lower expert first on a tie), and their softmax over
// those k (Mixtral's, and Qwen3's with norm_topk_prob: the probabilities add up to 1); or the
// other rules of MoeRouterRule.
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

// A router's rule beyond its k (the trainer's model.moe_router_* fields): group-limited routing
// (groups > 0), pre_softmax, DeepSeek-V3's sigmoid scores, the top k's scaling factor, and the
// expert bias that moves the choice (sigmoid only; E values of the wide type, or none).
template <typename T>
struct MoeRouterRule {
  int64_t groups = 0, group_topk = 0;
  bool pre_softmax = false;
  bool sigmoid = false;
  double scale = 1.0;
  const T* bias = nullptr;
};

// The scores of one row of E logits into `score` (double): the logits, or with pre_softmax their
// softmax, or with sigmoid their sigmoids.
template <typename T>
void MoeRowScores(std::vector<double>& score, const T* logit, int64_t experts,
                  const MoeRouterRule<T>& rule) {
  if (rule.pre_softmax) {
    MoeRowSoftmax(score, logit, experts);
    return;
  }
  for (int64_t e = 0; e < experts; ++e) {
    const double l = double(logit[e]);
    score[size_t(e)] = rule.sigmoid ? 1.0 / (1.0 + std::exp(-l)) : l;
  }
}

// logits [n][E] -> index [n][k] (descending choice score, ties to the lower expert), probs [n][k]
// times rule.scale (Megatron-Core's --moe-router-topk-scaling-factor): the softmax over the k
// chosen logits; or with pre_softmax (Megatron-Core's --moe-router-pre-softmax, transformers'
// norm_topk_prob false) the softmax over all E, the chosen k's values as they are; or with sigmoid
// (Megatron-Core's --moe-router-score-function sigmoid, DeepSeek-V3's) the k's sigmoids over their
// sum (k > 1; the sigmoid itself for k = 1). The choice is by the scores (the same top k as the
// logits but for sigmoid's bias), plus rule.bias under sigmoid (DeepSeek-V3's
// e_score_correction_bias: it moves the choice and weighs nothing). Group-limited routing
// (groups > 0; Megatron-Core's group_limited_topk): the E experts fall into `groups` equal
// groups, each scored by the sum of its k / group_topk largest choice scores (at least one:
// Megatron-Core's k // group_topk is 0 for k < group_topk and scores every group 0), and the k
// come from the group_topk best groups (ties to the lower group).
template <typename T>
void MoeRouterTopK(T* probs, int32_t* index, const T* logits, int64_t n, int64_t experts, int64_t k,
                   const MoeRouterRule<T>& rule = {}) {
  std::vector<int32_t> order(static_cast<size_t>(experts));
  const int64_t groups = rule.groups, group_topk = rule.group_topk;
  const int64_t per_group = groups > 0 ? experts / groups : experts;
  std::vector<double> group_score(static_cast<size_t>(groups > 0 ? groups : 0));
  std::vector<int32_t> group_order(group_score.size());
  std::vector<double> scores(static_cast<size_t>(per_group)), row(static_cast<size_t>(experts));
  std::vector<double> choice(static_cast<size_t>(experts));
  for (int64_t r = 0; r < n; ++r) {
    const T* logit = logits + r * experts;
    MoeRowScores(row, logit, experts, rule);
    for (int64_t e = 0; e < experts; ++e) {
      choice[size_t(e)] = row[size_t(e)] + (rule.bias != nullptr ? double(rule.bias[e]) : 0.0);
    }
    std::iota(order.begin(), order.end(), 0);
    auto larger = [&choice](int32_t a, int32_t b) {
      return choice[size_t(a)] > choice[size_t(b)] ||
             (choice[size_t(a)] == choice[size_t(b)] && a < b);
    };
    auto candidates = order.end();  // the experts of the chosen groups: [begin, candidates)
    if (groups > 0) {
      const int64_t summed = std::max<int64_t>(1, k / group_topk);
      for (int64_t g = 0; g < groups; ++g) {
        std::copy_n(choice.begin() + g * per_group, per_group, scores.begin());
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
    // The softmax over the k chosen logits (the first is their maximum), the sigmoids' sum, or
    // nothing (pre_softmax; sigmoid with k = 1).
    double sum = 0;
    const int32_t first = order[0];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      sum += rule.sigmoid ? row[size_t(e)] : std::exp(double(logit[e]) - double(logit[first]));
    }
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      index[r * k + j] = e;
      double p = std::exp(double(logit[e]) - double(logit[first])) / sum;
      if (rule.pre_softmax || (rule.sigmoid && k == 1)) p = row[size_t(e)];
      if (rule.sigmoid && k > 1) p = row[size_t(e)] / sum;
      probs[r * k + j] = T(p * rule.scale);
    }
  }
}

// The router's backward into dlogits [n][E] (overwritten), dot = sum_i p_i dp_i over the k and
// c = rule.scale. The softmax over the k chosen: dl_j = p_j (dp_j - dot / c) at the chosen, zero
// elsewhere. With pre_softmax, through the softmax over all E (s, from the logits):
// dl_e = s_e (c g_e - dot), g_e = dp at the chosen, zero elsewhere. With sigmoid (s_i the chosen
// sigmoids, S their sum, from the logits): dl_i = s_i (1 - s_i) c / S (dp_i - dot / c) at the
// chosen (k > 1), dl_i = s_i (1 - s_i) c dp_i (k = 1). The bias weighs nothing: no gradient.
template <typename T>
void MoeRouterTopKBackward(T* dlogits, const T* dprobs, const T* probs, const int32_t* index,
                           const T* logits, int64_t n, int64_t experts, int64_t k,
                           const MoeRouterRule<T>& rule = {}) {
  std::fill(dlogits, dlogits + n * experts, T(0));
  std::vector<double> s(static_cast<size_t>(experts));
  const double c = rule.scale;
  for (int64_t r = 0; r < n; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += double(probs[r * k + j]) * double(dprobs[r * k + j]);
    T* dl = dlogits + r * experts;
    if (rule.pre_softmax) {
      MoeRowSoftmax(s, logits + r * experts, experts);
      for (int64_t e = 0; e < experts; ++e) dl[e] = T(-s[size_t(e)] * dot);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = index[r * k + j];
        dl[e] = T(s[size_t(e)] * (c * double(dprobs[r * k + j]) - dot));
      }
      continue;
    }
    if (rule.sigmoid) {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = index[r * k + j];
        sum += s[size_t(e)] = 1.0 / (1.0 + std::exp(-double(logits[r * experts + e])));
      }
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = index[r * k + j];
        const double se = s[size_t(e)], dp = double(dprobs[r * k + j]);
        dl[e] = T(se * (1 - se) * (k > 1 ? c / sum * (dp - dot / c) : c * dp));
      }
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      const double p = probs[r * k + j];
      dl[index[r * k + j]] = T(p * (double(dprobs[r * k + j]) - dot / c));
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

// The auxiliary loss's grouping of rows (the counts and sums a row meets) and its scores. Row r of
// the n is in group (first_row + r) / group_rows (group_rows 0: all rows in group 0): one group
// for Megatron-Core's aux_loss (the microbatch), one per sequence for its seq_aux_loss
// (DeepSeek-V2's sequence-wise balance; first_row places a rank's rows, under sequence or context
// parallelism, in their sequences). The scores are the softmax over all E logits, or with
// sigmoid (Megatron-Core's compute_routing_scores_for_aux_loss under sigmoid scores) the sigmoids
// over their row's sum.
struct MoeAuxRule {
  int64_t group_rows = 0, first_row = 0;
  bool sigmoid = false;
  int64_t GroupOf(int64_t r) const { return group_rows > 0 ? (first_row + r) / group_rows : 0; }
};

// One row's auxiliary-loss scores into q (double) and, unnormalised, into raw (the exponentials
// or the sigmoids); returns their sum.
template <typename T>
double MoeAuxScores(std::vector<double>& q, std::vector<double>& raw, const T* row, int64_t experts,
                    bool sigmoid) {
  double sum = 0;
  const double top = sigmoid ? 0.0 : double(*std::max_element(row, row + experts));
  for (int64_t e = 0; e < experts; ++e) {
    const double l = double(row[e]);
    sum += raw[size_t(e)] = sigmoid ? 1.0 / (1.0 + std::exp(-l)) : std::exp(l - top);
  }
  for (int64_t e = 0; e < experts; ++e) q[size_t(e)] = raw[size_t(e)] / sum;
  return sum;
}

// The auxiliary load-balancing loss's gradient (Megatron-Core's switch_load_balancing_loss_func,
// Switch Transformer's: aux = coeff E / (T^2 k) sum_e P_e c_e, P_e the sum over the T tokens of
// the scores, c_e the tokens routed to e, constant; per sequence with seq_aux_loss) into dlogits
// [n][E] (accumulated), `scale` holding coeff E / (T^2 k) and the objective's weight, c the row's
// group's counts (counts [groups][E]): with the softmax dl_j += scale q_j (c_j - sum_e q_e c_e);
// with sigmoids (q_j = s_j / S) dl_j += scale s_j (1 - s_j) / S (c_j - sum_e q_e c_e).
template <typename T, typename W>
void MoeAuxLossBackward(T* dlogits, const T* logits, const W* counts, double scale, int64_t n,
                        int64_t experts, const MoeAuxRule& rule = {}) {
  std::vector<double> q(static_cast<size_t>(experts)), raw(q.size());
  for (int64_t r = 0; r < n; ++r) {
    const T* row = logits + r * experts;
    const W* c = counts + rule.GroupOf(r) * experts;
    const double sum = MoeAuxScores(q, raw, row, experts, rule.sigmoid);
    double dot = 0;
    for (int64_t e = 0; e < experts; ++e) dot += q[size_t(e)] * double(c[e]);
    for (int64_t e = 0; e < experts; ++e) {
      const double se = raw[size_t(e)];
      const double own = rule.sigmoid ? se * (1 - se) / sum : q[size_t(e)];
      dlogits[r * experts + e] += T(scale * own * (double(c[e]) - dot));
    }
  }
}

// out[g][e] = the sum over the rows of group g (MoeAuxRule) of their e-th score (the auxiliary
// loss's P_e); out holds `groups` groups, those without rows here zero.
template <typename T, typename W>
void MoeRouterProbSums(W* out, const T* logits, int64_t n, int64_t experts, int64_t groups = 1,
                       const MoeAuxRule& rule = {}) {
  std::vector<double> sums(static_cast<size_t>(groups * experts), 0.0);
  std::vector<double> q(static_cast<size_t>(experts)), raw(q.size());
  for (int64_t r = 0; r < n; ++r) {
    MoeAuxScores(q, raw, logits + r * experts, experts, rule.sigmoid);
    const int64_t g = rule.GroupOf(r);
    for (int64_t e = 0; e < experts; ++e) sums[size_t(g * experts + e)] += q[size_t(e)];
  }
  for (int64_t i = 0; i < groups * experts; ++i) out[i] = W(sums[size_t(i)]);
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
