// Hardware profile and cluster JSON (`--cluster FILE`): the bytes are written to a scratch file
// and read by LoadCluster, which takes either form (a cluster file naming a preset profile, or a
// profile file). An accepted profile then prices and simulates a small model on two GPUs, within a
// node and across nodes, so that extreme figures (1e-300 TFLOP/s, 1e300 us latencies) reach the
// cost model and the simulator's integer clock.
#include <cstddef>
#include <cstdint>

#include "core/cluster.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/estimate.h"
#include "fuzz/fuzz_util.h"
#include "simulator/refine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::string path = fuzz::ScratchFile("cluster", fuzz::AsString(data, size));
  if (path.empty()) return 0;
  auto c = LoadCluster(path, 0, 0);
  if (!c.ok()) return 0;
  (void)HardwareProfileToJson(c->profile).dump();
  auto m = LoadModel("gpt-1.7b");
  if (!m.ok()) __builtin_trap();
  ParallelConfig cfg;
  cfg.pp = 2;
  cfg.global_batch = 8;
  cfg.precision = c->profile.precision;
  if (!cfg.Validate(*m).ok()) return 0;
  for (int gpus_per_node : {1, 2}) {
    ClusterSpec two = *c;
    two.gpus_per_node = gpus_per_node;
    two.nodes = 2 / gpus_per_node;
    (void)sim::SimulateLayout(*m, two, cfg);
  }
  return 0;
}
