// Runs the console page's script in Node against a served engine, with a minimal DOM
// and an EventSource reading the real /api/stream. Prints one JSON line per step.
// usage: node console_harness.js BASE_URL SCRIPT_FILE
const fs = require('fs');
const [base, scriptFile] = process.argv.slice(2);
const registry = {};
class El {
  constructor(id) { this.id = id || ''; this.innerHTML = ''; this.textContent = ''; this.value = '';
    this.className = ''; this.children = []; this.classList = { toggle: (c, on) => { this[c] = on; } }; }
  prepend(c) { this.children.unshift(c); if (c.id) registry[c.id] = c; }
  append(c) { this.children.push(c); if (c.id) registry[c.id] = c; }
}
const byId = id => (registry[id] ||= new El(id));
global.document = {
  querySelector: s => byId(s.replace(/^#/, '')),
  querySelectorAll: () => Object.values(registry).filter(e => e.className.split(' ').includes('ev')),
  // a row's nested count span (written through innerHTML) exists once its row does
  getElementById: id => registry[id] || (id.startsWith('n-') && registry['ev-' + id.slice(2)] ? byId(id) : null),
  createElement: () => new El(),
};
const store = {};
global.localStorage = { getItem: k => store[k] ?? null, setItem: (k, v) => { store[k] = v; } };
const realFetch = fetch;
global.fetch = (path, opts) => realFetch(base + path, opts);
global.EventSource = class {
  constructor(path) { this.listeners = {}; this.run(path); }
  addEventListener(k, f) { this.listeners[k] = f; }
  async run(path) {
    const res = await realFetch(base + path);
    if (this.onopen) this.onopen();
    console.log(JSON.stringify({ step: 'open' }));
    const dec = new TextDecoder(); let buf = '';
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i); buf = buf.slice(i + 2);
        const kind = (block.match(/^event: (.*)$/m) || [])[1];
        const data = (block.match(/^data: (.*)$/m) || [])[1];
        if (kind && data && this.listeners[kind]) this.listeners[kind]({ data });
      }
    }
  }
};
const sleep = ms => new Promise(r => setTimeout(r, ms));
async function until(f, what) {
  for (let i = 0; i < 1200; i++) { const v = f(); if (v) return v; await sleep(50); }
  throw new Error('timed out: ' + what);
}
(async () => {
  (0, eval)(fs.readFileSync(scriptFile, 'utf8'));  // global scope, as a <script>
  const eid = (await new Promise(r => process.stdin.once('data', d => r(String(d).trim()))));
  const row = await until(() => document.getElementById('ev-' + eid), 'the alert row');
  console.log(JSON.stringify({ step: 'row', html: row.innerHTML }));
  await until(() => (document.getElementById('n-' + eid) || {}).textContent?.startsWith('1 '), 'an output counted');
  row.onclick();
  await until(() => byId('main').innerHTML.includes('Recall hist'), 'the detail');
  console.log(JSON.stringify({ step: 'detail', html: byId('main').innerHTML }));
  byId('tk').value = '30';
  byId('acc').onclick();
  await until(() => byId('msg').textContent, 'the steering answer');
  console.log(JSON.stringify({ step: 'accelerate', msg: byId('msg').textContent }));
  process.exit(0);
})().catch(e => { console.log(JSON.stringify({ step: 'error', error: String(e) })); process.exit(1); });
