// Text and JSON forms of the Program IR (grammar in docs/ir.md).
#include "core/program.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

namespace ptdp {

const char* OpName(Op op) {
  switch (op) {
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kSendAct:
      return "send_act";
    case Op::kRecvAct:
      return "recv_act";
    case Op::kSendGrad:
      return "send_grad";
    case Op::kRecvGrad:
      return "recv_grad";
    case Op::kReduceGrads:
      return "reduce_grads";
    case Op::kOptimizerStep:
      return "optimizer_step";
    case Op::kBackwardInput:
      return "backward_input";
    case Op::kBackwardWeight:
      return "backward_weight";
  }
  return "?";
}

Result<Op> ParseOpName(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(Op::kBackwardWeight); ++i) {
    if (s == OpName(static_cast<Op>(i))) return static_cast<Op>(i);
  }
  return Status::Invalid("unknown instruction op '" + s + "'");
}

namespace {

const char* Prefix(Op op) {
  switch (op) {
    case Op::kForward:
      return "F";
    case Op::kBackward:
      return "B";
    case Op::kSendAct:
      return "SA";
    case Op::kRecvAct:
      return "RA";
    case Op::kSendGrad:
      return "SG";
    case Op::kRecvGrad:
      return "RG";
    case Op::kReduceGrads:
      return "AR";
    case Op::kOptimizerStep:
      return "OPT";
    case Op::kBackwardInput:
      return "BI";
    case Op::kBackwardWeight:
      return "W";
  }
  return "?";
}

bool IsSend(Op op) {
  return op == Op::kSendAct || op == Op::kSendGrad;
}
bool IsRecv(Op op) {
  return op == Op::kRecvAct || op == Op::kRecvGrad;
}

// Reads a non-negative decimal integer at s[*pos]; false if none.
bool ReadInt(const std::string& s, size_t* pos, int64_t* out) {
  size_t p = *pos;
  if (p >= s.size() || !std::isdigit(static_cast<unsigned char>(s[p]))) return false;
  int64_t v = 0;
  while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) {
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (s[p] - '0');
    ++p;
  }
  *pos = p;
  *out = v;
  return true;
}

}  // namespace

std::string InstrToText(const Instr& in, bool with_chunk) {
  std::string s = Prefix(in.op);
  if (in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep) return s;
  s += std::to_string(in.microbatch);
  if (with_chunk) s += "." + std::to_string(in.chunk);
  if (IsSend(in.op)) s += ">" + std::to_string(in.peer) + ":" + std::to_string(in.bytes);
  if (IsRecv(in.op)) s += "<" + std::to_string(in.peer) + ":" + std::to_string(in.bytes);
  if (ComputesInputGrad(in.op) && in.recompute) s += "r";
  if (in.op == Op::kForward && in.paired) s += "+";
  return s;
}

Result<Instr> InstrFromText(const std::string& token, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return Status::Invalid(where + ": instruction '" + token + "': " + why);
  };
  Instr in;
  size_t pos = 0;
  // Longer prefixes first: "BI" before "B".
  static const Op kOps[] = {
      Op::kOptimizerStep, Op::kSendAct, Op::kRecvAct,       Op::kSendGrad, Op::kRecvGrad,
      Op::kReduceGrads,   Op::kForward, Op::kBackwardInput, Op::kBackward, Op::kBackwardWeight};
  bool found = false;
  for (Op op : kOps) {
    std::string p = Prefix(op);
    if (token.compare(0, p.size(), p) == 0) {
      in.op = op;
      pos = p.size();
      found = true;
      break;
    }
  }
  if (!found) return bad("unknown op (expected F, B, BI, W, SA, RA, SG, RG, AR or OPT)");
  if (in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep) {
    if (pos != token.size()) return bad("unexpected text after the op");
    return in;
  }
  int64_t v = 0;
  if (!ReadInt(token, &pos, &v) || v > INT32_MAX) return bad("expected a microbatch number");
  in.microbatch = static_cast<int32_t>(v);
  if (pos < token.size() && token[pos] == '.') {
    ++pos;
    if (!ReadInt(token, &pos, &v) || v > INT32_MAX) return bad("expected a chunk number after '.'");
    in.chunk = static_cast<int32_t>(v);
  }
  if (IsSend(in.op) || IsRecv(in.op)) {
    char want = IsSend(in.op) ? '>' : '<';
    if (pos >= token.size() || token[pos] != want) {
      return bad(std::string("expected '") + want + "peer:bytes'");
    }
    ++pos;
    if (!ReadInt(token, &pos, &v) || v > INT32_MAX) return bad("expected a peer rank");
    in.peer = static_cast<int32_t>(v);
    if (pos >= token.size() || token[pos] != ':') return bad("expected ':bytes'");
    ++pos;
    if (!ReadInt(token, &pos, &v)) return bad("expected a byte count");
    in.bytes = v;
  }
  if (ComputesInputGrad(in.op) && pos < token.size() && token[pos] == 'r') {
    in.recompute = true;
    ++pos;
  }
  if (in.op == Op::kForward && pos < token.size() && token[pos] == '+') {
    in.paired = true;
    ++pos;
  }
  if (pos != token.size()) return bad("unexpected text '" + token.substr(pos) + "'");
  return in;
}

