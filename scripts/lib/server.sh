# Sourced by the scripts that start strata-server on port 0 (demo.sh, e2e-server.sh).
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
