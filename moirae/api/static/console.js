// The Moirae on-call console: incidents live (SSE), an incident's chart, norm, context,
// similar past incidents and history search, actions, and the archive. Plain JS, no build.
'use strict';
const $ = s => document.querySelector(s);
const esc = v => String(v ?? '').replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
const MAX_TICKETS = 1000000;
const list = {status: '', type: '', offset: 0, limit: 50, total: 0, items: new Map(), types: new Set()};
let selected = null, refreshTimer = null;

// -- formatting --------------------------------------------------------------------------
const num = (v, d = 1) => (typeof v === 'number' && isFinite(v)) ? v.toLocaleString('en', {maximumFractionDigits: d, minimumFractionDigits: d}) : '–';
const when = t => t ? new Date(t).toISOString().replace('T', ' ').slice(0, 16) + ' UTC' : '–';
const day = t => t ? new Date(t).toISOString().slice(0, 10) : '–';
function dur(s) {
  if (typeof s !== 'number' || !isFinite(s)) return '–';
  if (s < 60) return Math.round(s) + ' s';
  const m = Math.round(s / 60);
  return m < 60 ? m + ' min' : Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
}
const badge = (cls, text) => `<span class="badge ${cls}">${esc(text)}</span>`;
const statusBadge = i => badge('s-' + i.status, i.status);
const sevBadge = i => badge('v-' + i.severity_label, i.severity_label + (typeof i.severity === 'number' ? ' ' + num(i.severity) + ' sd' : ''));

// -- the API, errors in words ------------------------------------------------------------
function words(status, body) {
  const d = body && body.detail;
  let m;
  if (Array.isArray(d)) {
    m = d.map(e => {
      const loc = (e.loc || []).filter(x => !['body', 'query', 'path'].includes(x)).join(' ');
      return (loc ? loc + ': ' : '') + String(e.msg || 'invalid value').replace(/^Value error, /, '');
    }).join('; ');
  } else if (typeof d === 'string') m = d;
  else if (body && typeof body.message === 'string') m = body.message;
  else m = 'the server answered with status ' + status;
  const what = {401: 'Not allowed: the API token is missing or wrong. ', 403: 'Refused: ', 404: 'Not found: ', 409: 'Not possible now: ',
                413: 'Too large: ', 429: 'Slow down: ',
                422: 'Invalid input: ', 500: 'Server error: '}[status] || '';
  return what + m;
}
// the console's session: on loopback the page carries its CSRF token; elsewhere the typed
// token is exchanged for a session (POST /api/session), which the live stream needs
let csrf = (document.querySelector('meta[name="moirae-csrf"]') || {}).content || '';
async function ensureSession() {
  if (csrf || !$('#token').value) return;
  try { csrf = (await api('/api/session', {method: 'POST'})).csrf; } catch (e) { feedback('err', e.message); }
}
async function api(path, opts = {}) {
  const h = {'Content-Type': 'application/json'}, t = $('#token').value;
  if (t) h.Authorization = 'Bearer ' + t;
  if (csrf) h['X-CSRF-Token'] = csrf;
  let r;
  try { r = await fetch(path, {...opts, headers: h}); } catch (e) { throw new Error('The server cannot be reached: ' + e.message); }
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new Error(words(r.status, body));
  return body;
}

// -- feedback that stays until dismissed --------------------------------------------------
function feedback(kind, text) {
  const box = $('#fb');
  if (!box) return;
  const d = document.createElement('div');
  d.className = 'fb ' + kind;
  d.setAttribute('role', kind === 'err' ? 'alert' : 'status');
  d.innerHTML = `<span class="fbtext">${esc(text)}</span><button title="dismiss" aria-label="dismiss">×</button>`;
  d.querySelector('button').onclick = () => d.remove();
  box.append(d);
}

