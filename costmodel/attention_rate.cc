#include "costmodel/attention_rate.h"

#include <algorithm>

#include "core/status.h"
#include "costmodel/log_axis.h"

namespace ptdp::costmodel {

double AttentionTableTflops(const AttentionTable& t, double s, double d, bool dropout) {
  PTDP_CHECK(!t.empty() && s > 0 && d > 0 && (!dropout || t.HasDropout()));
  const AxisPos ps = Locate(t.s, s), pd = Locate(t.d, d);
  double acc = 0;
  for (int ds = 0; ds < 2; ++ds) {
    const double ws = ds ? ps.w : 1 - ps.w;
    if (ws == 0) continue;  // on a grid line: that point alone, exactly
    const size_t is = std::min(ps.lo + ds, t.s.size() - 1);
    for (int dd = 0; dd < 2; ++dd) {
      const double wd = dd ? pd.w : 1 - pd.w;
      if (wd == 0) continue;
      const size_t id = std::min(pd.lo + dd, t.d.size() - 1);
      acc += ws * wd * (dropout ? t.DropoutAt(is, id) : t.At(is, id));
    }
  }
  return acc;
}

}  // namespace ptdp::costmodel
