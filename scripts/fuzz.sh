#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan + UBSan) and runs each for a
# bounded time (FUZZ_SECONDS, default 60): the GGUF reader (fuzz_gguf) and the
# server's request path, framer and body parser (fuzz_request). Exits non-zero on any
# finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
bdir=build-fuzz
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
      -DCMAKE_CXX_COMPILER=clang++-14 -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=OFF \
      -DSTRATA_CUDA=OFF >/dev/null
cmake --build "$bdir" -j2 --target fuzz_gguf fuzz_make_seeds fuzz_request
mkdir -p "$bdir/artifacts"
run() {  # target corpus max_len
    echo "fuzz: running $1 for ${secs}s"
    "$bdir/bin/$1" -max_total_time="$secs" -max_len="$3" -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$bdir/artifacts/" -print_final_stats=1 "$2" 2>&1 | tail -n 25
    # tail hides the fuzzer's status: take it from the pipe.
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz: $1 FOUND A FAULT (see $bdir/artifacts)"; exit 1; }
}
corpus="$bdir/corpus"
mkdir -p "$corpus"
"$bdir/bin/fuzz_make_seeds" "$corpus"
run fuzz_gguf "$corpus" 4096
# Seeds of the request target: the first byte says where the bytes split in two.
rcorpus="$bdir/corpus-request"
mkdir -p "$rcorpus"
body='{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true,"logprobs":true,"top_logprobs":2,"stop":["x"]}'
printf '\x20POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s' "${#body}" "$body" >"$rcorpus/chat"
printf '\x07POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"pro\r\n15\r\nmpt":"Hi","n":1}    \r\n0\r\n\r\n' >"$rcorpus/chunked"
printf '\x03GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\nExpect: 100-continue\r\nRange: bytes=0-1\r\n\r\n' >"$rcorpus/get"
printf '\x00{"prompt":[1,2,3],"temperature":0.5,"seed":7,"stream_options":{"include_usage":true}}' >"$rcorpus/body"
# Bodies that reach the schema and grammar compilers and the tool checks.
printf '\x00{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]{1,3}(x|y)+$"},"b":{"anyOf":[{"type":"integer","minimum":-3},{"$ref":"#/$defs/n"}]}},"required":["a"],"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}}}}}}' >"$rcorpus/schema"
printf '\x00{"prompt":"x","grammar":"root ::= (\\"a\\" [b-d]* | x){2,5}\\nx ::= [^\\\\n]+"}' >"$rcorpus/grammar"
printf '\x00{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}' >"$rcorpus/tools"
run fuzz_request "$rcorpus" 8192
echo "fuzz: no finding in ${secs}s per target"
