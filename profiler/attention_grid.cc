#include "profiler/attention_grid.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ptdp::profiler {

namespace {

constexpr const char* kFlag = "--attention-grid";

Result<std::vector<int64_t>> ParseList(const std::string& arg, const char* what) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = arg.find(',', start);
    const std::string item =
        arg.substr(start, comma == std::string::npos ? arg.npos : comma - start);
    char* end = nullptr;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || v < 1) {
      return Status::Invalid(std::string(kFlag) + ": \"" + arg +
                             "\" is not a comma-separated list " + "of positive integers (" + what +
                             ")");
    }
    out.push_back(v);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Status CheckIncreasing(const std::vector<int64_t>& axis, const char* what) {
  for (size_t i = 0; i < axis.size(); ++i) {
    if (axis[i] < 1 || (i > 0 && axis[i] <= axis[i - 1])) {
      return Status::Invalid(std::string(kFlag) + ": " + what +
                             " must be positive integers, increasing");
    }
  }
  return Status::Ok();
}

bool SameShape(const AttentionGridSample& x, const ProfileReport& r) {
  return x.b == r.att_b && x.s == r.att_s && x.heads == r.att_heads && x.d == r.att_d;
}

// The reference's own figures, where the point is its shape (timed once, not twice).
void CopyReference(const ProfileReport& r, AttentionGridSample* x) {
  x->forward = r.att_seconds, x->backward = r.att_backward_seconds;
  x->tflops = r.att_train_tflops;
  if (x->tflops <= 0) x->note = "the backend does not time the attention backward";
  x->dropout_forward = r.att_dropout_seconds, x->dropout_backward = r.att_dropout_backward_seconds;
  x->dropout_tflops = r.att_dropout_train_tflops;
  if (x->dropout_tflops <= 0) x->dropout_note = "not measured at the --attention shape";
}

// The point without dropout; x->note says why it is left out.
Status TimeWithoutDropout(ProfileBackend& backend, const TimingOptions& t, const ProfileReport& r,
                          AttentionGridSample* x) {
  PTDP_ASSIGN_OR_RETURN(x->forward, backend.TimeAttention(x->b, x->s, x->heads, x->d, 0.0, t));
  PTDP_ASSIGN_OR_RETURN(x->backward,
                        backend.TimeAttentionBackward(x->b, x->s, x->heads, x->d, 0.0, t));
  if (x->backward <= 0) {
    x->note = "the backend does not time the attention backward";
    return Status::Ok();
  }
  const std::string kind = backend.attention_kind(0.0);
  if (kind != r.attention_kind) {
    x->note = "ran " + kind + ", not the kernel of attention_tflops (" + r.attention_kind + ")";
    return Status::Ok();
  }
  x->tflops = CausalTrainTflops(x->b, x->s, x->heads, x->d, x->forward + x->backward);
  return Status::Ok();
}

// The point with dropout; `*kind` is the dropout kernel every point must run (the reference's,
// or the first point's when the reference has none); x->dropout_note says why it is left out.
Status TimeWithDropout(ProfileBackend& backend, const TimingOptions& t, std::string* kind,
                       AttentionGridSample* x) {
  const double p = kProfileAttentionDropout;
  PTDP_ASSIGN_OR_RETURN(const Seconds forward,
                        backend.TimeAttention(x->b, x->s, x->heads, x->d, p, t));
  PTDP_ASSIGN_OR_RETURN(const Seconds backward,
                        backend.TimeAttentionBackward(x->b, x->s, x->heads, x->d, p, t));
  if (backward <= 0) {
    x->dropout_note =
        "the dropout attention ran another kernel than the one without (or no "
        "backward is timed)";
    return Status::Ok();
  }
  const std::string ran = backend.attention_kind(p);
  if (kind->empty()) *kind = ran;
  if (ran != *kind) {
    x->dropout_note = "ran " + ran + ", not " + *kind;
    return Status::Ok();
  }
  x->dropout_forward = forward, x->dropout_backward = backward;
  x->dropout_tflops = CausalTrainTflops(x->b, x->s, x->heads, x->d, forward + backward);
  return Status::Ok();
}

void Report(const AttentionGridSample& x, const std::string& what, const std::string& why) {
  std::fprintf(stderr,
               "ptdp profile: attention grid point s=%lld d=%lld (b=%lld heads=%lld): %s left out: "
               "%s\n",
               static_cast<long long>(x.s), static_cast<long long>(x.d),
               static_cast<long long>(x.b), static_cast<long long>(x.heads), what.c_str(),
               why.c_str());
}

}  // namespace

double CausalTrainTflops(int64_t b, int64_t s, int64_t heads, int64_t d, Seconds seconds) {
  return 7.0 * double(b) * double(s) * double(s) * double(heads) * double(d) / seconds / kTera;
}

Status ParseAttentionGrid(const std::vector<std::string>& args, ProfileOptions* o) {
  if (args.empty()) return Status::Ok();
  if (args.size() != 2) {
    return Status::Invalid(std::string(kFlag) + ": needs two lists, S1,S2,... D1,D2,...");
  }
  PTDP_ASSIGN_OR_RETURN(o->attention_grid_s, ParseList(args[0], "sequence lengths"));
  PTDP_ASSIGN_OR_RETURN(o->attention_grid_d, ParseList(args[1], "head dimensions"));
  return Status::Ok();
}

Status CheckAttentionGrid(const ProfileOptions& o) {
  if (o.attention_grid_s.empty() != o.attention_grid_d.empty()) {
    return Status::Invalid(std::string(kFlag) +
                           ": needs both sequence lengths and head dimensions");
  }
  PTDP_RETURN_IF_ERROR(CheckIncreasing(o.attention_grid_s, "sequence lengths"));
  return CheckIncreasing(o.attention_grid_d, "head dimensions");
}

Status MeasureAttentionGrid(ProfileBackend& backend, const TimingOptions& t,
                            const ProfileOptions& o, ProfileReport* r) {
  if (o.attention_grid_s.empty()) return Status::Ok();
  r->att_grid_tokens = r->att_b * r->att_s;
  r->att_grid_width = r->att_heads * r->att_d;
  std::string dropout_kind = r->att_dropout_train_tflops > 0 ? r->attention_dropout_kind : "";
  for (const int64_t s : o.attention_grid_s) {
    for (const int64_t d : o.attention_grid_d) {
      AttentionGridSample x;
      x.s = s, x.d = d;
      x.b = std::max<int64_t>(1, std::llround(double(r->att_grid_tokens) / double(s)));
      x.heads = std::max<int64_t>(1, std::llround(double(r->att_grid_width) / double(d)));
      if (SameShape(x, *r)) {
        CopyReference(*r, &x);
      } else {
        const Status st = TimeWithoutDropout(backend, t, *r, &x);
        if (!st.ok()) x.tflops = 0, x.note = "failed: " + st.message();
        if (x.tflops > 0) {
          const Status dst = TimeWithDropout(backend, t, &dropout_kind, &x);
          if (!dst.ok()) x.dropout_tflops = 0, x.dropout_note = "failed: " + dst.message();
        } else {
          x.dropout_note = "the point is left out";
        }
      }
      if (x.tflops <= 0) {
        Report(x, "the point", x.note);
      } else if (x.dropout_tflops <= 0) {
        Report(x, "its dropout rate", x.dropout_note);
      }
      r->att_grid.push_back(std::move(x));
    }
  }
  r->att_grid_dropout_kind = dropout_kind;
  return Status::Ok();
}

}  // namespace ptdp::profiler
