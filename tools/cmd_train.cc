// `mpirun -np N ptdp train --plan plan.json --data tokens.bin --steps S [--log metrics.jsonl]`:
// wiring only; the runtime (runtime/executor/trainer.h) does the work. Rank 0 prints; every rank
// returns the same exit code for bad input found at setup (the ranks agree on it first).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <sstream>

#include "core/cluster.h"
#include "core/json.h"
#include "core/ledger.h"
#include "core/plan_file.h"
#include "core/timeline.h"
#include "runtime/backend/registry.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/world.h"
#include "runtime/executor/trainer.h"
#include "tools/common.h"
#include "tools/train_adapt.h"
#include "tools/train_placement.h"
#include "tools/train_report.h"

namespace ptdp::tools {
namespace {

struct TrainArgs {
  std::string plan, log, trace, backend = "cpu", memory_limit;
  std::string dump_params, expect_params, expect_losses;
  std::string save, load;  // checkpoints (docs/checkpoints.md)
  std::string init_from;   // a Hugging Face GPT-2 or Llama folder (docs/checkpoints.md)
  std::string fake_hosts;  // tests: the host of each rank, in place of gethostname
  int64_t save_every = 0;
  int64_t stop_at = 0;  // stop (and save) after this step, as a pre-empted job would; 0: --steps
  int keep = 2;
  int64_t steps = 0;
  int64_t monitor_every = 0;  // the monitor's window in steps (0: off)
  // Validation (--eval-data, or --split's share of --data): every eval_every steps (0: only after
  // the last) eval_iters global batches of it, forward only (runtime/executor/evaluate.cc); the
  // test data's after the last step.
  int64_t eval_every = 0;
  int64_t eval_iters = 10;
  double straggler_threshold = 0.2;
  AdaptArgs adapt;  // --adapt, --switch-plan (tools/train_adapt.h)
  double params_tol = 1e-4, loss_tol = 1e-5, memory_tol = -1;
  runtime::TrainOptions opts;
};

// Pre-emption (SIGTERM, or SIGUSR1 which Slurm can send ahead of the end of a job): the handler
// only notes it; after the current step the ranks agree whether any got it, save and exit 0.
volatile std::sig_atomic_t g_stop_signal = 0;
void OnStopSignal(int sig) {
  g_stop_signal = sig;
}

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

// Collective: whether any rank has been asked to stop.
Result<bool> AnyRankStopping(runtime::Communicator& world) {
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all,
                        runtime::AllGatherDoubles(world, {double(g_stop_signal)}));
  for (double v : all) {
    if (v != 0) return true;
  }
  return false;
}

// "123", "64KiB", "512MiB", "4GiB" -> bytes.
Result<Bytes> ParseBytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return Status::Invalid("--memory-limit: '" + s + "' is not a size (e.g. 512MiB)");
  }
  const std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "KiB")
    mul = kKiB;
  else if (unit == "MiB")
    mul = kMiB;
  else if (unit == "GiB")
    mul = kGiB;
  else if (!unit.empty() && unit != "B")
    return Status::Invalid("--memory-limit: unknown unit '" + unit + "'");
  // NaN fails every comparison, so test for the good range rather than the bad one; a NaN or
  // out-of-range double cast to an integer is undefined (and disabled the limit).
  const double bytes = v * mul;
  if (!std::isfinite(bytes)) return Status::Invalid("--memory-limit: '" + s + "' is not finite");
  if (!(bytes >= 1)) return Status::Invalid("--memory-limit: must be positive");
  if (!(bytes <= 0x1p62)) {
    return Status::Invalid("--memory-limit: '" + s + "' is more than 2^62 bytes");
  }
  return static_cast<Bytes>(bytes);
}

