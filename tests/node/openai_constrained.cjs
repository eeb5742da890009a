// Constrained decoding through the official `openai` npm client, against two
// `edge0 serve` processes on the tiny random-weight model (noise): one with
// Qwen3's template (tool calls as JSON in <tool_call>) and one with
// Qwen3.5's (the XML form). Noise + a grammar must still give valid output:
//  - tool_choice "required" and a named function, plain and streamed: valid
//    tool_calls, finish_reason "tool_calls", arguments that ajv validates
//    against the tool's parameters schema; parallel_tool_calls false: one;
//  - response_format json_schema for 20 schemas of growing nesting: the
//    content parses and ajv validates it; json_object gives an object;
//  - an unsupported schema keyword is a 400 naming it.
// The schemas bound their strings (maxLength) so that noise finishes: an
// unbounded string only ends when noise happens to close it.
//
//     node tests/node/openai_constrained.cjs PORT_QWEN3 PORT_QWEN35 KEY
//
// openai and ajv come from the cache scripts/deps.sh fills ($EDGE0_NPM).
'use strict';
const assert = require('assert');
const os = require('os');
const path = require('path');

const root = process.env.EDGE0_NPM || path.join(os.homedir(), '.cache', 'edge0-npm');
const OpenAI = require(path.join(root, 'node_modules', 'openai'));
const Ajv = require(path.join(root, 'node_modules', 'ajv'));
const [port3, port35, key] = process.argv.slice(2);
const ajv = new Ajv({ strict: false, allErrors: true });

const S = (n) => ({ type: 'string', maxLength: n });
const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer' },
    detailed: { type: 'boolean' },
    where: { type: 'object', properties: { city: S(12), lat: { type: 'number' } }, required: ['city'],
      additionalProperties: false } },
    required: ['unit', 'days', 'where'], additionalProperties: false } } },
  { type: 'function', function: { name: 'set_alarm', parameters: { type: 'object', properties: {
    hour: { type: 'integer', minimum: 0 }, repeat: { type: 'array', items: { enum: ['mon', 'tue', 'wed'] },
      maxItems: 3 }, label: { type: ['string', 'null'], enum: ['wake', 'meds', null] } },
    required: ['hour'], additionalProperties: false } } },
  { type: 'function', function: { name: 'ping' } },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name,
  ajv.compile(t.function.parameters || { type: 'object', properties: {}, additionalProperties: false })]));

function checkCalls(msg, finish, what, only, max) {
  assert.strictEqual(finish, 'tool_calls', what + ': finish_reason');
  assert.ok(msg.tool_calls && msg.tool_calls.length >= 1, what + ': no tool_calls');
  if (max) assert.ok(msg.tool_calls.length <= max, what + ': too many calls');
  for (const c of msg.tool_calls) {
    assert.ok(validators[c.function.name], what + ': unknown function ' + c.function.name);
    if (only) assert.strictEqual(c.function.name, only, what + ': the named function');
    const args = JSON.parse(c.function.arguments);
    const v = validators[c.function.name];
    assert.ok(v(args), what + ': ' + c.function.name + ' ' + c.function.arguments + ' ' + JSON.stringify(v.errors));
  }
  return msg.tool_calls.length;
}

// json_schema k: objects nested k levels, each with a few typed members
function nested(k) {
  let s = { type: 'object', properties: { n: { type: 'integer' }, ok: { type: 'boolean' } }, required: ['n', 'ok'],
    additionalProperties: false };
  for (let i = 1; i < k; i++) {
    const props = { ['l' + i]: s, tag: { enum: ['a', 'b', 'c', i] }, v: S(6) };
    const req = ['l' + i, 'tag'];
    if (i % 3 === 0) props.list = { type: 'array', items: { type: ['integer', 'null'] }, minItems: 1, maxItems: 2 };
    if (i % 4 === 0) { props.any = { anyOf: [{ type: 'number' }, { const: 'x' }] }; req.push('any'); }
    s = { type: 'object', properties: props, required: req, additionalProperties: false };
  }
  return s;
}

