#!/usr/bin/env bash
# Runs a command with the Debian packages that .carry/ replaces made invisible, as on the GPU
# machine: in a private mount namespace (unshare -m, root only) their directories are covered by
# empty tmpfs mounts and their loose files by /dev/null, so a build that still reaches for one of
# them fails here instead of on the GPU machine. The system itself is untouched.
#
# usage: bench/gpu/without_debian_deps.sh COMMAND [ARGS...]
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
[ "${PTDP_DEPS_HIDDEN:-}" = "done" ] && exec "$@"  # already inside (run_all.sh nests calls)
if [ "${PTDP_DEPS_HIDDEN:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "without_debian_deps.sh: needs root (unshare -m)" >&2; exit 2; }
  exec unshare -m env PTDP_DEPS_HIDDEN=1 "$0" "$@"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
mount --make-rprivate /
dirs="/usr/include/nlohmann /usr/include/CLI /usr/include/eigen3 /usr/include/gtest /usr/include/gmock
      /usr/include/benchmark /usr/src/googletest /usr/lib/x86_64-linux-gnu/openmpi
      /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /usr/share/pmix /usr/lib/x86_64-linux-gnu/cmake/GTest
      /usr/lib/x86_64-linux-gnu/cmake/benchmark /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11
      /usr/share/eigen3 /usr/include/hwloc /usr/include/pmix /etc/openmpi"
for d in $dirs; do [ -d "$d" ] && mount -t tmpfs -o size=1m,ro none "$d"; done
pkgs="$(grep -v -E '^\s*(#|$)' "$root/bench/gpu/carry_packages.txt") libgtest-dev libgmock-dev"
for p in $pkgs; do
  dpkg -L "$p" 2>/dev/null | while IFS= read -r f; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    # Still visible (not covered by a directory mount above)? Cover the file.
    [ -e "$f" ] && mount --bind /dev/null "$f" 2>/dev/null || true
  done
done
# The MPI launchers are links through /etc/alternatives: cover them by name.
for b in /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/mpicxx /usr/bin/mpicc /usr/bin/orterun /usr/bin/orted; do
  [ -e "$b" ] && mount --bind /dev/null "$(readlink -f "$b")" 2>/dev/null || true
done
if [ -e /usr/include/nlohmann/json.hpp ] || [ -s /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian ] \
   || [ -s /usr/lib/x86_64-linux-gnu/libmpi.so.40 ]; then
  echo "without_debian_deps.sh: hiding failed" >&2; exit 1
fi
export PTDP_DEPS_HIDDEN="done"
exec "$@"
