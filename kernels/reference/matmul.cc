// Matmul (nn.Linear) forward and backward over row-major buffers, through Eigen maps.
#include <Eigen/Dense>

#include "kernels/reference/ops.h"

namespace ptdp::kernels {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapMat = Eigen::Map<RowMajor<T>>;
template <typename T>
using MapConstMat = Eigen::Map<const RowMajor<T>>;
template <typename T>
using MapVec = Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>;

}  // namespace

template <typename T>
void MatmulForward(T* out, const T* x, const T* w, const T* bias, int64_t n, int64_t c,
                   int64_t oc) {
  MapMat<T> o(out, n, oc);
  MapConstMat<T> xm(x, n, c);
  MapConstMat<T> wm(w, oc, c);
  o.noalias() = xm * wm.transpose();
  if (bias != nullptr) {
    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> b(bias, oc);
    o.rowwise() += b;
  }
}

template <typename T>
void MatmulBackward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t n,
                    int64_t c, int64_t oc, bool accumulate_dx) {
  MapConstMat<T> dom(dout, n, oc);
  MapConstMat<T> xm(x, n, c);
  MapConstMat<T> wm(w, oc, c);
  if (dx != nullptr) {
    MapMat<T> dxm(dx, n, c);
    if (accumulate_dx) {
      dxm.noalias() += dom * wm;
    } else {
      dxm.noalias() = dom * wm;
    }
  }
  if (dw != nullptr) {
    MapMat<T> dwm(dw, oc, c);
    dwm.noalias() += dom.transpose() * xm;
  }
  if (dbias != nullptr) {
    MapVec<T> db(dbias, oc);
    db += dom.colwise().sum();
  }
}

#define PTDP_INSTANTIATE(T)                                                                    \
  template void MatmulForward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t); \
  template void MatmulBackward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,  \
                                  int64_t, bool);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
