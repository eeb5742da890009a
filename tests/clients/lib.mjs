// Shared by the client tests in tests/clients: the packages pinned by
// scripts/clients_deps.sh (loaded from its cache, $EDGE0_CLIENTS), the
// command line (BASE_URL KEY [CASE]), a JSON Schema validator (ajv with
// ajv-formats: the oracle, not edge0's code) and the output of a case.
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

export const clientsDir = process.env.EDGE0_CLIENTS || path.join(os.homedir(), '.cache', 'edge0-clients');
export const load = createRequire(path.join(clientsDir, 'package.json'));

const [baseArg, keyArg, caseArg] = process.argv.slice(2);
if (!baseArg || !keyArg) {
  console.error('usage: node ' + path.basename(process.argv[1]) + ' BASE_URL API_KEY [CASE]');
  process.exit(2);
}
export const base = baseArg.replace(/\/+$/, '');
export const key = keyArg;
export const which = caseArg || 'all';
// the id the server answers to (edge0 serve --name)
export const model = process.env.E0_MODEL || 'edge0';

const Ajv = load('ajv').default;
const addFormats = load('ajv-formats').default;
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

// Throws unless value validates against schema, naming what and the errors.
export function validate(schema, value, what) {
  const v = ajv.compile(schema);
  if (!v(value)) throw new Error(`${what}: ${JSON.stringify(value)} does not validate: ${ajv.errorsText(v.errors)}`);
}

export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// The keywords the libraries emit for ordinary schemas (issue 39): a pattern,
// a format, integer bounds. Every string is bounded, so that the random
// model's noise finishes under the grammar.
export const keywordSchema = {
  type: 'object',
  properties: {
    code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' },
    day: { type: 'string', format: 'date' },
    count: { type: 'integer', minimum: 2, maximum: 9 },
    label: { type: 'string', maxLength: 12 },
  },
  required: ['code', 'day', 'count'],
  additionalProperties: false,
};

// A schema without those keywords (what edge0 enforces on main today).
export const plainSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 16 },
    days: { type: 'integer' },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'days', 'unit'],
  additionalProperties: false,
};

// Runs the named cases (all, or the one on the command line): each prints
// what it checked; any failure prints the error and exits 1.
export async function run(name, cases) {
  const names = which === 'all' ? Object.keys(cases) : [which];
  try {
    for (const n of names) {
      if (!cases[n]) throw new Error(`no case ${n} (cases: ${Object.keys(cases).join(' ')})`);
      const said = await cases[n]();
      console.log(`${name}:${n}: ok: ${said}`);
    }
  } catch (e) {
    const status = e && e.status ? ` (HTTP ${e.status})` : '';
    console.log(`FAIL${status}: ${String((e && e.message) || e).split('\n')[0].slice(0, 300)}`);
    if (process.env.E0_VERBOSE) console.error(e);
    process.exit(1);
  }
}
