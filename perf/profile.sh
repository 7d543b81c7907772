#!/usr/bin/env bash
# Profile a running broker while sluice-perf drives it: perf record (cpu-clock, DWARF call
# graphs) on the broker's pid for the duration of one sluice-perf run, then the top
# functions by self time, and a flamegraph when inferno is installed.
#
# usage: perf/profile.sh PID OUT_PREFIX -- SLUICE-PERF-ARGS...
#   e.g. perf/profile.sh $(pgrep -n sluice) /tmp/events -- events --url amqp://127.0.0.1:5673 --count 5M
# writes OUT_PREFIX.data (perf), OUT_PREFIX.txt (sluice-perf report + top functions),
#        OUT_PREFIX.folded and OUT_PREFIX.svg (with inferno: cargo install inferno)
set -euo pipefail
[ $# -ge 3 ] && [ "$2" != -- ] && [ "$3" = -- ] || { sed -n '2,10p' "$0"; exit 2; }
PID=$1 OUT=$2; shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PERF_BIN=${PERF_BIN:-$ROOT/target/release/sluice-perf}
FREQ=${FREQ:-1000}

perf record -e cpu-clock -F "$FREQ" --call-graph dwarf,16384 -p "$PID" -o "$OUT.data" 2>"$OUT.record.log" &
REC=$!
sleep 0.5
"$PERF_BIN" "$@" --broker-pid "$PID" >"$OUT.txt" || true
kill -INT "$REC" 2>/dev/null || true
wait "$REC" || true
set +e   # reporting below is best effort
{
    echo
    echo "== broker: self time by function (perf report --no-children)"
    perf report -i "$OUT.data" --no-children --percent-limit 0.7 --stdio --no-call-graph 2>&1 | grep -E '^ +[0-9]|rror'
    echo
    echo "== broker: inclusive time (perf report --children), sluice frames"
    perf report -i "$OUT.data" --children --percent-limit 3 --stdio --no-call-graph 2>/dev/null \
        | grep -E '^ +[0-9]' | grep -E 'sluice|glommio|kernel' | grep -v -E 'std::|core::|scoped_tls|clone3|start_thread' | head -60
} >>"$OUT.txt"
if command -v inferno-collapse-perf >/dev/null; then
    perf script -i "$OUT.data" 2>/dev/null | inferno-collapse-perf >"$OUT.folded"
    inferno-flamegraph --title "$*" <"$OUT.folded" >"$OUT.svg"
fi
cat "$OUT.txt"
