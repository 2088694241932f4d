// The job `ptdp launch` writes (docs/launch.md): from a plan, the nodes and tasks, one task per GPU
// in RankGrid's order (consecutive ranks fill a node, as RankGrid::NodeOf assumes), GPU binding by
// local rank (the runtime picks GPU = local rank), the environment, log and checkpoint folders and
// pre-emption handling. Pure text generation; cmd_launch.cc writes and submits it.
#pragma once

#include <string>
#include <vector>

#include "core/plan_file.h"
#include "core/status.h"

namespace ptdp::tools {

struct LaunchRequest {
  std::string scheduler;  // "slurm" | "mpirun"
  std::string ptdp;       // absolute path of the ptdp binary the job runs
  std::string job_dir;    // absolute: the job's folder (plan.json, logs/, checkpoints/)
  // --data's words: a token file, or a blend WEIGHT FILE WEIGHT FILE ... (the paths absolute)
  std::vector<std::string> data;
  int64_t steps = 0;
  int64_t save_every = 0;
  int nodes = 0;          // 0: the plan's
  std::string partition;  // slurm: optional
  std::string time;       // slurm: optional, as sbatch reads it ("2:00:00")
  std::string hosts;      // mpirun: comma-separated node names (default: this host, one node)
  std::string backend = "cuda";
  std::string train_args;   // appended to the ptdp train line as written (shell words)
  int signal_lead_s = 120;  // slurm: USR1 this long before the time limit
};

// Nodes and ranks per node the plan assumes: world = tp * pp * dp ranks, gpus_per_node per node
// (fewer on a single partial node).
struct JobShape {
  int ranks = 1;
  int nodes = 1;
  int ranks_per_node = 1;
};
Result<JobShape> ShapeOfPlan(const PlanFile& plan, int nodes_flag);

// The sbatch script (scheduler slurm) or the bash script around mpirun (scheduler mpirun).
Result<std::string> JobScript(const PlanFile& plan, const LaunchRequest& req);
// mpirun: the hostfile, each node with ranks_per_node slots, in node order.
Result<std::string> Hostfile(const PlanFile& plan, const LaunchRequest& req);

// `s` in single quotes for a POSIX shell.
std::string ShellQuote(const std::string& s);

}  // namespace ptdp::tools
