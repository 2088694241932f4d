#!/usr/bin/env bash
# The whole GPU session in one command: probe the machine, build ptdp for sm_90a from the carried
# dependencies (.carry/, bench/gpu/gather_deps.sh), run every GPU test (the kernel tests also under
# compute-sanitizer memcheck), profile the GPU with ptdp, and train GPT ~125M / ~350M / 1.3B with
# ptdp and with PyTorch (eager, torch.compile), each at its largest microbatch that fits; then a
# summary table of stages, tokens/s, MFU and ptdp's predicted against measured step time.
#
# usage: bench/gpu/run_all.sh OUT_DIR [--dry-run] [--carry DIR] [--build-dir DIR] [--budget SECONDS]
#                             [--pack DIR]
#   OUT_DIR     every log, JSON and the summary go here (summary.txt, summary.json, stages.tsv)
#   --dry-run   on a CPU machine: everything that needs no GPU (carry completeness, configure and
#               build with the Debian packages hidden, control flow, the tiny model on --device cpu)
#   --budget    seconds for the whole run (default 560: the device tool allows 600 per command;
#               dry run 3600, as this 2-core machine builds the CUDA code slowly)
#   --pack DIR  at the end, copy summary.txt and summary.json to DIR and tar OUT_DIR into
#               DIR/gpu-run.tgz (the device tool brings back at most 8 files from $OUT)
#   --models L  the benchmark models (default "gpt2-124m gpt2-350m gpt-1.3b"; dry run "tiny")
#   --ptdp-steps N  training steps of each ptdp run (default 10; the first 3 are warm-up)
#   --ptdp-mbs A:B  ptdp's microbatch doubling from A to at most B (default 1:64)
#   --torch-models L  the models PyTorch runs (default: all of --models)
#   --torch-batch N   PyTorch's microbatch (halved until it fits) instead of the doubling search
#   --torch-box S     seconds for each PyTorch model (default 60, gpt-1.3b 90)
#   --no-torch, --no-memcheck, --no-kernels   leave out PyTorch, memcheck, or the op table (ptdp train --op-times)
#               (for a short run when only ptdp changed)
#   --no-calibrate  leave out the calibrate stage: the first model's fastest run again with a
#               measured trace (ptdp train --trace), ptdp compare and ptdp calibrate on it (with the
#               kernels stage's op table, --op-times, when it is of that model), and every
#               ptdp run's step predicted from the measured and the calibrated profile
#               (calibration.json; bench/gpu/close_loop.py); --lean keeps it (it tests no code)
#   --no-adapt  leave out the adapt stage (issue 13 on the GPU, bench/gpu/adapt_stage.sh): 4 ranks
#               (pipeline stages) sharing the GPU as MPS clients of 25% of the SMs each (time-sliced
#               when MPS does not start) train a 24-layer GPT-2-small-wide model without a
#               straggler, with rank 1 slowed 3x, and slowed with --monitor-every 4 --adapt (61-76 s
#               on an H200, 2026-11-27, MPS included; the dry run: 2 ranks, --backend cpu on an
#               8-layer model of h 128); its report: adapt.txt, adapt.json,
#               adapt.mps.txt and the end of summary.txt
#   --adapt-rounds R  the adapt stage's three runs R times in alternating order, the figure their
#               mean (adapt_stage.sh --rounds; default 1; about 60 s a round on an H200, so the
#               stage's time box is 150 + 70 (R - 1) s)
#   --skip-build  use --build-dir as it is (configure and build not run; the build stage only checks
#               that its ptdp is there): to rehearse the stages after the build on a CPU machine
#               with a build made apart (e.g. a CPU build, --dry-run --build-dir build-cpu)
#   --lean      speed only, for the last minutes of a lease: build ptdp alone and leave out the static
#               checks, the GPU tests, memcheck and the op table (a run that tests nothing: say so)
#   --tests REGEX  the build and the GPU tests whose names match REGEX (ctest -L gpu -R REGEX), nothing
#               else (no PyTorch, profile, ptdp runs or memcheck): a test added since the last GPU
#               session, in the few minutes a lease has left
#   --profile FILE  take the profile from FILE (e.g. profiles/h200-measured.json) instead of
#               measuring it (the profile stage then copies it)
#
# Every stage runs under `timeout`, bounded also by what is left of --budget; a failing stage does
# not stop the next (each writes OUT_DIR/<stage>.log and one line of stages.tsv). Exit status: 0
# when every stage passed, 1 otherwise (the summary names the failed ones).
set -euo pipefail
usage="usage: bench/gpu/run_all.sh OUT_DIR [--dry-run] [--carry DIR] [--build-dir DIR] [--budget SECONDS] [--pack DIR] [--models LIST] [--no-torch] [--no-memcheck] [--no-kernels] [--no-calibrate] [--no-adapt] [--adapt-rounds R] [--skip-build] [--lean] [--tests REGEX] [--profile FILE]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
case "$1" in -*) echo "$usage" >&2; exit 2 ;; esac
out=$1; shift
dry=0
carry=.carry
build=""
budget=""
pack=""
models=""
ptdp_steps=10
ptdp_min_mbs=1 ptdp_max_mbs=64
torch_models="" torch_batch="" torch_box=""
no_torch=0 no_memcheck=0 no_kernels=0 no_calibrate=0 no_adapt=0 skip_build=0 lean=0 profile_file=""
adapt_rounds=1
tests_regex=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --carry) carry=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --pack) pack=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --ptdp-steps) ptdp_steps=$2; shift 2 ;;
    --ptdp-mbs) ptdp_min_mbs=${2%%:*}; ptdp_max_mbs=${2##*:}; shift 2 ;;
    --torch-models) torch_models=$2; shift 2 ;;
    --torch-batch) torch_batch=$2; shift 2 ;;
    --torch-box) torch_box=$2; shift 2 ;;
    --no-torch) no_torch=1; shift ;;
    --no-memcheck) no_memcheck=1; shift ;;
    --no-kernels) no_kernels=1; shift ;;
    --no-calibrate) no_calibrate=1; shift ;;
    --no-adapt) no_adapt=1; shift ;;
    --adapt-rounds) adapt_rounds=$2; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --lean) lean=1; no_memcheck=1; no_kernels=1; shift ;;
    --profile) profile_file=$2; shift 2 ;;
    --tests) tests_regex=$2; no_torch=1; shift 2 ;;
    *) echo "run_all.sh: unknown argument $1; $usage" >&2; exit 2 ;;
  esac
