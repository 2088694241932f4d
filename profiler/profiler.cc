#include "profiler/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "profiler/attention_grid.h"
#include "profiler/epilogues.h"
#include "profiler/gemm_shapes.h"

namespace ptdp::profiler {
namespace {

struct Grid {
  std::vector<double> m, n, k;
  Bytes stream_bytes;
  int64_t att_b, att_s, att_heads, att_d;
  Bytes max_message;
  TimingOptions timing;
};

// Default grids. The cuda grid covers the GEMMs the planner asks for: m = b s tokens, n and k in
// {h, 3h/t, 4h/t, V/t} for the paper's models (h from 1536 to 25600, t up to 8).
Grid DefaultGrid(const std::string& kind, bool quick) {
  Grid g;
  if (kind == "cuda") {
    if (quick) {
      g.m = {1024, 4096};
      g.n = g.k = {1024, 4096};
      g.stream_bytes = Bytes(256) << 20;
      g.att_b = 1, g.att_s = 1024, g.att_heads = 16, g.att_d = 64;
      g.max_message = Bytes(64) << 20;
      g.timing = {0.005, 3, 1000};
    } else {
      g.m = {512, 1024, 2048, 4096, 8192, 16384};
      g.n = g.k = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
      g.stream_bytes = Bytes(1) << 30;
      g.att_b = 4, g.att_s = 2048, g.att_heads = 16, g.att_d = 128;
      g.max_message = Bytes(1) << 30;
      g.timing = {0.01, 5, 1000};
    }
  } else {
    if (quick) {
      g.m = {32, 128};
      g.n = g.k = {32, 128};
      g.stream_bytes = Bytes(4) << 20;
      g.att_b = 1, g.att_s = 64, g.att_heads = 2, g.att_d = 16;
      g.max_message = Bytes(256) << 10;
      g.timing = {0.002, 3, 200};
    } else {
      g.m = {64, 256, 1024};
      g.n = g.k = {64, 256, 1024};
      g.stream_bytes = Bytes(64) << 20;
      g.att_b = 1, g.att_s = 512, g.att_heads = 4, g.att_d = 64;
      g.max_message = Bytes(64) << 20;
      g.timing = {0.02, 5, 1000};
    }
  }
  return g;
}

Status CheckAxis(const std::vector<double>& axis, const char* flag) {
  for (size_t i = 0; i < axis.size(); ++i) {
    if (!(axis[i] >= 1) || axis[i] != std::floor(axis[i]) || (i > 0 && axis[i] <= axis[i - 1])) {
      return Status::Invalid(std::string(flag) + ": sizes must be positive integers, increasing");
    }
  }
  return Status::Ok();
}

// Times `op` identically on every rank: iteration counts come from the slowest rank's warm-up,
// each sample starts after a barrier, and the reported time is the max over ranks of the median.
Result<Seconds> TimeCollective(const std::function<Status()>& op, ProfileBackend& backend,
                               runtime::Communicator& host, const TimingOptions& t) {
  PTDP_RETURN_IF_ERROR(host.Barrier());
  Seconds start = Now();
  PTDP_RETURN_IF_ERROR(op());
  PTDP_RETURN_IF_ERROR(backend.Synchronize());
  float first = static_cast<float>(std::max(Now() - start, 1e-9));
  PTDP_RETURN_IF_ERROR(host.AllReduceMax(&first, 1, DType::kFp32));
  const int iters = std::clamp(static_cast<int>(t.sample_seconds / first), 1, t.max_iters);
  std::vector<Seconds> per_op;
  for (int s = 0; s < std::max(t.samples, 1); ++s) {
    PTDP_RETURN_IF_ERROR(host.Barrier());
    start = Now();
    for (int i = 0; i < iters; ++i) PTDP_RETURN_IF_ERROR(op());
    PTDP_RETURN_IF_ERROR(backend.Synchronize());
    per_op.push_back((Now() - start) / iters);
  }
  std::sort(per_op.begin(), per_op.end());
  float median = static_cast<float>(per_op[per_op.size() / 2]);
  PTDP_RETURN_IF_ERROR(host.AllReduceMax(&median, 1, DType::kFp32));
  return static_cast<Seconds>(median);
}

// A device buffer released on scope exit.
class Buf {
 public:
  Buf(ProfileBackend* b, void* p) : b_(b), p_(p) {}
  Buf(const Buf&) = delete;
  ~Buf() { b_->Free(p_); }
  void* get() const { return p_; }

