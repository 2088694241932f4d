// `ptdp schedule`: generate a pipeline schedule and print it, rank by rank, as the paper's Figure 4
// draws it (time to the right, forward = one cell per chunk, backward = two), or as the Program's
// text or JSON form.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/json.h"
#include "core/plan_file.h"
#include "core/program.h"
#include "schedule/schedule.h"
#include "simulator/gantt.h"
#include "simulator/simulator.h"
#include "tools/common.h"

namespace ptdp::tools {
namespace {

// The closed-form bubble per rank of a zero-bubble schedule, in cells of the grid (F = B = W =
// one cell; Qi et al. 2024, Table 1): ZB-H1 (p - 1)(F + B - W), ZB-H2 (p - 1)(F + B - 2W); ZB-V
// none (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024: V-ZB's zero bubble).
int64_t ZeroBubbleClosedFormCells(const Program& p) {
  return p.kind == ScheduleKind::kZbH1 ? p.pp - 1 : 0;
}
const char* ZeroBubbleClosedForm(ScheduleKind k) {
  if (k == ScheduleKind::kZbV) return "0 (ZB-V)";
  return k == ScheduleKind::kZbH1 ? "(p-1)(F+B-W)" : "(p-1)(F+B-2W)";
}
const char* ZeroBubbleFromM(ScheduleKind k) {
  return k == ScheduleKind::kZbH1 ? "p" : "2p-1";
}

// The grid's time unit: a forward takes one per chunk, a backward two (a split backward's BI and
// W one each); communication is free.
constexpr Nanoseconds kGridUnit = 1000;

Result<sim::SimResult> SimulateGrid(const Program& compute) {
  PTDP_ASSIGN_OR_RETURN(Program p, schedule::Lower(compute, 0, false));
  const Nanoseconds unit = kGridUnit;
  sim::SimOptions o;
  o.record_timeline = true;
  return sim::Simulate(p,
                       sim::UniformCosts(p.pp, p.vp, ToSeconds(unit), ToSeconds(2 * unit), 0,
                                         SplitsBackward(p.kind) ? ToSeconds(unit) : 0.0),
                       o);
}

// Time-aligned grid: replays the compute order in grid units (SimulateGrid) and writes each
// instruction into the cells it covers: forwards as the microbatch number, backwards as the
// number and a '=' fill, W passes as the number and a '-' fill.
Result<std::string> Figure4(const Program& p) {
  const Nanoseconds unit = kGridUnit;
  const bool split = SplitsBackward(p.kind);
  PTDP_ASSIGN_OR_RETURN(sim::SimResult r, SimulateGrid(p));
  const int64_t cols = r.pipeline_ns / unit;
  const bool chunks = p.vp > 1;
  size_t w = std::to_string(p.microbatches - 1).size() + (chunks ? 1 : 0) + 1;
  std::vector<std::string> grid(p.pp, std::string(static_cast<size_t>(cols) * w, ' '));
  for (auto& row : grid)
    for (int64_t c = 0; c < cols; ++c) row[c * w + w - 1] = '.';
  for (const TimelineEvent& e : r.timeline.events) {
    if (e.stream != Stream::kCompute || !IsCompute(e.instr.op)) continue;
    const int64_t c0 = e.start_ns / unit, c1 = e.end_ns / unit;
    std::string label = std::to_string(e.instr.microbatch);
    if (chunks) label += static_cast<char>('a' + e.instr.chunk % 26);
    const bool back = e.instr.op != Op::kForward;
    const char fill = e.instr.op == Op::kBackwardWeight ? '-' : back ? '=' : ' ';
    std::string cell(static_cast<size_t>((c1 - c0) * w), fill);
    // Backward: "=12a==" style; the label sits at the left of its span.
    if (back) {
      cell.replace(0, label.size(), label);
    } else {
      cell.replace(cell.size() - 1 - label.size(), label.size(), label);
      cell.back() = ' ';
    }
    grid[e.pp_rank].replace(static_cast<size_t>(c0 * w), cell.size(), cell);
  }
  std::string out =
      std::string(ScheduleName(p.kind)) + " schedule, pp=" + std::to_string(p.pp) +
      " microbatches=" + std::to_string(p.microbatches) +
      (chunks ? " vp=" + std::to_string(p.vp) : "") +
      (split ? "\ntime runs right; a forward takes one cell per chunk, a backward's input-gradient "
               "half (B) one (shown \"N=\"), its weight-gradient half (W) one (shown \"N-\")"
             : "\ntime runs right; a forward takes one cell per chunk, a backward two (shown "
               "\"N===\")") +
      (chunks ? "; letters are chunks (a = chunk 0)" : "") +
      (VShaped(p.kind) ? " in a V (chunk a of rank r is stage r, chunk b stage 2p-1-r)" : "") +
      "; '.' is idle\n";
  for (int r2 = 0; r2 < p.pp; ++r2) {
    out +=
        "rank " + std::to_string(r2) + (r2 < 10 && p.pp > 10 ? " " : "") + " |" + grid[r2] + "\n";
  }
  char buf[256];
  if (!split) {
    // Narayanan et al.'s (p-1)/(v m) holds for Megatron-Core's microbatch groups too, but not for
    // the padded order pp = 2 keeps for odd m (docs/design-notes.md), so the line says so there.
    const bool published =
        p.kind != ScheduleKind::kInterleaved || p.pp != 2 || p.microbatches % 2 == 0;
    std::snprintf(buf, sizeof buf, "bubble: %.4f of the ideal time ((p-1)/(v m) = %.4f%s)\n",
                  r.bubble_fraction, double(p.pp - 1) / double(p.vp * p.microbatches),
                  published ? "" : ", not for pp = 2 with odd m");
    out += buf;
    return out;
  }
  Nanoseconds span_idle = 0;
  for (const sim::RankStats& rs : r.ranks) span_idle = std::max(span_idle, rs.span_idle_ns);
  std::snprintf(buf, sizeof buf,
                "bubble: %lld cells idle per rank at most, first forward to last W "
                "(closed form %s = %lld with F = B = W = 1 cell, from m >= %s)\n",
                static_cast<long long>(span_idle / unit), ZeroBubbleClosedForm(p.kind),
                static_cast<long long>(ZeroBubbleClosedFormCells(p)), ZeroBubbleFromM(p.kind));
  out += buf;
  return out;
}

// `--svg FILE`: the grid's timeline drawn as `ptdp simulate --svg` draws a plan's.
Status WriteScheduleSvg(const Program& compute, const std::string& path) {
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--svg", path));
  PTDP_ASSIGN_OR_RETURN(sim::SimResult r, SimulateGrid(compute));
  sim::GanttOptions g;
  g.title = std::string(ScheduleName(compute.kind)) +
            " schedule, pp=" + std::to_string(compute.pp) +
            " microbatches=" + std::to_string(compute.microbatches) +
            (compute.vp > 1 ? " vp=" + std::to_string(compute.vp) : "") +
            " (forward 1 unit, backward 2" + (SplitsBackward(compute.kind) ? ": B 1, W 1)" : ")");
  return WriteFileAtomic(path, sim::GanttSvg(r.timeline, g));
}

// Printing is bounded more tightly than a Program (schedule::kMaxScheduleCells): the JSON form
// costs hundreds of bytes per instruction, and the grid is pp rows of about 3 (m v + p) cells.
// Checked before anything is generated, so a huge count is refused at once.
constexpr int64_t kMaxPrintedCells = int64_t(1) << 16;
constexpr int64_t kMaxGridChars = int64_t(1) << 26;

Status CheckPrintable(int pp, int64_t m, int vp, const std::string& format) {
  if (pp < 1 || m < 1 || vp < 1) return Status::Ok();  // CheckScheduleShape names the field
  if (m > kMaxPrintedCells || m * vp > kMaxPrintedCells / pp) {
    return Status::Invalid("--microbatches: " + std::to_string(m) + " microbatches x vp " +
                           std::to_string(vp) + " x pp " + std::to_string(pp) +
                           " is more than the " + std::to_string(kMaxPrintedCells) +
                           " pipeline cells `ptdp schedule` prints");
  }
  if (format == "grid") {
    const int64_t width = std::to_string(m).size() + 2;
    const int64_t cols = 3 * (m * vp + pp);
    if (cols * width > kMaxGridChars / pp) {
      return Status::Invalid("--format: grid: pp " + std::to_string(pp) + " x " +
                             std::to_string(m * vp) +
                             " chunk-microbatches is too large to draw; use --format order");
    }
  }
  return Status::Ok();
}

// `--plan IN`: the Program of a plan file's layout (messages in its layout's precision, as
// `ptdp plan` writes it). With `--out OUT`, the plan written again with that Program
// (version 2): how a hand-written or edited plan gets the Program simulate and train require.
Status RunPlanSchedule(const std::string& in, const std::string& out, const std::string& format) {
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--plan", in));
  PTDP_ASSIGN_OR_RETURN(PlanFile plan, ReadPlanFile(in, /*require_program=*/false));
  auto cluster = LoadCluster(plan.cluster.name, plan.cluster.gpus);
  if (!cluster.ok()) return cluster.status().WithPrefix(in + ": cluster");
  PTDP_ASSIGN_OR_RETURN(plan.program, schedule::BuildProgram(plan.model, plan.layout));
  plan.has_program = true;
  Status v = schedule::Validate(plan.program);
  if (!v.ok()) return Status::Internal("generated program does not validate: " + v.message());
  if (!out.empty()) {
    PTDP_RETURN_IF_ERROR(WriteFileAtomic(out, PlanToJson(plan).dump(1) + "\n"));
    std::printf("wrote %s\n", out.c_str());
  } else if (format == "text") {
    std::fputs(ProgramToText(plan.program).c_str(), stdout);
  } else if (format == "json") {
    std::printf("%s\n", ProgramToJson(plan.program).dump(1).c_str());
  } else {
    return Status::Invalid("--format: with --plan, expected text or json, got '" + format + "'");
  }
  return Status::Ok();
}

}  // namespace

void RegisterSchedule(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "schedule", "Generate a pipeline schedule (Program) and print it rank by rank");
  struct Args {
    std::string kind = "1f1b";
    int pp = 4;
    int64_t microbatches = 8;
    int vp = 1;
    std::string format = "grid";
    bool lowered = false;
    int64_t bytes = 0;
    std::string svg;
    std::string plan, out;
  };
  auto args = std::make_shared<Args>();
  auto* plan = cmd->add_option("--plan", args->plan,
                               "A plan file: print its layout's lowered Program (text | json)");
  cmd->add_option("--out", args->out,
                  "With --plan: write the plan again, with its layout's Program, to this file")
      ->needs(plan);
  for (auto* o :
       {cmd->add_option("--kind", args->kind, "gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | zb-v")
            ->capture_default_str(),
        cmd->add_option("--pp", args->pp, "pipeline ranks p")->capture_default_str(),
        cmd->add_option("--microbatches,-m", args->microbatches, "microbatches m")
            ->capture_default_str(),
        cmd->add_option("--vp", args->vp, "model chunks per rank v (interleaved; zb-v: 2)")
            ->capture_default_str()}) {
    o->excludes(plan);
  }
  cmd->add_option(
         "--format", args->format,
         "grid (time-aligned, like the paper's Figure 4) | order (compute order per rank) | text "
         "(the Program's text form) | json")
      ->capture_default_str();
  cmd->add_option("--svg", args->svg,
                  "Also write the grid's timeline as an SVG Gantt picture (B and W apart)")
      ->excludes(plan);
  cmd->add_flag("--lowered", args->lowered,
                "text/json: include sends, receives and the gradient reduction")
      ->excludes(plan);
  cmd->add_option("--message-bytes", args->bytes, "with --lowered: bytes of each pipeline message")
      ->capture_default_str()
      ->excludes(plan);
  cmd->callback([args, exit_code] {
    auto fail = [&](const Status& s) { *exit_code = Fail("schedule", s); };
    if (!args->plan.empty()) {
      Status s = RunPlanSchedule(args->plan, args->out,
                                 args->format == "grid" ? std::string("text") : args->format);
      *exit_code = s.ok() ? 0 : Fail("schedule", s);
      return;
    }
    auto kind = ParseSchedule(args->kind);
    if (!kind.ok()) return fail(kind.status().WithPrefix("--kind"));
    if (VShaped(*kind) && args->vp == 1) args->vp = 2;  // the V's two chunks, unless told
    if (args->vp > 1 && *kind != ScheduleKind::kInterleaved && !VShaped(*kind)) {
      return fail(
          Status::Invalid("--vp: only the interleaved and zb-v schedules have several chunks per "
                          "rank; add --kind interleaved"));
    }
    if (args->format != "grid" && args->format != "order" && args->format != "text" &&
        args->format != "json") {
      return fail(Status::Invalid("--format: expected grid, order, text or json, got '" +
                                  args->format + "'"));
    }
    Status printable = CheckPrintable(args->pp, args->microbatches, args->vp, args->format);
    if (!printable.ok()) return fail(printable);
    auto compute = schedule::GenerateSchedule(*kind, args->pp, args->microbatches, args->vp);
    if (!compute.ok()) return fail(compute.status());
    Program p = *compute;
    if (args->lowered) {
      if (args->bytes < 0) return fail(Status::Invalid("--message-bytes: must be >= 0"));
      auto l = schedule::Lower(p, args->bytes, false);
      if (!l.ok()) return fail(l.status());
      p = *l;
    }
    Status v = schedule::Validate(p);
    if (!v.ok())
      return fail(Status::Internal("generated program does not validate: " + v.message()));
    if (!args->svg.empty()) {
      Status w = WriteScheduleSvg(*compute, args->svg);
      if (!w.ok()) return fail(w);
    }
    if (args->format == "grid") {
      auto g = Figure4(*compute);
      if (!g.ok()) return fail(g.status());
      std::fputs(g->c_str(), stdout);
    } else if (args->format == "order") {
      std::fputs(schedule::ScheduleDiagram(p).c_str(), stdout);
    } else if (args->format == "text") {
      std::fputs(ProgramToText(p).c_str(), stdout);
    } else if (args->format == "json") {
      std::printf("%s\n", ProgramToJson(p).dump(1).c_str());
    } else {
      return fail(Status::Invalid("--format: expected grid, order, text or json, got '" +
                                  args->format + "'"));
    }
    *exit_code = 0;
  });
}

}  // namespace ptdp::tools
