// ptdp profile --backend cpu|cuda --out profiles/<name>.json [--quick] [--raw raw.json] ...
// Measures the machine it runs on (GEMM grid, memory-bound bandwidth, attention, launch cost, and
// collectives when run under mpirun with several ranks) and writes a HardwareProfile that
// `ptdp plan --cluster <file>` reads as a one-node cluster. Wiring only: profiler/ does the work.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <optional>

#include "core/hardware.h"
#include "core/json.h"
#include "profiler/attention_grid.h"
#include "profiler/gemm_shapes.h"
#include "profiler/profiler.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/world.h"
#include "tools/common.h"

namespace ptdp::tools {
namespace {

struct ProfileArgs {
  std::string backend = "cpu";
  std::string out;
  std::string name;
  std::string raw;
  std::string links_from;
  double peak_tflops = 0;
  std::string peak_source;
  profiler::ProfileOptions opts;
  std::vector<std::string> attention_grid;  // --attention-grid S1,S2,... D1,D2,...
  // --gemm-shapes-of MODELS, --gemm-shapes-mbs B1,B2,..., --gemm-shapes-tp T1,T2,...
  std::string gemm_shapes_of, gemm_shapes_mbs, gemm_shapes_tp;
};

std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown host";
  return buf;
}

// Reads --links-from: a profile file, or a cluster file holding one under "profile".
Result<HardwareProfile> ReadLinksFrom(const std::string& path) {
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path));
  if (j.is_object() && j.contains("profile") && j["profile"].is_object()) {
    return HardwareProfileFromJson(j["profile"], path + ":profile");
  }
  return HardwareProfileFromJson(j, path);
}

// Validates the arguments that need no measurement; the same on every rank.
Status CheckArgs(const ProfileArgs& a) {
  if (a.out.empty()) return Status::Invalid("--out: required (the profile file to write)");
  if (a.backend != "cpu" && a.backend != "cuda") {
    return Status::Invalid("--backend: \"" + a.backend + "\" is not cpu or cuda");
  }
  if ((a.peak_tflops > 0) != !a.peak_source.empty()) {
    return Status::Invalid(
        "--peak-tflops and --peak-source: give both (a datasheet figure and where "
        "it is published) or neither");
  }
  if (a.peak_tflops < 0) return Status::Invalid("--peak-tflops: must be positive");
  return Status::Ok();
}

Status Run(ProfileArgs& a, runtime::Communicator& world) {
  Status local = CheckArgs(a);
  if (local.ok()) local = profiler::ParseAttentionGrid(a.attention_grid, &a.opts);
  if (local.ok()) local = profiler::CheckAttentionGrid(a.opts);
  if (local.ok()) {
    local =
        profiler::ParseGemmShapes(a.gemm_shapes_of, a.gemm_shapes_mbs, a.gemm_shapes_tp, &a.opts);
  }
  std::optional<HardwareProfile> links;
  if (local.ok() && !a.links_from.empty()) {
    auto l = ReadLinksFrom(a.links_from);
    if (l.ok()) {
      links = *l;
    } else {
      local = l.status().WithPrefix("--links-from");
    }
  }
  std::unique_ptr<profiler::ProfileBackend> backend;
  if (local.ok()) {
    auto b = profiler::MakeBackend(a.backend);
    if (b.ok()) {
      backend = std::move(*b);
    } else {
      local = b.status();
    }
  }
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, local));

  PTDP_ASSIGN_OR_RETURN(auto data_comm, backend->MakeDataComm(world.members()));
  runtime::Communicator& data = data_comm != nullptr ? *data_comm : world;
  a.opts.host = HostName();
  a.opts.date = Today();
  auto report = profiler::RunProfile(*backend, data, world, a.opts);
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, report.status()));

  Status written;
  if (world.rank() == 0) {
    std::optional<Sourced> peak;
    if (a.peak_tflops > 0) peak = Sourced{a.peak_tflops, a.peak_source};
    profiler::LinkFallback fallback;
    if (links.has_value()) {
      fallback.from = &*links;
      fallback.from_path = a.links_from;
    }
    const std::string name = a.name.empty() ? "measured-" + a.backend + "-" + a.opts.host : a.name;
    auto profile = profiler::ToHardwareProfile(*report, name, peak, fallback);
    if (profile.ok()) {
      std::fputs(profiler::ReportToText(*report).c_str(), stdout);
      written = WriteFileAtomic(a.out, HardwareProfileToJson(*profile).dump(2) + "\n");
      if (written.ok() && !a.raw.empty()) {
        written = WriteFileAtomic(a.raw, profiler::ReportToJson(*report).dump(2) + "\n");
      }
      if (written.ok()) std::printf("wrote %s\n", a.out.c_str());
    } else {
      written = profile.status();
    }
  }
  return runtime::AgreeStatus(world, written);
}

}  // namespace