done
[ -n "$budget" ] || budget=$([ $dry = 1 ] && echo 3600 || echo 560)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
case "$carry" in /*) ;; *) carry=$root/$carry ;; esac
case "$profile_file" in /* | "") ;; *) profile_file=$root/$profile_file ;; esac
[ -z "$profile_file" ] || [ -f "$profile_file" ] || { echo "run_all.sh: --profile $profile_file: no such file" >&2; exit 2; }
build=${build:-$([ $dry = 1 ] && echo build-gpu-dry || echo build-gpu)}
case "$build" in /*) ;; *) build=$root/$build ;; esac
start=$(date +%s)
stages=$out/stages.tsv
printf 'stage\tstatus\tseconds\tnote\n' > "$stages"
log() { echo "[run_all $(( $(date +%s) - start ))s] $*" >&2; }

# stage NAME SECONDS CMD...: runs CMD under timeout (the smaller of SECONDS and what the budget has
# left, less 20 s kept for the summary), its output in OUT_DIR/NAME.log; records ok / FAILED (rc) /
# TIMEOUT / SKIPPED (no time left) and never stops the script.
stage() {
  local name=$1 box=$2; shift 2
  local left=$(( budget - 20 - ($(date +%s) - start) ))
  [ "$box" -le "$left" ] || box=$left
  if [ "$box" -lt 5 ]; then
    printf '%s\tSKIPPED\t0\tno time left in the %ss budget\n' "$name" "$budget" >> "$stages"
    log "$name: SKIPPED (budget spent)"; return 0
  fi
  log "$name: starting (time box ${box}s)"
  local t0 rc=0
  t0=$(date +%s)
  # A stage is a function of this script: a child bash (with -e) gets it through export -f.
  timeout --kill-after=10 "$box" bash -euo pipefail -c '"$@"' _ "$@" > "$out/$name.log" 2>&1 || rc=$?
  local dt=$(( $(date +%s) - t0 )) status=ok note=""
  if [ $rc = 124 ] || [ $rc = 137 ]; then status=TIMEOUT; note="killed after ${box}s"
  elif [ $rc != 0 ]; then status=FAILED; note="rc $rc: $(grep -v '^\s*$' "$out/$name.log" | tail -n 1 | cut -c1-150)"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$dt" "$note" >> "$stages"
  log "$name: $status in ${dt}s${note:+ ($note)}"
  return 0
}
skip() { printf '%s\tSKIPPED\t0\t%s\n' "$1" "$2" >> "$stages"; log "$1: SKIPPED ($2)"; }
passed() { awk -F'\t' -v n="$1" '$1 == n && $2 == "ok" {f = 1} END {exit !f}' "$stages"; }

# --- what this machine has -------------------------------------------------------------------
python=python3
command -v "$python" > /dev/null || python=""
nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; } || true
cuda_bin=$(dirname "${nvcc:-/usr/local/cuda/bin/nvcc}")
sanitizer=$(command -v compute-sanitizer || true)
[ -n "$sanitizer" ] || { [ -x "$cuda_bin/compute-sanitizer" ] && sanitizer=$cuda_bin/compute-sanitizer; } || true
# cuDNN and NCCL come with PyTorch's wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) on the GPU image.
wheel_dir() {  # python package -> its folder, or nothing
  [ -n "$python" ] || return 0
  "$python" -c "import sys, $1 as m; print(list(m.__path__)[0])" 2>/dev/null || true
}
cudnn_dir=$(wheel_dir nvidia.cudnn)
nccl_dir=$(wheel_dir nvidia.nccl)
nccl_lib="" nccl_inc=""
if [ -n "$nccl_dir" ]; then
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -n 1 || true)
  nccl_inc=$nccl_dir/include
elif [ -e /usr/local/cuda/lib64/libnccl.so ]; then  # a toolkit with NCCL beside it (this CI machine)
  nccl_lib=/usr/local/cuda/lib64/libnccl.so; nccl_inc=/usr/local/cuda/include
fi
carry_lib=$carry/usr/lib/x86_64-linux-gnu
# Carried OpenMPI is relocated: OPAL_PREFIX replaces its /usr prefix; its optional components
# (InfiniBand, UCX, libfabric) are absent on purpose, so their load errors are silenced.
export OPAL_PREFIX=$carry/usr
# PMIx (under OpenMPI's launcher) has its own prefix and component folder (checked: mpirun -np 2
# runs from the carry with the Debian packages hidden, without warnings, only with all three).
export PMIX_PREFIX=$carry_lib/pmix2 PMIX_INSTALL_PREFIX=$carry_lib/pmix2
export PMIX_MCA_mca_base_component_path=$carry_lib/pmix2/lib/pmix PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_btl=self,vader
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH=$carry/usr/bin:$cuda_bin:$PATH
run_ld=$carry_lib:$carry_lib/openmpi/lib${nccl_lib:+:$(dirname "$nccl_lib")}${cudnn_dir:+:$cudnn_dir/lib}
# In a dry run, everything that runs our build does so with the Debian packages hidden ($hide).
with_libs() { LD_LIBRARY_PATH=$run_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $hide "$@"; }
# In a dry run the build and every run of ptdp see no Debian package that .carry replaces.
hide=""
[ $dry = 1 ] && hide=$root/bench/gpu/without_debian_deps.sh

probe() {
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  dry_run: $dry  budget_s: $budget"
  echo "git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "nvcc: ${nvcc:-NOT FOUND} $("${nvcc:-false}" --version 2>/dev/null | tail -n 2 | head -n 1)"
  echo "cmake: $(cmake --version | head -n 1)  ninja: $(ninja --version 2>/dev/null || echo none)  g++: $(g++ -dumpversion 2>/dev/null || echo none)"
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo "cuobjdump: $(command -v cuobjdump || echo 'not found')"
  echo "python: ${python:-none} $( [ -n "$python" ] && "$python" -c 'import sys; print(sys.executable)')"
  echo "torch: $( [ -n "$python" ] && "$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tail -n 1)"
  echo "cuDNN (nvidia.cudnn): ${cudnn_dir:-not found}"
  echo "NCCL (nvidia.nccl): ${nccl_dir:-not found}  library: ${nccl_lib:-none}"
  echo "system MPI: mpirun=$(PATH=${PATH#"$carry/usr/bin:"} command -v mpirun || echo none)  libmpi: $(ldconfig -p 2>/dev/null | grep -c 'libmpi\.so' || true) entries"
  echo "carried: $carry ($(du -sm "$carry" 2>/dev/null | cut -f1) MiB)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi: none"
  [ -n "$nvcc" ] || { echo "nvcc not found"; return 1; }
}

carry_check() {  # every file gather_deps.sh listed is here, and libmpi's dependencies resolve
  [ -f "$carry/MANIFEST" ] || { echo "no $carry/MANIFEST: run bench/gpu/gather_deps.sh (make gpu-carry) where Debian's packages are"; return 1; }
  local miss=0
  while IFS= read -r f; do [ -e "$carry/$f" ] || [ -L "$carry/$f" ] || { echo "missing: $f"; miss=$((miss + 1)); }; done < "$carry/MANIFEST"
  echo "$(wc -l < "$carry/MANIFEST") files listed, $miss missing"
  local deps
  deps=$(LD_LIBRARY_PATH=$run_ld ldd "$carry_lib/openmpi/lib/libmpi.so")
  echo "$deps"
  if grep -q 'not found' <<< "$deps"; then echo "libmpi: unresolved libraries"; return 1; fi
  [ $miss = 0 ]
}

configure() {
  local args=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTDP_CARRY="$carry"
              -DPTDP_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER="$nvcc")
  [ -n "$nccl_lib" ] && args+=(-DPTDP_NCCL_LIBRARY="$nccl_lib" -DPTDP_NCCL_INCLUDE_DIR="$nccl_inc")
  # cuDNN (include/, lib/libcudnn.so.9) from PyTorch's wheel; cudnn-frontend comes from the carry.
  [ -n "$cudnn_dir" ] && args+=(-DPTDP_CUDNN_ROOT="$cudnn_dir")
  $hide cmake "${args[@]}"
  grep -E '^PTDP_WITH_(CUDA|MPI):' "$build/CMakeCache.txt"
  grep -E '^PTDP_CUDNN_(INCLUDE_DIR|LIBRARY):' "$build/CMakeCache.txt" || true
  grep -q '^PTDP_WITH_MPI:BOOL=ON' "$build/CMakeCache.txt" || { echo "MPI not found in the carry: runtime/cuda is not built"; return 1; }
}

build_all() {
  local targets=(ptdp kernels_cuda_test cuda_device_test cuda_comm_test cuda_ops_test
                 cudnn_attention_test gpu_static_objects)
  [ "$lean" = 1 ] && targets=(ptdp)
  local jobs
  jobs=$(nproc)
  # PyTorch runs beside the build on a GPU machine: leave it two cores.
  [ $dry = 0 ] && [ "$jobs" -gt 4 ] && jobs=$((jobs - 2))
  # gpu_static_objects: the static kernel checks' ptxas logs and SASS (cuobjdump is on the GPU
  # image, so there the tensor-core check reads SASS), compiled beside the rest.
  with_libs cmake --build "$build" -j "$jobs" --target "${targets[@]}"
}

libs_check() {  # every library ptdp needs resolves with what is here and carried
  local deps
  deps=$(with_libs ldd "$build/tools/ptdp")
  echo "$deps"
  if grep -q 'not found' <<< "$deps"; then echo "ptdp: unresolved libraries"; return 1; fi
  with_libs "$build/tools/ptdp" presets > /dev/null
}

gpu_tests() {  # label gpu: the kernel tests, CudaDevice, the NCCL and staged communicators
  cd "$build"
  local rc=0
  with_libs ctest -L '^gpu$' ${tests_regex:+-R "$tests_regex"} --output-on-failure --timeout 45 \
    --output-junit "$out/ctest-gpu.xml" || rc=$?
  # SKIPPED is not passed: on a GPU only the 2-GPU NCCL entry may skip (one GPU here); any other
  # skip fails the stage, so a GPU that the tests could not use cannot look green.
  "$python" -c 'import sys, xml.etree.ElementTree as E; c = {}; bad = []
for t in E.parse(sys.argv[1]).getroot().iter("testcase"):
    c[t.get("status")] = c.get(t.get("status"), 0) + 1
    if t.get("status") == "notrun" and t.get("name") != "cuda_comm_nccl_np2": bad.append(t.get("name"))
print("junit testcases by status (notrun = SKIPPED, never passed):", c)
if bad: print("skipped on a GPU machine:", ", ".join(bad)); sys.exit(1)' "$out/ctest-gpu.xml" || rc=1
  return $rc
}

static_tests() { cd "$build" && with_libs ctest -L gpu_static --output-on-failure --output-junit "$out/ctest-gpu-static.xml"; }

memcheck() {  # the GPU unit tests under compute-sanitizer memcheck (out-of-bounds, misaligned, leaks)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 1; }
  local t rc=0
  # kernels/cuda's kernels, then CudaOps (the packed element-wise and LayerNorm kernels, the
  # cuBLASLt GEMMs with their tuning, cross-entropy, optimizer) and CudaDevice's allocator.
  for t in tests/kernels/kernels_cuda_test tests/cuda/cuda_ops_test tests/cuda/cuda_device_test; do
    echo "== memcheck $t"
    with_libs "$sanitizer" --tool memcheck --error-exitcode 3 --leak-check full \
      "$build/$t" --gtest_brief=1 || rc=1
  done
  return $rc
}

models_check() {  # bench/gpu/models/*.json (PyTorch's shapes) still equal ptdp's presets
  local m f bad=0
  for f in "$root"/bench/gpu/models/*.json; do
    m=$(basename "$f" .json)
    with_libs "$build/tools/ptdp" plan --model "$m" --cluster "$root/profiles/dgx-h100.json" --gpus 1 \
      --global-batch 1 --fix tp=1,pp=1,dp=1,mbs=1,recompute=none --top 1 --out "$out/models.$m.plan.json" > /dev/null 2>&1 ||
    with_libs "$build/tools/ptdp" plan --model "$m" --cluster cpu --gpus 1 \
      --global-batch 1 --fix tp=1,pp=1,dp=1,mbs=1,recompute=none --top 1 --out "$out/models.$m.plan.json" > /dev/null
    "$python" -c 'import json,sys; a=json.load(open(sys.argv[1]))["model"]; b=json.load(open(sys.argv[2]))["model"]; sys.exit(0 if a == b else print("differs:", sys.argv[3], a, b) or 1)' \
      "$f" "$out/models.$m.plan.json" "$m" && echo "$m: same as ptdp's preset" || bad=1
    rm -f "$out/models.$m.plan.json"
  done
  return $bad
}

tokens() { with_libs "$build/tools/ptdp" tokenize --in "$root/README.md" --out "$out/tokens.bin"; }

peak=989 peak_source="NVIDIA H100 SXM datasheet, dense BF16 989.4 TFLOP/s (the H200 has the same compute)"
profile() {
  if [ -n "$profile_file" ]; then
    echo "profile: $profile_file (not measured in this run)"
    cp "$profile_file" "$out/profile.json"
    return
  fi
  # --attention-grid: attention at every s with every d (docs/profile.md) covering the models'
  # shapes (gpt2-124m/350m: s 1024, d 64; gpt-1.3b: s 2048, d 128), so that each is priced at its
  # own (attention_table); 5 points beyond --attention's, about 5-15 s (docs/cuda.md). The cuda
  # profile also times the GeLU epilogues and the bias gradient at --attention's fc1 and fc2 shapes
  # (gelu_epilogue/dgelu_epilogue/bias_grad_Gelems_per_s, profiler/epilogues.h; estimated under
  # 1 s), which the kernels stage's `compare --op-times` on this profile then prices.
  # --gemm-shapes-of: every Linear GEMM (QKV, projection, fc1, fc2, logits) of the benchmark models
  # at each microbatch the ptdp stages may train (--ptdp-mbs doubling; the dry run's 1 and 2),
  # timed at its exact shape into gemm_points (docs/profile.md), which price those runs' GEMMs in
  # place of the grid's interpolation (gpt2-124m's h 768 lies between its powers of two). About
  # 0.25 s a shape on the H200 (docs/cuda.md): 30 shapes at --ptdp-mbs 16:32, 105 at 1:64.
  local mbs=() b of
  for ((b = ptdp_min_mbs; b <= ptdp_max_mbs; b *= 2)); do mbs+=("$b"); done
  [ $dry = 1 ] && mbs=(1 2)
  of=$(printf '%s,' $models)
  local shapes=(--gemm-shapes-of "${of%,}" --gemm-shapes-mbs "$(IFS=,; echo "${mbs[*]}")")
  local a=(profile --backend cuda --out "$out/profile.json" --raw "$out/profile.raw.json"
           --peak-tflops "$peak" --peak-source "$peak_source" --links-from "$root/profiles/dgx-h100.json"
           --attention-grid 1024,2048,4096 64,128 "${shapes[@]}")
  [ $dry = 1 ] && a=(profile --backend cpu --quick --out "$out/profile.json" --raw "$out/profile.raw.json"
                     --attention-grid 32,64 8,16 "${shapes[@]}")
  with_libs "$build/tools/ptdp" "${a[@]}"
}

# PyTorch: eager doubles its microbatch until out of memory (or, with --torch-batch, runs that
# one, halving until it fits); compile then runs at eager's (halving until it fits), since each
# new shape costs torch.compile a fresh compilation.
torch_model() {  # MODEL DEVICE STEPS MAX [BATCH]
  local m=$1 dev=$2 steps=$3 max=$4 fixed=${5:-} spec=$root/bench/gpu/models/$1.json b
  if [ -z "$fixed" ]; then
    "$python" "$root/bench/pytorch/train_gpt_torch.py" --plan "$spec" --mode eager --device "$dev" \
      --steps "$steps" --warmup 3 --peak-tflops "$peak" --find-max-batch --max-batch "$max" \
      | tee "$out/torch.$m.eager.json"
  else
    b=$fixed
    until "$python" "$root/bench/pytorch/train_gpt_torch.py" --plan "$spec" --mode eager --device "$dev" \
            --steps "$steps" --warmup 3 --peak-tflops "$peak" --batch "$b" > "$out/torch.$m.eager.json"; do
      b=$((b / 2)); [ "$b" -ge 1 ] || { echo "eager: no microbatch fits"; return 1; }
    done
    cat "$out/torch.$m.eager.json"
  fi
  b=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("microbatch", 0))' "$out/torch.$m.eager.json")
  [ "$b" -ge 1 ] || { echo "eager: no microbatch fits"; return 1; }
  while [ "$b" -ge 1 ]; do
    if "$python" "$root/bench/pytorch/train_gpt_torch.py" --plan "$spec" --mode compile --device "$dev" \
         --steps "$steps" --warmup 3 --peak-tflops "$peak" --batch "$b" > "$out/torch.$m.compile.json"; then
      cat "$out/torch.$m.compile.json"; return 0
    fi
    b=$((b / 2))
  done
  return 1
}
torch_all() {  # runs in the background beside the build; one stage per model and mode
  local m
  for m in $models; do
    case " $torch_models " in *" $m "*) ;; *) skip "torch-$m" "not in --torch-models"; continue ;; esac
    if [ $dry = 1 ]; then stage "torch-$m" 300 torch_model "$m" cpu 3 2 "$torch_batch"
    else stage "torch-$m" "${torch_box:-$([ "$m" = gpt-1.3b ] && echo 90 || echo 60)}" torch_model "$m" cuda 10 64 "$torch_batch"; fi
  done
}

ptdp_model() {  # MODEL: compare.sh's ptdp side on the profile measured above
  local a=(--models "$1" --skip-build --build-dir "${build#"$root/"}" --work "$out/ptdp-$1"
           --profile "$out/profile.json" --only ptdp)
  if [ $dry = 1 ]; then a+=(--backend cpu --steps 3 --max-mbs 2)
  else a+=(--backend cuda --steps "$ptdp_steps" --min-mbs "$ptdp_min_mbs" --max-mbs "$ptdp_max_mbs" --peak-tflops "$peak" --peak-source "$peak_source"); fi
  with_libs "$root/bench/gpu/compare.sh" "${a[@]}"
  cat "$out/ptdp-$1/results.jsonl"
  ! grep -q '"error"' "$out/ptdp-$1/results.jsonl"
}

kernels() {  # MODEL: where one step's time goes, op by op and shape (ptdp train --op-times)
  local plan=""
  grep -q '"microbatch"' "$out/ptdp-$1/results.jsonl" &&
    plan=$out/ptdp-$1/$1.mbs$("$python" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["microbatch"])' "$out/ptdp-$1/results.jsonl").plan.json
  [ -n "$plan" ] || { echo "no measured microbatch for $1"; return 1; }
  echo "plan: $plan"
  cp "$plan" "$out/kernels.plan.json"  # the calibrate stage checks the table's model against it
  with_libs "$build/tools/ptdp" train --backend cuda --plan "$plan" --data "$out/tokens.bin" --steps 3 \
    --op-times | tee "$out/kernels.txt"
  # The same table beside the cost model's price of each GEMM and attention op (ptdp compare
  # --op-times): on this call's measured profile (the plan's cluster) and on the shipped dgx-h100.
  for c in "" dgx-h100; do
    with_libs "$build/tools/ptdp" compare --op-times "$out/kernels.txt" --plan "$plan" \
      ${c:+--cluster "$c"} > "$out/kernels-priced${c:+-$c}.txt" || echo "compare --op-times ${c:-measured} failed"
    tail -n 6 "$out/kernels-priced${c:+-$c}.txt" | sed "s/^/priced on ${c:-the measured profile}: /"
  done
  # Side by side in the same run: cuBLASLt's first-ranked algorithm per GEMM shape against the one
  # kernels/cublas times as fastest (PTDP_GEMM_TUNE=0 turns the timing off).
  PTDP_GEMM_TUNE=0 with_libs "$build/tools/ptdp" train --backend cuda --plan "$plan" \
    --data "$out/tokens.bin" --steps 3 --op-times > "$out/kernels-gemm-untuned.txt"
  grep -E "^Linear|iteration +3/" "$out/kernels-gemm-untuned.txt" | sed 's/^/untuned GEMMs: /'
  # And GeLU in cuBLASLt's epilogues (GELU_AUX_BIAS, DGELU) against GEMMs plus packed GeLU passes.
  PTDP_GELU_EPILOGUE=0 with_libs "$build/tools/ptdp" train --backend cuda --plan "$plan" \
    --data "$out/tokens.bin" --steps 3 --op-times > "$out/kernels-gelu-pass.txt"
  grep -E "Gelu|GeLU|iteration +3/" "$out/kernels-gelu-pass.txt" | sed 's/^/GeLU passes: /'
  # And the optimizer step as one launch for every tensor (AdamW, SumSquares "(multi-tensor)")
  # against one launch per tensor (PTDP_MULTI_TENSOR=0).
  PTDP_MULTI_TENSOR=0 with_libs "$build/tools/ptdp" train --backend cuda --plan "$plan" \
    --data "$out/tokens.bin" --steps 3 --op-times > "$out/kernels-per-tensor-optim.txt"
  grep -E "^(AdamW|SumSquares)|iteration +3/" "$out/kernels-per-tensor-optim.txt" |
    sed 's/^/per-tensor optimizer: /'
}

# Closing the loop on this machine (issue 13, docs/compare.md): MODEL's fastest layout trained
# again, 4 microbatches a step, with a measured trace; its prediction from the measured profile put
# beside it (ptdp compare: table and SVG), the profile calibrated on it (ptdp calibrate), then every
# run the ptdp stages trained (each model and microbatch) predicted from both profiles against its
# measured step. 4 microbatches: each compute class then has 4 instances, so the fit matches their
# median rather than one sample, and the run's own error after the fit is not the fit's residual
# over as many classes as figures (forward, backward, optimizer step).
# The kernels stage's op table, when it is of MODEL (its plan's model), goes to calibrate too
# (--op-times): the attention, GeLU-epilogue and bias-gradient rates and the GEMM multiples, which
# a trace cannot tell apart (docs/op_times.md). A dry run has no kernels stage: it times the
# traced plan's ops on the CPU itself, so that this path runs there too.
calibrate_loop() {  # MODEL
  local m=$1 w=$out/ptdp-$1 b plan fix backend=cuda steps=4 f name p microbatches=4 ops=()
  [ $dry = 1 ] && backend=cpu
  b=$("$python" "$root/bench/gpu/close_loop.py" fastest "$w" "$m")
  fix=$("$python" "$root/bench/gpu/close_loop.py" fix "$w/$m.mbs$b.plan.json")
  plan=$out/traced.$m.plan.json
  with_libs "$build/tools/ptdp" plan --model "$m" --cluster "$out/profile.json" --gpus 1 \
    --global-batch $((microbatches * b)) --fix "$fix" --software ptdp --top 1 --out "$plan" > /dev/null
  # 3 warm-up steps (compare.sh's count), the 4th traced.
  echo "traced run: $m, $fix, $microbatches microbatches a step ($plan), $steps steps, the last traced"
  # The SM clock, power and temperature every 50 ms while it trains (clocks.MODEL.csv): on
  # 2026-11-27 the traced run's later microbatches ran up to 14% slower than its first, which a
  # clock drop under sustained load would explain and the untraced one-microbatch steps not see.
  local sampler=""
  if [ $dry = 0 ] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits \
      -lms 50 > "$out/clocks.$m.csv" 2>&1 &
    sampler=$!
  fi
  local rc=0  # the sampler is stopped whether or not the run fails
  with_libs "$build/tools/ptdp" train --backend "$backend" --plan "$plan" --data "$out/tokens.bin" \
    --steps "$steps" --log "$out/trace.$m.jsonl" --trace "$out/trace.$m.json" > "$out/trace.$m.train.txt" || rc=$?
  if [ -n "$sampler" ]; then
    kill "$sampler" 2> /dev/null || true
    wait "$sampler" 2> /dev/null || true
    "$python" "$root/bench/gpu/close_loop.py" clocks "$out/clocks.$m.csv" || true
  fi
  [ $rc = 0 ] || return $rc
  compare_to() {  # PROFILE WHEN: that profile's prediction of the traced run, beside the trace
    with_libs "$build/tools/ptdp" simulate --plan "$plan" --profile "$1" --trace "$out/predicted.$m.$2.json" > /dev/null
    with_libs "$build/tools/ptdp" compare --predicted "$out/predicted.$m.$2.json" --measured "$out/trace.$m.json" \
      --svg "$out/compare.$m.$2.svg" --top 5 | tee "$out/compare.$m.$2.txt"
  }
  compare_to "$out/profile.json" before
  if [ $dry = 1 ]; then
    with_libs "$build/tools/ptdp" train --backend cpu --plan "$plan" --data "$out/tokens.bin" --steps 3 \
      --op-times > "$out/kernels.txt"
    cp "$plan" "$out/kernels.plan.json"
  fi
  if [ -s "$out/kernels.txt" ] && [ -f "$out/kernels.plan.json" ] &&
    [ "$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["name"])' "$out/kernels.plan.json")" = "$m" ]; then
    ops=(--op-times "$out/kernels.txt")
    echo "op table: $out/kernels.txt (plan $out/kernels.plan.json, $m)"
  else
    echo "no op table of $m (kernels stage): the attention and epilogue rates stay as measured"
  fi
  with_libs "$build/tools/ptdp" calibrate --plan "$plan" --measured "$out/trace.$m.json" \
    --profile "$out/profile.json" --out "$out/profile.calibrated.json" ${ops[@]+"${ops[@]}"}
  compare_to "$out/profile.calibrated.json" after
  mkdir -p "$out/close-loop"
  for f in "$out"/ptdp-*/*.mbs*.plan.json; do
    name=$(basename "$f" .plan.json)
    [ -s "$(dirname "$f")/$name.jsonl" ] || continue  # planned, not trained (did not fit)
    for p in start calibrated; do
      with_libs "$build/tools/ptdp" simulate --plan "$f" --format json \
        --profile "$out/$([ $p = start ] && echo profile || echo profile.calibrated).json" \
        > "$out/close-loop/$name.$p.json"
    done
  done
  "$python" "$root/bench/gpu/close_loop.py" table "$out" "$m" "$b"
}

