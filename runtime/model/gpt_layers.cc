#include "runtime/model/gpt_layers.h"

#include <cmath>
#include <type_traits>

#include "kernels/reference/ops.h"

namespace ptdp::runtime {
namespace k = ::ptdp::kernels;

uint64_t DropoutCtx::Key(const std::string& site) const {
  // The site's hash, mixed with the step so each iteration draws fresh masks.
  return k::HashKey(site.c_str()) ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(step + 1));
}

namespace {

// The tensor group's all-reduces; a group of one (or none) is the identity.
template <typename T>
Status TpAllReduceSum(Communicator* tp, T* x, int64_t n) {
  if (tp == nullptr || tp->size() == 1) return Status::Ok();
  if constexpr (std::is_same_v<T, float>) {
    return tp->AllReduceSum(x, n, DType::kFp32);
  } else {
    return Status::Internal("tensor-parallel collectives move fp32 only");
  }
}
template <typename T>
Status TpAllReduceMax(Communicator* tp, T* x, int64_t n) {
  if (tp == nullptr || tp->size() == 1) return Status::Ok();
  if constexpr (std::is_same_v<T, float>) {
    return tp->AllReduceMax(x, n, DType::kFp32);
  } else {
    return Status::Internal("tensor-parallel collectives move fp32 only");
  }
}

template <typename T>
Result<Buffer<T>> Act(Device* dev, int64_t n) {
  return Buffer<T>::Make(dev, n, MemTag::kActivations);
}
template <typename T>
Result<Buffer<T>> Tmp(Device* dev, int64_t n) {
  return Buffer<T>::Make(dev, n, MemTag::kWorkspace);
}

template <typename T>
void AddBiasRows(T* x, const T* bias, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) x[i * c + j] += bias[j];
}

// mask over the hidden elements [N][h] of a microbatch, indexed globally by (sequence, position,
// col).
template <typename T>
void HiddenMask(T* mask, const LayerDims& d, const DropoutCtx& drop, const std::string& site) {
  k::FillDropoutMask(mask, drop.Key(site), static_cast<uint64_t>(drop.seq0 * d.s * d.h),
                     d.N() * d.h, drop.p);
}

// mask over attention probabilities [b][a/t][s][s], indexed by (sequence, GLOBAL head, i, j).
template <typename T>
void AttentionMask(T* mask, const LayerDims& d, const DropoutCtx& drop, const std::string& site) {
  const uint64_t key = drop.Key(site);
  const int64_t ss = d.s * d.s;
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t hh = 0; hh < d.heads_local; ++hh) {
      const int64_t first = ((drop.seq0 + bi) * d.heads + d.head0 + hh) * ss;
      k::FillDropoutMask(mask + (bi * d.heads_local + hh) * ss, key, static_cast<uint64_t>(first),
                         ss, drop.p);
    }
  }
}

std::string Site(int layer, const char* what) {
  return "layer" + std::to_string(layer) + "." + what;
}

}  // namespace

template <typename T>
Status AllocLayerInput(Device* dev, const LayerDims& d, LayerStash<T>* st) {
  PTDP_ASSIGN_OR_RETURN(st->x, Act<T>(dev, d.N() * d.h));
  return Status::Ok();
}

template <typename T>
void DropLayerActivations(LayerStash<T>* st) {
  for (Buffer<T>* b :
       {&st->ln1_out, &st->ln1_mean, &st->ln1_rstd, &st->qkv, &st->att, &st->attn_out, &st->x2,
        &st->ln2_out, &st->ln2_mean, &st->ln2_rstd, &st->fc1_out, &st->gelu_out}) {
    b->Reset();
  }
}

