# -DPTDP_CARRY=<dir>: find every dependency beyond the CUDA toolkit (nlohmann_json, CLI11, Eigen3,
# GTest, benchmark, OpenMPI) in the folder bench/gpu/gather_deps.sh fills (<dir>/usr mirrors /usr),
# for a GPU machine that has none of our Debian packages and no network. Included before the first
# find_package. Without PTDP_CARRY nothing changes.
set(PTDP_CARRY "" CACHE PATH "folder made by bench/gpu/gather_deps.sh (empty: system packages)")
if(NOT PTDP_CARRY)
  return()
endif()
get_filename_component(_carry "${PTDP_CARRY}" ABSOLUTE BASE_DIR "${PROJECT_SOURCE_DIR}")
if(NOT EXISTS "${_carry}/MANIFEST")
  message(FATAL_ERROR "PTDP_CARRY=${PTDP_CARRY}: no MANIFEST there; run bench/gpu/gather_deps.sh first")
endif()
set(_carry_usr "${_carry}/usr")
set(_carry_lib "${_carry_usr}/lib/x86_64-linux-gnu")
list(PREPEND CMAKE_PREFIX_PATH "${_carry_usr}")
# Debian's OpenMPI lives under lib/x86_64-linux-gnu/openmpi; its mpicxx wrapper reports /usr paths,
# so FindMPI is given the header and library directly instead of asking the wrapper.
set(MPI_SKIP_COMPILER_WRAPPER ON CACHE BOOL "" FORCE)
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "" FORCE)
set(MPI_CXX_HEADER_DIR "${_carry_lib}/openmpi/include" CACHE PATH "" FORCE)
set(MPI_CXX_LIB_NAMES "mpi" CACHE STRING "" FORCE)
set(MPI_mpi_LIBRARY "${_carry_lib}/openmpi/lib/libmpi.so" CACHE FILEPATH "" FORCE)
set(MPIEXEC_EXECUTABLE "${_carry_usr}/bin/mpirun" CACHE FILEPATH "" FORCE)
# libmpi's own dependencies are carried beside it: the linker must see them (-rpath-link), and
# built binaries find libmpi's own dependencies (libopen-pal, hwloc, libevent, pmix) at run time.
string(APPEND CMAKE_EXE_LINKER_FLAGS " -Wl,-rpath-link,${_carry_lib}:${_carry_lib}/openmpi/lib")
string(APPEND CMAKE_SHARED_LINKER_FLAGS " -Wl,-rpath-link,${_carry_lib}:${_carry_lib}/openmpi/lib")
# Debian's libmpi carries its own RUNPATH (/usr/lib/x86_64-linux-gnu/openmpi/lib), which hides the
# executable's RPATH from libmpi's dependencies: a program linking MPI runs only with the carry on
# LD_LIBRARY_PATH (bench/gpu/run_all.sh sets it). So gtest_discover_tests must not run test
# binaries at build time (it found Debian's libopen-rte, or nothing on the GPU machine): list the
# tests when ctest runs, under the caller's environment.
set(CMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE PRE_TEST)
# Built binaries find libmpi's own dependencies (libopen-pal, hwloc, libevent, pmix) at run time.
list(APPEND CMAKE_BUILD_RPATH "${_carry_lib}" "${_carry_lib}/openmpi/lib")
message(STATUS "PTDP_CARRY: dependencies from ${_carry_usr}")
