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

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city', 'days'], additionalProperties: false },
  },
};

test('tools: a forced call comes back as tool_calls whose arguments follow the schema', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools: [weatherTool],
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false, max_tokens: 160,
    temperature: 0,
  });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.ok(call.id.startsWith('call_'));
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.city, 'string');
  assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7);
});

test('tools: the streaming helper assembles the same call', async () => {
  const body = {
    model: 'tiny', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools: [weatherTool],
    tool_choice: 'required', parallel_tool_calls: false, max_tokens: 160, temperature: 0,
  };
  const plain = await client.chat.completions.create(body);
  const stream = client.chat.completions.stream(body);
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  const got = final.choices[0].message.tool_calls.map((t) => [t.function.name, t.function.arguments]);
  const want = plain.choices[0].message.tool_calls.map((t) => [t.function.name, t.function.arguments]);
  assert.deepEqual(got, want);
});

test('tools: a tool result goes back to the model in the next turn', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny', tools: [weatherTool], max_tokens: 4, temperature: 0,
    messages: [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo","days":1}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 3}' },
    ],
  });
  assert.ok(r.usage.prompt_tokens > 20);
});

test('structured output: json_schema content parses and follows the schema', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 10 }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 } },
    required: ['name', 'tags'], additionalProperties: false };
  const r = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: 'Describe a cat.' }], max_tokens: 160, temperature: 0.8, seed: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'cat', schema, strict: true } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const doc = JSON.parse(r.choices[0].message.content);
  assert.deepEqual(Object.keys(doc), ['name', 'tags']);
  assert.ok(doc.tags.every((t) => t === 'a' || t === 'b'));
});

test('structured output: an unsupported keyword is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', contentEncoding: 'base64' } } },
    }),
    (e) => e.status === 400 && /contentEncoding/.test(e.message));
});
