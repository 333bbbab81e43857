#!/bin/bash
# Usage: h5md_campaign.sh TARGET SECONDS OUTDIR
# Runs one target of benchmarks/fuzz_targets/h5md.py for SECONDS, restarting after a crash
# (libFuzzer stops at the first one) until the time is spent; Python exceptions other than
# trajscale's errors are kept in OUTDIR/findings, crashes as OUTDIR/crash-*.
set -u
target=$1; total=$2; out=$3
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/corpus" "$out/findings"
end=$(( $(date +%s) + total ))
runs=0
while [ "$(date +%s)" -lt "$end" ]; do
  left=$(( end - $(date +%s) ))
  runs=$((runs + 1))
  TRAJSCALE_FUZZ_FINDINGS="$out/findings" python "$here/benchmarks/fuzz_targets/h5md.py" --target "$target" \
    --seconds "$left" --corpus "$out/corpus" -artifact_prefix="$out/" >> "$out/log.txt" 2>&1
  echo "run $runs exit $?" >> "$out/runs.txt"
done
