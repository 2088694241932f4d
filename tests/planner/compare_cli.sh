#!/usr/bin/env bash
# ptdp compare from the command line: a pp = 4 plan simulated as predicted and as the ideal
# schedule (same Program, other costs) matches every instruction, prints its tables, writes an SVG
# that parses as XML with both charts; a trace of another layout and a corrupt trace are refused
# with exit 2 naming the flag.
# usage: compare_cli.sh PTDP WORKDIR
set -euo pipefail
ptdp=$1 work=$2/compare_cli
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$ptdp" plan --model tiny --cluster cpu --gpus 4 --global-batch 8 \
  --fix tp=1,pp=4,dp=1,mbs=1,recompute=none,schedule=1f1b --top 1 --out p4.json > /dev/null
"$ptdp" plan --model tiny --cluster cpu --gpus 2 --global-batch 8 \
  --fix tp=1,pp=2,dp=1,mbs=1,recompute=none,schedule=1f1b --top 1 --out p2.json > /dev/null
"$ptdp" simulate --plan p4.json --trace pred.json > /dev/null
"$ptdp" simulate --plan p4.json --ideal --trace ideal.json > /dev/null
"$ptdp" simulate --plan p2.json --trace other.json > /dev/null
"$ptdp" compare --predicted pred.json --measured ideal.json --svg both.svg --top 3 > out.txt
grep -q "instructions: [1-9][0-9]* matched, 0 only predicted, 0 only measured" out.txt || { cat out.txt; exit 1; }
grep -q "^3 *backward" out.txt || { cat out.txt; exit 1; }
python3 -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); n = sum(1 for e in r.iter() if e.tag.endswith("svg")); sys.exit(0 if n == 3 else print("svg elements:", n) or 1)' both.svg
rc=0; "$ptdp" compare --predicted pred.json --measured other.json > bad1.txt 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "different layouts" bad1.txt || { echo "layout mismatch: rc $rc"; cat bad1.txt; exit 1; }
head -c 100 ideal.json > cut.json
rc=0; "$ptdp" compare --predicted pred.json --measured cut.json > bad2.txt 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "^ptdp compare: error: --measured: cut.json" bad2.txt || { echo "corrupt trace: rc $rc"; cat bad2.txt; exit 1; }
[ "$(wc -l < bad2.txt)" = 1 ] || { echo "not one line:"; cat bad2.txt; exit 1; }
echo "compare: $(grep -c . out.txt) lines, svg ok, bad traces refused"
