// cuDNN's fused SDPA behind CudnnAttention (cudnn_attention.h). Compiled only when CMake found
// cuDNN and the cudnn-frontend headers (cmake/CudnnFrontend.cmake); cudnn_attention_none.cc
// stands in otherwise.
#include "runtime/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <cudnn_frontend.h>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {
namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttr = fe::graph::Tensor_attributes;

namespace {

// The tensors' uids in both graphs: the variant packs name buffers by these.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeed, kOffset, kDO, kDQ, kDK, kDV };

// Q, K or V (part 0, 1, 2) of qkv [b s][h][3][D] seen as cuDNN's [b, h, s, D]; the pointer of
// part j is qkv + j D, so the three share these strides.
TensorAttr QkvPart(const AttentionShape& a, const char* name, int64_t uid) {
  const int64_t h = a.heads_local, d = a.head_dim, s = a.s;
  return TensorAttr()
      .set_name(name)
      .set_uid(uid)
      .set_dim({a.b, h, s, d})
      .set_stride({s * h * 3 * d, 3 * d, h * 3 * d, 1});
}
// out and dout [b s][h D] as [b, h, s, D].
std::vector<int64_t> RowsDim(const AttentionShape& a) {
  return {a.b, a.heads_local, a.s, a.head_dim};
}
std::vector<int64_t> RowsStride(const AttentionShape& a) {
  const int64_t h = a.heads_local, d = a.head_dim, s = a.s;
  return {s * h * d, d, h * d, 1};
}
// The log-sum-exp fp32 [b][h][s] as cuDNN's Stats [b, h, s, 1].
std::vector<int64_t> StatsDim(const AttentionShape& a) {
  return {a.b, a.heads_local, a.s, 1};
}
std::vector<int64_t> StatsStride(const AttentionShape& a) {
  return {a.heads_local * a.s, a.s, 1, 1};
}

float Scale(const AttentionShape& a) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
}

std::shared_ptr<Graph> NewGraph() {
  auto g = std::make_shared<Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The dropout seed and offset: int64 device scalars [1,1,1,1] (cuDNN's Philox reads them on the
// device, so a key change needs no rebuild).
std::shared_ptr<TensorAttr> Scalar(Graph& g, const char* name, int64_t uid) {
  return g.tensor(TensorAttr()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT64));
}

std::shared_ptr<Graph> ForwardGraph(const AttentionShape& a, float p) {
  auto g = NewGraph();
  auto q = g->tensor(QkvPart(a, "Q", kQ));
  auto k = g->tensor(QkvPart(a, "K", kK));
  auto v = g->tensor(QkvPart(a, "V", kV));
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("ptdp_attention_forward")
                  .set_generate_stats(true)  // the lse the backward reads
                  .set_attn_scale(Scale(a))
                  .set_causal_mask(true);
  if (p > 0) opts.set_dropout(p, Scalar(*g, "Seed", kSeed), Scalar(*g, "Offset", kOffset));
  auto [o, stats] = g->sdpa(q, k, v, opts);
  o->set_output(true).set_uid(kO).set_dim(RowsDim(a)).set_stride(RowsStride(a));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(StatsDim(a))
      .set_stride(StatsStride(a));
  return g;
}

std::shared_ptr<Graph> BackwardGraph(const AttentionShape& a, float p) {
  auto g = NewGraph();
  auto q = g->tensor(QkvPart(a, "Q", kQ));
  auto k = g->tensor(QkvPart(a, "K", kK));
  auto v = g->tensor(QkvPart(a, "V", kV));
  auto o = g->tensor(
      TensorAttr().set_name("O").set_uid(kO).set_dim(RowsDim(a)).set_stride(RowsStride(a)));
  auto dout = g->tensor(
      TensorAttr().set_name("dO").set_uid(kDO).set_dim(RowsDim(a)).set_stride(RowsStride(a)));
  auto stats = g->tensor(TensorAttr()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim(StatsDim(a))
                             .set_stride(StatsStride(a))
                             .set_data_type(fe::DataType_t::FLOAT));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("ptdp_attention_backward")
                  .set_attn_scale(Scale(a))
                  .set_causal_mask(true);
  if (p > 0) opts.set_dropout(p, Scalar(*g, "Seed", kSeed), Scalar(*g, "Offset", kOffset));
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
  // dq, dk, dv land in dqkv [b s][h][3][D] like q, k, v in qkv.
  const TensorAttr qkv = QkvPart(a, "", 0);
  dq->set_output(true).set_uid(kDQ).set_dim(qkv.get_dim()).set_stride(qkv.get_stride());
  dk->set_output(true).set_uid(kDK).set_dim(qkv.get_dim()).set_stride(qkv.get_stride());
  dv->set_output(true).set_uid(kDV).set_dim(qkv.get_dim()).set_stride(qkv.get_stride());
  return g;
}

// splitmix64's finaliser: a bijective mix, so distinct inputs give distinct seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// cuDNN's dropout seed for this layer, microbatch and tensor rank (see the header).
int64_t DropoutSeed(uint64_t key, const AttentionShape& a) {
  const uint64_t where = static_cast<uint64_t>(a.batch_begin * a.heads_total + a.head_begin);
  return static_cast<int64_t>(Mix(key ^ Mix(where)));
}

std::string CudnnMessage(const char* what, fe::error_t e) {
  return std::string(what) + ": " + e.get_message();
}

}  // namespace

bool CudnnAttentionBuilt() {
  return true;
}

struct CudnnAttention::Impl {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, float>;  // b, s, heads, D, p
  struct Entry {
    bool supported = false;
    std::string why;  // cuDNN's message when refused
    std::shared_ptr<Graph> forward, backward;
    int64_t forward_ws = 0, backward_ws = 0;
  };

  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  int64_t* seed_offset = nullptr;  // device [2]: the Seed and Offset scalars
  std::map<Key, Entry> cache;

