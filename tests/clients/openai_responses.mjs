// The `openai` npm client's Responses API (client.responses.create) against
// `edge0 serve`:
//   plain: a response object with a message item of output_text, usage;
//   stream: the event sequence (response.created first, then
//     response.in_progress, output_text deltas whose concatenation is the
//     final text, response.completed or response.incomplete last), every
//     event typed and its sequence_number increasing;
//   tool: a function tool forced with tool_choice "required": a function_call
//     item whose arguments validate (ajv) against its schema; then the
//     function_call_output sent back gets an answer;
//   json_schema_keywords: text.format json_schema with keywordSchema; the
//     output text validates.
//
//     node tests/clients/openai_responses.mjs BASE_URL KEY [CASE]
import { base, key, model, load, run, check, validate, plainSchema, keywordSchema } from './lib.mjs';

const OpenAI = load('openai').default;
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0, timeout: 60000 });
const input = 'What is the weather in Zürich?';

function checkResponse(r, max, what) {
  check(r.object === 'response', what + ': object ' + r.object);
  check(/^resp_/.test(r.id), what + ': id ' + r.id);
  check(['completed', 'incomplete'].includes(r.status), what + ': status ' + r.status);
  check(Array.isArray(r.output) && r.output.length >= 1, what + ': output items');
  check(r.usage && r.usage.output_tokens >= 1 && r.usage.output_tokens <= max,
    what + ': usage.output_tokens ' + (r.usage && r.usage.output_tokens));
  check(r.usage.input_tokens > 0, what + ': usage.input_tokens');
}

async function plain() {
  const r = await client.responses.create({ model, input, max_output_tokens: 32, store: false });
  checkResponse(r, 32, 'plain');
  const msg = r.output.find((o) => o.type === 'message');
  check(msg && msg.role === 'assistant', 'plain: an assistant message item');
  check(msg.content.every((p) => p.type === 'output_text' && typeof p.text === 'string'), 'plain: output_text parts');
  check(typeof r.output_text === 'string', 'plain: output_text');
  return `status ${r.status}, ${r.usage.output_tokens} output tokens, ${r.output.length} output item(s)`;
}

async function stream() {
  const s = await client.responses.create({ model, input, max_output_tokens: 32, store: false, stream: true,
    instructions: 'Answer briefly.' });
  const types = [];
  let seq = -1, delta = '', final = null;
  for await (const ev of s) {
    check(typeof ev.type === 'string', 'an event without type');
    check(Number.isInteger(ev.sequence_number) && ev.sequence_number > seq,
      `${ev.type}: sequence_number ${ev.sequence_number} after ${seq}`);
    seq = ev.sequence_number;
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') delta += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
    check(ev.type !== 'error' && ev.type !== 'response.failed', 'stream: ' + JSON.stringify(ev));
  }
  check(types[0] === 'response.created', 'first event ' + types[0]);
  check(types.includes('response.in_progress'), 'no response.in_progress');
  check(['response.completed', 'response.incomplete'].includes(types[types.length - 1]), 'last event ' + types[types.length - 1]);
  for (const t of ['response.output_item.added', 'response.output_item.done'])
    check(types.includes(t), 'no ' + t);
  checkResponse(final, 32, 'stream final');
  const text = final.output.filter((o) => o.type === 'message').flatMap((o) => o.content)
    .filter((p) => p.type === 'output_text').map((p) => p.text).join('');
  check(text === delta, 'the deltas do not add up to the final text');
  return `${types.length} events in order, ${final.usage.output_tokens} output tokens`;
}

async function tool() {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Current weather', parameters: plainSchema,
    strict: true }];
  const r = await client.responses.create({ model, input, tools, tool_choice: 'required', max_output_tokens: 2000,
    store: false, parallel_tool_calls: false });
  checkResponse(r, 600, 'tool');
  const calls = r.output.filter((o) => o.type === 'function_call');
  check(calls.length === 1, 'tool: function_call items ' + calls.length);
  const c = calls[0];
  check(c.name === 'get_weather' && typeof c.call_id === 'string' && c.call_id, 'tool: name/call_id');
  const args = JSON.parse(c.arguments);
  validate(plainSchema, args, 'tool arguments');
  const r2 = await client.responses.create({ model, tools, max_output_tokens: 32, store: false,
    input: [{ role: 'user', content: input }, c, { type: 'function_call_output', call_id: c.call_id, output: '{"temp":21}' }] });
  checkResponse(r2, 32, 'tool result turn');
  return `function_call ${JSON.stringify(args)} validates; the function_call_output turn answered (${r2.status})`;
}

async function jsonSchemaKeywords() {
  const r = await client.responses.create({ model, input, max_output_tokens: 2000, store: false,
    text: { format: { type: 'json_schema', name: 'record', schema: keywordSchema, strict: true } } });
  checkResponse(r, 600, 'json_schema');
  check(r.status === 'completed', 'json_schema: status ' + r.status);
  const v = JSON.parse(r.output_text);
  validate(keywordSchema, v, 'output_text');
  return `output_text validates: ${JSON.stringify(v)}`;
}

await run('openai_responses', { plain, stream, tool, json_schema_keywords: jsonSchemaKeywords });
