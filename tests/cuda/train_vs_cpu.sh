#!/usr/bin/env bash
# A training run on --backend cuda against a reference run, same plan precision, step by step:
#   single:  t = p = d = 1 on cuda vs the same layout on cpu (one process each);
#   staged:  t = 2, p = 2 as four processes sharing one GPU (the staged MPI communicator) vs
#            t = p = 1 on cuda in one process;
#   distopt: t = 1, p = 2, d = 2 with the distributed optimizer (its reduce-scatter and all-gather
#            through the staged communicator), four processes vs t = p = 1 on cuda;
#   seqpar:  t = 2, p = 2 with sequence parallelism (its all-gathers and reduce-scatters in the
#            compute dtype through the staged communicator), four processes vs t = p = 1 on cuda;
#   cp:      p = 2, cp = 2 with fused attention (kernels/cuda/context_attention.cu; the keys'
#            all-gather, broadcasts and reduces through the staged communicator), four processes
#            vs t = p = 1 on cuda.
# Prints SKIPPED (and exits 0; ctest's SKIP_REGULAR_EXPRESSION) when the build has no CUDA backend
# or no GPU is visible; never PASS without having trained on a GPU.
#
# Bounds, for the first STEPS steps. u = 2^-8 in bf16 (both backends round at the same points, so
# they differ by flipped roundings). In fp32, u = K 2^-24 with K = 256, the longest reduction of the
# tiny model (vocabulary, FFN): how far two summation orders (cuBLAS and the fused kernels against
# Eigen and the reference loops) can move one reduced value.
#   loss       |L' - L| / L <= 2u (TV_k / L + 1 / sqrt(B s))  as tests/runtime/half_equivalence.sh
#              (TV_k: the reference's loss variation so far; B s: the tokens of a step);
#   grad norm  |G' - G| / G <= R u at step 1 with R = 4 l + 2 (every gradient element carries at
#              most R roundings of u, docs/runtime.md "Precision"), and is only reported later;
#   validation after the last step (--eval-data, one global batch: runtime/executor/evaluate.cc on
#              the backend) within the loss's bound with TV_k grown by the last step's change, the
#              step the validation's parameters have taken beyond the last loss.
# The staged run's schedule is SCHEDULE (default 1f1b; zb-h1 runs the split backward on the GPU).
# usage: train_vs_cpu.sh PTDP WORKDIR MODE PREC LAYERS DROPOUT [SCHEDULE]
set -euo pipefail
ptdp=$1 work=$2 mode=$3 prec=$4 layers=$5 dropout=$6 schedule=${7:-1f1b}
here=$(cd "$(dirname "$0")" && pwd)
plans="$here/../runtime/write_plan.sh"
steps=3
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
. "$here/../mpi_session.sh"
# bf16 attention on kernels/cuda, whose dropout masks are the CPU's, unless the caller sets
# PTDP_ATTENTION=cudnn (then with DROPOUT 0 only: cuDNN draws its own masks).
export PTDP_ATTENTION=${PTDP_ATTENTION:-reference}
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text="$here/CMakeLists.txt"
[ -f "$work/data.bin" ] || { "$ptdp" tokenize --in "$text" --out "$work/data.tmp.$$" &&
  mv -f "$work/data.tmp.$$" "$work/data.bin"; }
