#include "runtime/comm/agree.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace ptdp::runtime {

Result<std::vector<double>> AllGatherDoubles(Communicator& comm,
                                             const std::vector<double>& values) {
  // A double is two fp32 words moved bit for bit (MPI_FLOAT copies bits between like hosts).
  std::vector<double> out(values.size() * static_cast<size_t>(comm.size()));
  PTDP_RETURN_IF_ERROR(
      comm.AllGather(values.data(), out.data(), int64_t(values.size()) * 2, DType::kFp32));
  return out;
}

Result<std::vector<std::string>> AllGatherStrings(Communicator& comm, const std::string& text) {
  // Fixed-width slots (a NUL pads each), so one AllGather moves them all.
  constexpr size_t kSlot = kMaxGatheredText + 1;
  std::vector<uint8_t> mine(kSlot, 0), all(kSlot * static_cast<size_t>(comm.size()));
  std::memcpy(mine.data(), text.data(), std::min(text.size(), kMaxGatheredText));
  PTDP_RETURN_IF_ERROR(comm.AllGather(mine.data(), all.data(), int64_t(kSlot), DType::kU8));
  std::vector<std::string> out;
  for (size_t r = 0; r < size_t(comm.size()); ++r) {
    out.emplace_back(reinterpret_cast<const char*>(&all[r * kSlot]));
  }
  return out;
}

Status AgreeStatus(Communicator& comm, const Status& local) {
  PTDP_ASSIGN_OR_RETURN(
      std::vector<double> codes,
      AllGatherDoubles(comm, {static_cast<double>(static_cast<int>(local.code()))}));
  int root = -1;
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] != 0) {
      root = static_cast<int>(i);
      break;
    }
  }
  if (root < 0) return Status::Ok();
  // The root's message: length, then the bytes as 16-bit words.
  std::string msg = comm.rank() == root ? local.message() : std::string();
  float len = static_cast<float>(msg.size());
  PTDP_RETURN_IF_ERROR(comm.Broadcast(&len, 1, DType::kFp32, root));
  std::vector<uint16_t> words((static_cast<size_t>(len) + 1) / 2, 0);
  if (comm.rank() == root && !msg.empty()) std::memcpy(words.data(), msg.data(), msg.size());
  if (!words.empty()) {
    PTDP_RETURN_IF_ERROR(comm.Broadcast(words.data(), int64_t(words.size()), DType::kFp16, root));
  }
  msg.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(len));
  return Status(static_cast<StatusCode>(static_cast<int>(codes[static_cast<size_t>(root)])), msg);
}

}  // namespace ptdp::runtime