# Issue 13's monitor, injected straggler and --adapt on this machine (bench/gpu/adapt_stage.sh: on
# the GPU its ranks share it through the staged communicator, as MPS clients when MPS starts): the
# measured profile when the profile stage made one, else the script's default
# (profiles/h200-measured.json; cpu when dry).
adapt_runs() {
  local a=(--backend "$([ $dry = 1 ] && echo cpu || echo cuda)" --rounds "$adapt_rounds")
  [ -s "$out/tokens.bin" ] && a+=(--data "$out/tokens.bin")
  [ $dry = 0 ] && [ -s "$out/profile.json" ] && a+=(--cluster "$out/profile.json")
  with_libs "$root/bench/gpu/adapt_stage.sh" "$build/tools/ptdp" "$out" "${a[@]}"
}

# Stages run in a child bash (stage above): it needs these functions and settings.
export -f probe carry_check configure build_all libs_check gpu_tests static_tests memcheck tokens models_check \
  profile torch_model ptdp_model kernels calibrate_loop adapt_runs with_libs wheel_dir
export lean tests_regex profile_file adapt_rounds out dry carry build budget root ptdp_steps ptdp_min_mbs ptdp_max_mbs models torch_models torch_batch torch_box python nvcc cuda_bin sanitizer cudnn_dir nccl_dir nccl_lib \
  nccl_inc carry_lib run_ld hide peak peak_source

