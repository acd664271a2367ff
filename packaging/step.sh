#!/usr/bin/env bash
# One step of `make`'s set-up, shown as one line: the step's own output (apt's progress and debconf lines, pip's
# downloads) goes to a log; the terminal sees the step's name, then its time, or on failure the step's tail.
# On a terminal the line also shows the log's latest line while the step runs, so a long download still moves.
#   usage: packaging/step.sh "what the step does" command [args ...]
# The log is $NALAR_SETUP_LOG (build/setup.log by default), appended to, so an earlier step's lines stay.
set -uo pipefail

what=$1
shift
log=${NALAR_SETUP_LOG:-build/setup.log}
case "$log" in */*) mkdir -p "${log%/*}" ;; esac
printf '=== %(%Y-%m-%dT%H:%M:%S)T  %s: %s\n' -1 "$what" "$*" >> "$log"
offset=$(wc -c < "$log")
start=$SECONDS

"$@" >> "$log" 2>&1 &
child=$!
trap 'kill "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 130' INT TERM
if [ -t 1 ]; then
  width=$(( $(tput cols 2>/dev/null || echo 100) - 1 ))
  while kill -0 "$child" 2>/dev/null; do
    latest=$(tail -c +"$((offset + 1))" "$log" 2>/dev/null | tr '\r' '\n' | grep -v '^[[:space:]]*$' | tail -n 1)
    line="nalar: $what… ${latest}"
    printf '\r\033[K%s' "${line:0:$width}"
    sleep 2 & wait $!
  done
  printf '\r\033[K'
else
  echo "nalar: $what…"
fi
wait "$child"
status=$?
trap - INT TERM

if [ "$status" -ne 0 ]; then
  echo "nalar: $what: failed (exit $status). The step's last lines (all of it in $log):" >&2
  tail -c +"$((offset + 1))" "$log" | tail -n 40 >&2
  exit "$status"
fi
echo "nalar: $what: done ($((SECONDS - start)) s)"