// -- the incident list ---------------------------------------------------------------------
function matches(i) {
  return (!list.status || i.status === list.status) && (!list.type || i.event === list.type);
}
function noteType(t) {
  if (list.types.has(t)) return;
  list.types.add(t);
  const o = document.createElement('option');
  o.value = o.textContent = t;
  $('#ftype').append(o);
}
const newestFirst = (a, b) => (b.start > a.start) - (b.start < a.start) || (b.id > a.id) - (b.id < a.id);
function renderList(fresh) {
  const items = [...list.items.values()].sort(newestFirst);
  $('#list').innerHTML = items.length ? items.map(i => `<a class="inc${i.id === selected ? ' sel' : ''}${fresh && fresh.has(i.id) ? ' new' : ''}"
    id="inc-${esc(i.id)}" data-id="${esc(i.id)}" href="#/incident/${encodeURIComponent(i.id)}">
    <span>${statusBadge(i)}</span><span class="k">${esc(i.event)} · ${esc(i.key)}</span><span class="r">${esc(i.alerts)} alert${i.alerts === 1 ? '' : 's'}</span>
    <span>${sevBadge(i)}</span><span class="t">${esc(when(i.start))}</span><span class="r">${esc(dur(i.duration_s))}</span></a>`).join('')
    : '<p class="muted" style="padding:0 .8em">No incidents match.</p>';
  const last = Math.min(list.offset + list.limit, list.total);
  $('#range').textContent = list.total ? `${list.offset + 1}–${last} of ${list.total}` : '0 incidents';
  $('#prev').disabled = list.offset === 0;
  $('#next').disabled = list.offset + list.limit >= list.total;
}
// The list is a snapshot taken when the server answered, and the stream may deliver
// changes made after it before the answer arrives: those are kept aside while a request
// is in flight and applied over its answer (unless the answer holds a newer copy). An
// answer to a request that a later one superseded (a filter changed) is dropped.
let loading = null;
async function loadList() {
  const q = new URLSearchParams({limit: list.limit, offset: list.offset});
  if (list.status) q.set('status', list.status);
  if (list.type) q.set('type', list.type);
  const seen = loading = new Map();
  try {
    const r = await api('/api/incidents?' + q);
    if (loading !== seen) return;
    list.items = new Map(r.incidents.map(i => [i.id, i]));
    list.total = r.total;
    r.incidents.forEach(i => noteType(i.event));
    renderList();
    const last = [...list.items.values()].sort(newestFirst).at(-1);
    for (const i of seen.values()) {
      const had = list.items.get(i.id);
      if (had ? had.updated_at >= i.updated_at : list.items.size >= list.limit && newestFirst(last, i) < 0) continue;
      onIncident(i);  // newer than the snapshot, or new and on this page
    }
  } catch (e) {
    if (loading === seen) $('#list').innerHTML = `<p class="fb err">${esc(e.message)}</p>`;
  } finally {
    if (loading === seen) loading = null;
  }
}
function onIncident(i) {
  if (loading) loading.set(i.id, i);
  noteType(i.event);
  const known = list.items.has(i.id);
  if (matches(i) && (known || list.offset === 0)) {
    if (!known) list.total += 1;
    list.items.set(i.id, i);
    const items = [...list.items.values()].sort(newestFirst);
    list.items = new Map(items.slice(0, list.limit).map(x => [x.id, x]));
    renderList(known ? null : new Set([i.id]));
  } else if (known) { list.items.delete(i.id); list.total -= 1; renderList(); }
  if (i.id === selected) scheduleRefresh();
}