void RegisterProfile(CLI::App& app, int* exit_code) {
  static ProfileArgs a;
  auto* cmd = app.add_subcommand(
      "profile", "measure this machine (GEMMs, bandwidth, attention, collectives) into a profile");
  cmd->add_option("--backend", a.backend, "cpu (Eigen + MPI) or cuda (cuBLAS + NCCL)");
  cmd->add_option("--out", a.out, "the profile file to write (core/hardware.h schema)");
  cmd->add_option("--name", a.name, "profile name (default measured-<backend>-<host>)");
  cmd->add_flag("--quick", a.opts.quick, "a small grid that runs in seconds (CI)");
  cmd->add_option("--raw", a.raw, "also write every measurement (the full collective sweep)");
  cmd->add_option(
      "--links-from", a.links_from,
      "profile (or cluster) file whose link figures to copy when a link is not measured");
  cmd->add_option("--peak-tflops", a.peak_tflops,
                  "datasheet dense peak (default: the best measured GEMM)");
  cmd->add_option("--peak-source", a.peak_source, "where --peak-tflops is published");
  cmd->add_option("--gemm-m", a.opts.gemm_m, "GEMM grid rows (tokens), increasing");
  cmd->add_option("--gemm-n", a.opts.gemm_n, "GEMM grid output features, increasing");
  cmd->add_option("--gemm-k", a.opts.gemm_k, "GEMM grid input features, increasing");
  cmd->add_option("--attention", a.opts.attention,
                  "attention shape to time, without and with dropout 0.1: B S HEADS D "
                  "(default: the backend's)")
      ->expected(4);
  cmd->add_option("--attention-grid", a.attention_grid,
                  "also time attention at every sequence length S with every head dimension D "
                  "(S1,S2,... D1,D2,...; each call keeps the tokens b S and the width heads D of "
                  "--attention's shape), without and with dropout 0.1, into attention_table")
      ->expected(2);
  cmd->add_option("--gemm-shapes-of", a.gemm_shapes_of,
                  "also time every Linear GEMM (QKV, projection, fc1, fc2, logits; forward and "
                  "both backward) of these models (presets or model JSON, comma-separated) at "
                  "their exact shapes, into gemm_points");
  cmd->add_option("--gemm-shapes-mbs", a.gemm_shapes_mbs,
                  "the microbatch sizes of --gemm-shapes-of, comma-separated (required with it)");
  cmd->add_option("--gemm-shapes-tp", a.gemm_shapes_tp,
                  "the tensor-parallel degrees of --gemm-shapes-of, comma-separated (default 1)");
  cmd->add_option("--max-message-bytes", a.opts.max_message_bytes,
                  "largest collective message (default: backend's)");
  cmd->callback([exit_code] {
    Status st = runtime::InitComm(nullptr, nullptr);
    if (!st.ok()) {
      *exit_code = Fail("profile", st);
      return;
    }
    auto world = runtime::WorldComm();
    if (!world.ok()) {
      *exit_code = Fail("profile", world.status());
      return;
    }
    st = Run(a, **world);
    const bool root = (*world)->rank() == 0;
    world->reset();
    // Every failure went through AgreeStatus: all ranks hold it; rank 0 prints it.
    *exit_code = st.ok() ? 0 : (root ? Fail("profile", st) : st.ExitCode());
    runtime::FinalizeComm();
  });
}

}  // namespace ptdp::tools
