#!/usr/bin/env bash
# soak.sh [TOTAL] - a long mixed load against one server process, and its memory before and after.
#
#   scripts/soak.sh            1,000,000 requests (the recorded run in docs/reliability.md)
#   scripts/soak.sh 100000     shorter
#
# Starts build/server/sluice-server on free loopback ports, warms it up (~5% of TOTAL), reads its
# resident memory from /metrics, then sends TOTAL requests at once from three load testers:
# 40% `simple` as unary async calls, 40% `identity` (64 floats) over one ModelStreamInfer stream,
# 20% `mlp` as unary async calls. Reads the resident memory again, checks that the server counted
# exactly the successes the clients received and no failure, stops it with SIGTERM (exit 0
# expected) and prints a table. Exit status 1 if a check fails, if the live heap grew by 10 MiB or
# more (sluice_heap_allocated_bytes: what the allocator handed out and did not get back; bound
# SLUICE_SOAK_HEAP_BOUND_MIB), or if RSS grew by the RSS bound or more (SLUICE_SOAK_RSS_BOUND_MIB;
# default 10 MiB on glibc malloc, 40 on tcmalloc, whose per-thread caches alone may keep 32 MiB of
# freed memory: there RSS is not the leak figure, the live heap is). `none` reports a growth
# without a bound (sanitizer builds: their allocator keeps freed memory in quarantine).
set -euo pipefail
cd "$(dirname "$0")/.."

total=${1:-1000000}
build=${SLUICE_BUILD_DIR:-build}
server="$build/server/sluice-server"
loadtest="$build/loadtest/sluice-loadtest"
[[ -x "$server" && -x "$loadtest" ]] || { echo "soak.sh: build first (scripts/build.sh)" >&2; exit 2; }

work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
"$server" --model-repository=models --grpc-address=127.0.0.1 --grpc-port=0 --http-port=0 --metrics-port=0 \
  --metrics-address=127.0.0.1 >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "server ready" "$work/server.log" && break; sleep 0.1; done
grep -q "server ready" "$work/server.log" || { cat "$work/server.log"; exit 1; }
grpc_port=$(grep -o 'grpc_port=[0-9]*' "$work/server.log" | head -1 | cut -d= -f2)
metrics_port=$(grep -o 'metrics_port=[0-9]*' "$work/server.log" | head -1 | cut -d= -f2)

metric() { curl -s "http://127.0.0.1:$metrics_port/metrics" | awk -v s="$1" '$1 == s { print $2 }'; }
rss_mib() { awk -v b="$(metric process_resident_memory_bytes)" 'BEGIN { printf "%.1f", b / 1048576 }'; }
# The live heap in MiB, and the allocator's name, from sluice_heap_allocated_bytes{allocator="..."}.
heap_line() { curl -s "http://127.0.0.1:$metrics_port/metrics" | grep '^sluice_heap_allocated_bytes{' || true; }
heap_mib() { heap_line | awk '{ printf "%.1f", $2 / 1048576 }'; }
allocator=$(heap_line | sed -n 's/.*allocator="\([^"]*\)".*/\1/p')
if [[ -z $allocator ]]; then
  # Sanitizer builds export no heap account; then only an unbounded run makes sense.
  [[ ${SLUICE_SOAK_HEAP_BOUND_MIB:-10} == none ]] ||
    { echo "soak.sh: the server exports no sluice_heap_allocated_bytes" >&2; exit 1; }
  allocator=unknown
  heap_mib() { echo 0; }
fi

# One load tester: MODEL MODE REQUESTS CONCURRENCY NAME [EXTRA...]; writes $work/NAME.json.
load() {
  local model=$1 mode=$2 requests=$3 concurrency=$4 name=$5
  shift 5
  "$loadtest" --url="127.0.0.1:$grpc_port" --model="$model" --mode="$mode" \
    --concurrency="$concurrency" --max-requests="$requests" --warmup-ms=0 --window-ms=5000 \
    --stability-percent=0.1 --max-windows=1000 --max-duration-s=3600 --no-progress \
    --json="$work/$name.json" "$@" >"$work/$name.out" 2>&1 || {
    local rc=$?
    # 3: stopped at --max-requests, which is the plan here.
    [[ $rc == 3 ]] || { echo "soak.sh: $name: sluice-loadtest exit $rc" >&2; cat "$work/$name.out" >&2; return 1; }
  }
}
# Requests that succeeded, the load tester's one probe request before its load included.
ok_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["totals"]["succeeded"])' "$1"; }

