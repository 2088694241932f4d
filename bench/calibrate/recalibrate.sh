# Sourced by gelu_split.sh and opt_split.sh: for each profile VARIANT.json in the current folder,
# calibrate on A's trace, simulate A, B1 and B2 from the calibrated profile, compare each with its
# measured trace, and print the figures (figures.py).
# usage: recalibrate_variants PTDP FIGURES_DIR VARIANT...
recalibrate_variants() {
  local ptdp=$1 here=$2 v n
  shift 2
  for v in "$@"; do
    "$ptdp" calibrate --plan A.json --measured A.measured.json --profile "$v.json" \
      --out "cal.$v.json" > "cal.$v.txt"
    for n in A B1 B2; do
      "$ptdp" simulate --plan "$n.json" --profile "cal.$v.json" --trace "$n.$v.json" > /dev/null
      "$ptdp" compare --predicted "$n.$v.json" --measured "$n.measured.json" --top 0 \
        > "$n.cmp.$v.txt"
    done
    python3 "$here/figures.py" . "$v"
  done
}
