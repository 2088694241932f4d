// CudaOps against CpuOps: every Ops entry on the same inputs, in fp32 and bf16 (label gpu; every
// test GTEST_SKIP()s when no CUDA device is visible, so it reports SKIPPED, never passed). The
// fixture and the tolerance: ops_fixture.h; the mixture of experts' ops: ops_moe_test.cc.
#include "tests/cuda/ops_fixture.h"

namespace ptdp::runtime::cuda {

// c = 96 and 1000 take the 16-byte pack kernels (runtime/cuda/layernorm_kernels.h; at 1000 a lane
// walks several packs and the parameter gradient spans several column blocks), c = 99 (not a
// multiple of the pack width) kernels/cuda's scalar ones.
TEST_P(CudaOpsTest, LayerNorm) {
  for (const int64_t c : {int64_t{96}, int64_t{1000}, int64_t{99}}) {
    SCOPED_TRACE("c = " + std::to_string(c));
    LayerNormCase(c);
  }
}

void CudaOpsTest::LayerNormCase(int64_t c) {
  const int64_t n = 37;
  Pair x = Rand(n * c, act()), w = Rand(c, act(), 0.5, 1.5), b = Rand(c, act());
  Pair out = Make(n * c, act()), mean = Make(n, DType::kFp32), rstd = Make(n, DType::kFp32);
  Run([&](Ops* o, auto pick) {
    return o->LayerNormForward(pick(out).ref(), pick(mean).ref(), pick(rstd).ref(), pick(x).cref(),
                               pick(w).cref(), pick(b).cref(), n, c, 0.0);
  });
  Expect(out, c, "ln out");
  Expect(mean, c, "ln mean");
  Expect(rstd, c, "ln rstd");
  Pair dout = Rand(n * c, act()), dx = Rand(n * c, act());
  Pair dw = Rand(c, DType::kFp32), db = Rand(c, DType::kFp32);
  for (bool acc : {false, true}) {
    Run([&](Ops* o, auto pick) {
      return o->LayerNormBackward(pick(dx).ref(), pick(dw).ref(), pick(db).ref(), pick(dout).cref(),
                                  pick(x).cref(), pick(w).cref(), pick(mean).cref(),
                                  pick(rstd).cref(), n, c, acc, 0.0);
    });
    // Accumulating, the GPU rounds the part to bf16 before adding it: 2^-9 of |part| more.
    Expect(dx, c, "ln dx", 0, acc && bf16() ? 0x1p-9 * 4 * MaxAbs(dx) : 0);
    Expect(dw, n, "ln dw");
    Expect(db, n, "ln db");
  }
}

// The bias gradient (bias_grad.cu) at a training-sized row count: 16-byte packs where the width
// divides the columns (2056 bf16 and fp32; 20 fp32), kernels/cuda's ColumnSums where it does not
// (20 bf16), each accumulating into a non-zero fp32 gradient, against CpuOps.
TEST_P(CudaOpsTest, BiasGradientPacksAndFallback) {
  const int64_t n = 3001, c = 8;
  for (const int64_t oc : {int64_t(2056), int64_t(20)}) {
    SCOPED_TRACE(testing::Message() << "oc " << oc);
    Pair x = Rand(n * c, act()), dout = Rand(n * oc, act());
    Pair dw = Rand(oc * c, DType::kFp32), db = Rand(oc, DType::kFp32);
    Run([&](Ops* o, auto pick) {
      return o->LinearBackwardWeight(pick(dw).ref(), pick(db).ref(), pick(dout).cref(),
                                     pick(x).cref(), n, c, oc);
    });
    Expect(db, n, "bias gradient");
    Expect(dw, n, "weight gradient");
  }
}

TEST_P(CudaOpsTest, Linear) {
  const int64_t n = 48, c = 64, oc = 80;  // oc % 8 == 0: bf16 can take the GeLU epilogue
  Pair x = Rand(n * c, act()), w = Rand(oc * c, act()), bias = Rand(oc, act());
  Pair out = Make(n * oc, act()), gelu = Make(n * oc, act()), logits = Make(n * oc, DType::kFp32);
  auto* cuda_ops = dynamic_cast<CudaOps*>(gpu_->ops());
  ASSERT_NE(cuda_ops, nullptr);
  // bf16: cuBLASLt's GELU_AUX_BIAS epilogue, then the GEMM and a packed GeLU pass (fp32 has one).
  for (const bool epilogue : {true, false}) {
    SCOPED_TRACE(epilogue ? "GeLU epilogue" : "GeLU pass");
    cuda_ops->set_gelu_epilogue(epilogue);
    Run([&](Ops* o, auto pick) {
      PTDP_RETURN_IF_ERROR(o->LinearForward(pick(out).ref(), pick(gelu).ref(), pick(x).cref(),
                                            pick(w).cref(), pick(bias).cref(), n, c, oc));
      // The output layer: 16-bit inputs, fp32 logits, no bias.
      return o->LinearForward(pick(logits).ref(), {}, pick(x).cref(), pick(w).cref(), {}, n, c, oc);
    });
    Expect(out, c, "linear out");
    // The GPU's GeLU pass reads the rounded pre-activation (the CPU's its fp32 value, as the
    // epilogue does): |GeLU'| <= 1.13 times 2^-9 |out|.
    Expect(gelu, c, "linear gelu", 0, bf16() ? 1.13 * 0x1p-9 * MaxAbs(out) : 0);
    Expect(logits, c, "linear logits");
  }
  cuda_ops->set_gelu_epilogue(true);
  Pair dout = Rand(n * oc, act()), dx = Make(n * c, act());
  Pair dw = Rand(oc * c, DType::kFp32), db = Rand(oc, DType::kFp32);
  Pair dpre = Make(n * oc, act());
  Run([&](Ops* o, auto pick) {
    PTDP_RETURN_IF_ERROR(
        o->LinearBackwardData(pick(dx).ref(), pick(dout).cref(), pick(w).cref(), n, c, oc));
    PTDP_RETURN_IF_ERROR(o->LinearBackwardWeight(pick(dw).ref(), pick(db).ref(), pick(dout).cref(),
                                                 pick(x).cref(), n, c, oc));
    return o->GeluBackward(pick(dpre).ref(), pick(out).cref(), pick(dout).cref(), n * oc);
  });
  Expect(dx, oc, "linear dx");
  Expect(dw, n, "linear dw");
  Expect(db, n, "linear dbias");
  // The GPU evaluates GeLU' in fp32, the CPU in double: about ten roundings and tanhf's 2 ulp,
  // relative to the formula's terms (whose sum cancels near GeLU's minimum), bounded by
  // 1 + k |x| (1 + 3a x^2), times |dout|: 16 ulp of fp32 of that (found on an H200, where the
  // k = 1 bound alone failed by 3 ulp at -0.77).
  double gelu_abs = 0;
  const std::vector<double> pre_v = Get(&cpu_, out.c), dout_v = Get(&cpu_, dout.c);
  for (size_t i = 0; i < pre_v.size(); ++i) {
    const double x = pre_v[i];
    gelu_abs = std::max(gelu_abs, 16 * 0x1p-24 * std::fabs(dout_v[i]) *
                                      (1.0 + 0.7978845608 * std::fabs(x) * (1 + 0.134145 * x * x)));
  }
  Expect(dpre, 1, "gelu backward", 0, gelu_abs);

  // dpre2 = GeLU'(x) * (dout W), fused where the backend says so (bf16 on the GPU: the DGELU
  // epilogue), else the two ops. The fused form applies GeLU' to the fp32 product, the CPU to its
  // bf16 rounding: 2^-9 of |dpre2| more, relative; GeLU' itself as above.
  Pair tmp = Make(n * c, act()), dpre2 = Make(n * c, act());
  for (const bool epilogue : {true, false}) {
    SCOPED_TRACE(epilogue ? "dGeLU epilogue" : "dGeLU pass");
    cuda_ops->set_gelu_epilogue(epilogue);
    if (bf16()) {  // braces: EXPECT_EQ is an if-else of its own (-Wdangling-else)
      EXPECT_EQ(cuda_ops->FusesLinearGeluBackward(DType::kBf16), epilogue);
    }
    Run([&](Ops* o, auto pick) {
      if (o->FusesLinearGeluBackward(act())) {
        return o->LinearBackwardDataGelu(pick(dpre2).ref(), pick(dout).cref(), pick(w).cref(),
                                         pick(x).cref(), n, c, oc);
      }
      PTDP_RETURN_IF_ERROR(
          o->LinearBackwardData(pick(tmp).ref(), pick(dout).cref(), pick(w).cref(), n, c, oc));
      return o->GeluBackward(pick(dpre2).ref(), pick(x).cref(), pick(tmp).cref(), n * c);
    });
    double fused_abs = 0;
    const std::vector<double> x_v = Get(&cpu_, x.c), dg_v = Get(&cpu_, tmp.c);
    for (size_t i = 0; i < x_v.size(); ++i) {
      const double xi = x_v[i];
      fused_abs =
          std::max(fused_abs, 16 * 0x1p-24 * std::fabs(dg_v[i]) *
                                  (1.0 + 0.7978845608 * std::fabs(xi) * (1 + 0.134145 * xi * xi)));
    }
    Expect(dpre2, oc, "linear dx + gelu backward", bf16() ? 0x1p-9 : 0, fused_abs);
  }
  cuda_ops->set_gelu_epilogue(true);
}

TEST_P(CudaOpsTest, DropoutResidualAndAdd) {
  const int64_t n = 33, c = 64;
  Pair x = Rand(n * c, act()), bias = Rand(c, act()), res = Rand(n * c, act());
  Pair out = Make(n * c, act()), mask = Make(n * c, DType::kU8);
  const DropoutSpec drop{0.25, 777, 1000};
  Run([&](Ops* o, auto pick) {
    return o->BiasDropoutResidual(pick(out).ref(), pick(mask).ref(), pick(x).cref(),
                                  pick(bias).cref(), pick(res).cref(), n, c, drop);
  });
  ExpectEqual(mask, "hidden dropout mask");
  Expect(out, 3, "bias dropout residual");
  Pair dy = Rand(n * c, act()), dx = Make(n * c, act()), db = Rand(c, DType::kFp32);
  Run([&](Ops* o, auto pick) {
    return o->DropoutBackward(pick(dx).ref(), pick(db).ref(), pick(dy).cref(), pick(mask).cref(), n,
                              c, drop.p);
  });
  Expect(dx, 1, "dropout backward");
  // The GPU sums the rounded dx (the CPU its fp32 values): n roundings of 2^-9 |dx|.
  Expect(db, n, "dropout dbias", 0, bf16() ? double(n) * 0x1p-9 * MaxAbs(dx) : 0);
  Pair y = Rand(n * c, act()), ymask = Make(n * c, DType::kU8), sum = Make(n * c, act());
  Run([&](Ops* o, auto pick) {
    PTDP_RETURN_IF_ERROR(o->Dropout(pick(y).ref(), pick(ymask).ref(), drop));
    return o->Add(pick(sum).ref(), pick(y).cref(), pick(x).cref());
  });
  ExpectEqual(ymask, "dropout mask");
  Expect(y, 1, "dropout");
  Expect(sum, 1, "add");
}

TEST_P(CudaOpsTest, Attention) {
  // kernels/cuda's attention against the CPU, masks and all; bf16 would otherwise run cuDNN,
  // whose dropout masks are its own (cudnn_attention_test.cc compares cuDNN with this path).
  auto* cuda_ops = dynamic_cast<CudaOps*>(gpu_->ops());
  ASSERT_NE(cuda_ops, nullptr);
  cuda_ops->set_attention_path(AttentionPath::kReference);
  AttentionShape a;
  a.b = 2, a.s = 40, a.heads_local = 2, a.head_dim = 32, a.heads_total = 4, a.head_begin = 2;
  a.batch_begin = 3;
  const int64_t N = a.b * a.s, hd = a.heads_local * a.head_dim,
                ss = a.b * a.heads_local * a.s * a.s;
  for (double p : {0.0, 0.1}) {
    Pair qkv = Rand(N * 3 * hd, act()), out = Make(N * hd, act());
    Pair probs = Make(ss, act()), mask = Make(p > 0 ? ss : 0, DType::kU8);
    Pair dropped = Make(p > 0 ? ss : 0, act());
    const DropoutSpec drop{p, 4242, 0};
    auto stash = [&](auto pick) {
      AttentionStash st;
      st.probs = pick(probs).ref();
      st.mask = pick(mask).ref();
      st.dropped = pick(dropped).ref();
      st.out = pick(out).cref();
      st.dropout_key = drop.key;
      return st;
    };
    Run([&](Ops* o, auto pick) {
      AttentionStash st = stash(pick);
      return o->AttentionForward(pick(out).ref(), &st, pick(qkv).cref(), a, drop);
    });
    Expect(out, a.s, "attention out", 4.0 / 256 * (act() == DType::kBf16));
    Pair dout = Rand(N * hd, act()), dqkv = Make(N * 3 * hd, act());
    Run([&](Ops* o, auto pick) {
      const AttentionStash st = stash(pick);
      return o->AttentionBackward(pick(dqkv).ref(), pick(dout).cref(), pick(qkv).cref(), st, a, p);
    });
    // The CPU's backward reads its probabilities rounded to bf16 (the stash), the GPU recomputes
    // them in fp32: every P-weighted sum moves by up to 2^-9 of its terms; allowed as four such
    // half-ulps of the largest element (the sums here have s = 40 terms of mixed sign).
    Expect(dqkv, a.s * a.head_dim, "attention dqkv", 4.0 / 256 * bf16(),
           bf16() ? 4 * 0x1p-9 * MaxAbs(dqkv) : 0);
  }
}

TEST_P(CudaOpsTest, Embedding) {
  const int64_t b = 2, s = 16, c = 32, V = 50, begin = 20, end = 45;
  std::vector<double> tok(size_t(b * s));
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = double((i * 7) % V);
  Pair tokens = Put(tok, DType::kI32), wte = Rand((end - begin) * c, act()),
       wpe = Rand(s * c, act());
  Pair out = Make(b * s * c, act());
  Pair dwte = Rand((end - begin) * c, DType::kFp32), dwpe = Rand(s * c, DType::kFp32);
  Pair dout = Rand(b * s * c, act());
  Run([&](Ops* o, auto pick) {
    PTDP_RETURN_IF_ERROR(o->EmbeddingForward(pick(out).ref(), pick(tokens).cref(), pick(wte).cref(),
                                             pick(wpe).cref(), b, s, c, begin, end));
    return o->EmbeddingBackward(pick(dwte).ref(), pick(dwpe).ref(), pick(dout).cref(),
                                pick(tokens).cref(), b, s, c, begin, end);
  });
  Expect(out, 2, "embedding out");
  Expect(dwte, b * s, "embedding dwte");
  Expect(dwpe, b, "embedding dwpe");
}

// The cross-entropy's steps on one shard: the one-pass stats, the rescale to a group max (here
// values above the local one, as another rank's logits would give), the loss and the gradient.
TEST_P(CudaOpsTest, CrossEntropy) {
  // {v_local, begin, real}: 64 columns at 64 of 100 real (the last 28 padding; 16-byte packs, no
  // tail); 1000 columns at 0 of 997 (packs and a partial one); 333 at 333 of 1000 (rows off
  // 16-byte boundaries: one logit at a time); 256 at 1024 of 1000 (padding only: max -inf, sum 0).
  const int64_t cases[][3] = {{64, 64, 100}, {1000, 0, 997}, {333, 333, 1000}, {256, 1024, 1000}};
  for (const auto& [v_local, begin, real] : cases) {
    SCOPED_TRACE("v_local " + std::to_string(v_local) + " begin " + std::to_string(begin));
    VocabShard v;
    v.rows = 24, v.v_local = v_local, v.begin = begin, v.real = real;
    std::vector<double> tg(size_t(v.rows));
    // Every fifth row without a target (-1: out of the loss and of the gradient).
    for (size_t i = 0; i < tg.size(); ++i) tg[i] = i % 5 == 4 ? -1.0 : double((i * 13) % real);
    Pair targets = Put(tg, DType::kI32), logits = Rand(v.rows * v.v_local, DType::kFp32, -4, 4);
    Pair row_max = Make(v.rows, DType::kFp32), sums = Make(2 * v.rows, DType::kFp32);
    Pair group_max = Rand(v.rows, DType::kFp32, 4, 5);
    Pair row_sum = Make(v.rows, DType::kFp32), loss = Put({0.5}, DType::kFp64);
    Pair dlogits = Make(v.rows * v.v_local, act());
    Pair local_sums = Make(2 * v.rows, DType::kFp32);
    Run([&](Ops* o, auto pick) {
      PTDP_RETURN_IF_ERROR(o->CrossEntropyLocalStats(pick(row_max).ref(), pick(sums).ref(),
                                                     pick(logits).cref(), pick(targets).cref(), v));
      PTDP_RETURN_IF_ERROR(o->Cast(pick(local_sums).ref(), pick(sums).cref()));
      PTDP_RETURN_IF_ERROR(o->CrossEntropyRescaleSums(pick(sums).ref(), pick(row_max).cref(),
                                                      pick(group_max).cref(), v));
      if (begin >= real) return Status::Ok();  // no real column: no softmax to take
      PTDP_RETURN_IF_ERROR(o->CrossEntropyLoss(pick(row_sum).ref(), pick(loss).ref(),
                                               pick(local_sums).cref(), pick(row_max).cref(),
                                               pick(targets).cref(), v));
      return o->CrossEntropyBackward(pick(dlogits).ref(), pick(logits).cref(), pick(row_max).cref(),
                                     pick(row_sum).cref(), pick(targets).cref(), 0.125, v);
    });
    ExpectEqual(row_max, "ce row max");
    Expect(local_sums, v.v_local, "ce local sums");
    Expect(sums, v.v_local, "ce rescaled sums");
    if (begin >= real) {
      for (double x : Get(gpu_.get(), sums.g)) EXPECT_EQ(x, 0.0) << "padding-only shard";
      continue;
    }
    Expect(row_sum, v.v_local, "ce row sum");
    Expect(loss, v.rows * v.v_local, "ce loss sum");
    Expect(dlogits, v.v_local, "ce dlogits");
  }
}

TEST_P(CudaOpsTest, OptimizerReductionsCastsFills) {
  const int64_t n = 1000;
  Pair param = Rand(n, DType::kFp32), grad = Rand(n, DType::kFp32);
  Pair m = Rand(n, DType::kFp32), v = Rand(n, DType::kFp32, 0, 1);
  Pair copy = Make(n, act());
  AdamWHyper h;
  h.lr = 1e-3, h.weight_decay = 0.1, h.step = 3;
  h.grad_scale = 0.37;  // a clipping coefficient, applied inside the update on both backends
  Pair sq = Put({1.0}, DType::kFp64), flag = Put({0.0}, DType::kFp64);
  Run([&](Ops* o, auto pick) {
    PTDP_RETURN_IF_ERROR(o->AdamW(pick(param).ref(),
                                  act() == DType::kFp32 ? TensorRef{} : pick(copy).ref(),
                                  pick(grad).cref(), pick(m).ref(), pick(v).ref(), h));
    PTDP_RETURN_IF_ERROR(o->SumSquares(pick(sq).ref(), pick(grad).cref()));
    PTDP_RETURN_IF_ERROR(o->Scale(pick(grad).ref(), 0.5));
    return o->FlagNonFinite(pick(flag).ref(), pick(grad).cref());
  });
  Expect(param, 1, "adamw param", 1e-6);
  Expect(m, 1, "adamw m");
  Expect(v, 1, "adamw v");
  if (act() != DType::kFp32) Expect(copy, 1, "adamw compute copy");
  Expect(sq, n, "sum of squares");
  Expect(grad, 1, "scale");
  EXPECT_EQ(Get(gpu_.get(), flag.g)[0], 0.0);
  std::vector<double> bad(16, 1.0);
  bad[11] = std::nan("");
  Pair nonfinite = Put(bad, act()),
       cast = Make(16, act() == DType::kFp32 ? DType::kBf16 : DType::kFp32);
  Pair fill = Make(77, act()), normal = Make(6 * 5, act()), u8 = Make(9, DType::kU8);
  Run([&](Ops* o, auto pick) {
    PTDP_RETURN_IF_ERROR(o->FlagNonFinite(pick(flag).ref(), pick(nonfinite).cref()));
    PTDP_RETURN_IF_ERROR(o->Cast(pick(cast).ref(), ConstRef(pick(param).data(), DType::kFp32, 16)));
    PTDP_RETURN_IF_ERROR(o->Fill(pick(fill).ref(), 0.3));
    PTDP_RETURN_IF_ERROR(o->Fill(pick(u8).ref(), 1));
    // A column block (cols 2..6 of 9) of rows 4..9: the counter generator's global indices.
    return o->FillNormal(pick(normal).ref(), 99, 5, 9, 2, 4, 0.1, 0.02);
  });
  EXPECT_EQ(Get(gpu_.get(), flag.g)[0], 1.0);
  ExpectEqual(cast, "cast");
  ExpectEqual(fill, "fill");
  ExpectEqual(u8, "fill u8");
  Expect(normal, 1, "fill normal", 1e-6);
}

// AdamWMany and SumSquaresMany in one launch each against CudaOps' per-tensor loop
// (set_multi_tensor(false)) on the same values: AdamW bit for bit over three steps with the cached
// tables (one upload), then after the tensor set changes (uploaded again); the sum of squares
// within 1e-6 (the per-tensor kernel's fp32 rounding; tests/kernels/cuda_multi_tensor_test.cc).
TEST_P(CudaOpsTest, MultiTensorOptimizerMatchesPerTensor) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(gpu_->ops());
  ASSERT_NE(cuda_ops, nullptr);
  const std::vector<int64_t> counts = {1, 7, 8, 4099, 301, 65541};
  const int64_t misaligned = 4;  // this tensor's views start one element into their buffers
  std::vector<Pair> state[2];    // [path][5 k + {param, grad, m, v, copy}], GPU sides used
  std::vector<AdamWTensor> tensors[2];
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t shift = k == misaligned ? 1 : 0, n = counts[k] + shift;
    std::vector<std::vector<double>> values(4);
    for (auto& x : values) {
      std::uniform_real_distribution<double> u(-1, 1);
      for (int64_t i = 0; i < n; ++i) x.push_back(u(rng_));
    }
    for (double& x : values[3]) x *= x;  // v >= 0
    for (int path = 0; path < 2; ++path) {
      for (const auto& x : values) state[path].push_back(Put(x, DType::kFp32));
      state[path].push_back(Zeros(n, act()));
      auto view = [&](int i) {
        Tensor& t = state[path][5 * k + i].g;
        return TensorRef{static_cast<char*>(t.data()) + shift * DTypeBytes(t.dtype()), t.dtype(),
                         counts[k]};
      };
      tensors[path].push_back({view(0), bf16() ? view(4) : TensorRef{}, view(1), view(2), view(3),
                               k % 2 == 0 ? 0.1 : 0.0});
    }
  }
  AdamWHyper h;
  h.lr = 1e-3;
  h.grad_scale = 0.37;
  auto step = [&](int64_t s) {
    h.step = s;
    cuda_ops->set_multi_tensor(true);
    const Status a = gpu_->ops()->AdamWMany(tensors[0], h);
    cuda_ops->set_multi_tensor(false);
    const Status b = gpu_->ops()->AdamWMany(tensors[1], h);
    cuda_ops->set_multi_tensor(true);
    ASSERT_TRUE(a.ok() && b.ok()) << a.ToString() << " " << b.ToString();
    ASSERT_TRUE(gpu_->Synchronize().ok());
  };
  auto expect_identical = [&] {
    for (size_t i = 0; i < state[0].size(); ++i) {
      EXPECT_EQ(Get(gpu_.get(), state[0][i].g), Get(gpu_.get(), state[1][i].g))
          << "tensor " << i / 5 << " array " << i % 5;
    }
  };
  const int64_t uploads = cuda_ops->multi_tensor_uploads();
  for (int64_t s = 1; s <= 3; ++s) step(s);
  EXPECT_EQ(cuda_ops->multi_tensor_uploads(), uploads + 1) << "the table is cached";
  expect_identical();
  tensors[0].pop_back();  // a changed tensor set: uploaded again
  tensors[1].pop_back();
  step(4);
  EXPECT_EQ(cuda_ops->multi_tensor_uploads(), uploads + 2) << "the table is rebuilt";
  expect_identical();

  std::vector<ConstRef> grads;
  for (const AdamWTensor& t : tensors[0]) grads.push_back(t.grad);
  Pair sums[2] = {Put({0.0}, DType::kFp64), Put({0.0}, DType::kFp64)};
  cuda_ops->set_multi_tensor(false);
  ASSERT_TRUE(gpu_->ops()->SumSquaresMany(sums[1].g.ref(), grads).ok());
  cuda_ops->set_multi_tensor(true);
  ASSERT_TRUE(gpu_->ops()->SumSquaresMany(sums[0].g.ref(), grads).ok());
  const double multi = Get(gpu_.get(), sums[0].g)[0], loop = Get(gpu_.get(), sums[1].g)[0];
  EXPECT_GT(multi, 0.0);
  EXPECT_LE(std::fabs(multi - loop), 1e-6 * multi);
  EXPECT_EQ(cuda_ops->multi_tensor_uploads(), uploads + 3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOpsTest, ::testing::Values(DType::kFp32, DType::kBf16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(CudaOpsFp16Test, Fp16ComputeIsRefusedByName) {
  PTDP_REQUIRE_GPU();
  auto dev = CudaDevice::Create(0);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  auto x = Tensor::Make(dev->get(), 4, DType::kFp16, MemTag::kWorkspace);
  ASSERT_TRUE(x.ok());
  const Status st = (*dev)->ops()->Add(x->ref(), x->cref(), x->cref());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fp16"), std::string::npos) << st.message();
}

}  // namespace ptdp::runtime::cuda
