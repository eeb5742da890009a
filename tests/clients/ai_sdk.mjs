// The AI SDK (`ai` with @ai-sdk/openai-compatible, structured outputs on)
// against `edge0 serve`'s Chat Completions:
//   object: generateObject, and streamText with an Output.object output, with a zod schema using
//     .regex(), .min() and .max() (pattern, minimum/maximum, minLength/
//     maxLength in its JSON schema); the object validates (ajv) against the
//     JSON schema the SDK sent, and zod parses it;
//   object_plain: the same with a schema of .max() on strings, enums and
//     booleans only.
//
//     node tests/clients/ai_sdk.mjs BASE_URL KEY [CASE]
import { base, key, model, load, run, check, validate } from './lib.mjs';

globalThis.AI_SDK_LOG_WARNINGS = false; // generateObject's deprecation notice
const ai = load('ai');
const { createOpenAICompatible } = load('@ai-sdk/openai-compatible');
const { z } = load('zod');

const provider = createOpenAICompatible({ name: 'edge0', baseURL: base + '/v1', apiKey: key,
  supportsStructuredOutputs: true });

async function object(schema) {
  const json = z.toJSONSchema(schema, { target: 'draft-7' });
  const prompt = 'Make up a record.';
  const r = await ai.generateObject({ model: provider(model), schema, prompt, maxOutputTokens: 600, maxRetries: 0 });
  validate(json, r.object, 'generateObject');
  check(schema.safeParse(r.object).success, 'zod does not parse generateObject\'s object');
  let failed = null;
  const s = ai.streamText({ model: provider(model), output: ai.Output.object({ schema }), prompt, maxOutputTokens: 600,
    maxRetries: 0, onError: ({ error }) => { failed = error; } });
  let parts = 0;
  for await (const _ of s.partialOutputStream) parts++;
  if (failed) throw failed;
  const streamed = await s.output;
  validate(json, streamed, 'streamText output');
  return `generateObject ${JSON.stringify(r.object)} and streamText's output (${parts} partial objects) validate`;
}

await run('ai_sdk', {
  object: () => object(z.object({
    code: z.string().regex(/^[A-Z]{3}-[0-9]{2}$/),
    count: z.number().int().min(2).max(9),
    name: z.string().min(1).max(12),
  })),
  object_plain: () => object(z.object({
    name: z.string().max(12),
    kind: z.enum(['a', 'b', 'c']),
    ok: z.boolean(),
  })),
});
