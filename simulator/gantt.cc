#include "simulator/gantt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace ptdp::sim {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Golden-angle hues: neighbouring microbatches get far-apart colours.
// Forward light, backward (whole or its input-gradient half) dark, weight-gradient half between.
enum class Shade { kForward, kBackward, kWeight };
std::string Colour(int mb, Shade shade) {
  const int hue = static_cast<int>(std::fmod(mb * 137.508, 360.0));
  const int lightness = shade == Shade::kForward ? 72 : shade == Shade::kBackward ? 38 : 55;
  char buf[48];
  std::snprintf(buf, sizeof buf, "hsl(%d,70%%,%d%%)", hue, lightness);
  return buf;
}

Shade ShadeOf(Op op) {
  if (op == Op::kForward) return Shade::kForward;
  return op == Op::kBackwardWeight ? Shade::kWeight : Shade::kBackward;
}

}  // namespace

std::string GanttSvg(const Timeline& t, const GanttOptions& o) {
  const int pp = std::max(1, t.pp);
  // Which ranks get a row.
  std::vector<int> rows;
  if (pp <= o.max_rows) {
    for (int r = 0; r < pp; ++r) rows.push_back(r);
  } else {
    const int k = std::max(3, o.max_rows);
    for (int i = 0; i < k; ++i) {
      int r = static_cast<int>(std::llround(double(i) * (pp - 1) / (k - 1)));
      if (rows.empty() || rows.back() != r) rows.push_back(r);
    }
  }
  std::vector<int> row_of(pp, -1);
  for (size_t i = 0; i < rows.size(); ++i) row_of[rows[i]] = static_cast<int>(i);

  const Nanoseconds end = std::max<Nanoseconds>(1, o.axis_end_ns > 0 ? o.axis_end_ns : t.EndNs());
  const double left = 90, top = 40, row_h = 22, gap = 6;
  const double width = o.width_px;
  const double scale = width / double(end);
  const double height = top + rows.size() * (row_h + gap) + 60;
  std::string s;
  s.reserve(4096 + t.events.size() * 160);
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" +
       Num(left + width + 20) + "\" height=\"" + Num(height) +
       "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  std::string title = o.title.empty() ? std::string("pipeline schedule") : o.title;
  if (pp > o.max_rows) {
    title += " (showing " + std::to_string(rows.size()) + " of " + std::to_string(pp) + " ranks)";
  }
  s += "<text x=\"" + Num(left) + "\" y=\"20\" font-size=\"13\">" + Escape(title) + "</text>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const double y = top + i * (row_h + gap);
    s += "<text x=\"4\" y=\"" + Num(y + row_h * 0.7) + "\">rank " + std::to_string(rows[i]) +
         "</text>\n";
    s += "<rect x=\"" + Num(left) + "\" y=\"" + Num(y) + "\" width=\"" + Num(width) +
         "\" height=\"" + Num(row_h) + "\" fill=\"#f0f0f0\" stroke=\"#cccccc\"/>\n";
  }
  const bool chunks = t.vp > 1;
  bool split = false;  // the timeline holds a split backward: the legend names W
  for (const TimelineEvent& e : t.events) {
    if (e.stream != Stream::kCompute || e.pp_rank < 0 || e.pp_rank >= pp || row_of[e.pp_rank] < 0)
      continue;
    const Instr& in = e.instr;
    const double x = left + e.start_ns * scale, w = std::max(0.5, e.Duration() * scale);
    const double y = top + row_of[e.pp_rank] * (row_h + gap);
    std::string fill, label;
    split = split || in.op == Op::kBackwardInput || in.op == Op::kBackwardWeight;
    if (IsCompute(in.op)) {
      fill = Colour(in.microbatch, ShadeOf(in.op));
      label = std::to_string(in.microbatch) + (chunks ? "." + std::to_string(in.chunk) : "");
    } else {
      fill = "#555555";  // optimizer step
      label = "opt";
    }
    s += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) + "\" height=\"" +
         Num(row_h) + "\" fill=\"" + fill + "\" stroke=\"#ffffff\" stroke-width=\"0.3\"><title>" +
         Escape(InstrToText(in, chunks)) + " " + std::to_string(e.start_ns) + "-" +
         std::to_string(e.end_ns) + " ns</title></rect>\n";
    if (w >= 6.0 * label.size() + 2) {
      s += "<text x=\"" + Num(x + w / 2) + "\" y=\"" + Num(y + row_h * 0.7) +
           "\" text-anchor=\"middle\" fill=\"" +
           (ShadeOf(in.op) == Shade::kBackward && IsCompute(in.op) ? "#ffffff" : "#000000") +
           "\">" + label + "</text>\n";
    }
    if (in.op == Op::kBackwardWeight) {
      // W passes: a stripe along the bottom, so that B and W of one microbatch are told apart.
      s += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y + row_h - 3) + "\" width=\"" + Num(w) +
           "\" height=\"3\" fill=\"#ffffff\" fill-opacity=\"0.6\"/>\n";
    }
    if (in.op == Op::kForward && chunks && in.chunk > 0) {
      // Later chunks: a stripe along the top so that chunks are told apart as in Figure 4.
      s += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) +
           "\" height=\"3\" fill=\"#000000\" fill-opacity=\"0.4\"/>\n";
    }
  }
  // Time axis in milliseconds, legend.
  const double axis_y = top + rows.size() * (row_h + gap) + 12;
  for (int i = 0; i <= 10; ++i) {
    const double x = left + width * i / 10;
    s += "<line x1=\"" + Num(x) + "\" y1=\"" + Num(axis_y - 6) + "\" x2=\"" + Num(x) + "\" y2=\"" +
         Num(axis_y) + "\" stroke=\"#000000\"/>\n";
    s += "<text x=\"" + Num(x) + "\" y=\"" + Num(axis_y + 12) + "\" text-anchor=\"middle\">" +
         Num(ToSeconds(end) * 1e3 * i / 10) + " ms</text>\n";
  }
  const double ly = axis_y + 30;
  s += "<rect x=\"" + Num(left) + "\" y=\"" + Num(ly - 9) +
       "\" width=\"12\" height=\"10\" fill=\"" + Colour(0, Shade::kForward) + "\"/><text x=\"" +
       Num(left + 16) + "\" y=\"" + Num(ly) + "\">forward (colour: microbatch)</text>\n";
  s += "<rect x=\"" + Num(left + 200) + "\" y=\"" + Num(ly - 9) +
       "\" width=\"12\" height=\"10\" fill=\"" + Colour(0, Shade::kBackward) + "\"/><text x=\"" +
       Num(left + 216) + "\" y=\"" + Num(ly) + "\">backward</text>\n";
  if (split) {
    s += "<rect x=\"" + Num(left + 440) + "\" y=\"" + Num(ly - 9) +
         "\" width=\"12\" height=\"10\" fill=\"" + Colour(0, Shade::kWeight) + "\"/><text x=\"" +
         Num(left + 456) + "\" y=\"" + Num(ly) +
         "\">W: weight gradient (dark: BI, input gradient)</text>\n";
  }
  s += "<rect x=\"" + Num(left + 320) + "\" y=\"" + Num(ly - 9) +
       "\" width=\"12\" height=\"10\" fill=\"#f0f0f0\" stroke=\"#cccccc\"/><text x=\"" +
       Num(left + 336) + "\" y=\"" + Num(ly) + "\">idle (bubble)</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace ptdp::sim
