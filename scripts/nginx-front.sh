#!/usr/bin/env bash
# The nginx front-end example of docs/server.md, tested: starts strata-server and
# nginx (Debian's) on loopback with docs/nginx-strata.conf, and checks a chat
# completion, a streamed one, and nginx's limits (head, body) through the proxy.
# Skipped (exit 0, with a warning) when nginx is not installed.
# Usage: scripts/nginx-front.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
build=${1:-build}
nginx_bin=$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null || true)
if [ -z "$nginx_bin" ]; then
    echo "nginx-front: nginx is missing (scripts/install-deps.sh installs it); skipped"
    exit 0
fi
start_tiny_server "$build" nginx-front -c 512 -t 1
chmod 755 "$tmp"  # nginx's workers run as another user
# A free port for nginx: bind 0 and read what the kernel picked.
nport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
        || echo $((20000 + RANDOM % 20000)))
sed -e "s/127.0.0.1:8080/127.0.0.1:$port/" -e "s/127.0.0.1:8443/127.0.0.1:$nport/" \
    -e "s|^http {|pid $tmp/nginx.pid;\nerror_log $tmp/error.log;\nhttp {\n    access_log $tmp/access.log;\n    client_body_temp_path $tmp/body;\n    proxy_temp_path $tmp/proxy;\n    fastcgi_temp_path $tmp/fastcgi;\n    uwsgi_temp_path $tmp/uwsgi;\n    scgi_temp_path $tmp/scgi;|" \
    docs/nginx-strata.conf >"$tmp/nginx.conf"
"$nginx_bin" -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.stderr" &
extra_pids+=($!)
base="http://127.0.0.1:$nport"
for _ in $(seq 1 50); do curl -sf "$base/health" >/dev/null && break; sleep 0.1; done
fails=0
check() {  # name, condition result
    if [ "$2" = 1 ]; then echo "nginx-front: ok   $1"; else echo "nginx-front: FAIL $1"; fails=$((fails + 1)); fi
}
chat='{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}'
r=$(curl -s -m 30 "$base/v1/chat/completions" -H 'Content-Type: application/json' -d "$chat")
check "chat completion through nginx" "$(echo "$r" | jq -e '.choices[0].message.role == "assistant"' >/dev/null && echo 1 || echo 0)"
r=$(curl -sN -m 30 "$base/v1/chat/completions" -H 'Content-Type: application/json' \
        -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
check "streamed chat through nginx ends with [DONE]" "$(grep -q '^data: \[DONE\]' <<<"$r" && echo 1 || echo 0)"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 "$base/health" -H "X-Big: $(head -c 20000 /dev/zero | tr '\0' a)")
check "a 20 KB header line is refused by nginx ($code)" "$([ "$code" = 400 ] || [ "$code" = 494 ] && echo 1 || echo 0)"
head -c $((9 * 1024 * 1024)) /dev/zero | tr '\0' a >"$tmp/big.json"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 30 "$base/v1/completions" -H 'Content-Type: application/json' \
        --data-binary @"$tmp/big.json")
check "a 9 MiB body is refused by nginx ($code)" "$([ "$code" = 413 ] && echo 1 || echo 0)"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 -X GET "$base/v1/chat/completions")
check "the server's own errors pass through ($code)" "$([ "$code" = 405 ] && echo 1 || echo 0)"
if [ "$fails" -ne 0 ]; then
    echo "nginx-front: $fails check(s) FAILED"; tail -n 20 "$tmp/error.log" "$tmp/server.log" 2>/dev/null || true
    exit 1
fi
echo "nginx-front: all checks passed"