std::string ProgramToText(const Program& p) {
  std::ostringstream os;
  os << "program kind=" << ScheduleName(p.kind) << " pp=" << p.pp << " vp=" << p.vp
     << " microbatches=" << p.microbatches << "\n";
  for (const RankProgram& r : p.ranks) {
    os << "rank " << r.pp_rank << ":";
    for (size_t k = 0; k < r.layers.size(); ++k) {
      os << (k == 0 ? " layers=" : ",") << r.layers[k];
    }
    for (const Instr& in : r.instrs) os << " " << InstrToText(in, p.vp > 1);
    os << "\n";
  }
  return os.str();
}

namespace {

// "3,3": a rank's layers per chunk (the text form's layers= token).
Result<std::vector<int>> ParseLayerList(const std::string& text, const std::string& where) {
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    int64_t v = 0;
    if (!ReadInt(text, &pos, &v) || v > INT32_MAX) {
      return Status::Invalid(where + ": expected non-negative integers separated by commas, got '" +
                             text + "'");
    }
    out.push_back(static_cast<int>(v));
    if (pos == text.size()) return out;
    if (text[pos] != ',') {
      return Status::Invalid(where + ": expected non-negative integers separated by commas, got '" +
                             text + "'");
    }
    ++pos;
  }
}

Status ParseHeaderField(const std::string& field, Program* p, int line_no) {
  auto eq = field.find('=');
  std::string where = "program text line " + std::to_string(line_no);
  if (eq == std::string::npos)
    return Status::Invalid(where + ": expected key=value, got '" + field + "'");
  std::string key = field.substr(0, eq), value = field.substr(eq + 1);
  if (key == "kind") {
    auto k = ParseSchedule(value);
    if (!k.ok()) return k.status().WithPrefix(where + ": kind");
    p->kind = *k;
    return Status::Ok();
  }
  size_t pos = 0;
  int64_t v = 0;
  if (!ReadInt(value, &pos, &v) || pos != value.size() || v > INT32_MAX) {
    return Status::Invalid(where + ": " + key + ": expected a non-negative integer, got '" + value +
                           "'");
  }
  if (key == "pp")
    p->pp = static_cast<int>(v);
  else if (key == "vp")
    p->vp = static_cast<int>(v);
  else if (key == "microbatches")
    p->microbatches = v;
  else
    return Status::Invalid(where + ": unknown header key '" + key + "'");
  return Status::Ok();
}

}  // namespace

Result<Program> ProgramFromText(const std::string& text) {
  Program p;
  std::istringstream is(text);
  std::string line;
  int line_no = 0;
  bool header = false;
  while (std::getline(is, line)) {
    ++line_no;
    std::istringstream ls(line);
    std::string word;
    if (!(ls >> word) || word[0] == '#') continue;  // blank or comment
    std::string where = "program text line " + std::to_string(line_no);
    if (!header) {
      if (word != "program")
        return Status::Invalid(where + ": expected the header 'program kind=... pp=...'");
      while (ls >> word) PTDP_RETURN_IF_ERROR(ParseHeaderField(word, &p, line_no));
      header = true;
      continue;
    }
    if (word != "rank") return Status::Invalid(where + ": expected 'rank N:'");
    std::string num;
    if (!(ls >> num) || num.empty() || num.back() != ':') {
      return Status::Invalid(where + ": expected 'rank N:'");
    }
    num.pop_back();
    size_t pos = 0;
    int64_t r = 0;
    if (!ReadInt(num, &pos, &r) || pos != num.size() || r != static_cast<int64_t>(p.ranks.size())) {
      return Status::Invalid(where + ": expected 'rank " + std::to_string(p.ranks.size()) +
                             ":' (ranks in order from 0)");
    }
    RankProgram rp;
    rp.pp_rank = static_cast<int>(r);
    std::vector<std::string> words;
    while (ls >> word) words.push_back(word);
    size_t next = 0;
    if (!words.empty() && words[0].rfind("layers=", 0) == 0) {
      PTDP_ASSIGN_OR_RETURN(rp.layers, ParseLayerList(words[0].substr(7), where + ": layers"));
      next = 1;
    }
    for (; next < words.size(); ++next) {
      word = words[next];
      auto in =
          InstrFromText(word, "rank " + num + ", instruction " + std::to_string(rp.instrs.size()));
      if (!in.ok()) return in.status();
      rp.instrs.push_back(*in);
    }
    p.ranks.push_back(std::move(rp));
  }
  if (!header)
    return Status::Invalid("program text: missing the header line 'program kind=... pp=...'");
  if (static_cast<int>(p.ranks.size()) != p.pp) {
    return Status::Invalid("program text: header says pp=" + std::to_string(p.pp) + " but " +
                           std::to_string(p.ranks.size()) + " rank lines follow");
  }
  return p;
}