 private:
  ProfileBackend* b_;
  void* p_;
};

Status MeasureCollectives(ProfileBackend& backend, runtime::Communicator& comm,
                          runtime::Communicator& host, const Grid& g, ProfileReport* r) {
  const int n = comm.size();
  if (n < 2) return Status::Ok();
  // Message sizes from 4 KiB up to max_message, times 4, each a multiple of 4 n bytes (fp32).
  std::vector<Bytes> sizes;
  for (Bytes s = 4096; s <= g.max_message; s *= 4) sizes.push_back(s / (4 * n) * (4 * n));
  PTDP_ASSIGN_OR_RETURN(void* pa, backend.Alloc(g.max_message));
  Buf a(&backend, pa);
  PTDP_ASSIGN_OR_RETURN(void* pb, backend.Alloc(g.max_message));
  Buf b(&backend, pb);
  for (Bytes size : sizes) {
    const int64_t count = size / 4;
    const int64_t block = count / n;
    const std::pair<Collective, std::function<Status()>> ops[] = {
        {Collective::kAllReduce, [&] { return comm.AllReduceSum(a.get(), count, DType::kFp32); }},
        {Collective::kAllGather,
         [&] { return comm.AllGather(a.get(), b.get(), block, DType::kFp32); }},
        {Collective::kReduceScatter,
         [&] { return comm.ReduceScatterSum(a.get(), b.get(), block, DType::kFp32); }},
        // Ping-pong between group ranks 0 and 1; one op is one message each way, halved below.
        {Collective::kSendRecv,
         [&]() -> Status {
           if (comm.rank() == 0) {
             PTDP_ASSIGN_OR_RETURN(auto req, comm.ISend(a.get(), count, DType::kFp32, 1, 7));
             PTDP_RETURN_IF_ERROR(req->Wait());
             return comm.Recv(b.get(), count, DType::kFp32, 1, 8);
           }
           if (comm.rank() == 1) {
             PTDP_RETURN_IF_ERROR(comm.Recv(b.get(), count, DType::kFp32, 0, 7));
             PTDP_ASSIGN_OR_RETURN(auto req, comm.ISend(a.get(), count, DType::kFp32, 0, 8));
             return req->Wait();
           }
           return Status::Ok();
         }},
    };
    for (const auto& [kind, op] : ops) {
      PTDP_ASSIGN_OR_RETURN(Seconds t, TimeCollective(op, backend, host, g.timing));
      if (kind == Collective::kSendRecv) t /= 2;
      CollectiveSample c;
      c.op = kind;
      c.ranks = kind == Collective::kSendRecv ? 2 : n;
      c.size = size;
      c.seconds = t;
      c.algbw_GBps = AlgorithmBandwidth(size, t) / kGB;
      c.busbw_GBps = BusBandwidth(kind, c.ranks, size, t) / kGB;
      r->collectives.push_back(c);
    }
  }
  return Status::Ok();
}

// Times every (m, n, k) of the grid, m-major, into `out`; leaves it empty when the backend answers
// 0 (it does not measure this kind of GEMM).
template <typename Time>
Status SweepGemms(const Grid& g, std::vector<GemmSample>* out, Time&& time) {
  for (double m : g.m) {
    for (double n : g.n) {
      for (double k : g.k) {
        GemmSample s{static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k)};
        PTDP_ASSIGN_OR_RETURN(s.seconds, time(s.m, s.n, s.k));
        if (s.seconds == 0 && out->empty()) return Status::Ok();  // not measured by this backend
        if (!(s.seconds > 0)) {
          return Status::Internal("profile: a GEMM of " + std::to_string(s.m) + "x" +
                                  std::to_string(s.n) + "x" + std::to_string(s.k) + " took " +
                                  std::to_string(s.seconds) + " s");
        }
        s.tflops = 2.0 * m * n * k / s.seconds / kTera;
        out->push_back(s);
      }
    }
  }
  return Status::Ok();
}

// Forward + backward of r's attention at the causal count (profiler/attention_grid.h).
double ReportTrainTflops(const ProfileReport& r, Seconds forward, Seconds backward) {
  return CausalTrainTflops(r.att_b, r.att_s, r.att_heads, r.att_d, forward + backward);
}

// The attention at r's shape, without dropout and then, where the backend times the backward,
// with kProfileAttentionDropout: the same op at the same shape, so the two rates differ by what
// drawing the mask inside the kernel costs.
Status MeasureAttention(ProfileBackend& backend, const Grid& g, ProfileReport* r) {
  const int64_t b = r->att_b, s = r->att_s, heads = r->att_heads, d = r->att_d;
  PTDP_ASSIGN_OR_RETURN(r->att_seconds, backend.TimeAttention(b, s, heads, d, 0.0, g.timing));
  // QK^T and PV are 2 b s^2 heads d FLOPs each; causal masking halves the useful part.
  r->att_tflops = 2.0 * b * double(s) * s * heads * d / r->att_seconds / kTera;
  PTDP_ASSIGN_OR_RETURN(r->att_backward_seconds,
                        backend.TimeAttentionBackward(b, s, heads, d, 0.0, g.timing));
  r->attention_kind = backend.attention_kind(0.0);
  if (r->att_backward_seconds <= 0) return Status::Ok();
  r->att_train_tflops = ReportTrainTflops(*r, r->att_seconds, r->att_backward_seconds);
  const double p = kProfileAttentionDropout;
  PTDP_ASSIGN_OR_RETURN(const Seconds forward, backend.TimeAttention(b, s, heads, d, p, g.timing));
  PTDP_ASSIGN_OR_RETURN(const Seconds backward,
                        backend.TimeAttentionBackward(b, s, heads, d, p, g.timing));
  if (backward <= 0) return Status::Ok();  // not comparable: the backend said why on stderr
  r->att_dropout_p = p;
  r->att_dropout_seconds = forward;
  r->att_dropout_backward_seconds = backward;
  r->att_dropout_train_tflops = ReportTrainTflops(*r, forward, backward);
  r->attention_dropout_kind = backend.attention_kind(p);
  return Status::Ok();
}

}  // namespace