template <typename T>
Status LayerForward(Device* dev, Communicator* tp, const LayerDims& d, const LayerWeights<T>& w,
                    const DropoutCtx& drop, int layer, LayerStash<T>* st, T* y) {
  const int64_t N = d.N(), h = d.h, D = d.D(), hl = d.heads_local, f = d.f_local;
  const int64_t hd = hl * D, qkv_cols = 3 * hd;
  PTDP_ASSIGN_OR_RETURN(st->ln1_out, Act<T>(dev, N * h));
  PTDP_ASSIGN_OR_RETURN(st->ln1_mean, Act<T>(dev, N));
  PTDP_ASSIGN_OR_RETURN(st->ln1_rstd, Act<T>(dev, N));
  k::LayerNormForward(st->ln1_out.data(), st->ln1_mean.data(), st->ln1_rstd.data(), st->x.data(),
                      w.ln1_w, w.ln1_b, N, h);
  PTDP_ASSIGN_OR_RETURN(st->qkv, Act<T>(dev, N * qkv_cols));
  k::MatmulForward(st->qkv.data(), st->ln1_out.data(), w.qkv_w, w.qkv_b, N, h, qkv_cols);
  PTDP_ASSIGN_OR_RETURN(st->att, Act<T>(dev, d.b * hl * d.s * d.s));
  PTDP_ASSIGN_OR_RETURN(st->attn_out, Act<T>(dev, N * hd));
  Buffer<T> amask;
  if (drop.p > 0) {
    PTDP_ASSIGN_OR_RETURN(amask, Tmp<T>(dev, d.b * hl * d.s * d.s));
    AttentionMask(amask.data(), d, drop, Site(layer, "attn"));
  }
  k::AttentionForward(st->attn_out.data(), st->att.data(), st->qkv.data(),
                      drop.p > 0 ? amask.data() : static_cast<const T*>(nullptr), d.b, d.s, hl, D);
  amask.Reset();
  // Row-parallel projection: partial sums, the g all-reduce, then the bias once.
  PTDP_ASSIGN_OR_RETURN(Buffer<T> proj, Tmp<T>(dev, N * h));
  k::MatmulForward(proj.data(), st->attn_out.data(), w.proj_w, static_cast<const T*>(nullptr), N,
                   hd, h);
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, proj.data(), N * h));
  AddBiasRows(proj.data(), w.proj_b, N, h);
  PTDP_ASSIGN_OR_RETURN(Buffer<T> hmask, Tmp<T>(dev, drop.p > 0 ? N * h : 0));
  if (drop.p > 0) {
    HiddenMask(hmask.data(), d, drop, Site(layer, "attn_residual"));
    k::Mul(proj.data(), proj.data(), hmask.data(), N * h);
  }
  PTDP_ASSIGN_OR_RETURN(st->x2, Act<T>(dev, N * h));
  k::Add(st->x2.data(), st->x.data(), proj.data(), N * h);
  proj.Reset();
  // MLP.
  PTDP_ASSIGN_OR_RETURN(st->ln2_out, Act<T>(dev, N * h));
  PTDP_ASSIGN_OR_RETURN(st->ln2_mean, Act<T>(dev, N));
  PTDP_ASSIGN_OR_RETURN(st->ln2_rstd, Act<T>(dev, N));
  k::LayerNormForward(st->ln2_out.data(), st->ln2_mean.data(), st->ln2_rstd.data(), st->x2.data(),
                      w.ln2_w, w.ln2_b, N, h);
  PTDP_ASSIGN_OR_RETURN(st->fc1_out, Act<T>(dev, N * f));
  k::MatmulForward(st->fc1_out.data(), st->ln2_out.data(), w.fc1_w, w.fc1_b, N, h, f);
  PTDP_ASSIGN_OR_RETURN(st->gelu_out, Act<T>(dev, N * f));
  k::GeluForward(st->gelu_out.data(), st->fc1_out.data(), N * f);
  PTDP_ASSIGN_OR_RETURN(Buffer<T> mlp, Tmp<T>(dev, N * h));
  k::MatmulForward(mlp.data(), st->gelu_out.data(), w.fc2_w, static_cast<const T*>(nullptr), N, f,
                   h);
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, mlp.data(), N * h));
  AddBiasRows(mlp.data(), w.fc2_b, N, h);
  if (drop.p > 0) {
    HiddenMask(hmask.data(), d, drop, Site(layer, "mlp_residual"));
    k::Mul(mlp.data(), mlp.data(), hmask.data(), N * h);
  }
  k::Add(y, st->x2.data(), mlp.data(), N * h);
  return Status::Ok();
}