# --- the run ----------------------------------------------------------------------------------
[ -n "$models" ] || models=$([ $dry = 1 ] && echo tiny || echo "gpt2-124m gpt2-350m gpt-1.3b")
[ -n "$torch_models" ] || torch_models=$models
stage probe 30 probe
stage carry 30 carry_check
# PyTorch needs neither our build nor the carry: it runs beside the configure and build (CPU only)
# with the GPU to itself (the build leaves it two cores).
torch_pid=""
if [ $no_torch = 1 ]; then
  for m in $models; do skip "torch-$m" "--no-torch"; done
elif [ -z "$python" ] || ! "$python" -c 'import torch' 2> /dev/null; then
  for m in $models; do skip "torch-$m" "no PyTorch in ${python:-python3} here"; done
else
  torch_all & torch_pid=$!
fi
build_box=300
[ $dry = 1 ] && build_box=3000  # 2 shared cores here, 16 there
if [ $skip_build = 1 ]; then
  skip configure "--skip-build"
  # A build that is there stands for this stage (the stages after it test whether it runs).
  stage build 5 test -x "$build/tools/ptdp"
else
  stage configure 120 configure
  if passed configure; then stage build $build_box build_all; else skip build "configure failed"; fi
fi
if passed build; then
  stage libs 20 libs_check
  if [ $lean = 1 ]; then skip static "--lean"; else stage static 60 static_tests; fi
  # PyTorch has the GPU to itself while we only compile; our GPU stages wait for it, so that no
  # measurement shares the GPU.
  [ -n "$torch_pid" ] && { log "waiting for PyTorch"; wait "$torch_pid" || true; torch_pid=""; }
  # The kernels have never run on a GPU: their tests come before any timing.
  if [ $dry = 1 ]; then
    skip gpu-tests "dry run: no GPU (ctest -L gpu would only report SKIPPED)"
    skip memcheck "dry run: no GPU"
  elif [ $lean = 1 ]; then
    skip gpu-tests "--lean: nothing tested in this run"
  else
    stage gpu-tests 200 gpu_tests
  fi
  if [ -n "$tests_regex" ]; then
    for s in models tokens profile kernels calibrate adapt; do skip "$s" "--tests"; done
    [ $dry = 1 ] || skip memcheck "--tests"
    for m in $models; do skip "ptdp-$m" "--tests"; done
  else
    stage models 20 models_check
    stage tokens 10 tokens
    stage profile 170 profile
    first=${models%% *}
    for m in $models; do
      if passed profile; then stage "ptdp-$m" 60 ptdp_model "$m"; else skip "ptdp-$m" "no profile"; fi
      # Right after the first model: where its step's GPU time goes, op by op (ptdp train --op-times).
      [ "$m" = "$first" ] || continue
      if [ $dry = 1 ] || [ $no_kernels = 1 ]; then skip kernels "$([ $dry = 1 ] && echo 'dry run: no GPU' || echo --no-kernels)"
      elif passed "ptdp-$m"; then stage kernels 75 kernels "$m"
      else skip kernels "ptdp-$m did not pass"; fi
    done
    # ptdp compare and calibrate on the first model's fastest run, then every run predicted from the
    # measured and the calibrated profile (after all the ptdp stages: it predicts their runs).
    if [ $no_calibrate = 1 ]; then skip calibrate "--no-calibrate"
    elif passed "ptdp-$first"; then stage calibrate "$([ $dry = 1 ] && echo 300 || echo 90)" calibrate_loop "$first"
    else skip calibrate "ptdp-$first did not pass"; fi
    # The monitor, a straggler and --adapt (issue 13): three short 4-rank runs (2 when dry).
    if [ $no_adapt = 1 ]; then skip adapt "--no-adapt"
    else stage adapt "$([ $dry = 1 ] && echo $((400 * adapt_rounds)) || echo $((150 + 70 * (adapt_rounds - 1))))" adapt_runs; fi
    # memcheck last: it measures nothing, so it takes what the budget has left after the timings.
    if [ $dry = 0 ] && [ $no_memcheck = 0 ]; then stage memcheck 150 memcheck
    elif [ $dry = 0 ]; then skip memcheck "$([ $lean = 1 ] && echo --lean || echo --no-memcheck)"; fi
  fi
