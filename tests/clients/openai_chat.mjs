// The `openai` npm client's Chat Completions against `edge0 serve`:
//   plain, stream: an answer of at most max_tokens tokens, usage counted;
//   tool, tool_keywords: tool_choice "required" and a named function, plain
//     and streamed; the arguments validate (ajv) against the tool's schema:
//     plainSchema, and keywordSchema (pattern, format, minimum/maximum);
//   json_schema, json_schema_keywords: response_format json_schema, the
//     content validates against the schema.
//
//     node tests/clients/openai_chat.mjs BASE_URL KEY [CASE]
import { base, key, model, load, run, check, validate, keywordSchema, plainSchema } from './lib.mjs';

const OpenAI = load('openai').default;
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'user', content: 'What is the weather in Zürich?' }];

async function plain() {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 32 });
  const c = r.choices[0];
  check(r.object === 'chat.completion', 'object: ' + r.object);
  check(c.message.role === 'assistant', 'role: ' + c.message.role);
  check(['stop', 'length'].includes(c.finish_reason), 'finish_reason: ' + c.finish_reason);
  check(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 32, 'completion_tokens: ' + r.usage.completion_tokens);
  check(r.usage.prompt_tokens > 0, 'prompt_tokens');
  return `${r.usage.completion_tokens} tokens, finish ${c.finish_reason}`;
}

async function stream() {
  const s = await client.chat.completions.create({ model, messages, max_tokens: 32, stream: true,
    stream_options: { include_usage: true } });
  let text = '', chunks = 0, finish = null, usage = null;
  for await (const ch of s) {
    check(ch.object === 'chat.completion.chunk', 'chunk object: ' + ch.object);
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text += c.delta.content || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
    chunks++;
  }
  check(chunks >= 2, 'chunks: ' + chunks);
  check(['stop', 'length'].includes(finish), 'finish_reason: ' + finish);
  check(usage && usage.completion_tokens >= 1 && usage.completion_tokens <= 32, 'usage chunk');
  return `${chunks} chunks, ${usage.completion_tokens} tokens, finish ${finish}`;
}

function checkCalls(msg, finish, schema, name, what) {
  check(finish === 'tool_calls', what + ': finish_reason ' + finish);
  check(msg.tool_calls && msg.tool_calls.length >= 1, what + ': no tool_calls');
  for (const c of msg.tool_calls) {
    check(c.type === 'function' && c.function.name === name, what + ': function ' + c.function.name);
    validate(schema, JSON.parse(c.function.arguments), what + ' arguments');
  }
  return msg.tool_calls.length;
}

async function forced(schema) {
  const tools = [{ type: 'function', function: { name: 'lookup', description: 'Look a record up', parameters: schema } },
    { type: 'function', function: { name: 'noop', parameters: { type: 'object', properties: {}, additionalProperties: false } } }];
  // max_tokens above the longest call the grammar allows (up to 33 characters of whitespace between
  // any two JSON tokens: ~600 tokens for these schemas), one call a reply: a sampled call always ends
  const req = { model, messages, tools, max_tokens: 2000, chat_template_kwargs: { enable_thinking: false } };
  let n = 0;
  let r = await client.chat.completions.create({ ...req, tool_choice: 'required', parallel_tool_calls: false });
  // required: either tool may come; validate against the one named
  const msg = r.choices[0].message;
  check(r.choices[0].finish_reason === 'tool_calls', 'required: finish_reason ' + r.choices[0].finish_reason);
  for (const c of msg.tool_calls || []) {
    const t = tools.find((x) => x.function.name === c.function.name);
    check(t, 'required: unknown function ' + c.function.name);
    validate(t.function.parameters, JSON.parse(c.function.arguments), 'required ' + c.function.name);
    n++;
  }
  check(n === 1, 'required, parallel_tool_calls false: calls ' + n);
  const named = { type: 'function', function: { name: 'lookup' } };
  r = await client.chat.completions.create({ ...req, tool_choice: named, parallel_tool_calls: false, temperature: 0.9, seed: 3 });
  n += checkCalls(r.choices[0].message, r.choices[0].finish_reason, schema, 'lookup', 'named');
  const s = client.chat.completions.stream({ ...req, tool_choice: named, parallel_tool_calls: false, stream: true });
  const fin = await s.finalChatCompletion();
  n += checkCalls(fin.choices[0].message, fin.choices[0].finish_reason, schema, 'lookup', 'named, streamed');
  const args = JSON.parse(fin.choices[0].message.tool_calls[0].function.arguments);
  return `${n} forced calls valid (required, named, named streamed), e.g. ${JSON.stringify(args)}`;
}

async function jsonSchema(schema) {
  const req = { model, messages, max_tokens: 2000, chat_template_kwargs: { enable_thinking: false },
    response_format: { type: 'json_schema', json_schema: { name: 'record', schema, strict: true } } };
  const r = await client.chat.completions.create(req);
  check(r.choices[0].finish_reason === 'stop', 'finish_reason ' + r.choices[0].finish_reason);
  const v = JSON.parse(r.choices[0].message.content);
  validate(schema, v, 'content');
  const s = client.chat.completions.stream({ ...req, stream: true, seed: 5, temperature: 1 });
  const fin = await s.finalChatCompletion();
  check(fin.choices[0].finish_reason === 'stop', 'streamed: finish_reason ' + fin.choices[0].finish_reason);
  validate(schema, JSON.parse(fin.choices[0].message.content), 'streamed content');
  return `plain and streamed content validate, e.g. ${JSON.stringify(v)}`;
}

await run('openai_chat', {
  plain,
  stream,
  tool: () => forced(plainSchema),
  tool_keywords: () => forced(keywordSchema),
  json_schema: () => jsonSchema(plainSchema),
  json_schema_keywords: () => jsonSchema(keywordSchema),
});
