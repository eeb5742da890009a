// The official `@anthropic-ai/sdk` npm client against edge0 serve's Messages
// API: messages.create plain and streamed (messages.stream with its event
// helpers and finalMessage), a system prompt, thinking / text / tool_use
// blocks, the next turn with the tool_use blocks sent back and tool_result
// blocks from the user, count_tokens, and errors as the SDK's error classes.
// Run by tests/test_messages.c against its in-process server, whose model
// output is scripted: a message "SCRIPT:TEXT" is answered with TEXT (the tiny
// test model's noise never writes a tool call). The forced tool_use of
// tool_choice {type: "tool"} is tests/node/anthropic_tool_forced.cjs.
//
//     node tests/node/anthropic_messages.cjs PORT KEY
//
// The client comes from the cache scripts/deps.sh fills ($EDGE0_NPM, default
// ~/.cache/edge0-npm), pinned there; nothing is installed in the repository.
'use strict';
const assert = require('assert');
const os = require('os');
const path = require('path');

const root = process.env.EDGE0_NPM || path.join(os.homedir(), '.cache', 'edge0-npm');
const Anthropic = require(path.join(root, 'node_modules', '@anthropic-ai', 'sdk'));
const [port, key] = process.argv.slice(2);
const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: key, maxRetries: 0, timeout: 60000 });

const model = 'claude-sonnet-4-0'; // any name: the server answers with its model
const tools = [
  { name: 'get_weather', description: 'Current weather', input_schema: { type: 'object', properties: {
    city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } },
  { name: 'search', input_schema: { type: 'object', properties: { query: { type: 'string' } } } },
];
const script = 'Checking.</think>\n\nLet me look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n' +
  '</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n' +
  '<parameter=query>\n"edge0" <MoE>\n</parameter>\n</function>\n</tool_call>';
const user = { role: 'user', content: 'SCRIPT:' + script };

function checkToolMessage(m, what) {
  assert.strictEqual(m.type, 'message');
  assert.strictEqual(m.role, 'assistant');
  assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/, what + ': id');
  assert.strictEqual(m.stop_reason, 'tool_use', what + ': stop_reason');
  assert.deepStrictEqual(m.content.map((b) => b.type), ['thinking', 'text', 'tool_use', 'tool_use'], what + ': blocks');
  assert.strictEqual(m.content[0].thinking, 'Checking.');
  assert.strictEqual(m.content[1].text, 'Let me look.');
  assert.strictEqual(m.content[2].name, 'get_weather');
  assert.deepStrictEqual(m.content[2].input, { city: 'Zürich', days: 2 }, what + ': input');
  assert.strictEqual(m.content[3].name, 'search');
  assert.deepStrictEqual(m.content[3].input, { query: '"edge0" <MoE>' });
  for (const b of m.content.slice(2)) assert.match(b.id, /^toolu_[A-Za-z0-9]{24}$/, what + ': tool_use id');
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, what + ': usage');
}

async function main() {
  // plain, with a system prompt: the answer comes from the system's script
  const hello = await client.messages.create({ model, max_tokens: 64, system: 'SCRIPT:</think>\n\nFrom the system.',
    messages: [{ role: 'user', content: 'Hello' }] });
  assert.strictEqual(hello.content.length, 1);
  assert.strictEqual(hello.content[0].type, 'text');
  assert.strictEqual(hello.content[0].text, 'From the system.');
  assert.strictEqual(hello.stop_reason, 'end_turn');
  assert.strictEqual(hello.stop_sequence, null);

  // tool_use blocks, plain
  const plain = await client.messages.create({ model, max_tokens: 256, tools, messages: [user] });
  checkToolMessage(plain, 'plain');

  // streamed: the SDK's stream helper rebuilds the message from the events
  const seen = { text: '', thinking: '', json: 0, blocks: 0 };
  const stream = client.messages.stream({ model, max_tokens: 256, tools, messages: [user] });
  stream.on('text', (d) => { seen.text += d; });
  stream.on('thinking', (d) => { seen.thinking += d; });
  stream.on('inputJson', () => { seen.json++; });
  stream.on('contentBlock', () => { seen.blocks++; });
  const final = await stream.finalMessage();
  checkToolMessage(final, 'stream');
  assert.strictEqual(seen.text, 'Let me look.');
  assert.strictEqual(seen.thinking, 'Checking.');
  assert.ok(seen.json >= 2, 'input_json_delta events');
  assert.strictEqual(seen.blocks, 4);

  // the next turn: the assistant's blocks sent back as they came, the tool results from the user
  const next = await client.messages.create({ model, max_tokens: 64, tools, messages: [
    user,
    { role: 'assistant', content: plain.content },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: plain.content[2].id, content: 'SCRIPT:</think>\n\nSunny, and two results.' },
      { type: 'tool_result', tool_use_id: plain.content[3].id, content: [{ type: 'text', text: 'none' }] },
    ] },
  ] });
  assert.strictEqual(next.content[0].text, 'Sunny, and two results.');
  assert.strictEqual(next.stop_reason, 'end_turn');

  // count_tokens: what the create above was given
  const count = await client.messages.countTokens({ model, tools, messages: [user] });
  assert.strictEqual(count.input_tokens, plain.usage.input_tokens);

  // errors as the SDK's classes
  const wrong = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 && e.error.error.type === 'authentication_error');
  await assert.rejects(client.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }],
    metadata: { user_id: 'u', tier: 'gold' } }),
  (e) => e instanceof Anthropic.BadRequestError && e.error.error.type === 'invalid_request_error' &&
    /metadata\.tier/.test(e.message));
  await assert.rejects(client.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }),
  (e) => e instanceof Anthropic.BadRequestError && /image/.test(e.message));
  await assert.rejects(client.messages.batches.create({ requests: [] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error');
  console.log('@anthropic-ai/sdk ' + require(path.join(root, 'node_modules', '@anthropic-ai', 'sdk', 'package.json')).version +
    ': messages plain and streamed, system, thinking / text / tool_use blocks, the tool turn, count_tokens and errors ' +
    'as the client reads them');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
