// The Chrome trace is valid trace-event JSON with every field checked; the SVG is well-formed XML.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/json.h"
#include "core/timeline.h"
#include "schedule/schedule.h"
#include "simulator/gantt.h"
#include "simulator/simulator.h"

namespace ptdp::sim {
namespace {

SimResult SimulateWithTrace(ScheduleKind kind, int pp, int64_t m, int vp) {
  auto c = schedule::GenerateSchedule(kind, pp, m, vp);
  auto p = schedule::Lower(*c, 4096, kind == ScheduleKind::k1F1B);
  auto costs = UniformCosts(pp, vp, 1e-6, 2e-6, 1 << 20);
  costs.p2p_link.assign(pp, costmodel::LinkCost{1e-6, 1e9, true});
  costs.dp_allreduce.assign(pp, 5e-6);
  costs.optimizer.assign(pp, 1e-6);
  SimOptions o;
  o.record_timeline = true;
  auto r = Simulate(*p, costs, o);
  PTDP_CHECK(r.ok());
  return *r;
}

TEST(ChromeTrace, EveryEventHasItsFields) {
  SimResult r = SimulateWithTrace(ScheduleKind::kInterleaved, 4, 8, 2);
  const std::string path = ::testing::TempDir() + "/ptdp_trace_test.trace.json";
  ASSERT_TRUE(WriteChromeTrace(r.timeline, path).ok());
  auto j = ReadJsonFile(path);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE(j->is_object());
  ASSERT_TRUE(j->contains("traceEvents"));
  EXPECT_EQ((*j)["displayTimeUnit"], "ns");
  const Json& ev = (*j)["traceEvents"];
  ASSERT_TRUE(ev.is_array());
  std::set<std::string> phases;
  std::map<std::string, int> per_cat;
  std::set<int> named_pids;
  size_t complete = 0;
  for (const Json& e : ev) {
    ASSERT_TRUE(e.is_object());
    ASSERT_TRUE(e.contains("name") && e["name"].is_string());
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer());
    const std::string ph = e["ph"];
    phases.insert(ph);
    const int pid = e["pid"];
    EXPECT_GE(pid, 0);
    EXPECT_LT(pid, 4);
    if (ph == "M") {
      ASSERT_TRUE(e["args"].contains("name") || e["args"].contains("sort_index")) << e.dump();
      if (e["name"] == "process_name") named_pids.insert(pid);
      continue;
    }
    if (ph == "C") {
      ASSERT_TRUE(e.contains("ts") && e["ts"].is_number());
      ASSERT_TRUE(e["args"].is_object());
      continue;
    }
    ASSERT_EQ(ph, "X") << e.dump();
    ++complete;
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number());
    ASSERT_TRUE(e.contains("dur") && e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    ASSERT_TRUE(e.contains("cat") && e["cat"].is_string());
    const Json& a = e["args"];
    ASSERT_TRUE(a.is_object());
    ASSERT_TRUE(a["microbatch"].is_number_integer());
    ASSERT_TRUE(a["chunk"].is_number_integer());
    ASSERT_TRUE(a["op"].is_string());
    EXPECT_EQ(a["op"], e["cat"]);
    // ts and dur in microseconds carry the exact nanoseconds.
    const int64_t s = a["start_ns"], en = a["end_ns"];
    EXPECT_NEAR(e["ts"].get<double>() * 1000, double(s), 1e-3);
    EXPECT_NEAR(e["dur"].get<double>() * 1000, double(en - s), 1e-3);
    const std::string cat = e["cat"];
    ++per_cat[cat];
    const int tid = e["tid"];
    if (cat == "forward" || cat == "backward" || cat == "optimizer_step") {
      EXPECT_EQ(tid, 0);
    }
    if (cat == "send_act" || cat == "send_grad") {
      EXPECT_EQ(tid, 1);
      EXPECT_TRUE(a["peer"].is_number_integer());
      EXPECT_EQ(a["bytes"], 4096);
    }
    if (cat == "recv_act" || cat == "recv_grad") {
      EXPECT_EQ(tid, 2);
    }
    if (cat == "backward") {
      EXPECT_TRUE(a["recompute"].is_boolean());
    }
    if (cat == "forward") {
      const int mb = a["microbatch"], chunk = a["chunk"];
      EXPECT_EQ(e["name"], "F" + std::to_string(mb) + "." + std::to_string(chunk));
    }
  }
  EXPECT_EQ(named_pids.size(), 4u);
  EXPECT_EQ(complete, r.timeline.events.size());
  // 4 ranks x 8 microbatches x 2 chunks forwards and backwards; each message once per side.
  EXPECT_EQ(per_cat["forward"], 64);
  EXPECT_EQ(per_cat["backward"], 64);
  EXPECT_EQ(per_cat["send_act"], per_cat["recv_act"]);
  EXPECT_EQ(per_cat["send_act"], 8 * (8 - 1));
  EXPECT_EQ(per_cat["reduce_grads"], 4);
  EXPECT_EQ(per_cat["optimizer_step"], 4);
  EXPECT_TRUE(phases.count("C"));
  std::remove(path.c_str());
}

// A small well-formedness check: balanced, properly nested tags; quoted attributes; known entities.
// Returns "" when well formed, else the reason and offset.
std::string XmlError(const std::string& x) {
  std::vector<std::string> stack;
  size_t i = 0, roots = 0;
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' ||
           c == '.';
  };
  while (i < x.size()) {
    if (x[i] == '&') {
      size_t semi = x.find(';', i);
      if (semi == std::string::npos) return "unterminated entity at " + std::to_string(i);
      std::string ent = x.substr(i + 1, semi - i - 1);
      if (ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos" &&
          ent[0] != '#')
        return "unknown entity &" + ent + "; at " + std::to_string(i);
      i = semi + 1;
      continue;
    }
    if (x[i] != '<') {
      if (x[i] == '>') return "stray '>' at " + std::to_string(i);
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(x[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    if (x.compare(i, 5, "<?xml") == 0) {
      if (i != 0) return "XML declaration not at the start";
      size_t e = x.find("?>", i);
      if (e == std::string::npos) return "unterminated declaration";
      i = e + 2;
      continue;
    }
    if (x.compare(i, 4, "<!--") == 0) {
      size_t e = x.find("-->", i);
      if (e == std::string::npos) return "unterminated comment";
      i = e + 3;
      continue;
    }
    const bool closing = x[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    size_t n0 = j;
    while (j < x.size() && name_char(x[j])) ++j;
    if (j == n0) return "tag without a name at " + std::to_string(i);
    std::string name = x.substr(n0, j - n0);
    if (closing) {
      while (j < x.size() && std::isspace(static_cast<unsigned char>(x[j]))) ++j;
      if (j >= x.size() || x[j] != '>') return "bad end tag at " + std::to_string(i);
      if (stack.empty() || stack.back() != name)
        return "mismatched </" + name + "> at " + std::to_string(i);
      stack.pop_back();
      i = j + 1;
      continue;
    }
    std::set<std::string> attrs;
    bool self_close = false;
    while (true) {
      while (j < x.size() && std::isspace(static_cast<unsigned char>(x[j]))) ++j;
      if (j >= x.size()) return "unterminated tag <" + name;
      if (x[j] == '>') {
        ++j;
        break;
      }
      if (x[j] == '/' && j + 1 < x.size() && x[j + 1] == '>') {
        self_close = true;
        j += 2;
        break;
      }
      size_t a0 = j;
      while (j < x.size() && name_char(x[j])) ++j;
      if (j == a0) return "bad attribute in <" + name + "> at " + std::to_string(j);
      std::string an = x.substr(a0, j - a0);
      if (!attrs.insert(an).second) return "duplicate attribute " + an + " at " + std::to_string(j);
      if (j + 1 >= x.size() || x[j] != '=' || (x[j + 1] != '"' && x[j + 1] != '\''))
        return "unquoted attribute " + an + " at " + std::to_string(j);
      const char q = x[j + 1];
      size_t e = x.find(q, j + 2);
      if (e == std::string::npos) return "unterminated attribute value";
      std::string v = x.substr(j + 2, e - j - 2);
      if (v.find('<') != std::string::npos) return "'<' in attribute " + an;
      j = e + 1;
    }
    if (stack.empty()) ++roots;
    if (roots > 1) return "more than one root element";
    if (!self_close) stack.push_back(name);
    i = j;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

TEST(Xml, CheckerRejectsBrokenDocuments) {
  EXPECT_EQ(XmlError("<a><b x=\"1\"/></a>"), "");
  EXPECT_NE(XmlError("<a><b></a></b>"), "");
  EXPECT_NE(XmlError("<a x=1></a>"), "");
  EXPECT_NE(XmlError("<a>&bogus;</a>"), "");
  EXPECT_NE(XmlError("<a>"), "");
  EXPECT_NE(XmlError("<a/><b/>"), "");
}

TEST(Gantt, SvgIsWellFormedForSmallAndLargePipelines) {
  SimResult small = SimulateWithTrace(ScheduleKind::kInterleaved, 4, 8, 2);
  GanttOptions o;
  o.title = "interleaved <p=4> & v=2";
  std::string svg = GanttSvg(small.timeline, o);
  EXPECT_EQ(XmlError(svg), "");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("rank 3"), std::string::npos);
  EXPECT_NE(svg.find("&lt;p=4&gt; &amp; v=2"), std::string::npos);
  // One box per compute instruction (64 + 64 + 4 optimizer), plus the row backgrounds and legend.
  size_t boxes = 0;
  for (size_t k = svg.find("<title>"); k != std::string::npos; k = svg.find("<title>", k + 1))
    ++boxes;
  EXPECT_EQ(boxes, 64u + 64u + 4u);

  SimResult big = SimulateWithTrace(ScheduleKind::k1F1B, 32, 64, 1);
  std::string svg2 = GanttSvg(big.timeline);
  EXPECT_EQ(XmlError(svg2), "");
  EXPECT_NE(svg2.find("showing 16 of 32 ranks"), std::string::npos);
  EXPECT_NE(svg2.find("rank 31"), std::string::npos);
}

}  // namespace
}  // namespace ptdp::sim
