#include "runtime/model/moe_route.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/experts.h"
#include "runtime/model/layer_common.h"

namespace ptdp::runtime {

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

namespace {

bool EarlierToken(const TokenCopy& x, const TokenCopy& y) {
  return x.token < y.token;
}

// `kept` (the copies routed to one expert, in token order) and the first tokens of the sequence
// not among them, slot `pad_slot`, until there are `rows`; in token order.
std::vector<TokenCopy> PadTo(const std::vector<TokenCopy>& kept, int64_t rows, int64_t S,
                             int32_t first_token, int32_t pad_slot) {
  std::vector<char> routed(size_t(S), 0);
  for (const TokenCopy& x : kept) routed[size_t(x.token - first_token)] = 1;
  int64_t padding = rows - int64_t(kept.size());
  std::vector<TokenCopy> out = kept;
  for (int64_t n = 0; n < S && padding > 0; ++n) {
    if (routed[size_t(n)]) continue;
    out.push_back({int32_t(first_token + n), pad_slot});
    --padding;
  }
  std::sort(out.begin(), out.end(), EarlierToken);
  return out;
}

// The route's probabilities: the gathered [N][k] (sequence parallelism's gather is already the
// route's own), or a copy with one more slot of probability 0 when padded.
Result<Tensor> RouteProbs(const LayerCtx& c, FullRows all, DType t, bool padded) {
  const int64_t n = c.d.N() * c.arch.moe_topk;
  if (!all.owned.empty() && !padded) return std::move(all.owned);
  PTDP_ASSIGN_OR_RETURN(Tensor probs, Tmp(c, n + (padded ? 1 : 0), t));
  c.dev->Copy(probs.data(), all.ref.data, Bytes(n) * DTypeBytes(t));
  if (padded) {
    PTDP_RETURN_IF_ERROR(
        c.dev->ops()->Fill({static_cast<char*>(probs.data()) + n * DTypeBytes(t), t, 1}, 0.0));
  }
  return probs;
}

// The probabilities on the host, in double (token dropping by them).
std::vector<double> HostProbs(const LayerCtx& c, const Tensor& probs, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  if (probs.dtype() == DType::kFp64) {
    c.dev->Copy(out.data(), probs.data(), Bytes(n) * Bytes(sizeof(double)));
    return out;
  }
  std::vector<float> narrow(out.size());
  c.dev->Copy(narrow.data(), probs.data(), Bytes(n) * Bytes(sizeof(float)));
  for (size_t i = 0; i < narrow.size(); ++i) out[i] = narrow[i];
  return out;
}

}  // namespace

void DropInSequence(const LayerArch& a, int64_t S, int32_t first_token,
                    const std::vector<double>& prob, int32_t pad_slot,
                    std::vector<std::vector<TokenCopy>>* of) {
  const int64_t capacity = ExpertCapacity(S, a.moe_topk, a.moe_experts, a.moe_capacity_factor);
  for (std::vector<TokenCopy>& kept : *of) {
    if (capacity <= S && int64_t(kept.size()) > capacity) {
      if (!a.moe_drop_by_position) {  // the highest probabilities first, ties in token order
        std::stable_sort(kept.begin(), kept.end(), [&](const TokenCopy& x, const TokenCopy& y) {
          return prob[size_t(x.slot)] > prob[size_t(y.slot)];
        });
      }
      kept.resize(size_t(capacity));
      std::sort(kept.begin(), kept.end(), EarlierToken);
    }
    const int64_t rows = std::min(capacity, S);
    if (a.moe_pad_to_capacity && int64_t(kept.size()) < rows) {
      kept = PadTo(kept, rows, S, first_token, pad_slot);
    }
  }
}

Result<MoeRoute> Route(const LayerCtx& c, ConstRef index, ConstRef probs) {
  const int64_t N = c.d.N(), S = c.d.S(), k = c.arch.moe_topk, experts = c.arch.moe_experts;
  const bool drops = c.arch.moe_capacity_factor > 0, padded = drops && c.arch.moe_pad_to_capacity;
  PTDP_ASSIGN_OR_RETURN(FullRows all_index, GatherRows(c, index));
  PTDP_ASSIGN_OR_RETURN(FullRows all_probs, GatherRows(c, probs));
  MoeRoute r;
  r.slots = N * k + (padded ? 1 : 0);
  PTDP_ASSIGN_OR_RETURN(r.probs, RouteProbs(c, std::move(all_probs), probs.dtype, padded));
  std::vector<int32_t> chosen(static_cast<size_t>(N * k));
  c.dev->Copy(chosen.data(), all_index.ref.data, chosen.size() * sizeof(int32_t));
  r.routed.assign(static_cast<size_t>(experts), 0);
  r.per_sequence.assign(static_cast<size_t>(c.d.b * experts), 0);
  std::vector<std::vector<TokenCopy>> of(static_cast<size_t>(experts));
  const std::vector<double> prob =
      drops && !c.arch.moe_drop_by_position ? HostProbs(c, r.probs, N * k) : std::vector<double>();
  for (int64_t seq = 0; seq < c.d.b; ++seq) {  // each sequence's S rows of [b][S]
    std::vector<std::vector<TokenCopy>> in_seq(static_cast<size_t>(experts));
    for (int64_t s = seq * S * k; s < (seq + 1) * S * k; ++s) {
      const int32_t e = chosen[size_t(s)];
      if (e < 0 || e >= experts)
        return Status::Internal("router chose expert " + std::to_string(e));
      ++r.routed[size_t(e)];
      ++r.per_sequence[size_t(seq * experts + e)];
      in_seq[size_t(e)].push_back({int32_t(s / k), int32_t(s)});
    }
    if (drops) DropInSequence(c.arch, S, int32_t(seq * S), prob, int32_t(N * k), &in_seq);
    for (int64_t e = 0; e < experts; ++e) {
      of[size_t(e)].insert(of[size_t(e)].end(), in_seq[size_t(e)].begin(), in_seq[size_t(e)].end());
    }
  }
  // Each expert's copies in token order (the sequences in order, each's in token order).
  r.offsets.assign(static_cast<size_t>(experts) + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    r.offsets[size_t(e + 1)] = r.offsets[size_t(e)] + int64_t(of[size_t(e)].size());
  }
  std::vector<int32_t> token(size_t(r.copies())), slot(token.size());
  size_t at = 0;
  for (const std::vector<TokenCopy>& list : of) {
    for (const TokenCopy& x : list) {
      token[at] = x.token;
      slot[at++] = x.slot;
      r.padding += x.slot == int32_t(N * k) ? 1 : 0;
    }
  }
  PTDP_ASSIGN_OR_RETURN(r.token, Tmp(c, r.copies(), DType::kI32));
  PTDP_ASSIGN_OR_RETURN(r.slot, Tmp(c, r.copies(), DType::kI32));
  c.dev->Upload(r.token.data(), token.data(), r.token.bytes());
  c.dev->Upload(r.slot.data(), slot.data(), r.slot.bytes());
  return r;
}

}  // namespace ptdp::runtime
