#!/usr/bin/env bash
# sluice vs RabbitMQ, side by side: builds sluice and sluice-perf (release), starts
# sluice and a private RabbitMQ node (rabbitmq_amqp1_0) on loopback, runs the same
# scenarios (same sizes, counts, credit, client) against both, plus an independent
# client (rhea) on the events scenario, stops both brokers and rewrites the section
# between <!-- compare:begin --> and <!-- compare:end --> in perf/RESULTS.md.
#
# usage: perf/compare.sh            (about 6-8 minutes on 2 cores)
#   SCALE=0.2 perf/compare.sh       smaller counts (quick check)
#   RABBIT_TIMEOUT=30               cap, in seconds, of each RabbitMQ run (it is ~100x slower)
#   SLUICE_REPEAT=3                 sluice runs per scenario (the median counts; they are short
#                                   and the shared machine is noisy); RabbitMQ runs once (capped)
#   SLUICE_SHARDS=1                 passed to sluice (default: one shard per core)
#   KEEP=1                          keep the work directory (raw JSON, logs)
#   SOURCE=head                     measure HEAD (built in a clean snapshot) instead of the
#                                   working tree; also the fallback when the working tree
#                                   does not build
#
# Installs Debian's rabbitmq-server when missing (apt-get) and enables rabbitmq_amqp1_0.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export ROOT
cd "$ROOT"
SCALE=${SCALE:-1}
RABBIT_TIMEOUT=${RABBIT_TIMEOUT:-30}
SLUICE_REPEAT=${SLUICE_REPEAT:-3}
RESULTS=${RESULTS:-$ROOT/perf/RESULTS.md}
WORK=$(mktemp -d /tmp/sluice-compare.XXXXXX)
chmod 755 "$WORK"
START_TS=$(date +%s)