// -- the incident view -----------------------------------------------------------------------
function scheduleRefresh() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => selected && refreshIncident(selected), 400);
}
function showIncident(id) {
  if (selected !== id || !$('#ihead')) {
    selected = id;
    $('#main').innerHTML = `<div id="fb"></div><div id="ihead"><p class="muted">Loading incident ${esc(id)}…</p></div>
      <div class="card actions"><button id="ack">Acknowledge</button>
        <textarea id="note" placeholder="How was it resolved? (becomes this incident's resolution)"></textarea>
        <button id="resolve">Resolve</button></div>
      <div id="inow" class="card now"></div>
      <h3>Metric around the incident</h3><div id="ichart"></div>
      <h3>Context</h3><div id="ictx" class="chips"></div>
      <h3>Similar past incidents</h3><div id="isim"></div>
      <h3>History search</h3><div id="iprog"></div>
      <div class="actions card"><label>Accelerate by <input id="tk" type="number" value="100" min="1" max="${MAX_TICKETS}" step="1"> tickets</label>
        <button id="acc">Accelerate</button><button id="cancel">Cancel search</button></div>
      <h3>Alerts of this incident</h3><div id="ievents"></div>
      <details id="iprov"><summary>Provenance (source tuples of the first alert)</summary><div id="iprovbody"></div></details>`;
    $('#ack').onclick = () => act(id, 'acknowledge', {});
    $('#resolve').onclick = () => {
      const note = $('#note').value.trim();
      if (!note) return feedback('err', 'Write a resolution note first: say how the incident was resolved.');
      act(id, 'resolve', {note});
    };
    $('#acc').onclick = () => {
      const raw = $('#tk').value.trim(), n = Number(raw);
      if (raw === '' || !Number.isInteger(n) || n < 1 || n > MAX_TICKETS)
        return feedback('err', `Tickets must be a whole number from 1 to ${MAX_TICKETS.toLocaleString('en')}; got "${raw || $('#tk').validationMessage || 'nothing'}".`);
      steer(id, 'accelerate', {tickets: n});
    };
    $('#cancel').onclick = () => steer(id, 'cancel');
  }
  document.querySelectorAll('.inc').forEach(a => a.classList.toggle('sel', a.dataset.id === id));
  refreshIncident(id);
}
async function act(id, what, body) {
  try {
    const r = await api(`/api/incidents/${encodeURIComponent(id)}/${what}`, {method: 'POST', body: JSON.stringify(body)});
    if (what === 'resolve') $('#note').value = '';
    onIncident(r);
    // redraw the header now, with the feedback: a redraw 400 ms later would move the
    // buttons under a pointer on its way to the next one (a click then lands elsewhere)
    if (selected === id) await refreshIncident(id);
    feedback('ok', what === 'resolve' ? `Resolved: "${r.resolution}" is now this incident's resolution.` : `Acknowledged by ${r.acknowledged_by}.`);
  } catch (e) { feedback('err', e.message); }
}
async function steer(id, what, body) {
  try {
    const r = await api(`/api/events/${encodeURIComponent(id)}/${what}`, {method: 'POST', body: body ? JSON.stringify(body) : undefined});
    if (selected === id) await refreshIncident(id);  // as in act(): redraw, then say so
    feedback(r.changed ? 'ok' : 'err', r.message);
  } catch (e) { feedback('err', e.message); }
}
async function refreshIncident(id) {
  clearTimeout(refreshTimer);  // this redraw covers any update a pending one was scheduled for
  let inc, ev;
  try {
    [inc, ev] = await Promise.all([api('/api/incidents/' + encodeURIComponent(id)), api('/api/events/' + encodeURIComponent(id))]);
  } catch (e) { if (selected === id) $('#ihead').innerHTML = `<p class="fb err">${esc(e.message)}</p>`; return; }
  if (selected !== id) return;
  $('#ihead').innerHTML = `<h2>${esc(inc.event)} on ${esc(inc.key)} ${statusBadge(inc)} ${sevBadge(inc)}</h2>
    <div class="facts"><span>started ${esc(when(inc.start))}</span><span>last alert ${esc(when(inc.last_event))}</span>
    <span>lasted ${esc(dur(inc.duration_s))}</span><span>${esc(inc.alerts)} alert(s)</span>
    ${inc.acknowledged_by ? `<span>acknowledged by ${esc(inc.acknowledged_by)} ${esc(when(inc.acknowledged_at))}</span>` : ''}
    ${inc.resolution ? `<span>resolved by ${esc(inc.resolved_by)}: <b class="res" id="ires">${esc(inc.resolution)}</b></span>` : ''}</div>`;
  $('#inow').innerHTML = nowText(inc);
  $('#ichart').innerHTML = chart(inc);
  $('#ictx').innerHTML = chips(ev.context);
  $('#isim').innerHTML = similar(ev);
  $('#iprog').innerHTML = progress(ev);
  $('#ievents').innerHTML = '<table><tr><th>alert</th><th>time</th><th class="n">value</th><th class="n">sd above norm</th></tr>' +
    inc.events.map(e => `<tr><td>${esc(e.eid)}</td><td>${esc(when(e.ts))}</td><td class="n">${num(e.value)}</td><td class="n">${num(e.z)}</td></tr>`).join('') + '</table>';
  $('#iprovbody').innerHTML = provenance(ev.provenance);
  $('#iprovbody').onclick = e => { const tr = e.target.closest('tr.src'); if (tr) fed(tr.dataset.stream, tr.dataset.sid); };
  support(id);
}
// -- retractions and forward lookup (moirae/api/retract_api.py) ----------------------------
async function support(eid) {
  let s;
  try { s = await api('/api/events/' + encodeURIComponent(eid) + '/support'); } catch (e) { return; }
  if (selected !== eid || !$('#iprovbody')) return;
  const st = s.status === 'retracted' ? `${badge('s-resolved', 'retracted')} ${esc(s.reason || '')} (retraction ${esc(s.retraction)})` : badge('s-open', 'active');
  const held = !s.available ? 'support: not available' : s.in_archive_all ? `support: all ${s.sources} source row(s) still in the archive`
    : `support: ${s.in_archive} of ${s.sources} source row(s) still in the archive (the rest dropped by retention)`;
  $('#iprovbody').insertAdjacentHTML('afterbegin', `<p id="isupport">alert ${st} · <span class="muted">${esc(held)}</span></p>`);
}
async function fed(stream, sid) {
  const box = $('#ifed');
  if (!box) return;
  box.innerHTML = '<p class="muted">Looking up…</p>';
  try {
    const r = await api(`/api/lookup?ids=${encodeURIComponent(sid)}&stream=${encodeURIComponent(stream)}`);
    const src = r.sources[0] || {};
    box.innerHTML = `<p>source row ${esc(sid)} of ${esc(stream)} fed ${r.alerts.length} alert(s), ${r.counts.open} still open; ` +
      `${src.expired ? 'expired: no future alert can use it' : 'a future alert can still use it'}</p><table><tr><th>alert</th><th>event</th><th>time</th><th>status</th></tr>` +
      r.alerts.map(a => `<tr><td>${esc(a.eid)}</td><td>${esc(a.event)}</td><td>${esc(when(a.ts))}</td><td>${a.status === 'retracted' ? 'retracted: ' + esc(a.reason || '') : (a.open ? 'open' : 'closed')}</td></tr>`).join('') + '</table>';
  } catch (e) { box.innerHTML = `<p class="fb err">${esc(e.message)}</p>`; }
}
function nowText(inc) {
  const c = inc.current, n = inc.norm, metric = esc(inc.metric || (n && n.metric) || 'value');
  if (!c) return '<span class="muted">No value of the triggering metric yet.</span>';
  let s = `${metric} now <b>${num(c.value)}</b>`;
  if (n && typeof c.z === 'number') {
    s += ` — <b id="zsd">${num(Math.abs(c.z))} sd ${c.z >= 0 ? 'above' : 'below'} normal</b>`;
    s += `<div class="muted">norm ${num(n.mean)} ± ${num(n.sd)}${n.n ? ' from ' + n.n.toLocaleString('en') + ' readings' : ''}`;
    s += n.covered ? ` of ${esc(when(n.covered[0]))} to ${esc(when(n.covered[1]))}` : '';
    s += `, refined ${n.revisions} time(s) as history is read</div>`;
  } else s += ' <span class="muted">— the norm is not known yet (its history search is running)</span>';
  if (typeof inc.threshold === 'number') s += `<div class="muted">alert threshold ${num(inc.threshold)}</div>`;
  return s;
}

