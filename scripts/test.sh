#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need
# (Debian packages where missing, Go included, a Python venv with python-qpid-proton,
# pytest and tornado, rhea, mocha and minimist from npm), builds,
# checks formatting and lints, then runs every Rust, Python and Node test
# against the real broker binary on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
step() { printf '\n==> %s\n' "$*"; }

step "Debian packages the tests need, where missing"
# promtool (prometheus) for the deploy/prometheus checks; Node.js and npm for rhea;
# python3-venv for the venv; a C compiler and Python's headers, which
# python-qpid-proton's source build needs; openssl for the TLS tests' certificates.
need=()
command -v promtool >/dev/null || need+=(prometheus)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
command -v cc >/dev/null || need+=(gcc libc6-dev)
[ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || need+=(python3-dev)
command -v openssl >/dev/null || need+=(openssl)
# libfaketime for tests/clock.rs: the broker's wall clock stepped while it runs.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(libfaketime)
# Go and the Debian packages of go-amqp's test dependencies, for the go-amqp tests
# (tests/go and go-amqp's own broker tests, vendored in tests/third_party/go-amqp; built
# in GOPATH mode from /usr/share/gocode, no module download).
for p in golang-go golang-github-stretchr-testify-dev golang-github-google-go-cmp-dev \
         golang-github-fortytw2-leaktest-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

step "toolchain checks: rustfmt, clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

step "build (release broker for the black-box tests)"
cargo build --release --bin sluice
export SLUICE_BIN="$ROOT/target/release/sluice"

step "Rust tests (unit, engine, codec, fuzz corpus replay, broker over sockets)"
cargo test --workspace --release

step "vendored glommio: the unit tests of sluice's changes (vendor/README.md)"
CARGO_TARGET_DIR="$ROOT/target/glommio-tests" \
  cargo test --release --manifest-path vendor/glommio/Cargo.toml --lib sluice_

# Before the Python tests: qpid-interop-test's rhea shim (run from them) takes rhea from here.
if [ -f tests/node/package.json ]; then
  step "npm packages for the Node tests and the third parties' suites (rhea, mocha, minimist)"
  (cd tests/node && npm install --no-audit --no-fund --silent)
fi

if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  step "Python venv with python-qpid-proton"
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
  step "Python tests (python-qpid-proton against the real broker)"
  .venv/bin/python -m pytest -q tests/python
fi

if [ -f tests/node/package.json ]; then
  step "Node tests (rhea against the real broker)"
  (cd tests/node && node --test)
fi
step "all tests passed"
