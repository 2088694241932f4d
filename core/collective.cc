#include "core/collective.h"

namespace ptdp {

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kSendRecv:
      return "send_recv";
  }
  return "?";
}

}  // namespace ptdp