else
  for s in libs static gpu-tests memcheck models tokens profile kernels calibrate adapt; do skip "$s" "build failed"; done
  for m in $models; do skip "ptdp-$m" "build failed"; done
fi
[ -n "$torch_pid" ] && { wait "$torch_pid" || true; }

# --- the summary ------------------------------------------------------------------------------
# MFU's peak: the card's datasheet figure; in a dry run the CPU profile's own (as compare.sh uses).
summary_peak=$peak
if [ $dry = 1 ] && [ -f "$out/profile.json" ]; then
  summary_peak=$("${python:-python3}" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_tflops"]["value"])' "$out/profile.json" 2>/dev/null || echo "$peak")
fi
"${python:-python3}" "$root/bench/gpu/summarize.py" "$out" "$summary_peak" $models | tee "$out/summary.txt" || \
  { echo "run_all.sh: summary failed; the stages:"; cat "$stages"; }
log "done in $(( $(date +%s) - start ))s; everything is in $out"
if [ -n "$pack" ]; then
  mkdir -p "$pack"
  cp "$out/summary.txt" "$out/summary.json" "$out/stages.tsv" "$pack/" 2> /dev/null || true
  tar czf "$pack/gpu-run.tgz" -C "$(dirname "$out")" "$(basename "$out")"
fi
! grep -q -P '\t(FAILED|TIMEOUT)\t' "$stages"
