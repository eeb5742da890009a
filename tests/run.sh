#!/usr/bin/env bash
# Runs each test program (cmocka), shows its output, then one closing line
# "N passed, N failed, N skipped" that adds up the test cases of every
# program (skipped: the GPU tests on a machine without one).
# A program that exits non-zero without a cmocka summary counts as one failure.
set -u
pass=0; fail=0; skip=0; failed=""
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in "$@"; do
    name=$(basename "$(dirname "$(dirname "$t")")")/$(basename "$t")
    echo "=== $name"
    start=$(date +%s)
    "$t" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    # a program may run several cmocka groups: add up their summaries
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s += $1} END {if (NR) print s}')
    k=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); skip=$((skip + ${k:-0}))
    if [ "$rc" != 0 ]; then
        failed="$failed $name"
        [ -z "$f" ] && fail=$((fail + 1))
    fi
    echo "--- $name: rc=$rc, $(( $(date +%s) - start ))s"
done
[ -n "$failed" ] && echo "failing programs:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ -z "$failed" ]
