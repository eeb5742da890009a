// Claude Code (`claude -p`, @anthropic-ai/claude-code) against `edge0 serve`
// through the Messages API, with a logging proxy in between
// (tests/clients/proxy.mjs):
//   print: claude -p completes a turn: exit 0, its JSON result is a success
//     (is_error false) with non-empty text, and its requests went to
//     /v1/messages;
//   clean: the same, and edge0 accepted every request Claude Code sent (no
//     400 that Claude Code had to work around by dropping fields).
// The demo model is random noise: it never ends a turn, and Claude Code
// takes a turn cut off by max_tokens as an error. So the proxy adds
// stop_sequences ["."] (a field of the Messages API) to each request, and the
// turn ends as a real model's would, with stop_reason stop_sequence;
// everything else goes as Claude Code sent it. Claude Code runs with a
// throw-away config directory, its telemetry, auto-updater and other
// traffic off, the served model id for all its model slots, and six of its
// built-in tools (all of them make a 19k-token prompt, ~40 s to prefill on
// two cores).
//
//     node tests/clients/claude.mjs BASE_URL KEY [CASE]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { base, key, model, clientsDir, run, check } from './lib.mjs';
import { startProxy } from './proxy.mjs';

async function claude() {
  const proxy = await startProxy(base, (body, req) =>
    req.url.startsWith('/v1/messages') && !req.url.startsWith('/v1/messages/count_tokens')
      ? { ...body, stop_sequences: ['.'] } : body);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'edge0-claude-'));
  try {
    const env = {
      PATH: process.env.PATH, HOME: home, CLAUDE_CONFIG_DIR: home, TMPDIR: home,
      ANTHROPIC_BASE_URL: proxy.url, ANTHROPIC_API_KEY: key,
      ANTHROPIC_MODEL: model, ANTHROPIC_SMALL_FAST_MODEL: model, ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
      ANTHROPIC_DEFAULT_SONNET_MODEL: model, ANTHROPIC_DEFAULT_OPUS_MODEL: model,
      CLAUDE_CODE_MAX_OUTPUT_TOKENS: '1024',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1', DISABLE_BUG_COMMAND: '1', CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
    };
    const args = ['-p', 'Say hello in one sentence.', '--output-format', 'json', '--max-turns', '3',
      '--no-session-persistence', '--tools', 'Bash,Read,Edit,Write,Glob,Grep'];
    const bin = path.join(clientsDir, 'node_modules', '.bin', 'claude');
    const ch = spawn(bin, args, { env, cwd: home, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    ch.stdout.on('data', (d) => { out += d; });
    ch.stderr.on('data', (d) => { err += d; });
    const code = await new Promise((ok) => ch.on('close', ok));
    const at = out.lastIndexOf('\n{', out.length - 2);
    let res = null;
    try { res = JSON.parse(out.slice(at + 1)); } catch (e) { /* below */ }
    check(res, `claude exited ${code} without a JSON result: ${(out + err).slice(-400)}`);
    check(code === 0 && !res.is_error, `claude exited ${code}, is_error ${res.is_error}: ${String(res.result).slice(0, 200)}`);
    check(typeof res.result === 'string' && res.result.length > 0, 'claude printed no text');
    const msgs = proxy.seen.filter((s) => s.path.startsWith('/v1/messages'));
    check(msgs.length >= 1 && msgs.some((s) => s.status === 200), 'no /v1/messages request succeeded');
    return { res, msgs, code };
  } finally {
    await proxy.close();
    fs.rmSync(home, { recursive: true, force: true });
  }
}

await run('claude', {
  async print() {
    const { res, msgs, code } = await claude();
    const refused = msgs.filter((s) => s.status === 400).length;
    return `exit ${code}, ${res.num_turns} turn(s), ${msgs.length} /v1/messages requests (${refused} refused with 400), ` +
      `text ${JSON.stringify(res.result.slice(0, 40))}`;
  },
  async clean() {
    const { msgs } = await claude();
    const bad = msgs.filter((s) => s.status !== 200);
    const why = (s) => {
      try { return `${s.status} ${JSON.parse(s.error).error.message}`; } catch (x) { return String(s.status); }
    };
    check(bad.length === 0, `${bad.length} of ${msgs.length} /v1/messages requests refused: ` + [...new Set(bad.map(why))].join('; '));
    return `${msgs.length} /v1/messages requests, all accepted`;
  },
});
