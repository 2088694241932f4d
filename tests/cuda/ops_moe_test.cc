// CudaOps against CpuOps for the mixture of experts' ops (runtime/cuda/cuda_ops_moe.cc), on the
// fixture of ops_fixture.h (instantiated in fp32 and bf16 by ops_test.cc); SKIPPED without a GPU.
#include "tests/cuda/ops_fixture.h"

namespace ptdp::runtime::cuda {

// The mixture of experts' ops (cuda_ops_moe.cc: the dtypes each takes): the router (fp32 logits,
// pre-softmax and group-limited), its backward, the losses' gradients and sums, the row moves in
// the compute type and the shared expert's gate. The chosen experts are the CPU's, exactly.
TEST_P(CudaOpsTest, MixtureOfExperts) {
  const int64_t n = 37, E = 8, k = 2, w = 24;
  const MoeRouting r{E, k, 4, 2, true, false, 1.0, {}};
  Pair logits = Rand(n * E, DType::kFp32, -2, 2), probs = Make(n * k, DType::kFp32);
  Pair index = Make(n * k, DType::kI32), dprobs = Rand(n * k, DType::kFp32);
  Pair dl = Zeros(n * E, DType::kFp32), counts = Rand(E, DType::kFp32, 1, 9);
  Pair sq = Make(1, DType::kFp32), sums = Make(E, DType::kFp32), x = Rand(n * w, act());
  std::vector<double> rows(size_t(n * k)), slot(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = double((i * 5) % n), slot[i] = double(i);
  Pair rws = Put(rows, DType::kI32), slt = Put(slot, DType::kI32), moved = Make(n * k * w, act());
  Pair scaled = Make(n * k * w, act()), dots = Zeros(n * k, DType::kFp32);
  Pair comb = Zeros(n * w, act()), gate = Make(n, DType::kFp32), dlogit = Make(n, act());
  Pair glogit = Rand(n, act(), -3, 3);
  Run([&](Ops* o, auto pick) {
    PTDP_RETURN_IF_ERROR(
        o->MoeRouterTopK(pick(probs).ref(), pick(index).ref(), pick(logits).cref(), n, r));
    PTDP_RETURN_IF_ERROR(o->MoeRouterTopKBackward(pick(dl).ref(), pick(dprobs).cref(),
                                                  pick(probs).cref(), pick(index).cref(),
                                                  pick(logits).cref(), n, r));
    PTDP_RETURN_IF_ERROR(o->MoeAuxLossBackward(pick(dl).ref(), pick(logits).cref(),
                                               pick(counts).cref(), 0.3, n, E, {}));
    PTDP_RETURN_IF_ERROR(
        o->MoeZLossBackward(pick(dl).ref(), pick(sq).ref(), pick(logits).cref(), 0.1, n, E));
    PTDP_RETURN_IF_ERROR(o->MoeRouterProbSums(pick(sums).ref(), pick(logits).cref(), n, E, {}));
    PTDP_RETURN_IF_ERROR(
        o->MoePermuteRows(pick(moved).ref(), pick(x).cref(), pick(rws).cref(), n * k, w));
    PTDP_RETURN_IF_ERROR(o->MoeScaleRows(pick(scaled).ref(), pick(moved).cref(), pick(probs).cref(),
                                         pick(slt).cref(), n * k, w));
    PTDP_RETURN_IF_ERROR(o->MoeRowDots(pick(dots).ref(), pick(scaled).cref(), pick(moved).cref(),
                                       pick(slt).cref(), n * k, w));
    PTDP_RETURN_IF_ERROR(
        o->MoeUnpermuteAddRows(pick(comb).ref(), pick(scaled).cref(), pick(rws).cref(), n * k, w));
    PTDP_RETURN_IF_ERROR(o->MoeGateSigmoid(pick(gate).ref(), pick(glogit).cref(), n));
    return o->MoeGateSigmoidBackward(pick(dlogit).ref(), pick(gate).cref(), pick(dprobs).cref(), n);
  });
  ExpectEqual(index, "router index");
  Expect(probs, E, "router probs");
  Expect(dl, 3 * E, "router dlogits");
  Expect(sq, n, "z-loss sum");
  Expect(sums, n, "probability sums");
  ExpectEqual(moved, "permuted rows");
  Expect(scaled, 1, "scaled rows");
  Expect(dots, w, "row dots");
  Expect(comb, k, "combined rows");
  Expect(gate, 1, "gate");
  Expect(dlogit, 1, "gate dlogit");
}

// DeepSeek-V3's router (sigmoid scores over the top k's sum, scaled by 2.5, group-limited, the
// choice moved by an expert bias on the device): the same experts as the CPU's and its backward,
// and the per-sequence auxiliary loss over normalised sigmoids.
TEST_P(CudaOpsTest, SigmoidRouterWithExpertBiasAndSequenceAuxLoss) {
  const int64_t n = 37, E = 8, k = 2;
  Pair logits = Rand(n * E, DType::kFp32, -2, 2), probs = Make(n * k, DType::kFp32);
  Pair index = Make(n * k, DType::kI32), dprobs = Rand(n * k, DType::kFp32);
  Pair dl = Zeros(n * E, DType::kFp32), bias = Rand(E, DType::kFp32, -0.1, 0.1);
  // The auxiliary loss per sequence of 8 rows (the rows from 3 into the first: 5 groups) over the
  // sigmoids (seq_aux_loss under DeepSeek-V3's scores).
  const MoeAuxGrouping g{8, 3, true};
  Pair counts = Rand(5 * E, DType::kFp32, 1, 9), sums = Make(5 * E, DType::kFp32);
  Run([&](Ops* o, auto pick) {
    const MoeRouting r{E, k, 4, 2, false, true, 2.5, pick(bias).cref()};
    PTDP_RETURN_IF_ERROR(
        o->MoeRouterTopK(pick(probs).ref(), pick(index).ref(), pick(logits).cref(), n, r));
    PTDP_RETURN_IF_ERROR(o->MoeRouterTopKBackward(pick(dl).ref(), pick(dprobs).cref(),
                                                  pick(probs).cref(), pick(index).cref(),
                                                  pick(logits).cref(), n, r));
    PTDP_RETURN_IF_ERROR(o->MoeAuxLossBackward(pick(dl).ref(), pick(logits).cref(),
                                               pick(counts).cref(), 0.3, n, E, g));
    return o->MoeRouterProbSums(pick(sums).ref(), pick(logits).cref(), n, E, g);
  });
  ExpectEqual(index, "router index");
  Expect(probs, E, "router probs");
  Expect(dl, 2 * E, "router dlogits");
  Expect(sums, n, "per-sequence sigmoid sums");
}

}  // namespace ptdp::runtime::cuda
