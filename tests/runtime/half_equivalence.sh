#!/usr/bin/env bash
# 16-bit (bf16 / fp16) equivalence of one layout: per-step losses against the single-process run of
# the SAME precision and against the fp32 single-process run, within bounds derived from the unit
# roundoff u (2^-8 bf16, 2^-11 fp16); measured peak memory within 1% of the ledger.
#
# The bounds (docs/runtime.md "Precision"), for step k with the reference's losses L_1..L_k:
#   same precision:  |L'_k - L_k| / L_k <= 2u (TV_k / L_k + 1 / sqrt(B s))
#   against fp32:    |L'_k - F_k| / F_k <= R u (TV_k / L_k + 1 / sqrt(B s)),  R = 4 l + 2
# where TV_k = sum_{j<k} |L_{j+1} - L_j| (the loss's total variation so far) and B s the tokens of
# a step. Why: the layout rounds at the same points as one process and differs only in summation
# order (tensor-parallel partial sums rounded before the all-reduce, GEMM blocking over other
# microbatch sizes, data-parallel fp32 sums), which moves a rounded value by at most one ulp (2u).
# At step 1 the parameters are equal, so only the forward's ulp flips count; they are independent
# over the B s tokens whose mean the loss is: 2u / sqrt(B s). Each AdamW step moves along a
# normalised direction, so a 2u relative perturbation of the gradients changes that step's loss
# decrease by at most 2u of it; summed over the steps: 2u TV_k. Against fp32 the 16-bit run's values
# carry up to R roundings of u each on a token's path through l layers (LayerNorm output, the two
# branch outputs and the two residual sums per layer; the embedding and the final LayerNorm), hence
# R u in place of 2u.
# 10 steps, where the fp32 runs take 20: a layout's or a precision's fault shows from the first
# steps (a wrong sum or scale moves the loss by far more than these bounds at once), and the 16-bit
# runs of every layout were a third of the runtime tests' time (2026-11-30, side by side on this
# 2-core machine: six of these runs, bf16 and fp16 of three layouts, 8.0 s at 20 steps, 4.8 s at 10).
# PTDP_TEST_MEMORY_TOL (default 0.01) is --memory-tol; -1 leaves memory unchecked: the expert-
# parallel layouts (*_epN*), whose experts' token counts, and so memory, depend on the routing.
# usage: half_equivalence.sh PTDP WORKDIR PREC REF_NAME FP32_REF_NAME NAME LAYERS DROPOUT TP PP DP MBS VP SCHED RECOMPUTE SG [extra]
set -euo pipefail
ptdp=$1 work=$2 prec=$3 ref=$4 fref=$5 name=$6 layers=$7 dropout=$8 tp=$9 pp=${10} dp=${11}
mbs=${12} vp=${13} sched=${14} rec=${15} sg=${16}
shift 16
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
"$here/write_plan.sh" "$ptdp" "$work/$name.plan.json" "$layers" "$dropout" 256 16 "$tp" "$pp" "$dp" "$mbs" \
  "$vp" "$sched" "$rec" "$sg" "$prec"
np=$((tp * pp * dp * ${PTDP_TEST_CP:-1}))
# The first 10 of the fp32 reference's 20 steps: its learning-rate schedule (--decay-steps 20), as
# the 16-bit references' (reference.sh).
steps=10
timeout 300 mpirun -np "$np" --oversubscribe "$ptdp" train --plan "$work/$name.plan.json" \
  --data "$work/data.bin" --steps "$steps" --decay-steps 20 --log "$work/$name.jsonl" \
  --memory-tol "${PTDP_TEST_MEMORY_TOL:-0.01}" "$@"
case "$prec" in
  bf16) u=0.00390625 ;;   # 2^-8
  fp16) u=0.00048828125 ;; # 2^-11
  *) echo "unknown precision $prec"; exit 1 ;;
esac
losses() { grep -o '"loss":[^,}]*' "$1" | cut -d: -f2; }
paste -d' ' <(losses "$work/$name.jsonl") <(losses "$work/$ref.jsonl") <(losses "$work/$fref.jsonl") |
  awk -v u="$u" -v l="$layers" -v tokens=$((16 * 32)) -v steps="$steps" '
    NF == 3 {
      k = NR; run = $1; ref = $2; f32 = $3
      if (k > 1) tv += (ref > prev ? ref - prev : prev - ref)
      prev = ref
      shape = tv / ref + 1 / sqrt(tokens)
      same_bound = 2 * u * shape; f32_bound = (4 * l + 2) * u * shape
      same = (run > ref ? run - ref : ref - run) / ref
      vs32 = (run > f32 ? run - f32 : f32 - run) / f32
      if (same > worst_same) worst_same = same
      if (vs32 > worst_f32) worst_f32 = vs32
      if (same / same_bound > worst_ratio) worst_ratio = same / same_bound
      if (same > same_bound) { printf "FAIL step %d: %.3e from the %s reference over %.3e\n", k, same, "same-precision", same_bound; bad = 1 }
      if (vs32 > f32_bound) { printf "FAIL step %d: %.3e from the fp32 reference over %.3e\n", k, vs32, f32_bound; bad = 1 }
    }
    END {
      if (k != steps) { print "FAIL: " k " steps compared, want " steps; exit 1 }
      printf "losses: max relative difference %.3e vs the same precision (worst fraction of its bound %.3f), %.3e vs fp32\n", worst_same, worst_ratio, worst_f32
      exit bad
    }'
echo PASS