// The flags of the data (docs/data.md): each blend and the split well formed, every file a file.
Status CheckDataArgs(const runtime::TrainOptions& o) {
  if (!o.split.empty()) PTDP_RETURN_IF_ERROR(ParseSplit(o.split).status());
  for (const auto& [flag, words] : {std::pair{"--data", &o.data},
                                    {"--eval-data", &o.eval_data},
                                    {"--test-data", &o.test_data}}) {
    if (words->empty()) continue;
    PTDP_ASSIGN_OR_RETURN(const BlendSpec spec, ParseBlend(*words, flag));
    for (const std::string& path : spec.paths) {
      PTDP_RETURN_IF_ERROR(CheckNotSpecialFile(flag, path));
    }
  }
  return Status::Ok();
}

// The words of a flag, as a shell would take them back (for the relaunch line).
std::string JoinWords(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// This rank's checks of the arguments and the plan, and the memory limit (--memory-limit, else the
// plan's cluster profile, else this host's memory / ranks). Not yet agreed over the ranks.
Status ReadArguments(TrainArgs& a, int world_size, Result<PlanFile>* plan) {
  Status pre;
  if (auto dev = runtime::CreateDevice(a.backend); !dev.ok()) {
    pre = dev.status();
  } else if (a.steps < 1) {
    pre = Status::Invalid("--steps: must be at least 1");
  } else if (a.save_every < 0 || a.keep < 1) {
    pre = Status::Invalid("--save-every: must be >= 0, --keep: >= 1");
  } else if (a.save.empty() && (a.save_every > 0 || a.load == "latest")) {
    pre = Status::Invalid("--save-every and --load latest need --save DIR");
  } else if (a.eval_every < 0 || a.eval_iters < 1) {
    pre =
        Status::Invalid("--eval-every: must be >= 0 (0: after the last step), --eval-iters: >= 1");
  } else if (Status d = CheckDataArgs(a.opts); !d.ok()) {
    pre = d;
  } else if (a.opts.eval_data.empty() && a.eval_every > 0 && a.opts.split.empty()) {
    pre = Status::Invalid("--eval-every: needs --eval-data (the validation data) or --split");
  } else if (a.monitor_every < 0) {
    pre = Status::Invalid("--monitor-every: must be >= 0 (0: no monitor)");
  } else if (!(a.straggler_threshold > 0)) {
    pre = Status::Invalid("--straggler-threshold: must be > 0");
  } else if (a.adapt.calibrate && !a.adapt.adapt) {
    pre = Status::Invalid("--adapt-calibrate: only with --adapt");
  } else if (a.adapt.adapt && a.monitor_every == 0) {
    pre = Status::Invalid("--adapt: needs --monitor-every N (it re-plans at monitor windows)");
  } else if (!(a.adapt.threshold >= 0 && a.adapt.threshold < 1)) {
    // A gain is 1 - best / running, under 1: a threshold of 1 or more would never switch.
    pre = Status::Invalid("--adapt-threshold: must be in [0, 1) (a fraction of the step time)");
  } else if (!a.adapt.switch_plan.empty() && a.adapt.switch_at < 1) {
    pre = Status::Invalid("--switch-at: must be a step >= 1 with --switch-plan");
  } else if (a.opts.slow_rank < -1 || a.opts.slow_rank >= world_size) {
    pre = Status::Invalid("--slow-rank: must be a world rank below " + std::to_string(world_size));
  } else if (!(a.opts.slow_factor >= 1 && a.opts.slow_factor <= 1000)) {
    pre = Status::Invalid("--slow-factor: must be in [1, 1000]");
  } else if (Status f = CheckNotSpecialFile("--plan", a.plan); !f.ok()) {
    pre = f;
  } else {
    *plan = ReadPlanFile(a.plan);
    if (!plan->ok()) pre = plan->status().WithPrefix("--plan");
  }
  if (pre.ok() && !a.memory_limit.empty()) {
    auto b = ParseBytes(a.memory_limit);
    if (!b.ok())
      pre = b.status();
    else
      a.opts.memory_limit = *b;
    a.opts.memory_limit_source = "--memory-limit";
  } else if (pre.ok()) {
    // Default limit: the memory of one device of the plan's cluster profile; when the plan names
    // no known profile, this host's physical memory shared by the job's ranks (one node).
    auto cluster = LoadCluster((*plan)->cluster.name);
    if (cluster.ok() && cluster->profile.memory_GiB.value > 0) {
      a.opts.memory_limit = static_cast<Bytes>(cluster->profile.memory_GiB.value * kGiB);
      a.opts.memory_limit_source =
          "memory_GiB of the cluster profile '" + (*plan)->cluster.name + "'";
    } else {
      const double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
      a.opts.memory_limit = static_cast<Bytes>(phys / world_size);
      a.opts.memory_limit_source = "this host's physical memory / ranks";
    }
  }
  return pre;
}

// The --log lines of steps up to `last` from an earlier run (a resumed run continues its log).
std::string KeptLog(const std::string& path, int64_t last) {
  std::string kept;
  auto text = ReadTextFile(path);
  if (last == 0 || !text.ok()) return kept;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    auto j = ParseJson(line, path);
    if (j.ok() && j->is_object() && j->contains("step") && (*j)["step"].is_number_integer() &&
        (*j)["step"].get<int64_t>() <= last) {
      kept += line + "\n";
    }
  }
  return kept;
}

