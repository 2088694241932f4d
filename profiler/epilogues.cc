#include "profiler/epilogues.h"

#include <cstdio>
#include <utility>

namespace ptdp::profiler {
namespace {

double GeluElements(const ProfileReport& r) {
  return double(r.epi_tokens) * double(r.epi_ffn);
}

std::string ShapeText(const ProfileReport& r) {
  return std::to_string(r.epi_tokens) + " tokens, h " + std::to_string(r.epi_hidden) + ", f " +
         std::to_string(r.epi_ffn);
}

}  // namespace

Status MeasureEpilogues(ProfileBackend& backend, const TimingOptions& t, ProfileReport* r) {
  const int64_t T = r->att_b * r->att_s, h = r->att_heads * r->att_d, f = 4 * h;
  // fc1 forward, [T, h] -> [T, f] (n, c, oc = T, h, f), the GeLU on its T x f outputs; fc2's
  // input gradient (fc2: [T, f] -> [T, h]; n, c, oc = T, f, h), GeLU' on its T x f result.
  PTDP_ASSIGN_OR_RETURN(const EpilogueTimes forward, backend.TimeGeluEpilogue(T, h, f, false, t));
  PTDP_ASSIGN_OR_RETURN(const EpilogueTimes backward, backend.TimeGeluEpilogue(T, f, h, true, t));
  PTDP_ASSIGN_OR_RETURN(const Seconds bias, backend.TimeBiasGrad(T, f, t));
  if (forward.fused <= 0 && backward.fused <= 0 && bias <= 0) return Status::Ok();
  r->epi_tokens = T, r->epi_hidden = h, r->epi_ffn = f;
  r->gelu_epilogue = forward;
  r->dgelu_epilogue = backward;
  r->bias_grad_seconds = bias;
  return Status::Ok();
}

Seconds EpilogueAddedSeconds(const EpilogueTimes& t, double elements) {
  const Seconds added = t.fused - t.plain;
  if (!(t.fused > 0 && t.plain > 0 && added > 0)) return 0;
  return elements / added / 1e9 <= kMaxEpilogueGelemsPerSecond ? added : 0;
}

void AddEpilogueKeys(const ProfileReport& r, const std::string& run_source, HardwareProfile* p) {
  const double elements = GeluElements(r);
  const Seconds forward = EpilogueAddedSeconds(r.gelu_epilogue, elements),
                backward = EpilogueAddedSeconds(r.dgelu_epilogue, elements);
  const std::string at = " (" + ShapeText(r) + "; per element of the GeLU, T f), median of repeats";
  if (forward > 0 && backward > 0) {
    p->gelu_epilogue_Gelems_per_s = {elements / forward / 1e9,
                                     run_source +
                                         ": fc1's LinearForward+GeLU (the GELU_AUX_BIAS epilogue) "
                                         "less LinearForward with its bias" +
                                         at};
    p->dgelu_epilogue_Gelems_per_s = {
        elements / backward / 1e9,
        run_source +
            ": fc2's LinearBackwardData+dGeLU (the DGELU epilogue) less LinearBackwardData" + at};
  }
  if (r.bias_grad_seconds > 0) {
    p->bias_grad_Gelems_per_s = {elements / r.bias_grad_seconds / 1e9,
                                 run_source + ": fc1's bias gradient (column sums of a " +
                                     std::to_string(r.epi_tokens) + " x " +
                                     std::to_string(r.epi_ffn) + " " + r.gemm_dtype +
                                     " output gradient into fp32), median of repeats"};
  }
}

OrderedJson EpiloguesJson(const ProfileReport& r) {
  if (r.epi_tokens == 0) return nullptr;
  const auto pair = [](const EpilogueTimes& t) {
    return OrderedJson{{"fused_time_us", t.fused / kUs}, {"plain_time_us", t.plain / kUs}};
  };
  return OrderedJson{{"tokens", r.epi_tokens},
                     {"hidden", r.epi_hidden},
                     {"ffn", r.epi_ffn},
                     {"gelu_forward", pair(r.gelu_epilogue)},
                     {"dgelu_backward", pair(r.dgelu_epilogue)},
                     {"bias_grad_time_us", r.bias_grad_seconds / kUs}};
}

std::string EpiloguesText(const ProfileReport& r) {
  if (r.epi_tokens == 0) return "";
  const double elements = GeluElements(r);
  std::string out;
  char line[256];
  for (const auto& [name, t] :
       {std::pair{"gelu-aux epilogue (fc1 forward)", r.gelu_epilogue},
        std::pair{"dgelu epilogue (fc2 input gradient)", r.dgelu_epilogue}}) {
    const Seconds added = EpilogueAddedSeconds(t, elements);
    std::snprintf(line, sizeof(line), "# %s: %.1f us fused, %.1f us without; ", name, t.fused / kUs,
                  t.plain / kUs);
    out += line;
    if (added > 0) {
      std::snprintf(line, sizeof(line), "+%.1f us = %.1f Gelems/s\n", added / kUs,
                    elements / added / 1e9);
    } else {
      std::snprintf(line, sizeof(line), "not resolved (no key written)\n");
    }
    out += line;
  }
  const bool forward = EpilogueAddedSeconds(r.gelu_epilogue, elements) > 0,
             backward = EpilogueAddedSeconds(r.dgelu_epilogue, elements) > 0;
  if (forward != backward) out += "# gelu epilogue keys not written: they are both or neither\n";
  if (r.bias_grad_seconds > 0) {
    std::snprintf(line, sizeof(line), "# bias gradient (%lld x %lld): %.1f us = %.1f Gelems/s\n",
                  static_cast<long long>(r.epi_tokens), static_cast<long long>(r.epi_ffn),
                  r.bias_grad_seconds / kUs, elements / r.bias_grad_seconds / 1e9);
    out += line;
  }
  return out;
}

}  // namespace ptdp::profiler
