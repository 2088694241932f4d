// Context-parallel attention (kernels/reference/context_attention.cc) against the whole-sequence
// kernels: every rank's outputs, log-sum-exps and gradients, reassembled at their global
// positions, equal AttentionForward's, AttentionLogSumExp's and AttentionBackward's, with and
// without dropout, for cp = 1, 2 and 4.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/context_chunks.h"
#include "kernels/reference/ops.h"

namespace ptdp::kernels {
namespace {

TEST(ContextChunks, PositionsCoverTheSequenceOnce) {
  for (int cp : {1, 2, 4}) {
    const int64_t s = 16;
    std::vector<int> seen(s, 0);
    for (int r = 0; r < cp; ++r) {
      const ContextChunks c{s, cp, r};
      for (int64_t t = 0; t < c.Local(); ++t) {
        const int64_t g = c.Position(t);
        ++seen[size_t(g)];
        EXPECT_EQ(c.Owner(g), r);
        EXPECT_EQ(c.LocalOf(g), t);
      }
    }
    for (int64_t g = 0; g < s; ++g) EXPECT_EQ(seen[size_t(g)], 1) << "cp " << cp << " g " << g;
  }
  // cp 2, s 8: rank 0 holds positions 0 1 | 6 7, rank 1 holds 2 3 | 4 5.
  const ContextChunks r0{8, 2, 0}, r1{8, 2, 1};
  EXPECT_EQ(r0.Position(2), 6);
  EXPECT_EQ(r1.Position(0), 2);
  EXPECT_EQ(r1.Position(3), 5);
}

struct Case {
  int cp;
  double p;
};

class ContextAttention : public ::testing::TestWithParam<Case> {};

TEST_P(ContextAttention, RanksReassembleTheWholeSequence) {
  const int cp = GetParam().cp;
  const double p = GetParam().p;
  const int64_t b = 2, s = 16, h = 2, d = 4, heads_total = 6, head_begin = 2, batch_begin = 3;
  const uint64_t key = HashKey("context-attention");
  const int64_t S = s / cp;
  std::vector<double> qkv(size_t(b * s * h * 3 * d)), dout(size_t(b * s * h * d));
  FillNormal(qkv.data(), key, 0, int64_t(qkv.size()), 0.0, 1.0);
  FillNormal(dout.data(), key, 1 << 20, int64_t(dout.size()), 0.0, 1.0);

  // The whole sequence.
  std::vector<double> mask;
  if (p > 0) {
    mask.resize(size_t(b * h * s * s));
    FillAttentionDropoutMask(mask.data(), key, b, s, h, head_begin, heads_total, p, batch_begin);
  }
  std::vector<double> out(size_t(b * s * h * d)), att(size_t(b * h * s * s)),
      lse(size_t(b * h * s));
  std::vector<double> dqkv(qkv.size());
  AttentionForward(out.data(), att.data(), qkv.data(), p > 0 ? mask.data() : nullptr, b, s, h, d);
  AttentionLogSumExp(lse.data(), qkv.data(), b, s, h, d);
  AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), p > 0 ? mask.data() : nullptr,
                    b, s, h, d);

  // Each rank's rows of a [b][s][h][parts][d] tensor, in its local order.
  auto rows_of = [&](const std::vector<double>& whole, int rank, int64_t width) {
    const ContextChunks c{s, cp, rank};
    std::vector<double> local(size_t(b * S * width));
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t t = 0; t < S; ++t) {
        const double* from = whole.data() + (bi * s + c.Position(t)) * width;
        std::copy(from, from + width, local.data() + (bi * S + t) * width);
      }
    }
    return local;
  };
  std::vector<double> kv_all(size_t(cp * b * S * h * 2 * d));
  std::vector<std::vector<double>> local_qkv, local_out, local_dout, local_lse;
  for (int r = 0; r < cp; ++r) {
    local_qkv.push_back(rows_of(qkv, r, h * 3 * d));
    local_dout.push_back(rows_of(dout, r, h * d));
    ContextKvPack(kv_all.data() + r * b * S * h * 2 * d, local_qkv[r].data(), b * S, h, d);
  }
  ContextAttentionDims a{b, s, h, d, cp, 0, p, key, heads_total, head_begin, batch_begin};
  std::vector<std::vector<double>> dkv_sum(size_t(cp),
                                           std::vector<double>(size_t(b * S * h * 2 * d)));
  std::vector<std::vector<double>> local_dqkv;
  for (int r = 0; r < cp; ++r) {
    a.rank = r;
    local_out.emplace_back(size_t(b * S * h * d));
    local_lse.emplace_back(size_t(b * h * S));
    ContextAttentionForward(local_out[r].data(), local_lse[r].data(), local_qkv[r].data(),
                            kv_all.data(), a);
    local_dqkv.emplace_back(size_t(b * S * h * 3 * d), 0.0);
    std::vector<double> dkv(size_t(b * S * h * 2 * d));
    for (int src = 0; src < cp; ++src) {
      ContextAttentionBackward(local_dqkv[r].data(), dkv.data(), local_dout[r].data(),
                               local_out[r].data(), local_qkv[r].data(),
                               kv_all.data() + src * b * S * h * 2 * d, local_lse[r].data(), a,
                               src);
      for (size_t i = 0; i < dkv.size(); ++i) dkv_sum[size_t(src)][i] += dkv[i];
    }
  }
  for (int r = 0; r < cp; ++r) {
    ContextKvUnpack(local_dqkv[r].data(), dkv_sum[size_t(r)].data(), b * S, h, d);
    const ContextChunks c{s, cp, r};
    const std::vector<double> want_out = rows_of(out, r, h * d),
                              want_dqkv = rows_of(dqkv, r, h * 3 * d);
    for (size_t i = 0; i < want_out.size(); ++i) {
      ASSERT_NEAR(local_out[r][i], want_out[i], 1e-12) << "rank " << r << " out " << i;
    }
    for (size_t i = 0; i < want_dqkv.size(); ++i) {
      ASSERT_NEAR(local_dqkv[r][i], want_dqkv[i], 1e-11) << "rank " << r << " dqkv " << i;
    }
    for (int64_t bh = 0; bh < b * h; ++bh) {
      for (int64_t t = 0; t < S; ++t) {
        ASSERT_NEAR(local_lse[r][size_t(bh * S + t)], lse[size_t(bh * s + c.Position(t))], 1e-12);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpAndDropout, ContextAttention,
                         ::testing::Values(Case{1, 0.0}, Case{2, 0.0}, Case{2, 0.2}, Case{4, 0.2}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "cp" + std::to_string(i.param.cp) +
                                  (i.param.p > 0 ? "_dropout" : "");
                         });

}  // namespace
}  // namespace ptdp::kernels
