#!/usr/bin/env bash
# Gathers everything the GPU build needs beyond the CUDA toolkit, CMake, ninja and g++ into ONE
# ignored folder inside the tree (default .carry/), so that the device tool can carry it to a GPU
# machine that has none of our Debian packages and no network. Run it on a machine with them
# (`make deps`); CMake then finds everything through -DPTDP_CARRY=.carry (cmake/PtdpCarry.cmake).
#
# usage: bench/gpu/gather_deps.sh [CARRY_DIR]        (also: make gpu-carry)
#
# Layout: CARRY_DIR/usr mirrors /usr for the packages in bench/gpu/carry_packages.txt (headers,
# CMake configs, shared libraries, OpenMPI's components, help files and mpirun/orted; docs, man
# pages, Fortran and static archives left out), plus googletest built from Debian's sources
# (/usr/src/googletest) and installed under CARRY_DIR/usr, and cudnn-frontend's headers from PyPI in
# CARRY_DIR/cudnn_frontend/include. CARRY_DIR/MANIFEST lists every file.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
carry=${1:-$root/.carry}
case "$carry" in /*) ;; *) carry=$PWD/$carry ;; esac
limit_mib=48  # the device tool carries at most 64 MiB with the tree; leave room for the sources
die() { echo "gather_deps.sh: $*" >&2; exit 1; }

pkgs=$(grep -v -E '^\s*(#|$)' "$root/bench/gpu/carry_packages.txt")
missing=""
for p in $pkgs libgtest-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
[ -z "$missing" ] || die "missing Debian packages:$missing (run make deps first)"
[ -d /usr/src/googletest ] || die "/usr/src/googletest not found (libgtest-dev ships its sources there)"

rm -rf "$carry"
mkdir -p "$carry/usr"

# 1. The packages' files, /usr and merged-/usr /lib paths both under CARRY_DIR/usr.
for p in $pkgs; do
  dpkg -L "$p" | while IFS= read -r f; do
    case "$f" in
      */share/doc/*|*/share/man/*|*/share/lintian/*|*/fortran/*|*/openmpi/lib/*.a|*.mod|*/mpif*) continue ;;
    esac
    [ -f "$f" ] || [ -L "$f" ] || continue
    [ -d "$f" ] && continue
    rel=${f#/usr/}; rel=${rel#/}
    case "$f" in /usr/*) ;; /lib/*|/bin/*|/sbin/*) ;; *) continue ;; esac
    mkdir -p "$carry/usr/$(dirname "$rel")"
    cp -P "$f" "$carry/usr/$rel"
  done
done
# Debian points libmpi.so and mpicxx through /etc/alternatives (absolute links): make them relative.
ml=$carry/usr/lib/x86_64-linux-gnu
find "$carry/usr" -type l | while IFS= read -r l; do
  t=$(readlink "$l")
  case "$t" in
    /etc/alternatives/*|/usr/*|/lib/*)
      real=$(readlink -f "$l" 2>/dev/null || true)
      [ -n "$real" ] || continue
      rrel=${real#/usr/}; rrel=${rrel#/}
      if [ -e "$carry/usr/$rrel" ]; then
        ln -sfr "$carry/usr/$rrel" "$l"
      else
        rm -f "$l"  # points outside what we carry (e.g. a Fortran wrapper)
      fi ;;
  esac
done
# Debian's openmpi-bin links mpirun -> orterun; keep the plain names the scripts call.
[ -e "$carry/usr/bin/orterun" ] && ln -sf orterun "$carry/usr/bin/mpirun"
[ -e "$ml/openmpi/lib/libmpi.so.40" ] || [ -e "$ml/libmpi.so.40" ] || die "libmpi.so.40 not gathered"

# 2. googletest (and gmock) from Debian's sources, static and position-independent.
gt_build=$(mktemp -d /tmp/ptdp-gtest.XXXXXX)
trap 'rm -rf "$gt_build"' EXIT
cmake -S /usr/src/googletest -B "$gt_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_INSTALL_PREFIX="$carry/usr" \
  -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu > "$gt_build.log" 2>&1 || die "googletest configure failed ($gt_build.log)"
cmake --build "$gt_build" -j "$(nproc)" >> "$gt_build.log" 2>&1 || die "googletest build failed ($gt_build.log)"
cmake --install "$gt_build" >> "$gt_build.log" 2>&1 || die "googletest install failed ($gt_build.log)"
rm -f "$gt_build.log"

# 3. cudnn-frontend's headers (header-only C++; PyPI's nvidia-cudnn-frontend wheel, the version
# cmake/CudnnFrontend.cmake pins): CMake takes them from CARRY_DIR/cudnn_frontend/include, since the
# GPU machine cannot download them. cuDNN's own headers and library come with PyTorch's
# nvidia-cudnn-cu13 wheel there (include/ and lib/; run_all.sh passes -DPTDP_CUDNN_ROOT).
fe_version=$(sed -n 's/^set(PTDP_CUDNN_FRONTEND_VERSION "\([^"]*\)".*/\1/p' "$root/cmake/CudnnFrontend.cmake")
[ -n "$fe_version" ] || die "no PTDP_CUDNN_FRONTEND_VERSION in cmake/CudnnFrontend.cmake"
fe_tmp=$(mktemp -d /tmp/ptdp-cudnn-fe.XXXXXX)
trap 'rm -rf "$gt_build" "$fe_tmp"' EXIT
python3 -m pip download --no-deps --only-binary=:all: --quiet "nvidia-cudnn-frontend==$fe_version" \
  -d "$fe_tmp" || die "pip download nvidia-cudnn-frontend==$fe_version failed"
python3 -c 'import sys, zipfile, glob; z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' \
  "$fe_tmp" "$carry/cudnn_frontend" || die "could not unpack the nvidia-cudnn-frontend wheel"

# 4. Completeness and size.
for f in usr/include/nlohmann/json.hpp usr/include/CLI/CLI.hpp usr/include/eigen3/Eigen/Core \
         usr/include/gtest/gtest.h usr/include/gmock/gmock.h usr/include/benchmark/benchmark.h \
         usr/lib/x86_64-linux-gnu/libgtest.a usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian \
         usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h usr/bin/mpirun usr/bin/orted \
         usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake usr/share/cmake/CLI11/CLI11Config.cmake \
         usr/share/eigen3/cmake/Eigen3Config.cmake usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake \
         usr/lib/x86_64-linux-gnu/cmake/benchmark/benchmarkConfig.cmake \
         cudnn_frontend/include/cudnn_frontend.h; do
  [ -e "$carry/$f" ] || die "incomplete: $f missing from $carry"
done
(cd "$carry" && find . -type f -o -type l | sort > MANIFEST)
mib=$(du -sm "$carry" | cut -f1)
[ "$mib" -le "$limit_mib" ] || die "$carry is $mib MiB, over the $limit_mib MiB budget"
echo "gather_deps.sh: $carry holds $(wc -l < "$carry/MANIFEST") files, $mib MiB (budget $limit_mib MiB)"
