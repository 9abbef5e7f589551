#!/bin/bash
# ctest driver: start a real `journey serve` on a free loopback port, wait for /health, run the
# curl checks and the Node tests (official `openai` package), stop the server.
# Exit 77 (ctest SKIP) when node or the openai package cannot be had.
set -u
journey="$1"; model="$2"; here="$(cd "$(dirname "$0")" && pwd)"
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
if [ ! -d "$here/node_modules/openai" ]; then
  (cd "$here" && (npm ci --offline --no-audit --no-fund >/dev/null 2>&1 || npm install --no-audit --no-fund >/dev/null 2>&1))
  [ -d "$here/node_modules/openai" ] || { echo "SKIP: the openai npm package is unavailable (npm install failed)"; exit 77; }
fi
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
key="sk-journey-test-$RANDOM$RANDOM"
log=$(mktemp)
"$journey" serve --model "$model" --port "$port" --api-key "$key" --served-model-name stories \
  --threads 1 --rate-limit 100000 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
url="http://127.0.0.1:$port"
for _ in $(seq 1 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "server died:"; cat "$log"; exit 1; }
  sleep 0.1
done
fail=0
check() { if [ "$2" != "$3" ]; then echo "curl check failed: $1: expected $3, got $2"; fail=1; else echo "ok: $1"; fi; }
auth=(-H "Authorization: Bearer $key" -H "Content-Type: application/json")
check "health without key" "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" 200
check "no key -> 401" "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")" 401
check "models" "$(curl -s "${auth[@]}" "$url/v1/models" | grep -o '"id":"stories"')" '"id":"stories"'
sse=$(curl -s -N "${auth[@]}" "$url/v1/completions" -d '{"prompt":"Once","max_tokens":4,"stream":true}')
check "SSE ends with [DONE]" "$(printf '%s' "$sse" | grep '^data: ' | tail -1)" "data: [DONE]"
check "SSE chunk count" "$(printf '%s' "$sse" | grep -c '^data: {')" 4
big=$(head -c 2000000 /dev/zero | tr '\0' 'a')
check "body too large -> 413" "$(printf '{"prompt":"%s"}' "$big" | curl -s -o /dev/null -w '%{http_code}' "${auth[@]}" "$url/v1/completions" --data-binary @-)" 413
check "invalid UTF-8 -> 400" "$(printf '{"prompt":"\xc3\x28"}' | curl -s -o /dev/null -w '%{http_code}' "${auth[@]}" "$url/v1/completions" --data-binary @-)" 400
check "metrics exposed" "$(curl -s "$url/metrics" | grep -c '^journey:time_to_first_token_seconds_count')" 1
JOURNEY_URL="$url" JOURNEY_API_KEY="$key" JOURNEY_MODEL_NAME=stories node --test "$here/openai.test.mjs" || fail=1
kill -0 $pid 2>/dev/null || { echo "server died during the tests:"; cat "$log"; fail=1; }
exit $fail