log() { printf '[compare %4ss] %s\n' "$(( $(date +%s) - START_TS ))" "$*" >&2; }
n() { python3 -c "import sys; print(int(float(sys.argv[1]) * float(sys.argv[2])))" "$1" "$SCALE"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { # host port seconds
    for _ in $(seq 1 $(( $3 * 10 ))); do
        if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

SLUICE_PID=""
RABBIT_NODE=""
cleanup() {
    set +e
    if [ -n "$SLUICE_PID" ] && kill -0 "$SLUICE_PID" 2>/dev/null; then
        kill -TERM "$SLUICE_PID"; wait "$SLUICE_PID" 2>/dev/null
    fi
    if [ -n "$RABBIT_NODE" ]; then
        rabbitmqctl -q -n "$RABBIT_NODE" stop >/dev/null 2>&1
    fi
    if [ -d "$WORK/head" ]; then git -C "$ROOT" worktree remove --force "$WORK/head"; fi
    if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
}
trap cleanup EXIT

# ------------------------------------------------------------------ build
# The working tree is measured when it builds. Otherwise (someone is in the middle of
# an edit) HEAD is built from a clean snapshot in its own target directory.
SOURCE=${SOURCE:-worktree}
if [ "$SOURCE" = worktree ]; then
    log "building sluice and sluice-perf (release) from the working tree"
    if cargo build --release -p sluice -p sluice-perf >&2; then
        BIN=target/release
        SOURCE_DESC="working tree"
    else
        log "the working tree does not build: measuring HEAD instead"
        SOURCE=head
    fi
fi
if [ "$SOURCE" = head ]; then
    log "building HEAD ($(git rev-parse --short HEAD)) in a clean snapshot (target/compare)"
    git worktree add --detach "$WORK/head" HEAD >&2
    (cd "$WORK/head" && CARGO_TARGET_DIR="$ROOT/target/compare" cargo build --release -p sluice -p sluice-perf >&2)
    git worktree remove --force "$WORK/head" >&2
    BIN=target/compare/release
    SOURCE_DESC="HEAD snapshot"
fi
# Private copies: other builds may replace the binaries while we run.
cp "$BIN/sluice" "$BIN/sluice-perf" "$WORK/"
PERF="$WORK/sluice-perf"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# ------------------------------------------------------------------ RabbitMQ
if ! command -v rabbitmq-server >/dev/null 2>&1; then
    log "installing rabbitmq-server (apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >&2
fi
rabbitmq-plugins enable --offline rabbitmq_amqp1_0 >/dev/null 2>&1 || rabbitmq-plugins enable rabbitmq_amqp1_0 >&2
RABBIT_PORT=$(free_port)
RABBIT_DIST=$(free_port)
RABBIT_NODE=""
RABBIT_URL="amqp://guest:guest@127.0.0.1:$RABBIT_PORT"
RABBIT_STARTS=0
mkdir -p "$WORK/rabbit/log"
chown -R rabbitmq:rabbitmq "$WORK/rabbit" 2>/dev/null || true

# A fresh RabbitMQ node (empty Mnesia directory) per scenario: a run that hits the cap
# leaves a backlog whose clean-up and memory alarms would slow down the next one.
start_rabbit() {
    RABBIT_STARTS=$(( RABBIT_STARTS + 1 ))
    RABBIT_NODE="sluiceperf$$-$RABBIT_STARTS@localhost"
    local env=(HOME=/var/lib/rabbitmq RABBITMQ_NODENAME="$RABBIT_NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
               RABBITMQ_NODE_PORT="$RABBIT_PORT" RABBITMQ_DIST_PORT="$RABBIT_DIST"
               RABBITMQ_MNESIA_BASE="$WORK/rabbit/mnesia-$RABBIT_STARTS" RABBITMQ_LOG_BASE="$WORK/rabbit/log"
               RABBITMQ_PID_FILE="$WORK/rabbit/pid")
    if command -v setpriv >/dev/null && id rabbitmq >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        # setpriv keeps our open-files limit (the wrapper's `su` resets it to 1024,
        # which caps RabbitMQ at ~830 connections).
        (cd /var/lib/rabbitmq && setpriv --reuid rabbitmq --regid rabbitmq --init-groups \
            env "${env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server -detached) >&2
    else
        env "${env[@]}" rabbitmq-server -detached >&2
    fi
    rabbitmqctl -q -n "$RABBIT_NODE" wait --timeout 60 "$WORK/rabbit/pid" >&2
    wait_port 127.0.0.1 "$RABBIT_PORT" 60 || { log "RabbitMQ did not open its port"; exit 1; }
    RABBIT_PID=$(cat "$WORK/rabbit/pid")
}
stop_rabbit() {
    if [ -n "$RABBIT_NODE" ]; then
        rabbitmqctl -q -n "$RABBIT_NODE" stop >/dev/null 2>&1 || true
        # `rabbitmqctl stop` returns while the Erlang VM is still shutting down (2.5 s
        # measured here); a sluice run started then would share the cores with it.
        local i
        for i in $(seq 1 300); do kill -0 "$RABBIT_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$RABBIT_PID" 2>/dev/null || true
        RABBIT_NODE=""
    fi
    rm -rf "$WORK/rabbit/mnesia-$RABBIT_STARTS"
}

# ------------------------------------------------------------------ sluice
SLUICE_PORT=$(free_port)
SLUICE_ADMIN=$(free_port)
SLUICE_URL="amqp://127.0.0.1:$SLUICE_PORT"
SLUICE_ARGS=(--host 127.0.0.1 --port "$SLUICE_PORT" --tls-port 0 --admin-addr "127.0.0.1:$SLUICE_ADMIN"
             --data-dir "$WORK/sluice-data" --max-connections 20000)
[ -n "${SLUICE_SHARDS:-}" ] && SLUICE_ARGS+=(--shards "$SLUICE_SHARDS")
# Arguments added for one scenario (e.g. in-memory queues).
SLUICE_EXTRA=()
# A fresh sluice per scenario too, for symmetry.
start_sluice() {
    stop_sluice
    rm -rf "$WORK/sluice-data"
    RUST_LOG=warn "$WORK/sluice" "${SLUICE_ARGS[@]}" "${SLUICE_EXTRA[@]}" >>"$WORK/sluice.log" 2>&1 &
    SLUICE_PID=$!
    wait_port 127.0.0.1 "$SLUICE_PORT" 30 || { log "sluice did not open its port"; cat "$WORK/sluice.log" >&2; exit 1; }
}
stop_sluice() {
    if [ -n "$SLUICE_PID" ]; then
        kill -TERM "$SLUICE_PID" 2>/dev/null || true
        wait "$SLUICE_PID" 2>/dev/null || true
        SLUICE_PID=""
    fi
}

log "RabbitMQ nodes on 127.0.0.1:$RABBIT_PORT, sluice on 127.0.0.1:$SLUICE_PORT (restarted for each scenario)"
start_rabbit
RABBIT_VERSION=$(rabbitmqctl -q -n "$RABBIT_NODE" version 2>/dev/null || echo "?")

# ------------------------------------------------------------------ runs
mkdir -p "$WORK/out"
LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)

# run NAME BROKER(sluice|rabbit) ARGS...: one sluice-perf run, JSON saved as out/NAME.BROKER.json
run() {
    local name=$1 broker=$2; shift 2
    local url extra=() reps=1 i
    if [ "$broker" = sluice ]; then url=$SLUICE_URL; else
        url=$RABBIT_URL; extra=(--timeout "${RUN_TIMEOUT:-$RABBIT_TIMEOUT}"); fi
    if [ "$broker" = sluice ] && [ "$name" != idle ]; then reps=$SLUICE_REPEAT; fi
    for i in $(seq 1 "$reps"); do
        local pid
        if [ "$broker" = sluice ]; then stop_rabbit; start_sluice; pid=$SLUICE_PID; else
            stop_sluice; if [ -z "$RABBIT_NODE" ] || [ "$i" -gt 1 ]; then stop_rabbit; start_rabbit; fi; pid=$RABBIT_PID; fi
        log "$name on $broker ($i/$reps): sluice-perf $* ${extra[*]}"
        "$PERF" "$@" --url "$url" --broker-pid "$pid" --label "$broker" "${extra[@]}" --json \
            >"$WORK/out/$name.$broker.$i.json" 2>"$WORK/out/$name.$broker.$i.err" \
            || log "  ($name on $broker reported a failure)"
        python3 - "$WORK/out/$name.$broker.$i.json" >&2 <<'EOF' || true
import json, sys
r = json.load(open(sys.argv[1]))
lat = r.get("latency") or {}
if r.get("scenario") == "idle":
    print(f"  -> {r.get('opened')} connections, broker RSS {r.get('broker_rss_before_kib')} -> "
          f"{r.get('broker_rss_after_kib')} KiB ({r.get('broker_rss_per_connection_kib')} KiB each)")
else:
    print(f"  -> {r.get('msgs_per_s', 0):,.0f} msg/s ({r.get('msgs_what')}), {r.get('frames_per_s', 0):,.0f} "
          f"frames/s, p99 {lat.get('p99_us', '-')} us, end {r.get('end')}")
EOF
    done
    # The run with the median msg/s stands for the scenario; the others' rates are kept.
    python3 - "$WORK/out" "$name" "$broker" "$reps" <<'EOF' || true
import json, os, sys
out, name, broker, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = []
for i in range(1, reps + 1):
    try:
        runs.append(json.load(open(os.path.join(out, f"{name}.{broker}.{i}.json"))))
    except (OSError, ValueError):
        pass
if runs:
    # Latency runs are ranked by their p99, the others by throughput.
    if name == "latency":
        runs.sort(key=lambda r: (r.get("latency") or {}).get("p99_us") or 0)
    else:
        runs.sort(key=lambda r: r.get("msgs_per_s") or 0)
    pick = dict(runs[(len(runs) - 1) // 2])
    pick["repeats"] = [{"msgs_per_s": r.get("msgs_per_s"), "frames_per_s": r.get("frames_per_s")} for r in runs]
    json.dump(pick, open(os.path.join(out, f"{name}.{broker}.json"), "w"))
EOF
}
# both NAME COMMON-ARGS -- SLUICE-ARGS -- RABBIT-ARGS
both() {
    local name=$1; shift
    local common=() s=() r=()
    while [ "$1" != -- ]; do common+=("$1"); shift; done; shift
    while [ "$1" != -- ]; do s+=("$1"); shift; done; shift
    r=("$@")
    run "$name" sluice "${common[@]}" "${s[@]}"
    run "$name" rabbit "${common[@]}" "${r[@]}"
}
rate_of() { python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['msgs_per_s']))" "$1" 2>/dev/null || echo 0; }

# Idle connections first, on fresh brokers (RSS growth per connection).
both idle idle --connections "$(n 10000)" --duration 2 -- --

both events events --size 100 --credit 1000000 --count "$(n 3000000)" --idle-end 3 \
    -- --address 'events/cmp-{run}' -- --address '/topic/cmp-{run}'
both fanout events --size 100 --credit 1000000 --subscribers 4 --count "$(n 1000000)" --idle-end 3 \
    -- --address 'events/cmp-fan-{run}' -- --address '/topic/cmp-fan-{run}'
both queues queues --size 100 --credit 4096 --count "$(n 1000000)" \
    -- --address 'queues/cmp-{run}' -- --address '/queue/cmp-{run}'
# The same queue scenario with sluice keeping queues in memory (`--durability memory`); its
# RabbitMQ figure is the run above (classic queue, transient messages: RabbitMQ's in-memory path).
SLUICE_EXTRA=(--durability memory)
run queues-memory sluice queues --size 100 --credit 4096 --count "$(n 1000000)" --address 'queues/cmp-mem-{run}'
SLUICE_EXTRA=()
both events-store events-store --size 100 --credit 65536 --count "$(n 1000000)" \
    -- --address 'events-store/cmp-{run}' -- --address '/queue/cmp-es-{run}'
both rpc rpc --size 100 --credit 1024 --inflight 256 --count "$(n 200000)" \
    -- --address 'commands/cmp-{run}' -- --address '/queue/cmp-rpc-{run}' --reply-to '/queue/cmp-reply-{run}'
both frames frames --size 8 --credit 1048576 --count "$(n 5000000)" --idle-end 3 \
    -- --address 'events/cmp-frames-{run}' -- --address '/topic/cmp-frames-{run}'

# Latency at half of each broker's own maximum events rate (fixed-rate publisher).
for b in sluice rabbit; do
    max=$(rate_of "$WORK/out/events.$b.json")
    half=$(( max / 2 )); [ "$half" -lt 1000 ] && half=1000
    if [ "$b" = sluice ]; then addr='events/cmp-lat-{run}'; else addr='/topic/cmp-lat-{run}'; fi
    RUN_TIMEOUT=20 run latency "$b" events --size 100 --credit 65536 --rate "$half" --duration 5 --address "$addr"
done

# The independent client: rhea (faster than python-qpid-proton here), same events scenario.
RHEA_COUNT=$(n 300000)
RHEA_CMD_S="node perf/node/events_presettled.js $SLUICE_URL events/cmp-rhea-$$ $RHEA_COUNT 100 10000"
RHEA_CMD_R="node perf/node/events_presettled.js $RABBIT_URL /topic/cmp-rhea-$$ $RHEA_COUNT 100 10000"
if command -v node >/dev/null && [ -d tests/node/node_modules/rhea ]; then
    stop_rabbit; start_sluice
    log "rhea events on sluice"
    timeout 120 $RHEA_CMD_S >"$WORK/out/rhea.sluice.json" 2>"$WORK/out/rhea.sluice.err" || true
    stop_sluice; start_rabbit
    log "rhea events on rabbit"
    timeout $(( RABBIT_TIMEOUT + 30 )) $RHEA_CMD_R >"$WORK/out/rhea.rabbit.json" 2>"$WORK/out/rhea.rabbit.err" || true
else
    log "rhea not installed (cd tests/node && npm ci): skipping the independent client"
fi
LOADAVG_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------ stop
log "stopping both brokers"
stop_sluice
stop_rabbit

# ------------------------------------------------------------------ RESULTS.md
mkdir -p "$ROOT/perf/results"
for f in "$WORK"/out/*.[0-9]*.json; do
    python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$f" 2>/dev/null || true
done >"$ROOT/perf/results/compare-latest.jsonl"
DIRTY=""
if [ "$SOURCE_DESC" = "working tree" ] && git status --porcelain --untracked-files=no -- src proto | grep -q .; then
    DIRTY=" + uncommitted changes in src/ or proto/"
fi
ENV_LINE="$(date -u +%Y-%m-%dT%H:%MZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$DIRTY, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), kernel $(uname -r), RabbitMQ $RABBIT_VERSION (rabbitmq_amqp1_0) on $(erl -noshell -eval 'io:format("OTP ~s", [erlang:system_info(otp_release)]), halt().' 2>/dev/null || echo 'Erlang'), sluice shards: ${SLUICE_SHARDS:-one per CPU}, load average before/after: $LOADAVG_START / $LOADAVG_END, SCALE=$SCALE, sluice: median of $SLUICE_REPEAT runs per scenario, RabbitMQ: 1 run capped at ${RABBIT_TIMEOUT}s, total $(( $(date +%s) - START_TS ))s"
python3 "$ROOT/perf/py/compare_table.py" "$WORK/out" "$RESULTS" "$ENV_LINE" "$RHEA_CMD_S" "$RHEA_CMD_R"
log "wrote the compare section of $RESULTS"