// -- a hand-written SVG chart: series, alerts, threshold, norm band --------------------------
function chart(inc) {
  const s = inc.series;
  if (!s || !s.points.length) return '<p class="muted">No archived series for this incident.</p>';
  const W = 820, H = 260, L = 56, R = 10, T = 10, B = 28;
  const t0 = Date.parse(s.start), t1 = Date.parse(s.end);
  const pts = s.points.map(([t, v]) => [Date.parse(t), v]);
  const ev = inc.events.filter(e => typeof e.value === 'number').map(e => [Date.parse(e.ts), e.value]);
  const n = inc.norm, vals = [...pts.map(p => p[1]), ...ev.map(e => e[1])];
  if (typeof inc.threshold === 'number') vals.push(inc.threshold);
  if (n) vals.push(n.mean + n.sd, n.mean - n.sd);
  const lo = Math.min(0, ...vals), hi = Math.max(...vals) * 1.08 || 1;
  const x = t => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0), y = v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  let g = '';
  const a = Date.parse(inc.start) - inc.window_s * 1000, b = Date.parse(inc.last_event);
  g += `<rect id="ispan" x="${x(a)}" y="${T}" width="${Math.max(1, x(b) - x(a))}" height="${H - T - B}" fill="#ffcdd2" opacity=".45"/>`;
  if (n) {
    g += `<rect id="normband" x="${L}" y="${y(n.mean + n.sd)}" width="${W - L - R}" height="${Math.max(1, y(n.mean - n.sd) - y(n.mean + n.sd))}" fill="#a5d6a7" opacity=".45"/>`;
    g += `<line x1="${L}" x2="${W - R}" y1="${y(n.mean)}" y2="${y(n.mean)}" stroke="#2e7d32" stroke-width="1"/>`;
  }
  for (let k = 0; k <= 4; k++) {
    const v = lo + (hi - lo) * k / 4;
    g += `<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#eceff1"/><text x="${L - 6}" y="${y(v) + 4}" font-size="11" text-anchor="end" fill="#555">${Math.round(v)}</text>`;
  }
  for (let k = 0; k <= 4; k++) {
    const t = t0 + (t1 - t0) * k / 4;
    g += `<text x="${x(t)}" y="${H - 8}" font-size="11" text-anchor="${k === 0 ? 'start' : k === 4 ? 'end' : 'middle'}" fill="#555">${new Date(t).toISOString().slice(11, 16)}</text>`;
  }
  g += `<polyline id="iseries" fill="none" stroke="#1e88e5" stroke-width="1.2" points="${pts.map(p => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join(' ')}"/>`;
  if (typeof inc.threshold === 'number')
    g += `<line id="ithreshold" x1="${L}" x2="${W - R}" y1="${y(inc.threshold)}" y2="${y(inc.threshold)}" stroke="#c62828" stroke-dasharray="6 4"/>`;
  g += ev.map(e => `<circle cx="${x(e[0])}" cy="${y(e[1])}" r="3.5" fill="#ef6c00"/>`).join('');
  const legend = [`<span style="--c:#1e88e5">${esc(s.column)} (${esc(s.stream)})</span>`, `<span style="--c:#ef6c00">alerts (${esc(inc.metric || 'value')})</span>`];
  if (typeof inc.threshold === 'number') legend.push(`<span style="--c:#c62828">threshold ${num(inc.threshold)}</span>`);
  if (n) legend.push(`<span style="--c:#a5d6a7">norm mean ± sd${n.covered ? ', history ' + esc(day(n.covered[0])) + ' to ' + esc(day(n.covered[1])) : ''}</span>`);
  legend.push('<span style="--c:#ffcdd2">incident</span>');
  return `<svg class="chart" id="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(s.column)} around the incident">${g}</svg><div class="legend">${legend.join('')}</div>`;
}

