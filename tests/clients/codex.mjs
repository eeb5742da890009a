// Codex CLI (`codex exec`, @openai/codex) against `edge0 serve` through the
// Responses API, with a logging proxy in between (tests/clients/proxy.mjs):
//   exec: codex exec completes a turn: exit 0, its --json events hold
//     turn.completed and no turn.failed, its requests went to POST
//     /v1/responses (streamed), and the last message it wrote validates
//     (ajv) against the --output-schema given.
// Codex reads a config.toml in a throw-away CODEX_HOME: a model provider
// pointing at the server (wire_api "responses", the key from env_key), no
// retries, analytics and the update check off; --strict-config makes codex
// refuse a key it does not know. The demo model is random noise and never
// ends a turn (Codex takes a response cut off by max_output_tokens as a
// failed turn), so the turn asks, with codex's own --output-schema, for a
// small JSON object (text.format json_schema): constrained decoding ends it.
//
//     node tests/clients/codex.mjs BASE_URL KEY [CASE]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { base, key, model, clientsDir, run, check, validate } from './lib.mjs';
import { startProxy } from './proxy.mjs';

const schema = {
  type: 'object',
  properties: { answer: { type: 'string', maxLength: 24 }, done: { type: 'boolean' } },
  required: ['answer', 'done'],
  additionalProperties: false,
};

async function exec() {
  const proxy = await startProxy(base);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'edge0-codex-'));
  try {
    const codexHome = path.join(home, 'codex'), work = path.join(home, 'work');
    fs.mkdirSync(codexHome);
    fs.mkdirSync(work);
    fs.writeFileSync(path.join(codexHome, 'config.toml'), [
      `model = "${model}"`,
      'model_provider = "edge0"',
      'check_for_update_on_startup = false',
      '',
      '[analytics]',
      'enabled = false',
      '',
      '[model_providers.edge0]',
      'name = "edge0"',
      `base_url = "${proxy.url}/v1"`,
      'env_key = "EDGE0_API_KEY"',
      'wire_api = "responses"',
      'request_max_retries = 0',
      'stream_max_retries = 0',
      '',
    ].join('\n'));
    fs.writeFileSync(path.join(home, 'schema.json'), JSON.stringify(schema));
    const last = path.join(home, 'last.txt');
    const args = [path.join(clientsDir, 'node_modules', '@openai', 'codex', 'bin', 'codex.js'), 'exec',
      '--skip-git-repo-check', '--ephemeral', '--strict-config', '--json', '--sandbox', 'read-only',
      '--output-schema', path.join(home, 'schema.json'), '-o', last, 'Say hello.'];
    const env = { PATH: process.env.PATH, HOME: home, CODEX_HOME: codexHome, EDGE0_API_KEY: key };
    const ch = spawn(process.execPath, args, { env, cwd: work, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    ch.stdout.on('data', (d) => { out += d; });
    ch.stderr.on('data', (d) => { err += d; });
    const code = await new Promise((ok) => ch.on('close', ok));
    const events = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const failed = events.find((e) => e.type === 'turn.failed' || e.type === 'error');
    check(!failed, 'codex: ' + (failed && JSON.stringify(failed.error || failed.message).slice(0, 300)));
    check(code === 0, `codex exited ${code}: ${(err || out).slice(-300)}`);
    check(events.some((e) => e.type === 'turn.completed'), 'no turn.completed event');
    const reqs = proxy.seen.filter((s) => s.method === 'POST' && s.path === '/v1/responses');
    check(reqs.length >= 1 && reqs.every((s) => s.status === 200), 'POST /v1/responses: ' + reqs.map((s) => s.status));
    check(reqs[0].json.stream === true && reqs[0].json.text && reqs[0].json.text.format, 'codex sent a streamed request with text.format');
    const text = fs.readFileSync(last, 'utf8');
    validate(schema, JSON.parse(text), 'the last message');
    return `exit 0, turn completed, ${reqs.length} /v1/responses request(s), last message ${text.trim()} validates`;
  } finally {
    await proxy.close();
    fs.rmSync(home, { recursive: true, force: true });
  }
}

await run('codex', { exec });