// Iterations first_step .. --steps; rank 0 prints each step and rewrites the --log file; --save
// checkpoints every --save-every steps and after the last. Returns the losses. *relaunch: --adapt
// chose another t, p or d; the state after the last step run is saved for the relaunch.
Result<std::vector<double>> TrainSteps(const TrainArgs& a,
                                       std::unique_ptr<runtime::Trainer>& trainer_ptr,
                                       PlanFile* plan, runtime::Communicator& world,
                                       int64_t first_step, bool root, bool* agreed_failure,
                                       bool* relaunch) {
  const int64_t global_batch = trainer_ptr->layout().global_batch;  // a plan switch keeps it
  std::string log = root && !a.log.empty() ? KeptLog(a.log, first_step - 1) : "";
  std::vector<double> losses;
  AdaptState adapt;  // --adapt's switch on trial and the layouts it undid
  const int64_t last = a.stop_at > 0 ? std::min(a.stop_at, a.steps) : a.steps;
  for (int64_t step = first_step; step <= last; ++step) {
    runtime::Trainer& trainer = *trainer_ptr;
    PTDP_ASSIGN_OR_RETURN(runtime::StepMetrics m, trainer.Step(step));
    // The first step warms the caches and libraries: the op table counts the steps after it.
    if (step == first_step && a.steps > step && trainer.op_times() != nullptr) {
      trainer.op_times()->Reset();
    }
    losses.push_back(m.loss);
    std::optional<runtime::MonitorReport> monitor;
    if (a.monitor_every > 0 && (step % a.monitor_every == 0 || step == last)) {
      PTDP_ASSIGN_OR_RETURN(monitor, trainer.GatherMonitor(a.straggler_threshold));
    }
    EvalLosses eval;
    if (trainer.has_eval_data() &&
        ((a.eval_every > 0 && step % a.eval_every == 0) || step == a.steps)) {
      PTDP_ASSIGN_OR_RETURN(eval.valid, trainer.Evaluate(a.eval_iters));
    }
    if (trainer.has_test_data() && step == a.steps) {
      PTDP_ASSIGN_OR_RETURN(eval.test, trainer.Evaluate(a.eval_iters, SplitPart::kTest));
    }
    if (root) {
      std::printf(
          " iteration %6lld/%6lld | consumed samples %8lld | elapsed time per iteration (ms): "
          "%.1f | learning rate: %.3E | lm loss: %.6E | grad norm: %.4f | tokens/s: %.0f | "
          "TFLOP/s/GPU: %.4f | peak memory (MiB): %.2f | loss scale: %.0f | skipped: %lld\n",
          static_cast<long long>(step), static_cast<long long>(a.steps),
          static_cast<long long>(step * global_batch), m.iteration_s * 1e3, m.lr, m.loss,
          m.grad_norm, m.tokens_per_s, m.tflops_per_gpu, m.peak_memory_bytes / kMiB, m.loss_scale,
          static_cast<long long>(m.skipped_steps));
      PrintMoeLosses(a.opts, m);
      if (monitor) std::printf("%s\n", runtime::MonitorLine(*monitor).c_str());
      // Megatron-LM's lines (training.py evaluate_and_print_results), and how many batches.
      if (eval.valid) {
        std::printf(
            " validation loss at iteration %6lld | lm loss value: %.6E | lm loss PPL: %.6E "
            "| %lld global batches of the validation data\n",
            static_cast<long long>(step), *eval.valid, std::exp(*eval.valid),
            static_cast<long long>(a.eval_iters));
      }
      if (eval.test) {
        std::printf(
            " validation loss at the end of training for test data | lm loss value: %.6E | lm "
            "loss PPL: %.6E | %lld global batches of the test data\n",
            *eval.test, std::exp(*eval.test), static_cast<long long>(a.eval_iters));
      }
      std::fflush(stdout);
      if (!a.log.empty()) {
        log += MetricsJson(m, monitor ? &*monitor : nullptr, eval) + "\n";
        PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.log, log).WithPrefix("--log"));
      }
    }
    *agreed_failure = true;  // a plan switch's errors are agreed
    if (a.adapt.adapt) adapt.window_step_s.push_back(m.iteration_s);  // the trial's measure
    if (step < last) {  // nothing to gain after the last step
      PTDP_RETURN_IF_ERROR(AdaptAfterStep(a.adapt, monitor ? &*monitor : nullptr, step,
                                          a.opts.memory_limit, world, &adapt, plan, &trainer_ptr));
    }
    *agreed_failure = false;
    bool stopping = false;
    if (!a.save.empty()) {
      PTDP_ASSIGN_OR_RETURN(stopping, AnyRankStopping(world));
    }
    if (!a.save.empty() && ((a.save_every > 0 && step % a.save_every == 0) || step == last ||
                            stopping || adapt.relaunch)) {
      *agreed_failure = true;  // every rank returns the save's agreed status
      const auto t0 = std::chrono::steady_clock::now();
      PTDP_ASSIGN_OR_RETURN(const Bytes bytes, trainer_ptr->SaveCheckpoint(a.save, step, a.keep));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *agreed_failure = false;
      if (root) {
        std::printf(
            "saved checkpoint %s/step-%08lld: %.2f MiB in %.3f s (%.3f GB/s, all writers)\n",
            a.save.c_str(), static_cast<long long>(step), bytes / kMiB, s, bytes / s / 1e9);
        std::fflush(stdout);
      }
    }
    if (adapt.relaunch) {
      if (root) {
        std::printf(
            " adapt after step %lld: relaunch with: ptdp train --plan %s --load latest --save %s "
            "--data %s --steps %lld (and this run's other flags); every rank exits %d\n",
            static_cast<long long>(step), adapt.relaunch_plan.c_str(), a.save.c_str(),
            JoinWords(a.opts.data).c_str(), static_cast<long long>(a.steps), kRelaunchExitCode);
        std::fflush(stdout);
      }
      *relaunch = true;
      break;
    }
    if (stopping) {
      if (root) {
        std::printf("stopping after step %lld on a signal (relaunch with --load latest)\n",
                    static_cast<long long>(step));
      }
      break;
    }
  }
  return losses;
}

