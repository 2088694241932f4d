// Forwarders for the cuBLAS and cuBLASLt entry points ptdp calls (kernels/cublas/gemm.cc,
// runtime/cuda/cuda_ops.cc), resolved with dlopen/dlsym on the first call (lazy_cublas.h says why).
// Each definition has the prototype of the toolkit's header, so the compiler checks that a
// forwarder matches what the library exports.
#include "kernels/cublas/lazy_cublas.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

// PTDP_CUBLASLT_LIBRARY / PTDP_CUBLAS_LIBRARY: set by kernels/cublas/CMakeLists.txt.
#if !defined(PTDP_CUBLASLT_LIBRARY) || !defined(PTDP_CUBLAS_LIBRARY)
#error "PTDP_CUBLASLT_LIBRARY and PTDP_CUBLAS_LIBRARY must name the libraries to load"
#endif

namespace ptdp::cublas {
namespace {

// clang-format off
#define PTDP_CUBLASLT_ENTRIES(X)                                                    \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmul) \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate)                     \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)                    \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)              \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)             \
  X(cublasLtMatrixLayoutDestroy)
#define PTDP_CUBLAS_ENTRIES(X)                                                      \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasGetStatusString)                   \
  X(cublasSetMathMode) X(cublasSetStream_v2) X(cublasSgemm_v2)
// clang-format on

// The resolved entry points, or the reason they are not.
struct Api {
  std::string error;  // empty: every entry point below is resolved
#define PTDP_FIELD(name) decltype(&::name) name = nullptr;
  PTDP_CUBLASLT_ENTRIES(PTDP_FIELD)
  PTDP_CUBLAS_ENTRIES(PTDP_FIELD)
#undef PTDP_FIELD
};

// The library at `path` (the toolkit's), else its soname on the loader's search path.
void* Open(const char* path, std::string* error) {
  if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string full = path;
  const std::string soname = full.substr(full.find_last_of('/') + 1);
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const char* why = dlerror();
  *error = "cannot load " + full + " (nor " + soname + "): " + (why ? why : "unknown reason");
  return nullptr;
}

Api LoadApi(const char* lt_path, const char* blas_path) {
  Api api;
  // cuBLASLt first: cuBLAS needs it, and dlopen finds it loaded already.
  void* lt = Open(lt_path, &api.error);
  if (lt == nullptr) return api;
  void* blas = Open(blas_path, &api.error);
  if (blas == nullptr) return api;
#define PTDP_RESOLVE(lib, name)                                                           \
  if (api.error.empty()) {                                                                \
    api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name));                   \
    if (api.name == nullptr) api.error = std::string(#name) + " is missing from " + #lib; \
  }
#define PTDP_RESOLVE_LT(name) PTDP_RESOLVE(lt, name)
#define PTDP_RESOLVE_BLAS(name) PTDP_RESOLVE(blas, name)
  PTDP_CUBLASLT_ENTRIES(PTDP_RESOLVE_LT)
  PTDP_CUBLAS_ENTRIES(PTDP_RESOLVE_BLAS)
#undef PTDP_RESOLVE_BLAS
#undef PTDP_RESOLVE_LT
#undef PTDP_RESOLVE
  if (!api.error.empty()) api.error += std::string(" (") + lt_path + ", " + blas_path + ")";
  return api;
}

// Loaded once; a static local is initialised once even when threads race to it.
const Api& GetApi() {
  static const Api api = LoadApi(PTDP_CUBLASLT_LIBRARY, PTDP_CUBLAS_LIBRARY);
  return api;
}

// Calls the entry point `entry` when every one resolved, else returns NOT_INITIALIZED (the
// status string then names the file that did not load: StatusString).
template <typename Fn, typename... Args>
cublasStatus_t Forward(Fn Api::*entry, Args... args) {
  const Api& api = GetApi();
  return api.error.empty() ? (api.*entry)(args...) : CUBLAS_STATUS_NOT_INITIALIZED;
}

// A status string from the library, or the reason the libraries did not load.
template <typename Fn>
const char* StatusString(Fn Api::*entry, cublasStatus_t status) {
  const Api& api = GetApi();
  return api.error.empty() ? (api.*entry)(status) : api.error.c_str();
}

}  // namespace

Status LoadCublasLibraries() {
  const Api& api = GetApi();
  if (api.error.empty()) return Status::Ok();
  return Status::NotFound("cuBLAS: " + api.error);
}

Status TryLoadCublasFrom(const char* lt_path, const char* blas_path) {
  const Api api = LoadApi(lt_path, blas_path);
  if (api.error.empty()) return Status::Ok();
  return Status::NotFound("cuBLAS: " + api.error);
}

const char* CublasLtLibraryPath() {
  return PTDP_CUBLASLT_LIBRARY;
}
const char* CublasLibraryPath() {
  return PTDP_CUBLAS_LIBRARY;
}

}  // namespace ptdp::cublas

using ptdp::cublas::Api;
using ptdp::cublas::Forward;
using ptdp::cublas::StatusString;

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* light_handle) {
  return Forward(&Api::cublasLtCreate, light_handle);
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t light_handle) {
  return Forward(&Api::cublasLtDestroy, light_handle);
}
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  return StatusString(&Api::cublasLtGetStatusString, status);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t light_handle, cublasLtMatmulDesc_t compute_desc, const void* alpha,
    const void* a, cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc,
    const void* beta, const void* c, cublasLtMatrixLayout_t c_desc, void* d,
    cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
    size_t workspace_bytes, cudaStream_t stream) {
  return Forward(&Api::cublasLtMatmul, light_handle, compute_desc, alpha, a, a_desc, b, b_desc,
                 beta, c, c_desc, d, d_desc, algo, workspace, workspace_bytes, stream);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t light_handle, cublasLtMatmulDesc_t operation_desc,
    cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
    cublasLtMatrixLayout_t d_desc, cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  return Forward(&Api::cublasLtMatmulAlgoGetHeuristic, light_handle, operation_desc, a_desc, b_desc,
                 c_desc, d_desc, preference, requested, results, returned);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute_type,
                                                     cudaDataType_t scale_type) {
  return Forward(&Api::cublasLtMatmulDescCreate, desc, compute_type, scale_type);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return Forward(&Api::cublasLtMatmulDescDestroy, desc);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  return Forward(&Api::cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return Forward(&Api::cublasLtMatmulPreferenceCreate, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return Forward(&Api::cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  return Forward(&Api::cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  return Forward(&Api::cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return Forward(&Api::cublasLtMatrixLayoutDestroy, layout);
}

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  return Forward(&Api::cublasCreate_v2, handle);
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  return Forward(&Api::cublasDestroy_v2, handle);
}
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  return StatusString(&Api::cublasGetStatusString, status);
}
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return Forward(&Api::cublasSetMathMode, handle, mode);
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return Forward(&Api::cublasSetStream_v2, handle, stream);
}
cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t trans_a,
                                           cublasOperation_t trans_b, int m, int n, int k,
                                           const float* alpha, const float* a, int lda,
                                           const float* b, int ldb, const float* beta, float* c,
                                           int ldc) {
  return Forward(&Api::cublasSgemm_v2, handle, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                 beta, c, ldc);
}

}  // extern "C"