  ~Impl() {
    if (seed_offset != nullptr) cudaFreeAsync(seed_offset, stream);
    if (handle != nullptr) cudnnDestroy(handle);
  }

  static Key KeyOf(const AttentionShape& a, double p) {
    return {a.b, a.s, a.heads_local, a.head_dim, static_cast<float>(p)};
  }

  // Builds a graph; a failure is cuDNN refusing this graph, reported in e->why.
  bool Build(Graph& g, int64_t* ws, const char* what, Entry* e) {
    fe::error_t st = g.build(handle, {fe::HeurMode_t::A});
    if (st.is_good()) st = g.get_workspace_size(*ws);
    if (st.is_good()) return true;
    e->why = CudnnMessage(what, st);
    return false;
  }

  Entry& Get(const AttentionShape& a, double p) {
    const Key key = KeyOf(a, p);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Entry& e = cache[key];
    const float pf = static_cast<float>(p);
    e.forward = ForwardGraph(a, pf);
    e.backward = BackwardGraph(a, pf);
    e.supported = Build(*e.forward, &e.forward_ws, "forward", &e) &&
                  Build(*e.backward, &e.backward_ws, "backward", &e);
    if (!e.supported) e.forward.reset(), e.backward.reset();
    return e;
  }

  // Writes the dropout seed and offset (0) for this call, stream-ordered before the graph.
  Status SetSeed(uint64_t key, const AttentionShape& a) {
    const int64_t host[2] = {DropoutSeed(key, a), 0};
    // From pageable memory the copy is staged before cudaMemcpyAsync returns: `host` may go.
    PTDP_CUDA_RETURN(
        cudaMemcpyAsync(seed_offset, host, sizeof(host), cudaMemcpyHostToDevice, stream));
    return Status::Ok();
  }

  Status Run(const Graph& g, int64_t ws_bytes, std::unordered_map<int64_t, void*>& pack,
             const ScratchFn& scratch, const char* what) {
    void* ws = nullptr;
    if (ws_bytes > 0) {
      PTDP_ASSIGN_OR_RETURN(ws, scratch(ws_bytes));
    }
    const fe::error_t st = g.execute(handle, pack, ws);
    if (st.is_bad()) return Status::Internal(CudnnMessage(what, st));
    return Status::Ok();
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(cudaStream_t stream) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  const cudnnStatus_t st = cudnnCreate(&impl->handle);
  if (st != CUDNN_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return Status::NotFound(std::string("cudnnCreate failed: ") + cudnnGetErrorString(st));
  }
  // Every graph runs on the CudaOps stream, ordered with the rest of the step.
  const cudnnStatus_t ss = cudnnSetStream(impl->handle, stream);
  if (ss != CUDNN_STATUS_SUCCESS) {
    return Status::Internal(std::string("cudnnSetStream failed: ") + cudnnGetErrorString(ss));
  }
  PTDP_CUDA_RETURN(
      cudaMallocAsync(reinterpret_cast<void**>(&impl->seed_offset), 2 * sizeof(int64_t), stream));
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

Result<bool> CudnnAttention::Supports(const AttentionShape& a, double p, std::string* why) {
  try {
    const Impl::Entry& e = impl_->Get(a, p);
    if (!e.supported && why != nullptr) *why = e.why;
    return e.supported;
  } catch (const std::exception& ex) {  // the frontend throws on some malformed graphs
    if (why != nullptr) *why = ex.what();
    impl_->cache[Impl::KeyOf(a, p)] = Impl::Entry{false, ex.what(), nullptr, nullptr, 0, 0};
    return false;
  }
}

Status CudnnAttention::Forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                               const AttentionShape& a, double p, uint64_t key,
                               const ScratchFn& scratch) {
  const Impl::Entry& e = impl_->Get(a, p);
  if (!e.supported) return Status::Internal("cudnn attention: forward of a refused shape");
  auto* base = const_cast<__nv_bfloat16*>(qkv);  // cuDNN's variant pack is not const
  std::unordered_map<int64_t, void*> pack = {
      {kQ, base}, {kK, base + a.head_dim}, {kV, base + 2 * a.head_dim}, {kO, out}, {kStats, lse}};
  if (p > 0) {
    PTDP_RETURN_IF_ERROR(impl_->SetSeed(key, a));
    pack[kSeed] = impl_->seed_offset;
    pack[kOffset] = impl_->seed_offset + 1;
  }
  return impl_->Run(*e.forward, e.forward_ws, pack, scratch, "cudnn attention forward");
}

Status CudnnAttention::Backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                                const float* lse, const AttentionShape& a, double p, uint64_t key,
                                const ScratchFn& scratch) {
  const Impl::Entry& e = impl_->Get(a, p);
  if (!e.supported) return Status::Internal("cudnn attention: backward of a refused shape");
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  const int64_t d = a.head_dim;
  std::unordered_map<int64_t, void*> pack = {{kQ, base},
                                             {kK, base + d},
                                             {kV, base + 2 * d},
                                             {kO, const_cast<__nv_bfloat16*>(out)},
                                             {kDO, const_cast<__nv_bfloat16*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kDQ, dqkv},
                                             {kDK, dqkv + d},
                                             {kDV, dqkv + 2 * d}};
  if (p > 0) {
    PTDP_RETURN_IF_ERROR(impl_->SetSeed(key, a));
    pack[kSeed] = impl_->seed_offset;
    pack[kOffset] = impl_->seed_offset + 1;
  }
  return impl_->Run(*e.backward, e.backward_ws, pack, scratch, "cudnn attention backward");
}

}  // namespace ptdp::runtime::cuda