template <typename T>
Status LayerBackward(Device* dev, Communicator* tp, const LayerDims& d, const LayerWeights<T>& w,
                     const LayerGrads<T>& g, const DropoutCtx& drop, int layer, LayerStash<T>* st,
                     const T* dy, T* dx) {
  const int64_t N = d.N(), h = d.h, D = d.D(), hl = d.heads_local, f = d.f_local;
  const int64_t hd = hl * D, qkv_cols = 3 * hd;
  PTDP_CHECK(!st->gelu_out.empty());
  // MLP branch: y = x2 + drop(fc2(gelu(fc1(ln2(x2)))) + b2).
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dbranch, Tmp<T>(dev, N * h));
  PTDP_ASSIGN_OR_RETURN(Buffer<T> hmask, Tmp<T>(dev, drop.p > 0 ? N * h : 0));
  if (drop.p > 0) {
    HiddenMask(hmask.data(), d, drop, Site(layer, "mlp_residual"));
    k::Mul(dbranch.data(), dy, hmask.data(), N * h);
  } else {
    dev->Copy(dbranch.data(), dy, N * h * Bytes(sizeof(T)));
  }
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dgelu, Tmp<T>(dev, N * f));
  k::MatmulBackward(dgelu.data(), g.fc2_w, g.fc2_b, dbranch.data(), st->gelu_out.data(), w.fc2_w, N,
                    f, h);
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dfc1, Tmp<T>(dev, N * f));
  k::GeluBackward(dfc1.data(), st->fc1_out.data(), dgelu.data(), N * f);
  dgelu.Reset();
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dln, Tmp<T>(dev, N * h));
  k::MatmulBackward(dln.data(), g.fc1_w, g.fc1_b, dfc1.data(), st->ln2_out.data(), w.fc1_w, N, h,
                    f);
  dfc1.Reset();
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, dln.data(), N * h));  // f's backward
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dx2, Tmp<T>(dev, N * h));
  k::LayerNormBackward(dx2.data(), g.ln2_w, g.ln2_b, dln.data(), st->x2.data(), w.ln2_w,
                       st->ln2_mean.data(), st->ln2_rstd.data(), N, h);
  k::Add(dx2.data(), dx2.data(), dy, N * h);  // the residual path
  // Attention branch: x2 = x + drop(proj(attn(qkv(ln1(x)))) + bp).
  if (drop.p > 0) {
    HiddenMask(hmask.data(), d, drop, Site(layer, "attn_residual"));
    k::Mul(dbranch.data(), dx2.data(), hmask.data(), N * h);
  } else {
    dev->Copy(dbranch.data(), dx2.data(), N * h * Bytes(sizeof(T)));
  }
  hmask.Reset();
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dattn, Tmp<T>(dev, N * hd));
  k::MatmulBackward(dattn.data(), g.proj_w, g.proj_b, dbranch.data(), st->attn_out.data(), w.proj_w,
                    N, hd, h);
  dbranch.Reset();
  Buffer<T> amask;
  if (drop.p > 0) {
    PTDP_ASSIGN_OR_RETURN(amask, Tmp<T>(dev, d.b * hl * d.s * d.s));
    AttentionMask(amask.data(), d, drop, Site(layer, "attn"));
  }
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dqkv, Tmp<T>(dev, N * qkv_cols));
  k::AttentionBackward(dqkv.data(), dattn.data(), st->qkv.data(), st->att.data(),
                       drop.p > 0 ? amask.data() : static_cast<const T*>(nullptr), d.b, d.s, hl, D);
  amask.Reset();
  dattn.Reset();
  k::MatmulBackward(dln.data(), g.qkv_w, g.qkv_b, dqkv.data(), st->ln1_out.data(), w.qkv_w, N, h,
                    qkv_cols);
  dqkv.Reset();
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, dln.data(), N * h));  // f's backward
  k::LayerNormBackward(dx, g.ln1_w, g.ln1_b, dln.data(), st->x.data(), w.ln1_w, st->ln1_mean.data(),
                       st->ln1_rstd.data(), N, h);
  k::Add(dx, dx, dx2.data(), N * h);
  DropLayerActivations(st);
  return Status::Ok();
}