Result<ProfileReport> RunProfile(ProfileBackend& backend, runtime::Communicator& data_comm,
                                 runtime::Communicator& host_comm, const ProfileOptions& opts) {
  Grid g = DefaultGrid(backend.kind(), opts.quick);
  if (!opts.gemm_m.empty()) g.m = opts.gemm_m;
  if (!opts.gemm_n.empty()) g.n = opts.gemm_n;
  if (!opts.gemm_k.empty()) g.k = opts.gemm_k;
  PTDP_RETURN_IF_ERROR(CheckAxis(g.m, "--gemm-m"));
  PTDP_RETURN_IF_ERROR(CheckAxis(g.n, "--gemm-n"));
  PTDP_RETURN_IF_ERROR(CheckAxis(g.k, "--gemm-k"));
  if (opts.max_message_bytes < 0) return Status::Invalid("--max-message-bytes: must be positive");
  if (!opts.attention.empty()) {
    const auto& a = opts.attention;
    if (a.size() != 4 || *std::min_element(a.begin(), a.end()) < 1) {
      return Status::Invalid(
          "--attention: needs 4 positive integers: batch, sequence, heads, "
          "head dim");
    }
    g.att_b = a[0], g.att_s = a[1], g.att_heads = a[2], g.att_d = a[3];
  }
  PTDP_RETURN_IF_ERROR(CheckAttentionGrid(opts));
  if (opts.max_message_bytes > 0) g.max_message = std::max<Bytes>(opts.max_message_bytes, 4096);

  ProfileReport r;
  r.backend = backend.kind();
  r.device = backend.device_name();
  r.host = opts.host;
  r.date = opts.date;
  r.gemm_dtype = backend.gemm_dtype();
  r.precision = backend.precision();
  r.ranks = data_comm.size();
  r.gemm_m = g.m;
  r.gemm_n = g.n;
  r.gemm_k = g.k;
  PTDP_RETURN_IF_ERROR(SweepGemms(g, &r.gemm, [&](int64_t m, int64_t n, int64_t k) {
    return backend.TimeGemm(m, n, k, g.timing);
  }));
  PTDP_RETURN_IF_ERROR(SweepGemms(g, &r.gemm_backward_data, [&](int64_t m, int64_t n, int64_t k) {
    return backend.TimeGemmBackwardData(m, n, k, g.timing);
  }));
  PTDP_RETURN_IF_ERROR(SweepGemms(g, &r.gemm_backward_weight, [&](int64_t m, int64_t n, int64_t k) {
    return backend.TimeGemmBackwardWeight(m, n, k, g.timing);
  }));
  PTDP_RETURN_IF_ERROR(MeasureGemmPoints(backend, g.timing, opts, &r));
  r.stream_bytes = g.stream_bytes;
  PTDP_ASSIGN_OR_RETURN(double add_Bps, backend.StreamAddBandwidth(g.stream_bytes, g.timing));
  PTDP_ASSIGN_OR_RETURN(double gelu_Bps, backend.GeluBandwidth(g.stream_bytes, g.timing));
  r.stream_add_GBps = add_Bps / kGB;
  r.gelu_GBps = gelu_Bps / kGB;
  r.att_b = g.att_b, r.att_s = g.att_s, r.att_heads = g.att_heads, r.att_d = g.att_d;
  PTDP_RETURN_IF_ERROR(MeasureAttention(backend, g, &r));
  PTDP_RETURN_IF_ERROR(MeasureAttentionGrid(backend, g.timing, opts, &r));
  PTDP_RETURN_IF_ERROR(MeasureEpilogues(backend, g.timing, &r));
  // 1 MiB of fp32 logits: the exponentials, not the bytes, bound it on a CPU.
  r.ce_rows = 64, r.ce_vocab = 4096;
  PTDP_ASSIGN_OR_RETURN(r.ce_seconds, backend.TimeCrossEntropy(r.ce_rows, r.ce_vocab, g.timing));
  // 1 MiB of fp32 inputs, as for the cross-entropy: the tanh, not the bytes, bounds it on a CPU.
  r.gelu_elements = 262144;
  PTDP_ASSIGN_OR_RETURN(r.gelu_forward_seconds,
                        backend.TimeGelu(r.gelu_elements, /*backward=*/false, g.timing));
  PTDP_ASSIGN_OR_RETURN(r.gelu_backward_seconds,
                        backend.TimeGelu(r.gelu_elements, /*backward=*/true, g.timing));
  // Weight, gradient and AdamW's two moments together span the streaming add's bytes: out of the
  // cache, as a model's step is.
  r.optimizer_params = int64_t(g.stream_bytes / (4 * sizeof(float)));
  PTDP_ASSIGN_OR_RETURN(r.optimizer_seconds,
                        backend.TimeOptimizerStep(r.optimizer_params, g.timing));
  PTDP_ASSIGN_OR_RETURN(Seconds launch, backend.KernelLaunchSeconds(g.timing));
  r.launch_us = launch / kUs;
  PTDP_ASSIGN_OR_RETURN(r.memory_bytes, backend.MemoryCapacityBytes(r.ranks));
  PTDP_ASSIGN_OR_RETURN(r.workspace_bytes, backend.WorkspaceBytes());
  PTDP_RETURN_IF_ERROR(MeasureCollectives(backend, data_comm, host_comm, g, &r));
  return r;
}

}  // namespace ptdp::profiler
