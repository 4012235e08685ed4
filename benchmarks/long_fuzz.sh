#!/usr/bin/env bash
# The long local fuzz of tests/test_random_nests.py on every core: worker w runs seeds
# w*1000 + BASE + 1, w*1000 + BASE + 2, ... (PER nests each) until DEADLINE seconds have passed,
# and keeps the log of every seed that fails (rc 124: cut off at the deadline, not a failure).
# A compile taking more than MAX_COMPILE_S (default 10) seconds of CPU time fails its seed.
#
#   PROCS=16 PER=40 DEADLINE=480 BASE=0 OUT=fuzz-logs benchmarks/long_fuzz.sh
#
# docs/architecture.md ("Testing") records the runs made with it.
set -u
cd "$(dirname "$0")/.."
procs=${PROCS:-$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")}
per=${PER:-40}; base=${BASE:-0}; out=${OUT:-fuzz-logs}
end=$((SECONDS + ${DEADLINE:-480}))
mkdir -p "$out"
export POLYOPT_CACHE=0 OMP_NUM_THREADS=2 POLYOPT_FUZZ_MAX_COMPILE_S=${MAX_COMPILE_S:-10}
worker() {
  local w=$1 r=$base s rc
  while [ $SECONDS -lt $end ]; do
    r=$((r + 1)); s=$((w * 1000 + r))
    POLYOPT_FUZZ_EXAMPLES=$per POLYOPT_FUZZ_SEED=$s timeout $((end - SECONDS + 5)) \
      python3 -m pytest -q -x -p no:cacheprovider tests/test_random_nests.py -k match_the_interpreter \
      > "$out/seed_$s.log" 2>&1
    rc=$?
    echo "$s rc=$rc" >> "$out/worker_$w.txt"
    [ $rc -eq 0 ] && rm -f "$out/seed_$s.log"
  done
}
for w in $(seq 1 "$procs"); do worker "$w" & done
wait
cat "$out"/worker_*.txt | awk '{print $2}' | sort | uniq -c
echo "nests passed: $(( $(cat "$out"/worker_*.txt | grep -c 'rc=0$') * per ))"