function chips(context) {
  const seen = new Set(), out = [];
  for (const t of context || []) for (const [k, v] of Object.entries(t)) {
    const key = k + '=' + JSON.stringify(v);
    if (!seen.has(key)) { seen.add(key); out.push(`<span class="chip"><i>${esc(k)}</i> ${esc(typeof v === 'object' ? JSON.stringify(v) : v)}</span>`); }
  }
  return out.length ? out.join('') : '<span class="muted">no context recorded</span>';
}
function resolutionText(r) {
  if (r == null) return '';
  if (typeof r === 'string') return r;
  const found = [];
  (function walk(o) {
    if (Array.isArray(o)) o.forEach(walk);
    else if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) { if (k === 'resolution' && typeof v === 'string') found.push(v); else walk(v); }
  })(r);
  return [...new Set(found)].join('; ');
}
function terms(x) {
  const t = x.shared_terms || x.top_terms || x.terms || x.explanation;
  if (!t) return '';
  const arr = Array.isArray(t) ? t : (typeof t === 'object' ? Object.entries(t).map(([k, v]) => ({term: k, weight: v})) : [t]);
  return arr.slice(0, 5).map(e => typeof e === 'string' ? e : e.term || (e.attr != null ? e.attr + ' ' + e.value : JSON.stringify(e))).map(s => `<span class="chip">${esc(s)}</span>`).join('');
}
function similar(ev) {
  const st = ev.similar_status, rows = ev.similar;
  let h = '';
  const ended = st && st.status && !['suspended', 'running'].includes(st.status);
  if ((st && st.novel) || (ended && !rows.length)) h += (st && st.whole_archive === false && st.searched_back_to)
    ? `<p>${badge('novel', 'novel')} nothing similar since ${esc(day(st.searched_back_to))}: older history was not searched${st.remaining_chunks ? ' (' + st.remaining_chunks + ' chunks)' : ''}.</p>`
    : `<p>${badge('novel', 'novel')} nothing in the history searched is similar to this incident.</p>`;
  if (!ended) {
    const ops = new Set(Object.entries(ev.results || {}).filter(([, r]) => r.similarity).map(([op]) => op));
    const t = ev.progress.find(t => ops.has(t.operator) && t.state === 'suspended');
    h += t ? `<p class="muted">Partial list: the search is suspended after ${t.chunks_done} of ${t.chunks_total} chunks, waiting for feedback; Accelerate searches further.</p>`
           : '<p class="muted">Partial list: the history search has not finished; it may change.</p>';
  }
  h += rows.map(s => {
    const score = typeof s.score === 'number' ? s.score : 0, x = s.extra || {};
    const res = resolutionText(s.resolution);
    return `<div class="sim"><div><b>${num(score, 2)}</b><div class="bar"><span style="width:${Math.max(0, Math.min(100, score * 100)).toFixed(0)}%"></span></div></div>
      <div><span>${esc(when(s.ts))}</span> · <span class="muted">${esc(x.incident || s.eid)}</span>${x.duration_s != null ? ' · lasted ' + esc(dur(x.duration_s)) : ''}
      <div class="res">${res ? 'Resolved: ' + esc(res) : '<span class="muted">no resolution recorded</span>'}</div>
      <div class="chips">${terms(x)}</div></div></div>`;
  }).join('');
  return h || '<p class="muted">No similar incident found yet.</p>';
}
function progress(ev) {
  const tasks = ev.progress.filter(t => !t.materialization);
  if (!tasks.length) return `<p class="muted">${ev.boundary ? 'The history search has ended.' : 'No history search in this process.'}</p>`;
  return tasks.map(t => {
    const to = t.searched_back_to || (t.covered && t.covered[0]);
    const back = to ? `searched back to ${esc(day(to))}` : 'not started';
    const rest = t.remaining_chunks ? `, ${t.remaining_chunks} chunk(s) to go` : '';
    const raw = t.reprocessed_chunks ? ` · ${t.reprocessed_chunks} older chunk(s) re-processed` : '';
    const mat = t.materialized_until ? ` · materialized from ${esc(day(t.materialized_until))}` : '';
    return `<div><b>${esc(t.operator)}</b>: ${back}, ${t.chunks_done} of ${t.chunks_total} chunks${rest}${raw}${mat} · ${badge('v-unknown', t.state)}${t.tickets != null ? ' · ' + t.tickets + ' tickets' : ''}</div>`;
  }).join('');
}
function provenance(p) {
  if (!p || !p.available) return '<p class="muted">not available</p>';
  return `<p class="muted">${p.sources.length} source tuple(s), ${p.expired} expired; click a row for every alert it fed</p><table><tr><th>stream</th><th>time</th><th>row</th></tr>` +
    p.sources.slice(0, 200).map(s => `<tr class="src" data-stream="${esc(s.stream)}" data-sid="${esc(s.sid ?? s.source_id)}" title="every alert this row fed"><td>${esc(s.stream)}</td><td>${esc(when(s.ts))}</td><td>${esc(s.row ? Object.entries(s.row).map(([k, v]) => k + '=' + (typeof v === 'number' ? num(v) : v)).join(', ') : '')}</td></tr>`).join('') + '</table><div id="ifed"></div>';
}

