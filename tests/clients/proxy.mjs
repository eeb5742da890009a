// A logging HTTP proxy in front of `edge0 serve` for the client tests: it
// forwards every request as it came (method, path, headers, body) and
// streams the answer back, and keeps what the clients sent (method, path,
// status, the JSON body, the start of an error answer) so that a test can check what a client did. An
// optional edit(body, req) may change a JSON request body before it is
// forwarded; it returns the body to send.
import http from 'node:http';

export async function startProxy(target, edit) {
  const seen = [];
  const up = new URL(target);
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      let body = Buffer.concat(parts);
      const entry = { method: req.method, path: req.url, status: 0, json: null };
      if (body.length) {
        try {
          entry.json = JSON.parse(body.toString('utf8'));
          if (edit) {
            const edited = edit(entry.json, req);
            if (edited !== entry.json) body = Buffer.from(JSON.stringify(edited));
          }
        } catch (e) { /* not JSON: forwarded as is */ }
      }
      seen.push(entry);
      const headers = { ...req.headers, host: up.host, 'content-length': String(body.length) };
      const fwd = http.request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, (r) => {
        entry.status = r.statusCode;
        res.writeHead(r.statusCode, r.headers);
        if (r.statusCode >= 400) { // keep the start of an error's body
          entry.error = '';
          r.on('data', (d) => { if (entry.error.length < 2000) entry.error += d.toString('utf8'); });
        }
        r.pipe(res);
        // A client may hang up once it has the last event it needs (Codex
        // does after response.completed), before the server's end of the
        // stream: unpiped, the rest of the answer would never be read and the
        // connection to the server would keep this process alive.
        res.on('close', () => { if (!r.complete) r.destroy(); });
      });
      fwd.on('error', (e) => {
        entry.status = 502;
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end('proxy: ' + e.message);
      });
      fwd.end(body);
    });
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => new Promise((ok) => { server.closeAllConnections(); server.close(ok); }),
  };
}