template <typename T>
Status EmbeddingForwardTp(Communicator* tp, const LayerDims& d, const T* wte_local, const T* wpe,
                          const int32_t* tokens, const DropoutCtx& drop, T* out) {
  const bool first = tp == nullptr || tp->rank() == 0;  // one holder adds the positions
  k::EmbeddingForward(out, tokens, wte_local, first ? wpe : static_cast<const T*>(nullptr), d.b,
                      d.s, d.h, d.vocab_begin, d.vocab_begin + d.v_local);
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, out, d.N() * d.h));
  if (drop.p > 0) {
    std::vector<T> mask(static_cast<size_t>(d.N() * d.h));
    HiddenMask(mask.data(), d, drop, "embedding");
    k::Mul(out, out, mask.data(), d.N() * d.h);
  }
  return Status::Ok();
}

template <typename T>
Status EmbeddingBackwardTp(Device* dev, const LayerDims& d, T* dwte_local, T* dwpe,
                           const int32_t* tokens, const DropoutCtx& drop, const T* dout) {
  const T* g = dout;
  Buffer<T> masked;
  if (drop.p > 0) {
    PTDP_ASSIGN_OR_RETURN(masked, Tmp<T>(dev, d.N() * d.h));
    HiddenMask(masked.data(), d, drop, "embedding");
    k::Mul(masked.data(), dout, masked.data(), d.N() * d.h);
    g = masked.data();
  }
  // dout is replicated over the tensor group, so every rank computes the (replicated) wpe grad.
  k::EmbeddingBackward(dwte_local, dwpe, g, tokens, d.b, d.s, d.h, d.vocab_begin,
                       d.vocab_begin + d.v_local);
  return Status::Ok();
}

template <typename T>
Status HeadForward(Device* dev, Communicator* tp, const LayerDims& d, const T* lnf_w,
                   const T* lnf_b, const T* wout_local, const int32_t* targets, HeadStash<T>* st,
                   double* loss_sum) {
  const int64_t N = d.N(), h = d.h, V = d.v_local;
  PTDP_CHECK(!st->x.empty());
  PTDP_ASSIGN_OR_RETURN(st->ln_out, Act<T>(dev, N * h));
  PTDP_ASSIGN_OR_RETURN(st->ln_mean, Act<T>(dev, N));
  PTDP_ASSIGN_OR_RETURN(st->ln_rstd, Act<T>(dev, N));
  k::LayerNormForward(st->ln_out.data(), st->ln_mean.data(), st->ln_rstd.data(), st->x.data(),
                      lnf_w, lnf_b, N, h);
  PTDP_ASSIGN_OR_RETURN(st->logits, Act<T>(dev, N * V));
  k::MatmulForward(st->logits.data(), st->ln_out.data(), wout_local, static_cast<const T*>(nullptr),
                   N, h, V);
  PTDP_ASSIGN_OR_RETURN(st->row_max, Act<T>(dev, N));
  PTDP_ASSIGN_OR_RETURN(st->row_sum, Act<T>(dev, N));
  PTDP_ASSIGN_OR_RETURN(st->loss, Act<T>(dev, N));
  k::CrossEntropyLocalMax(st->row_max.data(), st->logits.data(), N, V, d.vocab_begin, d.vocab_real);
  PTDP_RETURN_IF_ERROR(TpAllReduceMax(tp, st->row_max.data(), N));
  PTDP_ASSIGN_OR_RETURN(Buffer<T> sums, Tmp<T>(dev, 2 * N));  // row sums, then target logits
  k::CrossEntropyLocalSums(sums.data(), sums.data() + N, st->logits.data(), st->row_max.data(),
                           targets, N, V, d.vocab_begin, d.vocab_real);
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, sums.data(), 2 * N));
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    st->row_sum[n] = sums[n];
    st->loss[n] = std::log(sums[n]) + st->row_max[n] - sums[N + n];
    total += static_cast<double>(st->loss[n]);
  }
  *loss_sum += total;
  return Status::Ok();
}

