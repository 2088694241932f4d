#!/usr/bin/env bash
# Bad input to `ptdp train` under mpirun: every case must end (within the timeout) with a non-zero
# exit, one error line from rank 0 naming the problem, and no rank left running.
# usage: bad_input.sh PTDP WORKDIR CASE
set -uo pipefail
ptdp=$1 work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
dir="$work/bad-$case"
mkdir -p "$dir"
printf 'the quick brown fox jumps over the lazy dog; %.0s' $(seq 40) > "$dir/text.txt"
"$ptdp" tokenize --in "$dir/text.txt" --out "$dir/data.bin" > /dev/null || exit 1
np=2 data="$dir/data.bin" extra=() expect=""
"$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 1f1b none true
case "$case" in
  world_size)  np=3; expect="plan: layout tp\*cp\*pp\*dp = 1\*1\*2\*1 = 2 ranks but the job has 3" ;;
  missing)     data="$dir/nope.bin"; expect="data file '.*nope.bin' cannot be opened" ;;
  truncated)   head -c 500 "$dir/data.bin" > "$dir/short.bin"; data="$dir/short.bin"
               expect="is truncated or corrupt" ;;
  vocab)       "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 100 8 1 2 1 1 1 1f1b none true
               expect="beyond the model's vocabulary of 100" ;;
  recompute_modules)  # selective recomputation of the MLP with a split backward (ZB-H1):
               # planned, not executed: a clear refusal
               PTDP_TEST_RECOMPUTE_MODULES=mlp "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 zb-h1 selective true
               grep -q '"recompute_modules": "mlp"' "$dir/plan.json" || { echo "FAIL: plan not written"; exit 1; }
               expect="plan: layout.recompute_modules: 'mlp' is not executed with the split backward of schedule 'zb-h1'" ;;
  param_gather)  # --overlap-param-gather without the distributed optimizer: nothing to gather
               extra=(--overlap-param-gather)
               expect="[-]-overlap-param-gather: needs layout.distributed_optimizer" ;;
  mtp)         # multi-token prediction with learned positions (the GPT's): planned, refused by name
               sed -i '0,/"dropout": 0.0/s//"dropout": 0.0, "mtp_layers": 1/' "$dir/plan.json"
               grep -q '"mtp_layers": 1' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="plan.model.mtp_layers: needs rotary position embeddings" ;;
  mla_split)   # multi-latent attention with a split backward (ZB-H1): planned, refused by name
               PTDP_TEST_ARCH=mla "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 zb-h1 none true
               grep -q '"mla_kv_lora": 20' "$dir/plan.json" || { echo "FAIL: plan not written"; exit 1; }
               expect="plan: layout.schedule: 'zb-h1' splits the backward, which this runtime does not run with multi-latent attention" ;;
  mla_v_dim)   # values wider than a query/key head (8 + 24): the padded attention cannot hold them
               PTDP_TEST_ARCH=mla "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 1f1b none true
               sed -i 's/"mla_v_dim": 16/"mla_v_dim": 40/' "$dir/plan.json"
               grep -q '"mla_v_dim": 40' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="plan.model.mla_v_dim: 40 is wider than a query/key head (head_dim [+] mla_rope_dim = 32)" ;;
  layernorm_1p)  # LayerNorm1P runs on LayerNorm; beside RMSNorm it is planned, refused by name
               sed -i '0,/"dropout": 0.0/s//"dropout": 0.0, "layernorm_1p": true, "rmsnorm": true/' "$dir/plan.json"
               grep -q '"layernorm_1p": true' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="plan.model.layernorm_1p: with rmsnorm is planned but not executed by this runtime" ;;
  moe_etp)     # experts split over fewer tensor ranks than the dense layers (etp 1 < tp 2):
               # planned, refused by name
               np=4
               PTDP_TEST_ARCH=moe PTDP_TEST_EP=2 PTDP_TEST_SEQ_PARALLEL=true \
                 "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 2 1 2 1 1 1f1b none true
               sed -i 's/"ep": 2,/"ep": 2, "etp": 1,/' "$dir/plan.json"
               grep -q '"etp": 1' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="plan: layout.etp: 1 is planned but not executed by this runtime, which splits each expert over the tensor group" ;;
  moe_a2a)     # Megatron-Core's combined 1F1B (ep 2, bf16): planned, refused by name
               PTDP_TEST_ARCH=moe PTDP_TEST_EP=2 \
                 "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 1 2 1 1 1f1b none true bf16
               sed -i 's/"ep": 2,/"ep": 2, "moe_a2a_overlap": true,/' "$dir/plan.json"
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="plan: layout.moe_a2a_overlap: the combined 1F1B is planned but not executed" ;;
  moe_shared_overlap)  # Megatron-Core's --moe-shared-expert-overlap (a shared expert): refused by name
               PTDP_TEST_ARCH=dsmoe \
                 "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 1 2 1 1 1f1b none true bf16
               sed -i 's/"precision": "bf16",/"precision": "bf16", "moe_shared_expert_overlap": true,/' "$dir/plan.json"
               grep -q '"moe_shared_expert_overlap": true' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="plan: layout.moe_shared_expert_overlap: the shared expert beside the dispatcher is planned but not executed" ;;
  program_size)   # the plan's Program must be its layout's: a message size edited by hand
               sed -i 's/"SA0.0>1:8192"/"SA0.0>1:4096"/' "$dir/plan.json"
               grep -q '"SA0.0>1:4096"' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: program: rank 0, instruction 1 is 'SA0>1:4096' but layout tp=1,pp=2,.* gives 'SA0>1:8192'" ;;
  program_order)  # two instructions of pipeline rank 1 swapped (its forward and backward of microbatch 0)
               sed -i '/"pp_rank": 1/,$ { s/"F0.0"/"@@"/; s/"B0.0"/"F0.0"/; s/"@@"/"B0.0"/ }' "$dir/plan.json"
               tr -d ' \n' < "$dir/plan.json" | grep -q '"pp_rank":1,"layers":\[2\],"instrs":\["RA0.0<0:8192","B0.0","F0.0"' \
                 || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: program: rank 1, instruction 1 is 'B0' but layout tp=1,pp=2,.* gives 'F0'" ;;
  split_backward)  # a zero-bubble Program (BI/W) under a 1F1B layout: not the layout's, refused
               sed -i 's/"kind": "1f1b"/"kind": "zb-h1"/; s/"B0.0"/"BI0.0"/' "$dir/plan.json"
               grep -q '"BI0.0"' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: program: header is '[^']*zb-h1[^']*' with 2 ranks but layout tp=1,pp=2,.* gives '[^']*1f1b" ;;
  program_layers)  # the layers a rank's Program states must be those its layout places there
               perl -0pi -e 's/("pp_rank": 1,\s*"layers": \[\s*)2/${1}3/' "$dir/plan.json"
               tr -d ' \n' < "$dir/plan.json" | grep -q '"pp_rank":1,"layers":\[3\]' \
                 || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: program: rank 1 states layers '3' but layout tp=1,pp=2,.* gives '2'" ;;
  fp16_no_fusion)  # the ledger's 16-bit gradients: this runtime keeps fp32 main gradients, refuses
               "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 1f1b none true fp16
               sed -i 's/"grad_accumulation_fusion": true/"grad_accumulation_fusion": false/' "$dir/plan.json"
               grep -q '"grad_accumulation_fusion": false' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: layout.grad_accumulation_fusion: fp16 without it keeps 16-bit gradients" ;;
  bf16_grads)  # bf16 gradients (--grad-reduce-in-bf16) planned: this runtime keeps fp32 main gradients
               "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 1f1b none true bf16
               sed -i 's/"fused_attention": false/"fused_attention": false, "grad_reduce_bf16": true/' "$dir/plan.json"
               grep -q '"grad_reduce_bf16": true' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: layout.grad_reduce_bf16: planned but not executed by this runtime" ;;
  bf16_state)  # 16-bit optimizer state (--use-precision-aware-optimizer) planned: refused
               PTDP_TEST_DIST_OPT=true "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 1 2 1 1 1f1b none true bf16
               sed -i 's/"fused_attention": false/"fused_attention": false, "optimizer_state_bf16": true/' "$dir/plan.json"
               grep -q '"optimizer_state_bf16": true' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: layout.optimizer_state_bf16: planned but not executed by this runtime" ;;
  fsdp)        # full sharding (ZeRO-3) planned: this runtime holds its stage's weights whole
               PTDP_TEST_DIST_OPT=true "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 1 2 1 1 1f1b none true
               sed -i 's/"fused_attention": false/"fused_attention": false, "fsdp": true/' "$dir/plan.json"
               grep -q '"fsdp": true' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: layout.fsdp: planned but not executed by this runtime" ;;
  optimizer_instances)  # the distributed optimizer in 2 instances of 1 rank: planned, refused
               PTDP_TEST_DIST_OPT=true "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 1 2 1 1 1f1b none true
               sed -i 's/"fused_attention": false/"fused_attention": false, "optimizer_instances": 2/' "$dir/plan.json"
               grep -q '"optimizer_instances": 2' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               expect="plan: layout.optimizer_instances: planned but not executed by this runtime" ;;
  context_parallel)  # 2 cp must divide the sequence (32): a plan of cp 3 (which ptdp schedule
               # refuses to complete, so it has no Program) is refused by name
               PTDP_TEST_CP=3 PTDP_TEST_FUSED_ATTENTION=true \
                 "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 1f1b none true \
                 2> /dev/null
               grep -q '"cp": 3' "$dir/plan.json" || { echo "FAIL: plan not written"; exit 1; }
               np=6
               expect="plan.layout: cp: 3 needs seq_len 32 divisible by 2 cp = 6" ;;
  fp8)         # FP8 planned (ptdp plan --precision fp8), refused by name: no FP8 GEMMs here
               "$here/write_plan.sh" "$ptdp" "$dir/plan.json" 4 0.0 256 8 1 2 1 1 1 1f1b none true fp8
               grep -q '"precision": "fp8"' "$dir/plan.json" || { echo "FAIL: plan not written"; exit 1; }
               expect="plan: layout.precision: 'fp8' is planned but not executed by this runtime" ;;
  backend_cuda)  # refused without CUDA or without a GPU; with a GPU the 1 MiB limit refuses it
               extra=(--backend cuda --memory-limit 1MiB)
               expect="backend: 'cuda' is not available in this build\|backend cuda: no CUDA device is visible\|model does not fit" ;;
  no_fit)      extra=(--memory-limit 1MiB); expect="model does not fit: pipeline rank 0 needs" ;;
  nan_loss)    # --expect-losses must fail a NaN loss (here from a learning rate of 1e30), which
               # compares false with every tolerance (it once passed as "difference 0")
               timeout 60 mpirun -np 2 --oversubscribe "$ptdp" train --plan "$dir/plan.json" \
                 --data "$data" --steps 2 --log "$dir/ref.jsonl" > /dev/null 2>&1 || exit 1
               extra=(--lr 1e30 --expect-losses "$dir/ref.jsonl")
               expect="step 2: loss -\?nan vs reference .* (relative inf over" ;;
  no_fit_profile)  # hidden 16384: 12.9 G parameters, 16 bytes each, over the cpu profile's 16 GiB
               sed -i 's/"hidden": 64,/"hidden": 16384,/; s/"heads": 4,/"heads": 128,/' "$dir/plan.json"
               grep -q '"heads": 128,' "$dir/plan.json" || { echo "FAIL: plan not edited"; exit 1; }
               "$ptdp" schedule --plan "$dir/plan.json" --out "$dir/plan.json" > /dev/null || exit 1
               expect="model does not fit: pipeline rank 0 needs .* (memory_GiB of the cluster profile 'cpu')" ;;
  dead_rank)   # a rank killed mid-training: mpirun must end the whole job, non-zero, no hang
               rm -f "$dir/log.jsonl" "$dir/out.txt"  # a previous run's log must not look like this one's
               timeout 90 mpirun -np 2 --oversubscribe "$ptdp" train --plan "$dir/plan.json" \
                 --data "$data" --steps 100000 --log "$dir/log.jsonl" > "$dir/out.txt" 2>&1 &
               job=$!
               for _ in $(seq 300); do [ -s "$dir/log.jsonl" ] && break; sleep 0.1; done
               victim=$(ps -eo pid=,ppid=,args= | awk -v dir="$dir" '$0 ~ dir"/plan.json" && $0 !~ /mpirun/ && $0 !~ /timeout/ {print $1}' | tail -n 1)
               [ -n "$victim" ] || { echo "FAIL: no rank process found"; kill "$job"; exit 1; }
               kill -9 "$victim"
               wait "$job"
               rc=$?
               cat "$dir/out.txt" | tail -n 5
               echo "exit code: $rc"
               [ "$rc" -ne 124 ] || { echo "FAIL: timed out (hang)"; exit 1; }
               [ "$rc" -ne 0 ] || { echo "FAIL: exit code 0"; exit 1; }
               echo PASS
               exit 0 ;;
  *) echo "unknown case $case"; exit 1 ;;
esac
out=$(timeout 60 mpirun -np "$np" --oversubscribe "$ptdp" train --plan "$dir/plan.json" \
      --data "$data" --steps 2 "${extra[@]}" 2>&1)
rc=$?
echo "$out"
echo "exit code: $rc"
[ "$rc" -ne 124 ] || { echo "FAIL: timed out (hang)"; exit 1; }
[ "$rc" -ne 0 ] || { echo "FAIL: exit code 0"; exit 1; }
echo "$out" | grep -q "$expect" || { echo "FAIL: no line matching '$expect'"; exit 1; }
n=$(echo "$out" | grep -c "ptdp train: error:")
[ "$n" -eq 1 ] || { echo "FAIL: $n error lines, want exactly 1 (rank 0)"; exit 1; }
echo PASS