// -- the archive page ------------------------------------------------------------------------
async function showArchive() {
  selected = null;
  $('#main').innerHTML = '<h2>Archive</h2><div id="arch"><p class="muted">Loading…</p></div>';
  try {
    const a = await api('/api/archive/summary');
    $('#arch').innerHTML = '<table id="archtable"><tr><th>stream</th><th>tier</th><th class="n">chunks</th><th class="n">rows</th><th class="n">late rows</th><th class="n">dead letters</th></tr>' +
      a.tiers.map(t => `<tr><td>${esc(t.stream)}</td><td>${esc(t.tier)}</td><td class="n">${t.chunks.toLocaleString('en')}</td><td class="n">${t.rows.toLocaleString('en')}</td><td class="n">${t.late_rows.toLocaleString('en')}</td><td class="n">${(a.dead_letters[t.stream] || 0).toLocaleString('en')}</td></tr>`).join('') + '</table>';
  } catch (e) { $('#arch').innerHTML = `<p class="fb err">${esc(e.message)}</p>`; }
}

// -- the monitors page: deployed monitors, deploy a file, undeploy ----------------------------
async function showMonitors() {
  selected = null;
  $('#main').innerHTML = '<h2>Monitors</h2><div id="fb"></div><div id="mons"><p class="muted">Loading…</p></div>' +
    '<h3>Deploy a monitor file</h3><textarea id="monfile" rows="10" cols="70" aria-label="monitor file" placeholder="name: …"></textarea>' +
    '<p><button id="mondeploy">Deploy</button></p>';
  $('#mondeploy').onclick = async () => {
    try {
      const r = await api('/api/monitors', {method: 'POST', body: JSON.stringify({text: $('#monfile').value})});
      feedback('ok', `Monitor ${r.name}: ${r.result}, version ${r.version}` + (r.previous ? ` (was ${r.previous})` : '') + '.');
      loadMonitors();
    } catch (e) { feedback('err', e.message); }
  };
  loadMonitors();
}
async function loadMonitors() {
  try {
    const rows = (await api('/api/monitors')).monitors;
    const span = m => m.materialized && m.materialized.units ? `${when(m.materialized.from)} – ${when(m.materialized.until)}` : '—';
    $('#mons').innerHTML = !rows.length ? '<p class="muted">No monitors deployed.</p>' :
      '<table id="montable"><tr><th>monitor</th><th>version</th><th>state</th><th class="n">rows/s</th><th class="n">alerts</th><th class="n">open tasks</th><th>materialized</th><th></th></tr>' +
      rows.map(m => `<tr><td>${esc(m.name)}</td><td><code>${esc(m.version)}</code></td><td>${esc(m.state)}${m.error ? ' — ' + esc(m.error) : ''}</td>` +
        `<td class="n">${m.rows_per_s == null ? '—' : num(m.rows_per_s)}</td><td class="n">${m.alerts == null ? '—' : m.alerts}</td>` +
        `<td class="n">${m.open_tasks == null ? '—' : m.open_tasks}</td><td>${span(m)}</td>` +
        `<td><button data-undeploy="${esc(m.name)}">Undeploy</button> <label><input type="checkbox" data-drop="${esc(m.name)}"> drop archive</label></td></tr>`).join('') + '</table>';
    document.querySelectorAll('[data-undeploy]').forEach(b => b.onclick = async () => {
      const name = b.getAttribute('data-undeploy');
      const drop = [...document.querySelectorAll('[data-drop]')].find(c => c.getAttribute('data-drop') === name).checked;
      try {
        const r = await api(`/api/monitors/${encodeURIComponent(name)}` + (drop ? '?drop_archive=true' : ''), {method: 'DELETE'});
        feedback('ok', `Monitor ${r.name} undeployed in ${num(r.seconds)} s` + (drop ? ', its archive dropped.' : ', its archive kept.'));
        loadMonitors();
      } catch (e) { feedback('err', e.message); }
    });
  } catch (e) { $('#mons').innerHTML = `<p class="fb err">${esc(e.message)}</p>`; }
}