OrderedJson ProgramToJson(const Program& p) {
  OrderedJson j;
  j["kind"] = ScheduleName(p.kind);
  j["pp"] = p.pp;
  j["vp"] = p.vp;
  j["microbatches"] = p.microbatches;
  OrderedJson ranks = OrderedJson::array();
  for (const RankProgram& r : p.ranks) {
    OrderedJson rj;
    rj["pp_rank"] = r.pp_rank;
    if (!r.layers.empty()) rj["layers"] = r.layers;
    OrderedJson ins = OrderedJson::array();
    for (const Instr& in : r.instrs) ins.push_back(InstrToText(in, true));
    rj["instrs"] = std::move(ins);
    ranks.push_back(std::move(rj));
  }
  j["ranks"] = std::move(ranks);
  return j;
}

Result<Program> ProgramFromJson(const Json& j) {
  Program p;
  JsonObjectReader rd(j, "program");
  std::string kind;
  rd.Required("kind", &kind);
  rd.Required("pp", &p.pp);
  rd.Required("vp", &p.vp);
  rd.Required("microbatches", &p.microbatches);
  const Json* ranks = rd.Child("ranks", true);
  PTDP_RETURN_IF_ERROR(rd.Finish());
  auto k = ParseSchedule(kind);
  if (!k.ok()) return k.status().WithPrefix("program.kind");
  p.kind = *k;
  if (!ranks->is_array())
    return Status::Invalid("program.ranks: expected an array, got " +
                           std::string(JsonTypeName(*ranks)));
  for (size_t i = 0; i < ranks->size(); ++i) {
    std::string path = "program.ranks[" + std::to_string(i) + "]";
    JsonObjectReader rr((*ranks)[i], path);
    RankProgram rp;
    rr.Required("pp_rank", &rp.pp_rank);
    const Json* layers = rr.Child("layers", false);
    const Json* ins = rr.Child("instrs", true);
    PTDP_RETURN_IF_ERROR(rr.Finish());
    if (layers != nullptr) {
      if (!layers->is_array()) return Status::Invalid(path + ".layers: expected an array");
      for (size_t c = 0; c < layers->size(); ++c) {
        const Json& n = (*layers)[c];
        if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > INT32_MAX) {
          return Status::Invalid(path + ".layers[" + std::to_string(c) +
                                 "]: expected a non-negative integer");
        }
        rp.layers.push_back(static_cast<int>(n.get<int64_t>()));
      }
    }
    if (rp.pp_rank != static_cast<int>(i)) {
      return Status::Invalid(path + ".pp_rank: expected " + std::to_string(i) +
                             " (ranks in order)");
    }
    if (!ins->is_array()) return Status::Invalid(path + ".instrs: expected an array");
    for (size_t k2 = 0; k2 < ins->size(); ++k2) {
      std::string where = path + ".instrs[" + std::to_string(k2) + "]";
      if (!(*ins)[k2].is_string()) return Status::Invalid(where + ": expected a string");
      auto in = InstrFromText((*ins)[k2].get<std::string>(), where);
      if (!in.ok()) return in.status();
      rp.instrs.push_back(*in);
    }
    p.ranks.push_back(std::move(rp));
  }
  if (static_cast<int>(p.ranks.size()) != p.pp) {
    return Status::Invalid("program.ranks: expected " + std::to_string(p.pp) + " ranks (pp), got " +
                           std::to_string(p.ranks.size()));
  }
  return p;
}

int64_t InstructionCount(const Program& p) {
  int64_t n = 0;
  for (const RankProgram& r : p.ranks) n += static_cast<int64_t>(r.instrs.size());
  return n;
}

}  // namespace ptdp
