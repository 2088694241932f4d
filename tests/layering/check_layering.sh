#!/usr/bin/env bash
# Checks the dependency rules of docs/design-notes.md / ARCHITECTURE.md by reading #include lines:
#   core -> (nothing in-project); schedule -> core; costmodel -> core;
#   simulator -> core, schedule, costmodel; planner -> core, schedule, costmodel, simulator;
#   kernels -> core; runtime -> core, schedule, kernels (never planner, simulator, costmodel);
#   profiler -> core, kernels, runtime;
#   bench/<layer> -> what <layer> may use;
#   tools/: cmd_train.cc (train_placement.*, train_report.*), cmd_tokenize.cc and cmd_export.cc ->
#     the runtime's layers, cmd_launch.cc (launch_script.*, relaunch.h) -> core only,
#     cmd_profile.cc -> the profiler's, cmd_schedule.cc -> the simulator's; the other commands
#     (plan, simulate, paper, presets) compose every layer, and so do train_adapt.cc and
#     train_replan.cc (`ptdp train --adapt`'s re-planner, reached from cmd_train.cc only through
#     tools/train_adapt.h, which names core and runtime types);
#   MPI, NCCL and CUDA headers only under runtime/comm/mpi, runtime/cuda, kernels/cuda, kernels/cublas, profiler.
# The build holds the library rules too (per-target include roots, cmake/PtdpLayer.cmake): this
# script adds the vendor-header rule, the per-command rules of tools/ and a reading of the source
# tree that does not depend on what the CMakeLists link. tests/ is not read: a test may prove a
# layer against the one above it (tests/core/ledger_test.cc walks schedule's Programs), and what a
# test can include is what its target links, which the build enforces.
set -u
root=${1:?usage: check_layering.sh SOURCE_ROOT}
cd "$root" || exit 2
fail=0
allowed() {  # allowed <dir> -> space-separated list of project folders it may include
  case "$1" in
    core) echo "core" ;;
    schedule) echo "core schedule" ;;
    costmodel) echo "core costmodel" ;;
    simulator) echo "core schedule costmodel simulator" ;;
    planner) echo "core schedule costmodel simulator planner" ;;
    kernels) echo "core kernels" ;;
    runtime) echo "core schedule kernels runtime" ;;
    profiler) echo "core kernels runtime profiler" ;;
  esac
}
# check <folder> <label> <allowed top-level folders...>: every project include under <folder>.
check() {
  local dir=$1 label=$2; shift 2
  local ok=" $* "
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include[[:space:]]*"([^"]+)".*/\1/' <<<"$line")
    top=${inc%%/*}
    case "$top" in core|schedule|costmodel|simulator|planner|kernels|runtime|profiler|tools|tests)
      if [[ "$ok" != *" $top "* ]]; then echo "layering: $file includes $inc ($label may not depend on $top)"; fail=1; fi ;;
    esac
  done < <(grep -rHn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' -E '^#include[[:space:]]*"' "$dir" 2>/dev/null)
}
layers="core schedule costmodel simulator planner kernels runtime profiler"
for dir in $layers; do
  [ -d "$dir" ] && check "$dir" "$dir" $(allowed $dir)
done
# A layer's benchmarks use what the layer may use.
for d in bench/*; do
  [ -d "$d" ] || continue
  layer=${d#*/}
  case " $layers " in *" $layer "*) ;; *) continue ;; esac
  check "$d" "$d" $(allowed $layer)
done
# The runtime's commands do not pull the planner, the simulator or the cost model in.
for f in cmd_train.cc train_placement.cc train_placement.h train_report.cc train_report.h \
  cmd_tokenize.cc cmd_export.cc cmd_profile.cc cmd_schedule.cc cmd_launch.cc launch_script.cc \
  launch_script.h relaunch.h; do
  [ -f "tools/$f" ] || continue
  case $f in
    cmd_profile.cc) ok=$(allowed profiler) ;;
    cmd_schedule.cc) ok=$(allowed simulator) ;;
    cmd_launch.cc | launch_script.* | relaunch.h) ok=$(allowed core) ;;
    *) ok=$(allowed runtime) ;;
  esac
  check "tools/$f" "tools/$f" $ok tools
done
# Vendor headers only where they belong.
while IFS= read -r line; do
  file=${line%%:*}
  case "$file" in runtime/comm/mpi/*|runtime/cuda/*|kernels/cuda/*|kernels/cublas/*|profiler/*|tests/*|bench/*) ;;
    *) echo "layering: $file includes a vendor communication/GPU header: ${line#*:}"; fail=1 ;;
  esac
done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' -E '^#include[[:space:]]*[<"](mpi\.h|nccl\.h|cuda_runtime[^>"]*|cublas[^>"]*|cudnn[^>"]*)[>"]' core schedule costmodel simulator planner kernels runtime profiler tools 2>/dev/null)
if [ $fail = 0 ]; then echo "layering: ok"; fi
exit $fail