// -- routing and live updates ---------------------------------------------------------------
function route() {
  const h = location.hash;
  const section = h.startsWith('#/archive') ? '#/archive' : h.startsWith('#/monitors') ? '#/monitors' : '#/';
  document.querySelectorAll('header nav a').forEach(a => a.classList.toggle('on', a.getAttribute('href') === section));
  if (h.startsWith('#/incident/')) showIncident(decodeURIComponent(h.slice(11)));
  else if (h.startsWith('#/archive')) showArchive();
  else if (h.startsWith('#/monitors')) showMonitors();
  else { selected = null; $('#main').innerHTML = '<p class="muted">Select an incident.</p>'; renderList(); }
}
$('#token').value = localStorage.getItem('moiraeToken') || '';
$('#token').onchange = e => { localStorage.setItem('moiraeToken', e.target.value); ensureSession().then(startStream); };
$('#fstatus').onchange = e => { list.status = e.target.value; list.offset = 0; loadList(); };
$('#ftype').onchange = e => { list.type = e.target.value; list.offset = 0; loadList(); };
$('#prev').onclick = () => { list.offset = Math.max(0, list.offset - list.limit); loadList(); };
$('#next').onclick = () => { list.offset += list.limit; loadList(); };
window.addEventListener('hashchange', route);
ensureSession().then(() => { loadList().then(route); startStream(); });
let es = null, streamLost = false;  // changes made while the stream was down are only in a new snapshot
function startStream() {
if (es && es.readyState !== EventSource.CLOSED) return;
es = new EventSource('/api/stream');
es.onopen = () => { $('#conn').textContent = 'live'; if (streamLost) { streamLost = false; loadList(); } };
es.onerror = () => { $('#conn').textContent = 'reconnecting…'; streamLost = true; };
es.addEventListener('incident', m => onIncident(JSON.parse(m.data)));
for (const k of ['insert', 'update', 'delete', 'boundary']) es.addEventListener(k, m => {
  const o = JSON.parse(m.data);
  if (o.eid === selected) scheduleRefresh();
});
}
