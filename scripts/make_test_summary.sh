#!/usr/bin/env bash
# Run each step of `make test` (make targets, given as arguments) whatever the others did,
# then print one table: each step's result (pass, FAIL, skipped) and its seconds. Exits 1
# when a step failed, 130 when interrupted (Ctrl-C: the step running and those after it
# are listed as skipped), 0 otherwise.
#
#   scripts/make_test_summary.sh lint unit doctest notebooks browser docs wheel-check
#
# MAKE: the make command to run the steps with (the Makefile passes its own $(MAKE)).
# STOP_ON_FAILURE=1: skip the steps after the first failure (a quick "is it green?").
set -u

if [ "$#" -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  [ "$#" -eq 0 ] && exit 2 || exit 0
fi

make_cmd=${MAKE:-make}
steps=("$@")
results=()
seconds=()
stop=0
interrupted=0
trap 'interrupted=1' INT

for step in "${steps[@]}"; do
  if [ "$stop" = 1 ] || [ "$interrupted" = 1 ]; then
    results+=("skipped")
    seconds+=("-")
    continue
  fi
  echo "make test: running $step"
  start=$(date +%s)
  $make_cmd --no-print-directory "$step"
  rc=$?
  took=$(($(date +%s) - start))
  if [ "$interrupted" = 1 ]; then
    results+=("skipped")
    seconds+=("$took")
  elif [ "$rc" = 0 ]; then
    results+=("pass")
    seconds+=("$took")
  else
    results+=("FAIL")
    seconds+=("$took")
    [ "${STOP_ON_FAILURE:-0}" = 1 ] && stop=1
  fi
done

failed=0
skipped=0
echo
echo "make test: summary"
printf '  %-14s %-8s %8s\n' step result seconds
for i in "${!steps[@]}"; do
  printf '  %-14s %-8s %8s\n' "${steps[$i]}" "${results[$i]}" "${seconds[$i]}"
  [ "${results[$i]}" = FAIL ] && failed=$((failed + 1))
  [ "${results[$i]}" = skipped ] && skipped=$((skipped + 1))
done
passed=$((${#steps[@]} - failed - skipped))
echo "  $passed passed, $failed failed, $skipped skipped"

if [ "$interrupted" = 1 ]; then
  exit 130
fi
[ "$failed" = 0 ]
