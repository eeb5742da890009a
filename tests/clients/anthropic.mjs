// The `@anthropic-ai/sdk` client's Messages API against `edge0 serve`:
//   plain: a message with content blocks, usage, stop_reason;
//   tool, tool_keywords: tool_choice {type: "tool", name} and {type: "any"},
//     plain and streamed (the SDK's stream helper, which checks the event
//     order): a tool_use block of the forced tool whose input validates (ajv)
//     against the input_schema: plainSchema, and keywordSchema (pattern,
//     format, minimum/maximum).
//
//     node tests/clients/anthropic.mjs BASE_URL KEY [CASE]
import { base, key, model, load, run, check, validate, keywordSchema, plainSchema } from './lib.mjs';

const Anthropic = load('@anthropic-ai/sdk').default;
const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'user', content: 'What is the weather in Zürich?' }];

async function plain() {
  const m = await client.messages.create({ model, messages, max_tokens: 32 });
  check(m.type === 'message' && m.role === 'assistant', 'type/role');
  check(['end_turn', 'max_tokens', 'stop_sequence'].includes(m.stop_reason), 'stop_reason ' + m.stop_reason);
  check(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 32, 'usage.output_tokens ' + m.usage.output_tokens);
  return `${m.content.length} block(s), ${m.usage.output_tokens} tokens, stop ${m.stop_reason}`;
}

function checkUse(m, schema, what) {
  const uses = m.content.filter((b) => b.type === 'tool_use');
  check(uses.length >= 1, what + ': no tool_use block');
  for (const u of uses) {
    check(u.name === 'lookup', what + ': tool ' + u.name);
    validate(schema, u.input, what + ' input');
  }
  check(m.stop_reason === 'tool_use', what + ': stop_reason ' + m.stop_reason);
  return uses.length;
}

async function forced(schema) {
  const tools = [{ name: 'lookup', description: 'Look a record up', input_schema: schema }];
  const req = { model, messages, tools, max_tokens: 2000, thinking: { type: 'disabled' } };
  let n = 0, last;
  for (const tool_choice of [{ type: 'tool', name: 'lookup' }, { type: 'any' }]) {
    last = await client.messages.create({ ...req, tool_choice });
    n += checkUse(last, schema, tool_choice.type);
    const fin = await client.messages.stream({ ...req, tool_choice }).finalMessage();
    n += checkUse(fin, schema, tool_choice.type + ', streamed');
  }
  const input = last.content.find((b) => b.type === 'tool_use').input;
  return `${n} forced tool_use blocks valid (tool, any; plain and streamed), e.g. ${JSON.stringify(input)}`;
}

await run('anthropic', {
  plain,
  tool: () => forced(plainSchema),
  tool_keywords: () => forced(keywordSchema),
});
