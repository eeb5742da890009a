// The official `openai` npm client against edge0 serve: tool calls plain and
// streamed (the client's own stream accumulator), the next turn with the
// call and its result sent back, errors as the client reads them, and
// /v1/models/{id}. Run by tests/test_server.c against its in-process server,
// whose model output is scripted: a user message "SCRIPT:TEXT" is answered
// with TEXT (the tiny test model's noise never writes a tool call).
//
//     node tests/node/openai_tools.cjs PORT KEY
//
// The client comes from the cache scripts/deps.sh fills ($EDGE0_NPM, default
// ~/.cache/edge0-npm), pinned there; nothing is installed in the repository.
'use strict';
const assert = require('assert');
const os = require('os');
const path = require('path');

const root = process.env.EDGE0_NPM || path.join(os.homedir(), '.cache', 'edge0-npm');
const OpenAI = require(path.join(root, 'node_modules', 'openai'));
const [port, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });

const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {
    city: { type: 'string' }, days: { type: 'integer' }, where: { type: 'object' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'search', parameters: { type: 'object', properties: {
    query: { type: 'string' } } } } },
];
const script = 'Checking.</think>\n\nLet me look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n' +
  '</parameter>\n<parameter=days>\n2\n</parameter>\n<parameter=where>\n{"lat": [47.4, {"x": null}]}\n</parameter>\n' +
  '</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n"edge0" <MoE>\n</parameter>\n' +
  '</function>\n</tool_call>';
const want = [
  ['get_weather', { city: 'Zürich', days: 2, where: { lat: [47.4, { x: null }] } }],
  ['search', { query: '"edge0" <MoE>' }],
];
const messages = [{ role: 'user', content: 'SCRIPT:' + script }];

function checkCalls(msg, what) {
  assert.strictEqual(msg.content || '', 'Let me look.', what + ': content');
  assert.strictEqual(msg.tool_calls.length, want.length, what + ': number of calls');
  msg.tool_calls.forEach((c, i) => {
    assert.match(c.id, /^call_[A-Za-z0-9]{24}$/, what + ': id');
    assert.strictEqual(c.type, 'function');
    assert.strictEqual(c.function.name, want[i][0], what + ': name');
    assert.deepStrictEqual(JSON.parse(c.function.arguments), want[i][1], what + ': arguments');
  });
}

async function main() {
  const r = await client.chat.completions.create({ model: 'm', messages, tools });
  assert.strictEqual(r.choices[0].finish_reason, 'tool_calls');
  checkCalls(r.choices[0].message, 'plain');

  // the client's stream helper rebuilds the message from the deltas
  const stream = client.beta.chat.completions.stream({ model: 'm', messages, tools, stream: true });
  const final = await stream.finalChatCompletion();
  assert.strictEqual(final.choices[0].finish_reason, 'tool_calls');
  checkCalls(final.choices[0].message, 'stream');

  // raw chunks: no markup in any content delta
  const chunks = await client.chat.completions.create({ model: 'm', messages, tools, stream: true });
  let text = '';
  for await (const ch of chunks) for (const c of ch.choices) text += c.delta.content || '';
  assert.strictEqual(text, 'Let me look.');

  // the next turn: the call as the client returned it, and the results
  const next = await client.chat.completions.create({ model: 'm', tools, messages: [
    { role: 'user', content: 'SCRIPT:</think>\n\nSunny, and two results.' },
    r.choices[0].message,
    ...r.choices[0].message.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: 'ok' })),
  ] });
  assert.strictEqual(next.choices[0].message.content, 'Sunny, and two results.');
  assert.strictEqual(next.choices[0].finish_reason, 'stop');

  // what is not supported yet is an error the client can read, naming the option
  await assert.rejects(client.chat.completions.create({ model: 'm', messages, tools,
    tool_choice: { type: 'function', function: { name: 'missing' } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'tool_choice');
  await assert.rejects(client.chat.completions.create({ model: 'm', messages, response_format: { type: 'json_schema',
    json_schema: { name: 'x', schema: { type: 'string', pattern: '(?<=a)b' } } } }),
  (e) => e.status === 400 && e.param === 'response_format' && /'pattern'/.test(e.message));

  const m = await client.models.retrieve('m');
  assert.strictEqual(m.id, 'm');
  await assert.rejects(client.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError);
  console.log('openai ' + require(path.join(root, 'node_modules', 'openai', 'package.json')).version +
    ': tool calls plain and streamed, the next turn, errors and models as the client reads them');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
