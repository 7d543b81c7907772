#!/bin/bash
# A/B: a sluice latency run started right after `rabbitmqctl stop` returns, or after the Erlang VM exited.
# Run from the repository root after `cargo build --release --workspace` (needs rabbitmq-server with
# rabbitmq_amqp1_0, as perf/compare.sh installs; ports 25672, 25673, 25680 and 25681 free).
P=${P:-target/release}
W=$(mktemp -d /tmp/rabab.XXXXXX); N=rabab@localhost
for round in 1 2; do
for mode in nowait wait; do
  rm -rf $W/mnesia; mkdir -p $W/log; chown -R rabbitmq:rabbitmq $W
  (cd /var/lib/rabbitmq && setpriv --reuid rabbitmq --regid rabbitmq --init-groups env HOME=/var/lib/rabbitmq RABBITMQ_NODENAME=$N RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=25680 RABBITMQ_DIST_PORT=25681 RABBITMQ_MNESIA_BASE=$W/mnesia RABBITMQ_LOG_BASE=$W/log RABBITMQ_PID_FILE=$W/pid /usr/lib/rabbitmq/bin/rabbitmq-server -detached)
  rabbitmqctl -q -n $N wait --timeout 60 $W/pid; RP=$(cat $W/pid)
  $P/sluice-perf frames --size 8 --credit 1048576 --count 5000000 --idle-end 3 --address /topic/x --url amqp://guest:guest@127.0.0.1:25680 --timeout 20 --json >/dev/null 2>&1
  rabbitmqctl -q -n $N stop
  t0=$(date +%s.%N)
  if [ $mode = wait ]; then for i in $(seq 1 300); do kill -0 $RP 2>/dev/null || break; sleep 0.1; done; fi
  waited=$(python3 -c "print(round($(date +%s.%N)-$t0,1))")
  rm -rf "$W/sluice-data"
  $P/sluice --host 127.0.0.1 --port 25672 --tls-port 0 --admin-addr 127.0.0.1:25673 --data-dir "$W/sluice-data" >"$W/sluice.log" 2>&1 & SP=$!
  sleep 0.5
  r=$($P/sluice-perf events --size 100 --credit 65536 --rate 3348360 --duration 5 --address events/lat --url amqp://127.0.0.1:25672 --json 2>/dev/null | python3 -c "import json,sys; r=json.load(sys.stdin); print(round(r['latency']['p99_us']), 'us p99', round(r['msgs_per_s']))")
  echo "round $round $mode: sluice started $waited s after rabbitmqctl stop returned; $r"
  kill $SP; wait $SP
  for i in $(seq 1 300); do kill -0 $RP 2>/dev/null || break; sleep 0.1; done
done; done
rm -rf "$W"
