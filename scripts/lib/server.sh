# Sourced by the scripts that start strata-server on port 0 (demo.sh, e2e-server.sh,
# http-fuzz.sh, nginx-front.sh).
# wait_for_server PID LOG TRIES NAME: waits (0.2 s per try) until the server that PID
# runs, logging to LOG, has printed its port and answers /health; prints the port.
# Exits the calling script with the log when the server dies or never gets ready.
wait_for_server() {
    local pid="$1" log="$2" tries="$3" name="$4" port=""
    for _ in $(seq 1 "$tries"); do
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "$name: the server exited" >&2; exit 1; }
        [ -z "$port" ] && port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -n1)
        if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
            echo "$port"
            return 0
        fi
        sleep 0.2
    done
    cat "$log" >&2
    echo "$name: the server did not get ready" >&2
    exit 1
}

# start_tiny_server BUILD NAME ARGS...: makes the tiny synthetic qwen3next model in a new
# temp folder and starts BUILD/bin/strata-server on it on a free port with ARGS, logging
# to $tmp/server.log; returns once it answers. Sets tmp, pid and port. An EXIT trap
# stops the server and every pid in extra_pids, and removes $tmp.
extra_pids=()
stop_tiny_server() {
    local p
    for p in "${extra_pids[@]}" "${pid:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    [ -n "${tmp:-}" ] && rm -rf "$tmp"
    return 0
}
start_tiny_server() {
    local build="$1" name="$2"
    shift 2
    tmp=$(mktemp -d -t "strata-$name.XXXXXX")
    pid=""
    trap stop_tiny_server EXIT
    "$build/bin/strata" make-model --arch qwen3next --preset tiny --type q8_0 --seed 1 --out "$tmp/tiny.gguf" >/dev/null
    "$build/bin/strata-server" -m "$tmp/tiny.gguf" --alias tiny --port 0 "$@" >"$tmp/server.log" 2>&1 &
    pid=$!
    port=$(wait_for_server "$pid" "$tmp/server.log" 150 "$name")  # 30 s at most
}
