// The OpenAI Agents SDK (@openai/agents) against `edge0 serve`, with its
// default model (the Responses API, OpenAIResponsesModel) on an `openai`
// client pointed at the server through a logging proxy
// (tests/clients/proxy.mjs):
//   tool: an Agent with one function tool (zod parameters) runs: the tool
//     ran (its side effect), the next request sent its result back (a
//     function_call_output item with the tool's output and the call's
//     call_id), and the run ended with a final output;
//   tool_typed: the same with a zod output type (text.format json_schema in
//     every request, the first one with tool_choice "required" too), and the
//     final output validates (ajv) against the output type's JSON schema.
// The demo model is random noise, so the tool is forced
// (modelSettings.toolChoice "required"; the SDK resets it after the call);
// the final turn ends with the JSON that the output type asks for
// (tool_typed) or that the proxy asks for (tool: below).
//
//     node tests/clients/agents.mjs BASE_URL KEY [CASE]
import { base, key, model, load, run, check, validate } from './lib.mjs';
import { startProxy } from './proxy.mjs';

const agents = load('@openai/agents');
const OpenAI = load('openai').default;
const { z } = load('zod');

// The answer after the tool's result, for the untyped agent: a small JSON
// object (text.format json_schema, a field of the Responses API) that the
// proxy asks for, so that the noise model's turn ends (the SDK takes a
// response cut off by max_output_tokens as a failed run).
const answerFormat = { type: 'json_schema', name: 'answer', strict: true, schema: { type: 'object',
  properties: { answer: { type: 'string', maxLength: 24 } }, required: ['answer'], additionalProperties: false } };
const endTurn = (body) => Array.isArray(body.input) && body.input.some((i) => i.type === 'function_call_output') &&
  !(body.text && body.text.format && body.text.format.type !== 'text') ? { ...body, text: { format: answerFormat } } : body;

async function tool(typed) {
  const proxy = await startProxy(base, typed ? null : endTurn);
  try {
    agents.setTracingDisabled(true);
    agents.setDefaultOpenAIClient(new OpenAI({ baseURL: proxy.url + '/v1', apiKey: key, maxRetries: 0, timeout: 60000 }));
    agents.setOpenAIAPI('responses');
    const ran = [];
    const getWeather = agents.tool({
      name: 'get_weather',
      description: 'The current weather in a city',
      parameters: z.object({ city: z.string().max(16) }),
      execute: async ({ city }) => {
        ran.push(city);
        return `sunny, 21 degrees in ${city}`;
      },
    });
    const outputSchema = { type: 'object', properties: { summary: { type: 'string', maxLength: 24 } },
      required: ['summary'], additionalProperties: false };
    const agent = new agents.Agent({
      name: 'Weather', instructions: 'Answer with the weather tool.', model, tools: [getWeather],
      modelSettings: { toolChoice: 'required', parallelToolCalls: false, maxTokens: 2000 },
      ...(typed ? { outputType: z.object({ summary: z.string().max(24) }) } : {}),
    });
    const result = await agents.run(agent, 'What is the weather in Zürich?', { maxTurns: 3 });
    check(ran.length >= 1, 'the tool never ran');
    const reqs = proxy.seen.filter((s) => s.method === 'POST' && s.path === '/v1/responses');
    check(reqs.length >= 2, 'requests to /v1/responses: ' + reqs.length);
    check(reqs[0].json.tool_choice === 'required', 'first request tool_choice ' + JSON.stringify(reqs[0].json.tool_choice));
    const calls = reqs[1].json.input.filter((i) => i.type === 'function_call');
    const outs = reqs[1].json.input.filter((i) => i.type === 'function_call_output');
    check(calls.length >= 1 && outs.length >= 1, 'the second request has no function_call / function_call_output');
    check(outs[0].call_id === calls[0].call_id, 'function_call_output call_id');
    const sent = typeof outs[0].output === 'string' ? outs[0].output : JSON.stringify(outs[0].output);
    check(sent.includes('21 degrees'), 'function_call_output: ' + sent.slice(0, 100));
    if (typed) validate(outputSchema, result.finalOutput, 'finalOutput');
    else validate(answerFormat.schema, JSON.parse(result.finalOutput), 'finalOutput');
    return `tool ran for ${JSON.stringify(ran[0])}, its output went back in request 2 of ${reqs.length}, ` +
      `finalOutput ${JSON.stringify(result.finalOutput)} validates`;
  } finally {
    await proxy.close();
  }
}

await run('agents', { tool: () => tool(false), tool_typed: () => tool(true) });
