# cuDNN 9 and the header-only cudnn-frontend graph API, for the tensor-core attention of the CUDA
# backend (runtime/cuda/cudnn_attention.cc). Included from runtime/cuda/CMakeLists.txt.
#
# Sets PTDP_HAVE_CUDNN (ON when both were found) and, then, the IMPORTED target ptdp::cudnn
# (headers of cuDNN and the frontend, libcudnn). Nothing here is required: when either is
# missing, the attention runs on kernels/cuda only and a STATUS message says why.
#
# cuDNN: headers (cudnn.h) and library (libcudnn.so or libcudnn.so.9) from PTDP_CUDNN_ROOT first
# (include/, lib/; the folder of PyTorch's nvidia-cudnn-cu13 wheel, which bench/gpu/run_all.sh
# passes), then the CUDA toolkit's folders.
# Frontend: headers only, never committed. From <PTDP_CARRY>/cudnn_frontend/include (the GPU
# machine has no network; bench/gpu/gather_deps.sh puts them there), else from PyPI's
# nvidia-cudnn-frontend wheel, downloaded once per build folder with pip at configure time.
set(PTDP_CUDNN_ROOT "" CACHE PATH "cuDNN folder with include/ and lib/ (empty: the CUDA toolkit's)")
option(PTDP_WITH_CUDNN "Use cuDNN's fused attention (SDPA) for bf16 when cuDNN is found" ON)
# The wheel's headers: 1.32.0 builds against cuDNN 9.19 (the toolkit here) and later 9.x.
set(PTDP_CUDNN_FRONTEND_VERSION "1.32.0" CACHE STRING "nvidia-cudnn-frontend wheel version")
set(PTDP_HAVE_CUDNN OFF)
if(NOT PTDP_WITH_CUDNN)
  message(STATUS "cuDNN attention: off (PTDP_WITH_CUDNN=OFF)")
  return()
endif()

# --- cuDNN ---------------------------------------------------------------------------------------
set(_cudnn_hints "")
if(PTDP_CUDNN_ROOT)
  list(APPEND _cudnn_hints ${PTDP_CUDNN_ROOT})
endif()
list(APPEND _cudnn_hints ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(PTDP_CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include NO_DEFAULT_PATH)
# The wheel has lib/libcudnn.so.9 without the unversioned link a -dev package adds; NAMES_PER_DIR:
# PTDP_CUDNN_ROOT before the toolkit whichever name each has.
find_library(PTDP_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
  HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
if(NOT PTDP_CUDNN_INCLUDE_DIR OR NOT PTDP_CUDNN_LIBRARY)
  message(STATUS "cuDNN attention: off (cudnn.h or libcudnn not found; set PTDP_CUDNN_ROOT)")
  return()
endif()

# --- cudnn-frontend headers ----------------------------------------------------------------------
set(_fe_include "")
if(PTDP_CARRY)
  get_filename_component(_fe_carry "${PTDP_CARRY}/cudnn_frontend/include" ABSOLUTE
                         BASE_DIR "${PROJECT_SOURCE_DIR}")
  if(EXISTS "${_fe_carry}/cudnn_frontend.h")
    set(_fe_include "${_fe_carry}")
  endif()
endif()
if(NOT _fe_include)
  set(_fe_dir "${CMAKE_BINARY_DIR}/_deps/cudnn_frontend-${PTDP_CUDNN_FRONTEND_VERSION}")
  if(NOT EXISTS "${_fe_dir}/include/cudnn_frontend.h")
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      message(STATUS "cuDNN attention: downloading nvidia-cudnn-frontend "
                     "${PTDP_CUDNN_FRONTEND_VERSION} (headers only) with pip")
      file(REMOVE_RECURSE "${_fe_dir}")
      # The wheel is per Python version but its include/ is the same in all of them.
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -m pip download --no-deps --only-binary=:all: --quiet
                nvidia-cudnn-frontend==${PTDP_CUDNN_FRONTEND_VERSION} -d "${_fe_dir}/wheel"
        RESULT_VARIABLE _fe_rc OUTPUT_QUIET ERROR_VARIABLE _fe_err TIMEOUT 300)
      file(GLOB _fe_wheel "${_fe_dir}/wheel/*.whl")
      if(_fe_rc EQUAL 0 AND _fe_wheel)
        list(GET _fe_wheel 0 _fe_wheel)
        # Only include/ is extracted: the wheel's Python module is not ours to ship.
        execute_process(
          COMMAND ${Python3_EXECUTABLE} -c
                  "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('include/')])"
                  "${_fe_wheel}" "${_fe_dir}"
          RESULT_VARIABLE _fe_rc ERROR_VARIABLE _fe_err)
      endif()
      file(REMOVE_RECURSE "${_fe_dir}/wheel")
      if(NOT _fe_rc EQUAL 0)
        message(STATUS "cuDNN attention: pip download failed: ${_fe_err}")
      endif()
    endif()
  endif()
  if(EXISTS "${_fe_dir}/include/cudnn_frontend.h")
    set(_fe_include "${_fe_dir}/include")
  endif()
endif()
if(NOT _fe_include)
  message(STATUS "cuDNN attention: off (no cudnn-frontend headers: neither "
                 "<PTDP_CARRY>/cudnn_frontend/include nor a pip download of "
                 "nvidia-cudnn-frontend==${PTDP_CUDNN_FRONTEND_VERSION})")
  return()
endif()
set(PTDP_CUDNN_FRONTEND_INCLUDE_DIR "${_fe_include}" CACHE INTERNAL "")

add_library(ptdp::cudnn INTERFACE IMPORTED)
# SYSTEM: the frontend's headers are not held to our warnings.
target_include_directories(ptdp::cudnn SYSTEM INTERFACE ${_fe_include} ${PTDP_CUDNN_INCLUDE_DIR})
# NVRTC: the frontend's header-only runtime-compiled engines (sm100 RmsNorm+SiLU) reference it.
target_link_libraries(ptdp::cudnn INTERFACE ${PTDP_CUDNN_LIBRARY} CUDA::nvrtc CUDA::cudart)
# The frontend's bundled nlohmann/json would sit beside the project's own copy: leave it out.
target_compile_definitions(ptdp::cudnn INTERFACE CUDNN_FRONTEND_SKIP_JSON_LIB)
set(PTDP_HAVE_CUDNN ON)
message(STATUS "cuDNN attention: on (cuDNN ${PTDP_CUDNN_INCLUDE_DIR}, ${PTDP_CUDNN_LIBRARY}; "
               "frontend ${_fe_include})")