// --load: the step the checkpoint holds (0 without one). Collective; errors agreed over the ranks.
Result<int64_t> Resume(const TrainArgs& a, runtime::Trainer& trainer, bool root) {
  if (a.load.empty()) return int64_t(0);
  const bool latest = a.load == "latest";
  const auto t0 = std::chrono::steady_clock::now();
  PTDP_ASSIGN_OR_RETURN(const int64_t done,
                        trainer.LoadCheckpoint(latest ? a.save : a.load, latest));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (root && done > 0) {
    std::printf("resumed from step %lld of %s (loaded and verified in %.3f s)\n",
                static_cast<long long>(done), a.load.c_str(), s);
  } else if (root) {
    std::printf("--load latest: no checkpoint under %s yet, starting from step 1\n",
                a.save.c_str());
  }
  if (done == 0) PTDP_RETURN_IF_ERROR(trainer.InitialiseParams());  // agreed
  if (root && done >= a.steps) {
    std::printf("the checkpoint's step %lld already reaches --steps %lld: nothing to train\n",
                static_cast<long long>(done), static_cast<long long>(a.steps));
  }
  return done;
}

// The whole run on this rank. Setup errors come back identical on every rank. *relaunch: --adapt
// saved for a relaunch in another t, p, d (the losses so far checked, nothing else reported).
Status Run(TrainArgs& a, runtime::Communicator& world, bool* agreed_failure, bool* relaunch) {
  const bool root = world.rank() == 0;
  Result<PlanFile> plan = Status::Internal("unread");
  const Status pre = ReadArguments(a, world.size(), &plan);
  *agreed_failure = true;
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, pre));
  // Where the ranks landed, before any group is built over them (docs/launch.md).
  std::string hosts;
  PTDP_RETURN_IF_ERROR(CheckRankPlacement(world, *plan, a.fake_hosts, &hosts));
  a.opts.steps = a.steps;
  a.opts.backend = a.backend;
  if (a.opts.optim.decay_steps == 0) a.opts.optim.decay_steps = a.steps;
  // With --load the checkpoint's parameters replace the initial ones: they are drawn only when
  // there is none to load (Resume). With --init-from alone the folder's weights do, and only the
  // vocabulary padding rows are drawn (the folder has none of them, nor Adam's moments).
  const runtime::ParamInit init = !a.load.empty()        ? runtime::ParamInit::kLoadFollows
                                  : !a.init_from.empty() ? runtime::ParamInit::kWeightsLoadFollows
                                                         : runtime::ParamInit::kRandom;
  PTDP_ASSIGN_OR_RETURN(auto trainer, runtime::Trainer::Create(&world, *plan, a.opts, init));
  const ParallelConfig& c = trainer->layout();
  if (root) {
    std::printf("ptdp train: %s on %d ranks (%s), %lld microbatches of %d per iteration\n",
                plan->model.name.c_str(), world.size(), c.ToString().c_str(),
                static_cast<long long>(c.Microbatches()), c.mbs);
    std::printf("ranks per host: %s (tensor groups as the plan places them, %d ranks per node)\n",
                hosts.c_str(), plan->cluster.gpus_per_node);
    for (auto part : {SplitPart::kTrain, SplitPart::kValid, SplitPart::kTest}) {
      const std::string d = trainer->DescribeData(part);
      if (!d.empty()) std::printf(" > %s data: %s\n", SplitPartName(part), d.c_str());
    }
  }
  PTDP_ASSIGN_OR_RETURN(const int64_t done, Resume(a, *trainer, root));  // agreed
  if (!a.init_from.empty() && done > 0) {
    if (root)
      std::printf("--init-from %s not used: resumed from a checkpoint\n", a.init_from.c_str());
  } else if (!a.init_from.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    PTDP_RETURN_IF_ERROR(trainer->InitFromHf(a.init_from));  // agreed
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (root) {
      std::printf("initialised from the Hugging Face folder %s in %.3f s\n", a.init_from.c_str(),
                  s);
    }
  }
  *agreed_failure = false;
  a.adapt.scratch_dir = a.save.empty() ? "ptdp-switch" : a.save + "/switch";
  a.adapt.save_dir = a.save;
  a.adapt.steps = a.steps;
  PTDP_ASSIGN_OR_RETURN(
      const std::vector<double> losses,
      TrainSteps(a, trainer, &*plan, world, done + 1, root, agreed_failure, relaunch));
  if (*relaunch) {
    *agreed_failure = true;
    return runtime::AgreeStatus(world,
                                !a.expect_losses.empty() && root
                                    ? CheckLosses(a.expect_losses, a.loss_tol, done + 1, losses)
                                    : Status::Ok());
  }
  if (root && trainer->op_times() != nullptr)
    PrintOpTimes(*trainer->op_times(), int64_t(losses.size()));
  // Memory: measured peak per pipeline rank beside the predictions.
  PTDP_ASSIGN_OR_RETURN(auto mem, trainer->GatherMemory());
  const Status mem_status = root ? ReportMemory(a.memory_tol, *plan, *trainer, mem) : Status::Ok();
  *agreed_failure = true;  // the checks below are agreed over all ranks
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, mem_status));
  if (!a.trace.empty()) {
    PTDP_ASSIGN_OR_RETURN(Timeline t, trainer->GatherTimeline());
    Status w = root ? WriteChromeTrace(t, a.trace).WithPrefix("--trace") : Status::Ok();
    PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, w));
  }
  if (!a.dump_params.empty()) PTDP_RETURN_IF_ERROR(trainer->WriteParamDump(a.dump_params));
  // Equivalence checks against a single-process run.
  const Status check = !a.expect_losses.empty() && root
                           ? CheckLosses(a.expect_losses, a.loss_tol, done + 1, losses)
                           : Status::Ok();
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, check));
  if (!a.expect_params.empty()) {
    PTDP_ASSIGN_OR_RETURN(const auto diff, trainer->CompareParams(a.expect_params));
    const double worst = diff.worst;
    if (root) {
      std::printf(
          "parameters vs reference: max per-tensor relative difference %.3e (tolerance %.1e; %s)\n",
          worst, a.params_tol, diff.tensor.c_str());
    }
    if (!(worst <= a.params_tol)) {
      return Status::Internal("final parameters differ from the reference by " +
                              std::to_string(worst) + " (relative, per tensor), over " +
                              std::to_string(a.params_tol));
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterTrain(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "train", "Train a plan's model with PTD-P (run under mpirun -np tp*cp*pp*dp)");
  static TrainArgs a;
  cmd->add_option("--plan", a.plan, "plan file (ptdp plan --out)")->required();
  cmd->add_option(
         "--data", a.opts.data,
         "token file (ptdp tokenize), or a blend WEIGHT FILE WEIGHT FILE ... (docs/data.md)")
      ->required();
  cmd->add_option("--split", a.opts.split,
                  "TRAIN,VALID,TEST shares of each --data file (e.g. 969,30,1; default: all "
                  "trains): validation and test data cut from it");
  cmd->add_option("--steps", a.steps, "iterations")->required();
  cmd->add_option("--log", a.log, "JSON lines of per-step metrics (rank 0 writes)");
  cmd->add_flag("--op-times", a.opts.op_times,
                "print rank 0's time per Ops call and shape (each call synchronised)");
  cmd->add_option("--backend", a.backend,
                  "compute backend: cpu, cpu-guard (tests: faults on host access to tensors), cuda "
                  "(builds with CUDA; GPU by local rank; never run on a GPU yet)");
  cmd->add_option("--kill-in-save-step", a.opts.kill_in_save_step,
                  "tests: SIGKILL the last rank inside this step's --save");
  cmd->add_option("--eval-data", a.opts.eval_data,
                  "validation data (as --data): its loss, forward only and without dropout, after "
                  "the last step and every --eval-every steps (\"eval_loss\" in --log)");
  cmd->add_option("--test-data", a.opts.test_data,
                  "test data (as --data): its loss after the last step (\"test_loss\" in --log)");
  cmd->add_option("--eval-every", a.eval_every,
                  "steps between validations (0, the default: after the last step only)");
  cmd->add_option("--eval-iters", a.eval_iters,
                  "global batches per validation or test (default 10; the same ones each "
                  "time)");
  cmd->add_option(
      "--moe-aux-loss-coeff", a.opts.moe_aux_loss_coeff,
      "a mixture of experts' load-balancing loss coefficient (Megatron-LM's; default 0)");
  cmd->add_option("--moe-router-load-balancing-type", a.opts.moe_load_balancing,
                  "the load-balancing loss per microbatch (aux_loss, the default) or per "
                  "sequence (seq_aux_loss; Megatron-LM's)");
  cmd->add_option("--moe-z-loss-coeff", a.opts.moe_z_loss_coeff,
                  "a mixture of experts' router z-loss coefficient (Megatron-LM's; default 0)");
  cmd->add_option("--mtp-loss-scaling-factor", a.opts.mtp_loss_scale,
                  "the multi-token prediction depths' weight in the loss (Megatron-LM's; 0.1)");
  cmd->add_option("--monitor-every", a.monitor_every,
                  "every N steps: utilisation per rank, bubble, stage imbalance and stragglers "
                  "(one line; the \"monitor\" field of --log)");
  cmd->add_option("--straggler-threshold", a.straggler_threshold,
                  "the monitor names ranks slower than the median by more (fraction, 0.2)");
  cmd->add_flag(
      "--adapt", a.adapt.adapt,
      "at every monitor window, re-plan for the same GPUs with the measured stage "
      "compute and switch at the step boundary (microbatch size, schedule, interleaving, "
      "split) when the simulator predicts a gain over --adapt-threshold; another t, p, d: "
      "with --save, save, write DIR/relaunch-plan.json and exit 75 (docs/runtime.md)");
  cmd->add_flag("--adapt-calibrate", a.adapt.calibrate,
                "--adapt fits the plan's profile to each window's last step (ptdp calibrate's "
                "fit) before pricing candidates; kept only when it lowers the compute error");
  cmd->add_option("--adapt-threshold", a.adapt.threshold,
                  "--adapt switches when the predicted step is this much shorter (fraction, 0.1)");
  cmd->add_option("--switch-plan", a.adapt.switch_plan,
                  "tests: switch to this plan (same t, p, d) after step --switch-at");
  cmd->add_option("--switch-at", a.adapt.switch_at, "tests: see --switch-plan");
  cmd->add_option("--slow-rank", a.opts.slow_rank,
                  "tests: this world rank computes --slow-factor times slower (sleeps)");
  cmd->add_option("--slow-factor", a.opts.slow_factor, "tests: see --slow-rank");
  cmd->add_option("--inject-overflow-step", a.opts.inject_overflow_step,
                  "tests: put an inf into one gradient at this step (fp16 loss scaling)");
  cmd->add_option("--initial-loss-scale", a.opts.initial_loss_scale, "fp16 dynamic loss scale");
  cmd->add_option("--loss-scale-window", a.opts.loss_scale_window,
                  "fp16: clean steps before the loss scale doubles");
  cmd->add_option("--trace", a.trace, "Chrome trace of the last iteration's measured timeline");
  cmd->add_option("--lr", a.opts.optim.lr, "peak learning rate");
  cmd->add_option("--min-lr", a.opts.optim.min_lr, "final learning rate of the cosine decay");
  cmd->add_option("--warmup", a.opts.optim.warmup_steps, "linear warm-up iterations");
  cmd->add_option("--weight-decay", a.opts.optim.weight_decay, "AdamW decoupled weight decay");
  cmd->add_option("--clip-grad", a.opts.optim.clip_grad, "global gradient-norm clip (0: off)");
  cmd->add_option("--seed", a.opts.data_seed, "data sampling seed");
  cmd->add_option("--bucket-elements", a.opts.bucket_elements, "data-parallel all-reduce bucket");
  cmd->add_flag("--overlap-grad-reduce", a.opts.overlap_grad_reduce,
                "start each model chunk's data-parallel all-reduce as soon as its gradients are "
                "final, under the rest of the backward (default off; docs/runtime.md)");
  cmd->add_flag("--overlap-param-gather", a.opts.overlap_param_gather,
                "with the distributed optimizer, start the gather of the updated weights after "
                "the step and wait for each chunk's before its next forward (default off; "
                "docs/distributed_optimizer.md)");
  cmd->add_option("--memory-limit", a.memory_limit,
                  "bytes per rank (e.g. 512MiB); default: physical memory / ranks");
  cmd->add_option("--memory-tol", a.memory_tol,
                  "fail if measured memory differs from the prediction by more (fraction)");
  cmd->add_option("--dump-params", a.dump_params, "write the final parameters (single process)");
  cmd->add_option("--expect-params", a.expect_params,
                  "compare final parameters with a --dump-params file");
  cmd->add_option("--expect-losses", a.expect_losses, "compare per-step losses with a --log file");
  cmd->add_option("--save", a.save,
                  "checkpoint folder: DIR/step-NNNNNNNN after every --save-every steps and the "
                  "last (docs/checkpoints.md)");
  cmd->add_option("--save-every", a.save_every, "steps between checkpoints (0: the last only)");
  cmd->add_option("--keep", a.keep, "checkpoints kept under --save (default 2)");
  cmd->add_option("--stop-at", a.stop_at,
                  "stop after this step (saving with --save) as a pre-empted job would; the "
                  "learning-rate schedule still runs to --steps");
  cmd->add_option("--decay-steps", a.opts.optim.decay_steps,
                  "iterations of the cosine decay (default: --steps)");
  cmd->add_option("--load", a.load,
                  "resume from a checkpoint: DIR/step-NNNNNNNN, a folder of them (the newest "
                  "valid), or 'latest' (the newest under --save; none yet: start from step 1)");
  cmd->add_option(
      "--init-from", a.init_from,
      "start from a Hugging Face GPT-2 or Llama folder (config.json, model.safetensors; e.g. "
      "ptdp export's), its model the plan's; ignored when --load resumes a checkpoint");
  cmd->add_option("--fake-hosts", a.fake_hosts,
                  "tests: comma-separated host of each rank, in place of gethostname (placement "
                  "check, docs/launch.md)");
  cmd->add_option("--params-tol", a.params_tol, "relative tolerance of --expect-params");
  cmd->add_option("--loss-tol", a.loss_tol, "relative tolerance of --expect-losses");
  cmd->callback([exit_code] {
    Status st = runtime::InitComm(nullptr, nullptr);
    if (!st.ok()) {
      *exit_code = Fail("train", st);
      return;
    }
    auto world = runtime::WorldComm();
    if (!world.ok()) {
      *exit_code = Fail("train", world.status());
      return;
    }
    // srun without a working PMIx plug-in starts N worlds of one: refuse before any rank trains.
    st = CheckSlurmNumbering((*world)->rank(), (*world)->size());
    if (!st.ok()) {
      world->reset();
      *exit_code = Fail("train", st);
      runtime::FinalizeComm();
      return;
    }
    bool agreed = false, relaunch = false;
    if (!a.save.empty()) CatchStopSignals();
    st = Run(a, **world, &agreed, &relaunch);
    const bool root = (*world)->rank() == 0;
    world->reset();
    if (st.ok()) {
      runtime::FinalizeComm();
      *exit_code = relaunch ? kRelaunchExitCode : 0;
    } else if (agreed) {
      // Every rank holds this same error: one line from rank 0, all exit non-zero together.
      *exit_code = root ? Fail("train", st) : st.ExitCode();
      runtime::FinalizeComm();
    } else {
      // A failure on this rank alone: report it and leave without MPI_Finalize (which could wait
      // for ranks blocked on us); mpirun then ends the job.
      *exit_code = Fail("train", st);
    }
  });
}

}  // namespace ptdp::tools