template <typename T>
Status HeadBackward(Device* dev, Communicator* tp, const LayerDims& d, const T* lnf_w,
                    const T* wout_local, T* dlnf_w, T* dlnf_b, T* dwout_local,
                    const int32_t* targets, double dloss, HeadStash<T>* st, T* dx) {
  const int64_t N = d.N(), h = d.h, V = d.v_local;
  PTDP_CHECK(!st->logits.empty());
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dl, Tmp<T>(dev, N));
  for (int64_t n = 0; n < N; ++n) dl[n] = static_cast<T>(dloss);
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dlogits, Tmp<T>(dev, N * V));
  k::CrossEntropyBackward(dlogits.data(), st->logits.data(), st->row_max.data(), st->row_sum.data(),
                          targets, dl.data(), N, V, d.vocab_begin, d.vocab_real);
  st->logits.Reset();
  PTDP_ASSIGN_OR_RETURN(Buffer<T> dln, Tmp<T>(dev, N * h));
  k::MatmulBackward(dln.data(), dwout_local, static_cast<T*>(nullptr), dlogits.data(),
                    st->ln_out.data(), wout_local, N, h, V);
  dlogits.Reset();
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(tp, dln.data(), N * h));
  k::LayerNormBackward(dx, dlnf_w, dlnf_b, dln.data(), st->x.data(), lnf_w, st->ln_mean.data(),
                       st->ln_rstd.data(), N, h);
  for (Buffer<T>* b :
       {&st->x, &st->ln_out, &st->ln_mean, &st->ln_rstd, &st->row_max, &st->row_sum, &st->loss}) {
    b->Reset();
  }
  return Status::Ok();
}

#define PTDP_INSTANTIATE_LAYERS(T)                                                                \
  template Status AllocLayerInput<T>(Device*, const LayerDims&, LayerStash<T>*);                  \
  template void DropLayerActivations<T>(LayerStash<T>*);                                          \
  template Status LayerForward<T>(Device*, Communicator*, const LayerDims&,                       \
                                  const LayerWeights<T>&, const DropoutCtx&, int, LayerStash<T>*, \
                                  T*);                                                            \
  template Status LayerBackward<T>(Device*, Communicator*, const LayerDims&,                      \
                                   const LayerWeights<T>&, const LayerGrads<T>&,                  \
                                   const DropoutCtx&, int, LayerStash<T>*, const T*, T*);         \
  template Status EmbeddingForwardTp<T>(Communicator*, const LayerDims&, const T*, const T*,      \
                                        const int32_t*, const DropoutCtx&, T*);                   \
  template Status EmbeddingBackwardTp<T>(Device*, const LayerDims&, T*, T*, const int32_t*,       \
                                         const DropoutCtx&, const T*);                            \
  template Status HeadForward<T>(Device*, Communicator*, const LayerDims&, const T*, const T*,    \
                                 const T*, const int32_t*, HeadStash<T>*, double*);               \
  template Status HeadBackward<T>(Device*, Communicator*, const LayerDims&, const T*, const T*,   \
                                  T*, T*, T*, const int32_t*, double, HeadStash<T>*, T*);
PTDP_INSTANTIATE_LAYERS(float)
PTDP_INSTANTIATE_LAYERS(double)

}  // namespace ptdp::runtime
