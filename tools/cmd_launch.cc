// `ptdp launch --plan plan.json --scheduler slurm|mpirun --data tokens.bin --steps S
//   [--nodes N] [--partition P] [--time T] [--out DIR] [--dry-run | --submit]`: the job that runs
// the plan (tools/launch_script.h, docs/launch.md). Writes DIR/plan.json (a copy: a requeued job
// runs the plan it started with), DIR/job.sbatch or DIR/job.sh (+ DIR/hostfile), and the logs/ and
// checkpoints/ folders; --dry-run prints the script instead; --submit also hands it to sbatch (or
// runs it, for mpirun).
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/data_spec.h"
#include "core/json.h"
#include "core/plan_file.h"
#include "tools/common.h"
#include "tools/launch_script.h"

namespace ptdp::tools {
namespace {

struct LaunchArgs {
  std::string plan, out = "ptdp-job";
  bool dry_run = false, submit = false;
  LaunchRequest req;
};

std::string AbsolutePath(const std::string& p) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

// This executable, so that the job runs the ptdp that wrote it.
std::string SelfPath() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ptdp") : self.string();
}

// Values pasted into #SBATCH lines, the hostfile or paths Slurm expands: one word, no quotes, no
// '%' (a Slurm file-name pattern), so the script cannot be cut or extended by them.
Status CheckWord(const char* flag, const std::string& value) {
  for (char ch : value) {
    if (std::isspace(static_cast<unsigned char>(ch)) || ch == '\'' || ch == '"' || ch == '%' ||
        ch == '\\' || ch == '$' || ch == '`') {
      return Status::Invalid(std::string(flag) +
                             ": must be one word without spaces, quotes, '%', '$', '`' or "
                             "backslashes (it goes into the script as written)");
    }
  }
  return Status::Ok();
}

Status WriteJob(const LaunchArgs& a, const std::string& plan_text, const std::string& script,
                const std::string& script_path, const std::string& hostfile) {
  std::error_code ec;
  for (const char* sub : {"logs", "checkpoints"}) {
    std::filesystem::create_directories(a.req.job_dir + "/" + sub, ec);
    if (ec) return Status::IoError("--out: cannot create " + a.req.job_dir + "/" + sub);
  }
  PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.req.job_dir + "/plan.json", plan_text));
  if (!hostfile.empty()) {
    PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.req.job_dir + "/hostfile", hostfile));
  }
  PTDP_RETURN_IF_ERROR(WriteFileAtomic(script_path, script));
  if (chmod(script_path.c_str(), 0755) != 0) {
    return Status::IoError("--out: cannot make " + script_path + " executable");
  }
  return Status::Ok();
}

