#!/usr/bin/env bash
# Interleaved A/B runs of one sluice-perf scenario against two builds of sluice.
#
#   perf/ab.sh OLD_DIR NEW_DIR [PAIRS] [-- sluice-perf arguments]
#
# OLD_DIR and NEW_DIR each hold a `sluice` and a `sluice-perf` binary (copy them out of
# target/release after building each revision). Each pair runs the old build, then the
# new one, each against a fresh broker (its defaults, a fresh data directory, loopback
# ports) and a fresh channel name, so that the VM's slow and fast periods fall on both
# sides alike. Default scenario: the frame pump of perf/compare.sh. Prints one line per
# run (build, frames/s, msg/s, p99 µs, broker CPU s, generator CPU s) and the medians.
set -euo pipefail
old=${1:?usage: perf/ab.sh OLD_DIR NEW_DIR [PAIRS] [-- sluice-perf args]}
new=${2:?usage: perf/ab.sh OLD_DIR NEW_DIR [PAIRS] [-- sluice-perf args]}
shift 2
pairs=8
if [[ $# -gt 0 && $1 != -- ]]; then pairs=$1; shift; fi
[[ ${1:-} == -- ]] && shift
args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
    args=(frames --size 8 --credit 1048576 --count 5000000 --idle-end 3)
fi
case ${args[0]} in
    queues) pattern=queues ;;
    events-store) pattern=events-store ;;
    rpc) pattern=commands ;;
    *) pattern=events ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

run() {
    local dir=$1 label=$2 port admin data pid out
    port=$(free_port); admin=$(free_port); data=$(mktemp -d -p "$work")
    RUST_LOG=warn "$dir/sluice" --host 127.0.0.1 --port "$port" --tls-port 0 \
        --admin-addr "127.0.0.1:$admin" --data-dir "$data" >"$work/broker.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
    out="$work/$label-$RANDOM.json"
    "$dir/sluice-perf" "${args[@]}" --address "$pattern/ab-$RANDOM$RANDOM" \
        --url "amqp://127.0.0.1:$port" --broker-pid "$pid" --json >"$out" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    python3 - "$out" "$label" <<'PY'
import json, sys
path, label = sys.argv[1], sys.argv[2]
try:
    j = json.load(open(path))
except Exception:
    print(f"{label} failed"); sys.exit(0)
p99 = (j.get("latency") or {}).get("p99_us")
print(label, round(j.get("frames_per_s", 0)), round(j.get("msgs_per_s", 0)),
      "-" if p99 is None else round(p99, 1), j["cpu"]["broker_s"], round(j["cpu"]["generator_s"], 2))
PY
}

for _ in $(seq "$pairs"); do
    run "$old" old
    run "$new" new
done | tee "$work/lines"
python3 - "$work/lines" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.rstrip().endswith("failed")]
for label in ("old", "new"):
    r = [x for x in rows if x[0] == label]
    if r:
        print(f"median {label}: {statistics.median(float(x[1]) for x in r):,.0f} frames/s, "
              f"{statistics.median(float(x[2]) for x in r):,.0f} msg/s, "
              f"broker CPU {statistics.median(float(x[4]) for x in r):.2f} s ({len(r)} runs)")
PY
