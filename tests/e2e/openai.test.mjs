// strata-server end to end with the official `openai` npm client, under Node's test
// runner. scripts/e2e-server.sh starts the server on a tiny model and sets
// STRATA_E2E_BASE_URL (http://127.0.0.1:PORT/v1) and STRATA_NPM_DIR (where
// scripts/install-deps.sh put the client).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

const baseURL = process.env.STRATA_E2E_BASE_URL;
const npmDir = process.env.STRATA_NPM_DIR;
assert.ok(baseURL && npmDir, 'set STRATA_E2E_BASE_URL and STRATA_NPM_DIR (scripts/e2e-server.sh does)');
const require = createRequire(path.join(npmDir, 'node_modules', 'noop.js'));
const OpenAI = require('openai').default ?? require('openai');

// Every request is bounded: 20 s, no retries.
const client = new OpenAI({ baseURL, apiKey: 'sk-unused', timeout: 20000, maxRetries: 0 });
let model;

test('models: the served model is listed', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  model = list.data[0].id;
  assert.equal(list.data[0].object, 'model');
});

test('chat: one answer with usage', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_tokens: 8, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
});

test('chat: streamed, role first, finish reason last, usage at the end; same text as not streamed', async () => {
  const body = { model: 'tiny', messages: [{ role: 'user', content: 'Count to five.' }], max_tokens: 12, temperature: 0 };
  const plain = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const withFinish = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  assert.equal(withFinish.length, 1);
  assert.equal(withFinish[0].choices[0].finish_reason, 'length');
  const last = chunks[chunks.length - 1];
  assert.equal(last.usage.completion_tokens, 12);
  const text = chunks.map((c) => (c.choices.length ? c.choices[0].delta.content ?? '' : '')).join('');
  assert.equal(text, plain.choices[0].message.content);
});

test('completions: legacy endpoint, stop string never emitted', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  const text = r.choices[0].text;
  assert.equal(typeof text, 'string');
  if (text.length >= 4) {
    const stop = text.slice(2, 4);
    const s = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stop });
    assert.equal(s.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(s.choices[0].finish_reason, 'stop');
  }
});

test('errors: n > 1 is a 400 naming the field; an unknown model is a 404', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.error?.param === 'n',
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
  );
});
