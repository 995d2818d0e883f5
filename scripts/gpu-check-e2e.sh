#!/usr/bin/env bash
# gpu-check-e2e.sh - the encoder end to end on the GPU (gpu-check.sh's e2e-server step): a
# sluice-server on --device, serving the bundled embedder and a BERT-base-shape checkpoint as
# KIND_GPU, loaded over gRPC by sluice-loadtest at 1, 16 and 64 clients with ragged lengths.
# Per (model, clients): sequences/s, tokens/s, p50/p99 (the load tester's JSON) and the server's
# CPU time per request (utime + stime from /proc/<pid>/stat around the level, over the requests
# the server answered in it: the executor waits on blocking-sync events, so this is what a
# request costs the host).
#
#   gpu-check-e2e.sh --root UNPACKED --work LOGS --repository REPO [--device cuda:0]
#                    [--limit SECONDS] [--levels "1 16 64"] [--window-ms 1000] [--max-windows 4]
#
# REPO must hold bert_base/1 (the checkpoint); the models' configs are written here. Writes
# LOGS/e2e-*.log, LOGS/figures/e2e-<model>-c<N>.json (the load tester's) and .cpu.json (server
# CPU), and the step's status line to LOGS/status/e2e-server.
set -uo pipefail

root="" work="" repo="" device="cuda:0" limit=75 levels="1 16 64" window_ms=1000 max_windows=4
kind=KIND_GPU
while (($#)); do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --repository) repo="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --levels) levels="$2"; shift 2 ;;
    --window-ms) window_ms="$2"; shift 2 ;;
    --max-windows) max_windows="$2"; shift 2 ;;
    *) echo "gpu-check-e2e: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $root && -n $work && -n $repo ]] || { echo "gpu-check-e2e: --root, --work, --repository" >&2; exit 2; }
[[ $device == cpu ]] && kind=KIND_CPU
mkdir -p "$work/figures" "$work/status"
start=$SECONDS

status() {
  printf '%s|%s\n' "$1" "$2" >"$work/status/e2e-server"
  echo "e2e-server: $1: $2"
}

# The models: the bundled embedder (hidden 64, sequences up to 128 tokens) and bert_base (hidden
# 768, 12 layers, 512 positions), each one instance on the device, buckets sized to the traffic.
rm -rf "$repo/embedder"
cp -r "$root/models/embedder" "$repo/embedder"
sed -i "s/kind: KIND_CPU/kind: $kind/" "$repo/embedder/config.pbtxt"
cat >"$repo/bert_base/config.pbtxt" <<EOF
# Written by gpu-check-e2e.sh: BERT-base shape (sluice-make-encoder), FP16 weights.
name: "bert_base"
backend: "encoder"
max_batch_size: 64
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { count: 1 kind: $kind } ]
parameters { key: "max_batch_tokens" value: { string_value: "16384" } }
parameters { key: "cuda_buckets" value: { string_value: "1x256,4x1024,8x2048,16x4096,32x8192,64x16384" } }
EOF

server_log="$work/e2e-server.log"
"$root/server/sluice-server" --model-repository "$repo" --device "$device" --grpc-port 0 \
  --metrics-port 0 --allow-http=false >"$server_log" 2>&1 &
server=$!
stop_server() {
  kill -TERM "$server" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$server" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -KILL "$server" 2>/dev/null
}
trap stop_server EXIT

port=""
while ((SECONDS - start < limit / 2)); do
  if grep -q 'server ready' "$server_log"; then
    port=$(grep -oP 'grpc_port=\K[0-9]+' "$server_log" | head -1)
    break
  fi
  kill -0 "$server" 2>/dev/null || break
  sleep 0.2
done
if [[ -z $port ]]; then
  status fail "the server was not ready after $((SECONDS - start)) s: $(tail -1 "$server_log" | cut -c1-160)"
  exit 0
fi
echo "server ready on port $port after $((SECONDS - start)) s"
# Where each model runs, from the server's load log: a model that fell back to the CPU backend
# must not be reported under the device.
grep "instance [0-9]*: \|runs on the CPU backend" "$server_log" | cut -c1-240

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
clk_tck=$(getconf CLK_TCK)
result=ok
detail=""
for spec in "embedder|8:128" "bert_base|8:256"; do
  IFS='|' read -r model lengths <<<"$spec"
  # Token ids drawn over the model's whole vocabulary (its config.json says how large).
  vocab=$(grep -oP '"vocab_size":\s*\K[0-9]+' "$repo/$model/1/config.json" | head -1)
  # The engine logs a GPU instance's load summary ("model 'x' instance 0: encoder on cuda:0:
  # ...") and says so when it puts a model on the CPU backend instead (executor_factory.cc).
  if [[ $device != cpu ]]; then
    if grep -q "model '$model' runs on the CPU backend" "$server_log"; then
      result=fail
      detail+="$model: the server put it on the CPU backend, not $device; "
    elif ! grep -q "model '$model' instance [0-9]*: .*on $device" "$server_log"; then
      result=fail
      detail+="$model: no load summary on $device in the server log; "
    fi
  fi
  for clients in $levels; do
    left=$((limit - (SECONDS - start) - 3))
    if ((left < 8)); then
      result=fail
      detail+="$model c$clients: no time; "
      continue
    fi
    json="$work/figures/e2e-$model-c$clients.json"
    before=$(cpu_ticks)
    rc=0
    timeout -k 2 "$left" "$root/bin/sluice-loadtest" -u "127.0.0.1:$port" -m "$model" \
      --concurrency "$clients" --seq-len "$lengths" --vocab-size "$vocab" --mode async \
      --warmup-ms 500 --window-ms "$window_ms" --max-windows "$max_windows" \
      --stability-percent 10 --json "$json" --no-progress \
      >"$work/e2e-$model-c$clients.log" 2>&1 || rc=$?
    after=$(cpu_ticks)
    printf '{"server_cpu_s": %s, "clk_tck": %s, "device": "%s", "lengths": "%s"}\n' \
      "$(awk -v a="$before" -v b="$after" -v t="$clk_tck" 'BEGIN { print (b - a) / t }')" \
      "$clk_tck" "$device" "$lengths" >"$work/figures/e2e-$model-c$clients.cpu.json"
    grep -A3 '^ *concurrency\|^ *level' "$work/e2e-$model-c$clients.log" | head -4
    if ((rc != 0)); then
      result=fail
      detail+="$model c$clients: exit $rc; "
    fi
  done
done
[[ -n $detail ]] || detail="embedder and bert_base at clients $levels"
status "$result" "${detail%; }"