warm=$((total / 50))
# The same three loads at the same concurrency as the measured run, so that what the allocator and
# gRPC keep for that much in flight is counted before, not as growth.
load simple async "$warm" 32 warm-simple &
a=$!
load identity stream "$warm" 32 warm-identity --shape INPUT0:64 &
b=$!
load mlp async $((warm / 2)) 16 warm-mlp &
c=$!
wait $a $b $c
rss_before=$(rss_mib)
heap_before=$(heap_mib)

start=$(date +%s)
load simple async $((total * 2 / 5)) 32 simple &
a=$!
load identity stream $((total * 2 / 5)) 32 identity --shape INPUT0:64 &
b=$!
load mlp async $((total / 5)) 16 mlp &
c=$!
wait $a $b $c
seconds=$(( $(date +%s) - start ))
rss_after=$(rss_mib)
heap_after=$(heap_mib)

status=0
printf '| model | mode | requests OK (client) | success (server) | failures (server) |\n|---|---|---:|---:|---:|\n'
for spec in "simple async simple warm-simple" "identity stream identity warm-identity" "mlp async mlp warm-mlp"; do
  read -r model mode name warm_name <<<"$spec"
  client_ok=$(( $(ok_of "$work/$name.json") + $(ok_of "$work/$warm_name.json") ))
  server_ok=$(metric "sluice_inference_requests_total{model=\"$model\",version=\"1\",outcome=\"success\"}")
  server_fail=$(curl -s "http://127.0.0.1:$metrics_port/metrics" |
    awk -v m="model=\"$model\"" 'index($0, "sluice_inference_requests_total{") == 1 && index($0, m) && index($0, "outcome=\"failure\"") { s += $2 } END { print s + 0 }')
  printf '| %s | %s | %s | %s | %s |\n' "$model" "$mode" "$client_ok" "$server_ok" "$server_fail"
  [[ "${server_ok%.*}" == "$client_ok" && "$server_fail" == 0 ]] || status=1
done
growth=$(awk -v a="$rss_after" -v b="$rss_before" 'BEGIN { printf "%.1f", a - b }')
heap_growth=$(awk -v a="$heap_after" -v b="$heap_before" 'BEGIN { printf "%.1f", a - b }')
echo
echo "$total requests in ${seconds} s; server RSS after warm-up ${rss_before} MiB, after ${rss_after} MiB: growth ${growth} MiB"
if [[ $allocator == unknown ]]; then
  echo "live heap: not exported by this build"
else
  echo "live heap ($allocator) after warm-up ${heap_before} MiB, after ${heap_after} MiB: growth ${heap_growth} MiB"
fi
if [[ $allocator == tcmalloc ]]; then default_rss_bound=40; else default_rss_bound=10; fi
bound=${SLUICE_SOAK_RSS_BOUND_MIB:-$default_rss_bound}
if [[ $bound != none ]]; then
  awk -v g="$growth" -v b="$bound" 'BEGIN { exit !(g < b) }' || { echo "RSS grew by $bound MiB or more"; status=1; }
fi
heap_bound=${SLUICE_SOAK_HEAP_BOUND_MIB:-10}
if [[ $heap_bound != none ]]; then
  awk -v g="$heap_growth" -v b="$heap_bound" 'BEGIN { exit !(g < b) }' ||
    { echo "the live heap grew by $heap_bound MiB or more"; status=1; }
fi

kill -TERM "$pid"
wait "$pid" && echo "server exited 0 after SIGTERM" || { echo "server exit status $?"; status=1; }
exit $status
