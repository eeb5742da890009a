// LangChain (@langchain/openai's ChatOpenAI) against `edge0 serve`:
//   structured: withStructuredOutput(zod schema with .regex(), .min(), .max())
//     by its default method and by function calling; the result validates
//     (ajv) against the schema's JSON form and zod parses it;
//   structured_plain: the same with .max() on strings, enums and booleans.
//
//     node tests/clients/langchain.mjs BASE_URL KEY [CASE]
import { base, key, model, load, run, check, validate } from './lib.mjs';

const { ChatOpenAI } = load('@langchain/openai');
const { z } = load('zod');

async function structured(schema) {
  const json = z.toJSONSchema(schema, { target: 'draft-7' });
  const llm = new ChatOpenAI({ model, apiKey: key, configuration: { baseURL: base + '/v1' }, maxTokens: 2000,
    maxRetries: 0, timeout: 60000 });
  const said = [];
  for (const method of [undefined, 'functionCalling']) {
    const r = await llm.withStructuredOutput(schema, { name: 'record', ...(method ? { method } : {}) })
      .invoke('Make up a record.');
    validate(json, r, 'method ' + (method || 'default'));
    check(schema.safeParse(r).success, 'zod does not parse the result');
    said.push(`${method || 'default'} ${JSON.stringify(r)}`);
  }
  return said.join('; ') + ' validate';
}

await run('langchain', {
  structured: () => structured(z.object({
    code: z.string().regex(/^[A-Z]{3}-[0-9]{2}$/),
    count: z.number().int().min(2).max(9),
    name: z.string().min(1).max(12),
  })),
  structured_plain: () => structured(z.object({
    name: z.string().max(12),
    kind: z.enum(['a', 'b', 'c']),
    ok: z.boolean(),
  })),
});