// sbatch (slurm) or bash (mpirun) on the written script; the exit status of that command.
int Submit(const LaunchArgs& a, const std::string& script_path) {
  const std::string cmd = a.req.scheduler == "slurm"
                              ? "sbatch --parsable " + ShellQuote(script_path)
                              : "bash " + ShellQuote(script_path);
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

Status Run(LaunchArgs& a, int* submit_rc) {
  if (a.dry_run && a.submit) return Status::Invalid("--dry-run and --submit: choose one");
  if (a.req.steps < 1) return Status::Invalid("--steps: must be at least 1");
  if (a.req.save_every < 0) return Status::Invalid("--save-every: must be >= 0");
  // Slurm keeps the lead in 16 bits (sbatch refuses more than 65535).
  if (a.req.signal_lead_s < 1 || a.req.signal_lead_s > 65535) {
    return Status::Invalid("--signal-lead: must be in [1, 65535] seconds");
  }
  // The job would fail only after its wait in the queue: every file of the blend is checked, and
  // its path made absolute (a blend's words alternate weights and files).
  PTDP_RETURN_IF_ERROR(ParseBlend(a.req.data, "--data").status());
  for (size_t i = a.req.data.size() == 1 ? 0 : 1; i < a.req.data.size(); i += 2) {
    const std::string& f = a.req.data[i];  // a token file, or a Megatron-LM dataset's prefix
    if (!std::filesystem::is_regular_file(f) && !(std::filesystem::is_regular_file(f + ".bin") &&
                                                  std::filesystem::is_regular_file(f + ".idx"))) {
      return Status::Invalid("--data: '" + f +
                             "' is not a file (or a PREFIX of .bin and .idx) here");
    }
    a.req.data[i] = AbsolutePath(a.req.data[i]);
  }
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--plan", a.plan));
  PTDP_ASSIGN_OR_RETURN(std::string plan_text, ReadTextFile(a.plan));
  Result<PlanFile> read = ReadPlanFile(a.plan);
  if (!read.ok()) return read.status().WithPrefix("--plan");
  const PlanFile& plan = *read;
  a.req.job_dir = AbsolutePath(a.out);
  a.req.ptdp = SelfPath();
  PTDP_RETURN_IF_ERROR(CheckWord("--out", a.req.job_dir));
  PTDP_RETURN_IF_ERROR(CheckWord("--partition", a.req.partition));
  PTDP_RETURN_IF_ERROR(CheckWord("--time", a.req.time));
  PTDP_RETURN_IF_ERROR(CheckWord("--hosts", a.req.hosts));
  PTDP_RETURN_IF_ERROR(CheckWord("--backend", a.req.backend));
  PTDP_ASSIGN_OR_RETURN(std::string script, JobScript(plan, a.req));
  std::string hostfile;
  if (a.req.scheduler == "mpirun") {
    PTDP_ASSIGN_OR_RETURN(hostfile, Hostfile(plan, a.req));
  }
  if (a.dry_run) {
    std::printf("%s", script.c_str());
    if (!hostfile.empty()) std::printf("# hostfile:\n%s", hostfile.c_str());
    return Status::Ok();
  }
  const std::string script_path =
      a.req.job_dir + (a.req.scheduler == "slurm" ? "/job.sbatch" : "/job.sh");
  PTDP_RETURN_IF_ERROR(WriteJob(a, plan_text, script, script_path, hostfile));
  std::printf("wrote %s (plan.json, logs/, checkpoints/%s)\n", script_path.c_str(),
              hostfile.empty() ? "" : ", hostfile");
  if (!a.submit) {
    std::printf("submit with: %s %s\n", a.req.scheduler == "slurm" ? "sbatch" : "bash",
                script_path.c_str());
    return Status::Ok();
  }
  if (a.req.scheduler == "slurm") std::printf("submitted Slurm job ");
  *submit_rc = Submit(a, script_path);
  return Status::Ok();
}

}  // namespace

void RegisterLaunch(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "launch", "Write (and submit) the Slurm or mpirun job that runs a plan (docs/launch.md)");
  static LaunchArgs a;
  cmd->add_option("--plan", a.plan, "plan file (ptdp plan --out)")->required();
  cmd->add_option("--scheduler", a.req.scheduler, "slurm | mpirun")->required();
  cmd->add_option(
         "--data", a.req.data,
         "token file (ptdp tokenize), or a blend WEIGHT FILE WEIGHT FILE ... (ptdp train's)")
      ->required();
  cmd->add_option("--steps", a.req.steps, "iterations")->required();
  cmd->add_option("--out", a.out, "the job's folder (default ptdp-job)");
  cmd->add_option("--nodes", a.req.nodes, "check: the plan's node count");
  cmd->add_option("--partition", a.req.partition, "slurm partition");
  cmd->add_option("--time", a.req.time, "slurm time limit (e.g. 2:00:00)");
  cmd->add_option("--hosts", a.req.hosts, "mpirun: comma-separated nodes (default localhost)");
  cmd->add_option("--backend", a.req.backend, "ptdp train --backend (default cuda)");
  cmd->add_option("--save-every", a.req.save_every,
                  "steps between checkpoints (0: the last, and on pre-emption)");
  cmd->add_option("--signal-lead", a.req.signal_lead_s,
                  "slurm: seconds before the time limit that USR1 asks the job to save (120)");
  cmd->add_option("--train-args", a.req.train_args,
                  "more ptdp train flags, as shell words (e.g. \"--lr 3e-3 --warmup 30\")");
  cmd->add_flag("--dry-run", a.dry_run, "print the script; write nothing");
  cmd->add_flag("--submit", a.submit, "write, then sbatch the script (mpirun: run it)");
  cmd->callback([exit_code] {
    int submit_rc = 0;
    const Status st = Run(a, &submit_rc);
    *exit_code = st.ok() ? submit_rc : Fail("launch", st);
  });
}

}  // namespace ptdp::tools
