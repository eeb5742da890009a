// The oracle of tests/test_schema_prop.c: every line of the file is a JSON
// pair [schema, instance] that edge0's grammar produced; ajv (draft 2020-12
// keywords, ajv-formats in full mode) must accept each instance.
//
//     node tests/node/schema_property.cjs PAIRS.jsonl
//
// ajv and ajv-formats come from the cache scripts/deps.sh fills ($EDGE0_NPM).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const root = process.env.EDGE0_NPM || path.join(os.homedir(), '.cache', 'edge0-npm');
const Ajv = require(path.join(root, 'node_modules', 'ajv', 'dist', '2020')); // prefixItems, $defs
const addFormats = require(path.join(root, 'node_modules', 'ajv-formats'));
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv, { mode: 'full' });

const lines = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter((l) => l.length);
const cache = new Map();
let bad = 0;
for (const line of lines) {
  const [schema, instance] = JSON.parse(line);
  const key = JSON.stringify(schema);
  let v = cache.get(key);
  if (!v) cache.set(key, (v = ajv.compile(schema)));
  if (!v(instance)) {
    fs.appendFileSync(process.argv[2] + '.bad', line + '\n');
    if (bad++ < 5) console.log('invalid: ' + JSON.stringify(instance) + '\n  schema ' + key + '\n  ' + JSON.stringify(v.errors));
  }
}
console.log(`ajv: ${lines.length - bad} of ${lines.length} instances valid (${cache.size} schemas)`);
process.exit(bad ? 1 : 0);
