#!/usr/bin/env bash
# Layouts simulated per `ptdp train --adapt` re-plan and its wall time, before and after a change
# to tools/train_replan.cc, side by side in one run: replan_layouts.cc is compiled against the
# tree's train_replan.cc ("after") and against REV's ("before"), with the libraries of BUILD (a
# configured tree in which `ninja tools_replan_test` has run), and the two run in turn, ROUNDS
# re-plans per case each (the median wall time is printed). Not part of make test: it times.
# usage: bench/adapt/replan_layouts.sh [BUILD] [REV] [ROUNDS]
#   (defaults: build-cpu; the parent of the commit that added this script, where other shapes got
#   the even split only; 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build-cpu}" && pwd)
rev=${2:-$(git -C "$root" log --diff-filter=A -1 --format=%H -- bench/adapt/replan_layouts.sh)~1}
rounds=${3:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" show "$rev:tools/train_replan.cc" > "$work/train_replan_before.cc"
mkdir -p "$work/before/tools"  # REV's header, found before the tree's
git -C "$root" show "$rev:tools/train_adapt.h" > "$work/before/tools/train_adapt.h"
includes=()
for d in "$build"/include/ptdp_*; do includes+=(-I "$d"); done
libs=()
for l in runtime simulator costmodel schedule kernels/reference core; do
  libs+=("$(ls "$build/$l"/libptdp_*.a)")
done
mpi_flags=$(mpicxx --showme:link 2> /dev/null || true)
for kind in before after; do
  src="$root/tools/train_replan.cc" first=()
  [ $kind = before ] && src="$work/train_replan_before.cc" first=(-I "$work/before")
  # shellcheck disable=SC2086
  nice -n 19 c++ -std=c++20 -O3 -DNDEBUG "${first[@]}" "${includes[@]}" \
    "$root/bench/adapt/replan_layouts.cc" \
    "$src" "${libs[@]}" "${libs[@]}" $mpi_flags -lpthread -o "$work/replan_$kind"
done
echo "before: $rev:tools/train_replan.cc  after: the tree's; $rounds re-plans per case"
"$work/replan_before" before "$rounds"
"$work/replan_after" after "$rounds"
"$work/replan_before" before "$rounds"
"$work/replan_after" after "$rounds"
