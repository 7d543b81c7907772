#!/usr/bin/env bash
# kill -9 under load, N times (default 20): a real client publishes unsettled to a
# queue and an events-store channel, recording every id that came back `accepted`;
# the broker is killed with SIGKILL at a pseudo-random moment, restarted, and every
# accepted id must be read back. CI runs 3 rounds as part of `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-20}
SLUICE_CRASH_ROUNDS=$ROUNDS cargo test --release --test store kill_minus_nine -- --nocapture 2>&1 \
  | grep -E "kill -9 round|test result|panicked|missing"
