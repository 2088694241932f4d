#!/usr/bin/env bash
# Checks the dependency rules of docs/design-notes.md / ARCHITECTURE.md by reading #include lines:
#   core -> (nothing in-project); schedule -> core; costmodel -> core;
#   simulator -> core, schedule, costmodel; planner -> core, schedule, costmodel, simulator;
#   kernels -> core; runtime -> core, schedule, kernels (never planner, simulator, costmodel);
#   MPI, NCCL and CUDA headers only under runtime/comm/mpi, runtime/cuda, kernels/cuda, kernels/cublas, profiler.
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
for dir in core schedule costmodel simulator planner kernels runtime profiler; do
  [ -d "$dir" ] || continue
  ok=" $(allowed $dir) "
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include[[:space:]]*"([^"]+)".*/\1/' <<<"$line")
    top=${inc%%/*}
    case "$top" in core|schedule|costmodel|simulator|planner|kernels|runtime|profiler|tools)
      if [[ "$ok" != *" $top "* ]]; then echo "layering: $file includes $inc ($dir may not depend on $top)"; fail=1; fi ;;
    esac
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' -E '^#include[[:space:]]*"' "$dir" 2>/dev/null)
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
