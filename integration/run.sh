#!/usr/bin/env bash
# End-to-end tests: start the real daemon with smollm2:135m on a free loopback port, drive it
# with the official openai, anthropic and ollama Python clients (installed into a virtual
# environment from PyPI) and curl, then stop it with SIGTERM and check it exits cleanly.
#
#   integration/run.sh                 all tests
#   integration/run.sh -k eviction     pytest arguments pass through
#   integration/run.sh --bench         the load benchmark instead of the tests
#   integration/run.sh --bench ttft    time to first token with tools offered vs without
#   integration/run.sh --bench responses   turn 2's time to first token: previous_response_id vs resent history
#
# Environment: LLAMAY_BIN (default target/release/llamay), LLAMAY_MODEL (smollm2:135m),
# LLAMAY_OTHER_MODEL (gemma3:270m, for eviction; its tests skip when it is not installed),
# LLAMAY_SERVE_FLAGS (more serve flags, e.g. "-t 1"), LLAMAY_HOME (the model store).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${LLAMAY_BIN:-$root/target/release/llamay}
venv=$root/integration/.venv
model=${LLAMAY_MODEL:-smollm2:135m}

if [ ! -x "$bin" ]; then
  cargo build --release
fi
# A requirements file newer than the last install (a package was added) installs again.
./integration/venv.sh

port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp -t llamay-integration.XXXXXX)
# Pulls may reach the local test registry (any port on 127.0.0.1) over plain http, as an
# operator allows a registry; no request can allow one.
RUST_LOG=${RUST_LOG:-info} "$bin" serve -m "$model" -addr "127.0.0.1:$port" -max-loaded 1 -keepalive 5m -parallel 4 -insecure-registry 127.0.0.1 ${LLAMAY_SERVE_FLAGS:-} >"$log" 2>&1 &
pid=$!
stop() {
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
trap stop EXIT

for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "llamay exited during start-up:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llamay did not answer /health" >&2; cat "$log" >&2; exit 1; }
grep -q "llamay serving" "$log" || { echo "the start-up banner is missing" >&2; cat "$log" >&2; exit 1; }

export LLAMAY_URL="http://127.0.0.1:$port" LLAMAY_MODEL="$model"
# test_auth.py starts its own daemon with -api-key from the same binary.
export LLAMAY_BIN="$bin"
status=0
if [ "${1:-}" = "--bench" ]; then
  shift
  bench=integration/bench_load.py
  if [ "${1:-}" = "ttft" ]; then
    shift
    bench=integration/bench_ttft.py
  elif [ "${1:-}" = "responses" ]; then
    shift
    bench=integration/bench_responses_ttft.py
  fi
  "$venv/bin/python" "$bench" "$@" || status=$?
else
  # Test files named on the command line replace the default of the whole directory.
  targets=(integration)
  for arg in "$@"; do
    case "$arg" in integration/*) targets=() ;; esac
  done
  # The slowest tests are listed at the end, for the time breakdown.
  "$venv/bin/pytest" -q --durations=12 "${targets[@]}" "$@" || status=$?
fi

# A clean stop: SIGTERM, running requests finish, exit status 0.
kill -TERM "$pid"
if wait "$pid"; then
  echo "llamay stopped cleanly"
else
  echo "llamay exited with status $? on SIGTERM" >&2
  tail -20 "$log" >&2
  status=1
fi
trap - EXIT
rm -f "$log"
exit $status