# PTDP_TEST_EP (expert parallelism) applies to the distopt mode's run alone: the one-process
# reference has a single data rank.
run_ep=${PTDP_TEST_EP:-1}
unset PTDP_TEST_EP
ep_tag=""
[ "$run_ep" = 1 ] || ep_tag=_ep$run_ep
# PTDP_TEST_RECOMPUTE (default none) into layout.recompute, with write_plan.sh's
# PTDP_TEST_RECOMPUTE_MODULES under selective.
recompute=${PTDP_TEST_RECOMPUTE:-none}
name=cuda_${mode}_${prec}_${schedule}${PTDP_TEST_ARCH:+_$PTDP_TEST_ARCH}$ep_tag
name=$name${PTDP_TEST_RECOMPUTE_MODULES:+_${PTDP_TEST_RECOMPUTE_MODULES//+/_}}
write_plan() {  # plan-name tp pp [schedule [dp]]
  local dp=${5:-1}
  "$plans" "$ptdp" "$work/$1.plan.json" "$layers" "$dropout" 256 16 "$2" "$3" "$dp" $((4 / dp)) 1 \
    "${4:-1f1b}" "$recompute" true "$prec"
}
train() {  # plan-name tp pp backend np [schedule [dp]]
  write_plan "$1" "$2" "$3" "${6:-1f1b}" "${7:-1}"
  timeout 300 mpirun -np "$5" --oversubscribe "$ptdp" train --plan "$work/$1.plan.json" \
    --data "$work/data.bin" --steps $steps --backend "$4" --log "$work/$1.jsonl" \
    --eval-data "$work/data.bin" --eval-iters 1 2>&1
}
# Whether there is anything to test, asked of one process started without mpirun: the device is
# ptdp train's first check, so --steps 0 ends right after it. (Through mpirun a failed rank costs
# about 2 s of teardown, and ctest runs these tests one at a time on all its slots.) On a GPU the
# probe stops at --steps and the cuda run of one process below decides.
write_plan "${name}_one" 1 1
probe=$(timeout 60 "$ptdp" train --plan "$work/${name}_one.plan.json" --data "$work/data.bin" \
  --steps 0 --backend cuda 2>&1 || true)
if echo "$probe" | grep -q "no CUDA device is visible\|not available in this build"; then
  echo "SKIPPED: $(echo "$probe" | grep -o "backend.*" | head -1)"
  exit 0
fi
if ! out=$(train "${name}_one" 1 1 cuda 1); then
  if echo "$out" | grep -q "no CUDA device is visible\|not available in this build"; then
    echo "SKIPPED: $(echo "$out" | grep -o "backend.*" | head -1)"
    exit 0
  fi
  echo "$out"; echo "FAIL: the cuda run failed"; exit 1
fi
if [ "$mode" = single ]; then
  out=$(train "${name}_ref" 1 1 cpu 1) || { echo "$out"; echo "FAIL: the cpu run failed"; exit 1; }
  run="${name}_one" ref="${name}_ref"
elif [ "$mode" = seqpar ]; then
  out=$(PTDP_TEST_SEQ_PARALLEL=true train "${name}_seqpar" 2 2 cuda 4 "$schedule") ||
    { echo "$out"; echo "FAIL: the sequence-parallel cuda run failed"; exit 1; }
  run="${name}_seqpar" ref="${name}_one"
elif [ "$mode" = cp ]; then
  out=$(PTDP_TEST_CP=2 PTDP_TEST_FUSED_ATTENTION=true train "${name}_cp" 1 2 cuda 4 "$schedule") ||
    { echo "$out"; echo "FAIL: the context-parallel cuda run failed"; exit 1; }
  run="${name}_cp" ref="${name}_one"
elif [ "$mode" = distopt ]; then
  out=$(PTDP_TEST_DIST_OPT=true PTDP_TEST_EP=$run_ep train "${name}_distopt" 1 2 cuda 4 "$schedule" 2) ||
    { echo "$out"; echo "FAIL: the distributed-optimizer cuda run failed"; exit 1; }
  run="${name}_distopt" ref="${name}_one"
else
  out=$(train "${name}_staged" 2 2 cuda 4 "$schedule") ||
    { echo "$out"; echo "FAIL: the 4-rank cuda run failed"; exit 1; }
  run="${name}_staged" ref="${name}_one"
fi
field() { grep -o "\"$2\":[^,}]*" "$work/$1.jsonl" | cut -d: -f2; }
case "$prec" in bf16) u=0.00390625 ;; fp32) u=0.0000152587890625 ;; *) echo "bad precision"; exit 1 ;; esac
paste -d' ' <(field "$run" loss) <(field "$ref" loss) <(field "$run" grad_norm) <(field "$ref" grad_norm) |
  awk -v u="$u" -v l="$layers" -v tokens=$((16 * 32)) -v steps=$steps '
    NF == 4 {
      k = NR; run = $1; ref = $2
      if (k > 1) tv += (ref > prev ? ref - prev : prev - ref)
      prev = ref
      bound = 2 * u * (tv / ref + 1 / sqrt(tokens))
      d = (run > ref ? run - ref : ref - run) / ref
      gd = ($3 > $4 ? $3 - $4 : $4 - $3) / $4
      printf "step %d: loss %.6f vs %.6f (rel %.2e, bound %.2e); grad norm %.6f vs %.6f (rel %.2e)\n", k, run, ref, d, bound, $3, $4, gd
      if (d > bound) { print "FAIL: loss over its bound"; bad = 1 }
      if (k == 1 && gd > (4 * l + 2) * u) { printf "FAIL: step-1 grad norm over %.2e\n", (4 * l + 2) * u; bad = 1 }
    }
    END { if (k != steps) { print "FAIL: " k " steps compared"; exit 1 } exit bad }'
paste -d' ' <(field "$run" eval_loss) <(field "$ref" eval_loss) <(field "$ref" loss | tr '\n' ' ') |
  awk -v u="$u" -v tokens=$((16 * 32)) -v steps=$steps '
    { run = $1; ref = $2
      for (i = 4; i < 3 + steps; ++i) tv += ($i > $(i - 1) ? $i - $(i - 1) : $(i - 1) - $i)
      tv += ($(2 + steps) > $(1 + steps) ? $(2 + steps) - $(1 + steps) : $(1 + steps) - $(2 + steps))
      bound = 2 * u * (tv / ref + 1 / sqrt(tokens))
      d = (run > ref ? run - ref : ref - run) / ref
      printf "validation after step %d: loss %.6f vs %.6f (rel %.2e, bound %.2e)\n", steps, run, ref, d, bound
      n++; if (!(d <= bound)) bad = 1 }
    END { if (n != 1) { print "FAIL: " n + 0 " validations compared, want 1"; exit 1 }
          if (bad) print "FAIL: validation loss over its bound"; exit bad }'
echo PASS
