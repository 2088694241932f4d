// cuBLAS and cuBLASLt are loaded on first use, not linked (lazy_cublas.cc). Linking them made every
// process of a CUDA build pay libcublasLt's load (540 MB of relocations and static constructors,
// ~70 ms on a 2-core host: `ptdp plan`, each rank of a CPU run and each test process, GPU or
// not). Only the entry points ptdp calls are forwarded; a call made when a library cannot be loaded
// returns CUBLAS_STATUS_NOT_INITIALIZED, and the status string names the library and the reason.
#pragma once

#include "core/status.h"

namespace ptdp::cublas {

// Loads both libraries (once per process) and resolves every entry point ptdp forwards. The error
// names the library or the missing symbol. Safe from any thread.
Status LoadCublasLibraries();

// What LoadCublasLibraries does with other files, for tests: a file that does not load or lacks an
// entry point gives the error it would. Nothing it loads is used.
Status TryLoadCublasFrom(const char* cublaslt_path, const char* cublas_path);

// The files this build loads: the toolkit's full path of each library's soname.
const char* CublasLtLibraryPath();
const char* CublasLibraryPath();

}  // namespace ptdp::cublas