async function tooluse(client, form) {
  const messages = [{ role: 'user', content: 'What is the weather?' }];
  const base = { model: 'm', messages, tools, max_tokens: 1200, temperature: 0 };
  let n = 0;
  for (const think of [false, true]) {
    // with thinking on, the reasoning (noise) is closed after max_tokens / 2 tokens: fewer cases
    const extra = { chat_template_kwargs: { enable_thinking: think } };
    const what = form + (think ? ' thinking' : '');
    let r = await client.chat.completions.create({ ...base, ...extra, tool_choice: 'required' });
    n += checkCalls(r.choices[0].message, r.choices[0].finish_reason, what + ' required');
    if (!think) {
      r = await client.chat.completions.create({ ...base, ...extra, tool_choice: 'required', parallel_tool_calls: false });
      checkCalls(r.choices[0].message, r.choices[0].finish_reason, what + ' required, one call', null, 1);
    }
    for (const name of think ? ['get_weather'] : ['set_alarm', 'get_weather', 'ping']) {
      const tc = { type: 'function', function: { name } };
      r = await client.chat.completions.create({ ...base, ...extra, tool_choice: tc, seed: 7, temperature: 0.8 });
      n += checkCalls(r.choices[0].message, r.choices[0].finish_reason, what + ' named ' + name, name);
      const stream = client.beta.chat.completions.stream({ ...base, ...extra, tool_choice: tc, stream: true });
      const fin = await stream.finalChatCompletion();
      n += checkCalls(fin.choices[0].message, fin.choices[0].finish_reason, what + ' named, streamed ' + name, name);
    }
  }
  return n;
}

async function main() {
  const c3 = new OpenAI({ baseURL: `http://127.0.0.1:${port3}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
  const c35 = new OpenAI({ baseURL: `http://127.0.0.1:${port35}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
  const n3 = await tooluse(c3, 'qwen3 JSON form');
  const n35 = await tooluse(c35, 'qwen3.5 XML form');

  let checked = 0;
  for (let k = 1; k <= 20; k++) {
    const schema = nested(k), v = ajv.compile(schema);
    const client = k % 2 ? c3 : c35;
    const req = { model: 'm', messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 1500, seed: k,
      temperature: k % 3 ? 0 : 0.7, response_format: { type: 'json_schema', json_schema: { name: 's' + k, schema,
        strict: true } } };
    let text;
    if (k % 5 === 0) { // streamed
      const stream = client.beta.chat.completions.stream({ ...req, stream: true });
      const fin = await stream.finalChatCompletion();
      assert.strictEqual(fin.choices[0].finish_reason, 'stop', 'schema ' + k + ' streamed: finish');
      text = fin.choices[0].message.content;
    } else {
      const r = await client.chat.completions.create(req);
      assert.strictEqual(r.choices[0].finish_reason, 'stop', 'schema ' + k + ': finish');
      text = r.choices[0].message.content;
    }
    const value = JSON.parse(text);
    assert.ok(v(value), 'schema ' + k + ': ' + text + ' ' + JSON.stringify(v.errors));
    checked++;
  }
  const o = await c3.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }],
    max_tokens: 400, response_format: { type: 'json_object' }, chat_template_kwargs: { enable_thinking: false } });
  if (o.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(o.choices[0].message.content);
    assert.ok(v && typeof v === 'object' && !Array.isArray(v), 'json_object: an object');
  } else {
    assert.strictEqual(o.choices[0].finish_reason, 'length');
  }

  // pattern and format are enforced; a back-reference is the construct still refused
  const pr = await c3.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 60,
    chat_template_kwargs: { enable_thinking: false },
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '^a+-[0-9]{2}$' } } } });
  if (pr.choices[0].finish_reason === 'stop') assert.match(JSON.parse(pr.choices[0].message.content), /^a+-[0-9]{2}$/);
  await assert.rejects(c3.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '(a)\\1' } } } }),
  (e) => e.status === 400 && e.param === 'response_format' && /'pattern'/.test(e.message) && /back-ref/.test(e.message));
  await assert.rejects(c35.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], tools,
    tool_choice: { type: 'function', function: { name: 'nope' } } }),
  (e) => e.status === 400 && e.param === 'tool_choice');
  console.log(`constrained: ${n3} JSON-form and ${n35} XML-form tool calls valid, ${checked} json_schema answers valid`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
