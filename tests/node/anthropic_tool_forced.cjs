// A forced tool call through the Messages API with the official
// `@anthropic-ai/sdk`: tool_choice {type: "tool", name} and {type: "any"}
// against a real model, plain and streamed. The tiny random test model never
// writes a tool call of its own, so this holds only because constrained
// decoding enforces the choice. Run by tests/test_messages.c
// (test_node_anthropic_forced) against `edge0 serve` of the tiny model.
//
//     node tests/node/anthropic_tool_forced.cjs PORT KEY
//
// Checked: the answer holds a tool_use block of the forced tool whose input
// is an object that satisfies the schema (required members present, typed
// as declared), stop_reason tool_use; the stream's input_json_delta events
// rebuild the same kind of input (finalMessage), and the events come in
// Anthropic's order (the SDK's stream helper throws otherwise).
'use strict';
const assert = require('assert');
const os = require('os');
const path = require('path');

const root = process.env.EDGE0_NPM || path.join(os.homedir(), '.cache', 'edge0-npm');
const Anthropic = require(path.join(root, 'node_modules', '@anthropic-ai', 'sdk'));
const [port, key] = process.argv.slice(2);
const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: key, maxRetries: 0, timeout: 120000 });

const model = 'edge0';
// Noise weights never end a string or a thought on their own: the strings
// are bounded by the schema, no other members are allowed, and thinking is off (its block would take the
// tokens first).
const thinking = { type: 'disabled' };
const tools = [
  { name: 'get_weather', description: 'Current weather for a city', input_schema: { type: 'object', properties: {
    city: { type: 'string', maxLength: 24 }, days: { type: 'integer' }, metric: { type: 'boolean' } }, required: ['city', 'days'], additionalProperties: false } },
  { name: 'search', description: 'Search the web', input_schema: { type: 'object', properties: {
    query: { type: 'string', maxLength: 24 } }, required: ['query'], additionalProperties: false } },
];
const messages = [{ role: 'user', content: 'What is the weather in Zürich for the next two days?' }];

function checkInput(name, input) {
  const schema = tools.find((t) => t.name === name).input_schema;
  assert.strictEqual(typeof input, 'object');
  assert.ok(input !== null && !Array.isArray(input), name + ': input is an object');
  for (const r of schema.required) assert.ok(r in input, name + ': required ' + r);
  for (const [k, v] of Object.entries(input)) {
    const t = schema.properties[k] && schema.properties[k].type;
    if (t === 'string') assert.strictEqual(typeof v, 'string', name + '.' + k);
    if (t === 'integer') assert.ok(Number.isInteger(v), name + '.' + k);
    if (t === 'boolean') assert.strictEqual(typeof v, 'boolean', name + '.' + k);
  }
}

function checkForced(m, names, what) {
  const uses = m.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1, what + ': a tool_use block');
  for (const u of uses) {
    assert.ok(names.includes(u.name), what + ': the forced tool, not ' + u.name);
    assert.match(u.id, /^toolu_[A-Za-z0-9]{24}$/);
    checkInput(u.name, u.input);
  }
  assert.strictEqual(m.stop_reason, 'tool_use', what + ': stop_reason');
}

async function main() {
  // one call each: with parallel calls allowed, noise weights go on calling
// until max_tokens (the grammar lets a call follow a call)
  const named = { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true };
  const plain = await client.messages.create({ model, max_tokens: 600, temperature: 0, thinking, tools, tool_choice: named, messages });
  checkForced(plain, ['get_weather'], 'tool, plain');

  let json = 0;
  const stream = client.messages.stream({ model, max_tokens: 600, temperature: 0, thinking, tools, tool_choice: named, messages });
  stream.on('inputJson', () => { json++; });
  const final = await stream.finalMessage();
  checkForced(final, ['get_weather'], 'tool, stream');
  assert.ok(json >= 1, 'input_json_delta events');

  const any = await client.messages.create({ model, max_tokens: 600, temperature: 0, thinking, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages });
  checkForced(any, ['get_weather', 'search'], 'any');

  // one call only
  const one = await client.messages.create({ model, max_tokens: 600, temperature: 0, thinking, tools, messages,
    tool_choice: { type: 'any', disable_parallel_tool_use: true } });
  checkForced(one, ['get_weather', 'search'], 'any, one call');
  assert.strictEqual(one.content.filter((b) => b.type === 'tool_use').length, 1);
  console.log('@anthropic-ai/sdk: tool_choice tool and any enforced, plain and streamed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
