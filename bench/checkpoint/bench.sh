#!/usr/bin/env bash
# Checkpoint save and load speed beside the disk's sequential write speed, measured in the same run
# (issue 12's benchmark; not part of make test). A wide, shallow GPT (2 layers, hidden 2048, GPT-2's
# vocabulary, seq 64) makes a checkpoint of about 2.4 GB (fp32 weights, Adam m and v) for little
# compute; it is saved and loaded by 1 rank and by 4 (t 2, p 2: four writers).
# usage: bench/checkpoint/bench.sh [PTDP] [WORKDIR] [switch]   (defaults: build/tools/ptdp,
# /tmp/ptdp-ckpt-bench; `switch`: the plan switch alone, its output beside the summary line)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ptdp=${1:-$root/build/tools/ptdp}
work=${2:-/tmp/ptdp-ckpt-bench}
only=${3:-all}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cat > wide.json <<'J'
{"name": "wide-2l", "layers": 2, "hidden": 2048, "heads": 16, "seq_len": 64, "vocab": 50257}
J
"$ptdp" tokenize --in "$root/README.md" --out tokens.bin > /dev/null
row() { printf '%-28s %10.1f %10.3f %10.3f\n' "$1" "$2" "$3" "$(python3 -c "print($2 * 1048576 / $3 / 1e9)")"; }
checkpoint_rows() {
printf '%-28s %10s %10s %10s\n' "what" "MiB" "seconds" "GB/s"
for layout in "1 1" "2 2"; do
  set -- $layout
  tp=$1 pp=$2 np=$(($1 * $2))
  "$ptdp" plan --model wide.json --cluster cpu --gpus "$np" --global-batch 1 \
    --fix "tp=$tp,pp=$pp,dp=1,mbs=1,recompute=none" --software ptdp --top 1 --out "plan$np.json" > /dev/null
  rm -rf "ck$np"
  mpirun -np "$np" "$ptdp" train --plan "plan$np.json" --data tokens.bin --steps 1 --save "ck$np" > "save$np.txt"
  read -r mib secs < <(sed -n 's/.*: \([0-9.]*\) MiB in \([0-9.]*\) s .*/\1 \2/p' "save$np.txt")
  row "save, $np rank(s)" "$mib" "$secs"
  sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true  # cold read where allowed
  mpirun -np "$np" "$ptdp" train --plan "plan$np.json" --data tokens.bin --steps 2 --save "ck$np" \
    --load latest > "load$np.txt"
  lsecs=$(sed -n 's/.*loaded and verified in \([0-9.]*\) s.*/\1/p' "load$np.txt")
  row "load + verify, $np rank(s)" "$mib" "$lsecs"
done
# The disk: the same bytes written sequentially and fsync'd, as a save does.
mib=${mib%.*}
t0=$(date +%s.%N)
dd if=/dev/zero of=disk.bin bs=1M count="$mib" conv=fsync status=none
t1=$(date +%s.%N)
row "disk: dd write + fsync" "$mib" "$(python3 -c "print($t1 - $t0)")"
rm -f disk.bin
}
[ "$only" = switch ] || checkpoint_rows
# The plan switch: the whole and rank 0's save, new-trainer and load seconds.
cat > small.json << 'J'
{"name": "gpt2-small-shape", "layers": 12, "hidden": 768, "heads": 12, "seq_len": 64, "vocab": 50257}
J
for sched in "1f1b 1" "gpipe 2"; do
  set -- $sched
  "$ptdp" plan --model small.json --cluster cpu --gpus 2 --global-batch 2 \
    --fix "tp=1,pp=2,dp=1,mbs=$2,schedule=$1,recompute=none" --software ptdp --top 1 \
    --out "switch-$1.json" > /dev/null
done
mpirun -np 2 "$ptdp" train --plan switch-1f1b.json --data tokens.bin --steps 2 \
  --switch-plan switch-gpipe.json --switch-at 1 > switch.txt
sed -n 's/.* in \([0-9.]*\) s; rank 0: save \([0-9.]*\), new trainer \([0-9.]*\), load \([0-9.]*\) s.*/plan switch, 2 ranks: \1 s (save \2, new trainer \3, load \4 s)/p' switch.txt
[ "$only" != switch ] || cat switch.txt
