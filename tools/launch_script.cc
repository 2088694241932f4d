#include "tools/launch_script.h"

#include <sstream>
#include <vector>

#include "tools/relaunch.h"

namespace ptdp::tools {
namespace {

std::vector<std::string> SplitHosts(const std::string& csv) {
  std::vector<std::string> out;
  std::stringstream in(csv);
  for (std::string h; std::getline(in, h, ',');) {
    if (!h.empty()) out.push_back(h);
  }
  return out;
}

// Relaunches of one job in the layouts `ptdp train --adapt` asks for (exit kRelaunchExitCode): a
// bound, so that a re-planner that changes its mind back and forth cannot hold the nodes forever.
constexpr int kMaxRelaunches = 3;

// The ptdp train line every rank runs: the plan in $plan (the job's copy, or the layout --adapt
// chose), its log and checkpoint folders, and --load latest so that a requeued or relaunched job
// resumes where the last one saved.
std::string TrainLine(const LaunchRequest& req) {
  std::ostringstream s;
  s << ShellQuote(req.ptdp) << " train --plan \"$plan\" --data";
  for (const std::string& word : req.data) s << " " << ShellQuote(word);
  s << " --steps " << req.steps << " --backend " << ShellQuote(req.backend)
    << " \\\n    --log \"$job/logs/metrics.jsonl\" --save \"$job/checkpoints\" --save-every "
    << req.save_every << " --load latest";
  if (!req.train_args.empty()) s << " \\\n    " << req.train_args;
  return s.str();
}

// NCCL and threading: what the runtime needs from the environment. NCCL picks NVLink inside a node
// and the network across nodes by itself; the site's interface names stay the site's to set.
std::string Environment(const LaunchRequest& req) {
  std::ostringstream s;
  s << "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one rank per GPU (or core): no nested "
       "threads\n";
  if (req.backend == "cuda") {
    s << "export NCCL_DEBUG=${NCCL_DEBUG:-WARN}\n"
         "# Site-specific, when NCCL's own choice is wrong: NCCL_SOCKET_IFNAME, NCCL_IB_HCA.\n";
  }
  return s.str();
}

// Waits for the launched step in $step; a USR1 trap (which sets `interrupted`) cuts a wait short,
// so wait again while the step runs. A step that ended while the trap ran is collected once more
// (127: its status was already taken). Leaves its exit status in rc.
constexpr const char* kWaitForStep =
    "rc=0\n"
    "while :; do\n"
    "  interrupted=0\n"
    "  wait \"$step\"\n"
    "  rc=$?\n"
    "  [ \"$interrupted\" = 1 ] || break\n"
    "  kill -0 \"$step\" 2>/dev/null && continue\n"
    "  wait \"$step\"\n"
    "  last=$?\n"
    "  [ \"$last\" = 127 ] || rc=$last\n"
    "  break\n"
    "done\n";

// Before the launch loop: the plan to run, the layout --adapt chose when an earlier run of this job
// asked for a relaunch (so a requeued job resumes in it), else the job's copy.
std::string PlanChoice() {
  std::ostringstream s;
  s << "# ptdp train --adapt may choose another t, p or d: its ranks then save, write\n"
       "# checkpoints/"
    << kRelaunchPlanName << " and exit " << kRelaunchExitCode
    << "; the loop below relaunches in that layout\n# (--load latest), at most " << kMaxRelaunches
    << " times.\nplan=\"$job/plan.json\"\nnext=\"$job/checkpoints/" << kRelaunchPlanName
    << "\"\n[ -f \"$next\" ] && plan=$next\nrelaunches=0\nwhile :; do\n";
  return s.str();
}

// After the wait: relaunch on kRelaunchExitCode while the bound allows, else leave the loop.
std::string RelaunchOrBreak(const std::string& also) {
  std::ostringstream s;
  s << "[ \"$rc\" = " << kRelaunchExitCode << " ]" << also << " && [ \"$relaunches\" -lt "
    << kMaxRelaunches << " ] || break\nrelaunches=$((relaunches + 1))\nplan=$next\n"
    << "echo \"ptdp job: the ranks saved for another layout; relaunch $relaunches of "
    << kMaxRelaunches << " with $plan\"\ndone\n";
  return s.str();
}

std::string Header(const PlanFile& plan, const JobShape& shape, const std::string& launcher) {
  const ParallelConfig& c = plan.layout;
  std::ostringstream s;
  s << "#!/bin/bash\n# Written by `ptdp launch` (docs/launch.md): " << plan.model.name << ", t"
    << c.tp << " p" << c.pp << " d" << c.dp << " = " << shape.ranks << " ranks on " << shape.nodes
    << " node(s) of " << shape.ranks_per_node << ", " << launcher
    << ".\n# Ranks fill nodes in order (rank r on node r / " << shape.ranks_per_node
    << "), so each tensor group of t consecutive ranks\n# stays inside a node as the plan "
       "assumes; ptdp train checks that and refuses another placement.\n";
  return s.str();
}

Result<std::string> SlurmScript(const PlanFile& plan, const LaunchRequest& req,
                                const JobShape& shape) {
  std::ostringstream s;
  s << Header(plan, shape, "srun --mpi=pmix");
  s << "#SBATCH --job-name=ptdp-" << plan.model.name << "\n#SBATCH --nodes=" << shape.nodes
    << "\n#SBATCH --ntasks-per-node=" << shape.ranks_per_node << "\n";
  if (req.backend == "cuda") s << "#SBATCH --gpus-per-node=" << shape.ranks_per_node << "\n";
  if (!req.partition.empty()) s << "#SBATCH --partition=" << req.partition << "\n";
  if (!req.time.empty()) s << "#SBATCH --time=" << req.time << "\n";
  s << "#SBATCH --output=" << req.job_dir << "/logs/slurm-%j.out\n"
    << "#SBATCH --open-mode=append\n#SBATCH --requeue\n"
    << "#SBATCH --signal=B:USR1@" << req.signal_lead_s << "\n"
    << "set -u\njob=" << ShellQuote(req.job_dir)
    << "\nmkdir -p \"$job/logs\" \"$job/checkpoints\"\n"
    << "echo \"ptdp job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, start ${SLURM_RESTART_COUNT:-0}\"\n"
    << Environment(req) << "# Pre-emption: USR1 reaches this script " << req.signal_lead_s
    << " s before the time limit (or from scancel --signal=USR1\n"
       "# --batch); srun forwards it to the ranks, which finish their step, save and exit 0. The\n"
       "# job is then requeued; the relaunch resumes from the checkpoint (--load latest).\n"
       "preempted=0\ninterrupted=0\nstep=\n"
       "trap 'preempted=1; interrupted=1; echo \"ptdp job: USR1: the ranks save and stop\"; "
       "kill -USR1 \"$step\" 2>/dev/null' USR1\n"
    << PlanChoice()
    << "# One task per GPU in rank order (block distribution); every GPU of the node visible to\n"
       "# each task, which takes GPU = its local rank.\n"
    << "srun --mpi=pmix --ntasks-per-node=" << shape.ranks_per_node
    << " --distribution=block:block --gpu-bind=none --kill-on-bad-exit=1 \\\n  " << TrainLine(req)
    << " &\nstep=$!\n"
    << kWaitForStep << RelaunchOrBreak(" && [ \"$preempted\" = 0 ]")
    << "# Requeue only a run the signal cut short (the last logged step before --steps).\n"
       "done_steps=$(tail -n 1 \"$job/logs/metrics.jsonl\" 2>/dev/null | grep -o '\"step\":[0-9]*' "
       "| cut -d: -f2)\n"
       "# A run that saved for a relaunch (75) as the signal came is requeued too: it starts in\n"
       "# checkpoints/"
    << kRelaunchPlanName
    << ".\n"
       "if [ \"$preempted\" = 1 ] && { [ \"$rc\" = 0 ] || [ \"$rc\" = "
    << kRelaunchExitCode << " ]; } && [ \"${done_steps:-0}\" -lt " << req.steps
    << " ]; then\n"
       "  echo \"ptdp job: saved after step ${done_steps:-0}; requeueing $SLURM_JOB_ID\"\n"
       "  scontrol requeue \"$SLURM_JOB_ID\"\nfi\nexit \"$rc\"\n";
  return s.str();
}

Result<std::string> MpirunScript(const PlanFile& plan, const LaunchRequest& req,
                                 const JobShape& shape) {
  std::ostringstream s;
  s << Header(plan, shape, "mpirun with a hostfile");
  s << "set -u\njob=" << ShellQuote(req.job_dir)
    << "\nmkdir -p \"$job/logs\" \"$job/checkpoints\"\n"
    << Environment(req)
    << "# Pre-emption: USR1 or TERM to this script reaches the ranks as USR1 (mpirun forwards "
       "it);\n"
       "# they save and exit 0; run this script again to resume (--load latest).\n"
       "interrupted=0\nstep=\n"
       "trap 'interrupted=1; kill -USR1 \"$step\" 2>/dev/null' USR1 TERM\n"
    << PlanChoice() << "# ppr:" << shape.ranks_per_node
    << ":node fills each host of the hostfile with consecutive ranks, in its order.\n"
    << "mpirun -np " << shape.ranks
    << " --hostfile \"$job/hostfile\" --map-by ppr:" << shape.ranks_per_node
    << ":node --rank-by slot --bind-to none -x OMP_NUM_THREADS"
    << (req.backend == "cuda" ? " -x NCCL_DEBUG" : "") << " \\\n  " << TrainLine(req)
    << " &\nstep=$!\n"
    << kWaitForStep << RelaunchOrBreak("") << "exit \"$rc\"\n";
  return s.str();
}

}  // namespace

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

Result<JobShape> ShapeOfPlan(const PlanFile& plan, int nodes_flag) {
  const ParallelConfig& c = plan.layout;
  const int per_node = plan.cluster.gpus_per_node;
  JobShape shape;
  shape.ranks = c.WorldSize();
  shape.ranks_per_node = std::min(per_node, shape.ranks);
  if (shape.ranks % shape.ranks_per_node != 0) {
    return Status::Invalid("plan.cluster.gpus_per_node: " + std::to_string(per_node) +
                           " does not divide the plan's " + std::to_string(shape.ranks) +
                           " ranks (t*p*d)");
  }
  shape.nodes = shape.ranks / shape.ranks_per_node;
  if (nodes_flag != 0 && nodes_flag != shape.nodes) {
    return Status::Invalid("--nodes: the plan needs " + std::to_string(shape.nodes) +
                           " node(s) of " + std::to_string(shape.ranks_per_node) + " GPUs (" +
                           std::to_string(shape.ranks) + " ranks), not " +
                           std::to_string(nodes_flag) + " (re-plan for another size)");
  }
  return shape;
}

Result<std::string> JobScript(const PlanFile& plan, const LaunchRequest& req) {
  PTDP_ASSIGN_OR_RETURN(JobShape shape, ShapeOfPlan(plan, req.nodes));
  if (req.scheduler == "slurm") return SlurmScript(plan, req, shape);
  if (req.scheduler == "mpirun") return MpirunScript(plan, req, shape);
  return Status::Invalid("--scheduler: '" + req.scheduler + "' is not slurm or mpirun");
}

Result<std::string> Hostfile(const PlanFile& plan, const LaunchRequest& req) {
  PTDP_ASSIGN_OR_RETURN(JobShape shape, ShapeOfPlan(plan, req.nodes));
  std::vector<std::string> hosts = SplitHosts(req.hosts);
  if (hosts.empty() && shape.nodes == 1) hosts.push_back("localhost");
  if (int(hosts.size()) != shape.nodes) {
    return Status::Invalid("--hosts: " + std::to_string(hosts.size()) + " host(s) for the plan's " +
                           std::to_string(shape.nodes) + " node(s)");
  }
  std::string out;
  for (const std::string& h : hosts) {
    out += h + " slots=" + std::to_string(shape.ranks_per_node) + "\n";
  }
  return out;
}

}  // namespace ptdp::tools
