// Reads a profile file written by `ptdp profile` with core's strict reader and checks what a
// measured profile must hold. usage: profile_file_check FILE RANKS (measured|estimated)
// Exit 0 when it holds, 1 with a one-line reason otherwise.
#include <cstdio>
#include <string>

#include "core/hardware.h"
#include "core/json.h"

int main(int argc, char** argv) {
  using namespace ptdp;
  if (argc != 4) {
    std::fprintf(stderr, "usage: profile_file_check FILE RANKS measured|estimated\n");
    return 2;
  }
  auto j = ReadJsonFile(argv[1]);
  if (!j.ok()) {
    std::fprintf(stderr, "%s\n", j.status().ToString().c_str());
    return 1;
  }
  auto p = HardwareProfileFromJson(*j, argv[1]);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    return 1;
  }
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "profile_file_check: %s\n", why.c_str());
    return 1;
  };
  if (p->gpus_per_node.value != std::stod(argv[2]))
    return fail("gpus_per_node is not the rank count");
  if (p->gemm.dtype != "fp32" || p->precision != Precision::kFp32)
    return fail("cpu profile is not fp32");
  // The cpu backend times the GeLU by its elements (memory_bound_GBps is then the streaming add's).
  if (!(p->gelu_forward_Gelems_per_s.value > 0) || !(p->gelu_backward_Gelems_per_s.value > 0))
    return fail("cpu profile has no GeLU rates");
  // And the optimizer step by its parameters.
  if (!(p->optimizer_Gparams_per_s.value > 0)) return fail("cpu profile has no optimizer rate");
  for (const Sourced* s : {&p->peak_tflops, &p->memory_GiB, &p->hbm_GBps, &p->memory_bound_GBps,
                           &p->kernel_launch_us, &p->gpus_per_node, &p->gelu_forward_Gelems_per_s,
                           &p->gelu_backward_Gelems_per_s, &p->optimizer_Gparams_per_s}) {
    if (s->source.rfind("ptdp profile run on ", 0) != 0)
      return fail("source not a profile run: " + s->source);
  }
  const std::string link_src = p->intra_node.all_reduce_busbw_GBps.source;
  const bool measured = link_src.find("bus bandwidth (nccl-tests definition)") != std::string::npos;
  if ((std::string(argv[3]) == "measured") != measured) return fail("link source: " + link_src);
  std::printf("profile_file_check: %s ok (%zu GEMMs, all-reduce busbw %.3f GB/s)\n", argv[1],
              p->gemm.tflops.size(), p->intra_node.all_reduce_busbw_GBps.value);
  return 0;
}
