"""The console (DESIGN.md §1 "Alert consoles"): one HTML page, plain JavaScript, no build
step. It lists alerts live (``EventSource`` on ``/api/stream``); selecting one shows its
context, similar past events (score, context, resolution) and recall results with the
history they cover, refined as outputs and revisions arrive, its tasks' progress and
provenance, and cancel / accelerate buttons (the token, when the server requires one,
is kept in the browser's localStorage).
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Moirae console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;display:flex;height:100vh;color:#222}
#side{width:34%;border-right:1px solid #ccc;overflow:auto}
#main{flex:1;overflow:auto;padding:0 1em}
header{padding:.5em 1em;background:#263238;color:#fff;display:flex;gap:1em;align-items:center}
header input{width:9em}
.ev{padding:.4em 1em;border-bottom:1px solid #eee;cursor:pointer}
.ev:hover,.ev.sel{background:#e3f2fd}
.ev .n{float:right;color:#666;font-size:12px}
.new{animation:flash 2s}@keyframes flash{from{background:#fff59d}to{background:none}}
table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #ddd;padding:2px 6px;font-size:13px}
th{background:#f5f5f5}.muted{color:#777}button{margin-right:.5em}
pre{background:#f7f7f7;padding:.4em;max-height:12em;overflow:auto}
</style></head><body>
<div id="side"><header><b>Moirae</b><span id="conn" class="muted">connecting</span>
<input id="token" type="password" placeholder="API token"></header><div id="list"></div></div>
<div id="main"><p class="muted">Select an alert.</p></div>
<script>
const $=s=>document.querySelector(s), esc=v=>String(v??'').replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
const counts={}; let selected=null, timer=null;
$('#token').value=localStorage.getItem('moiraeToken')||'';
$('#token').onchange=e=>localStorage.setItem('moiraeToken',e.target.value);
async function api(path,opts={}){const h={'Content-Type':'application/json'},t=$('#token').value;
  if(t)h.Authorization='Bearer '+t; const r=await fetch(path,{...opts,headers:h});
  const j=await r.json().catch(()=>({})); if(!r.ok)throw new Error(r.status+': '+JSON.stringify(j.detail)); return j;}
function row(e,fresh){let d=document.getElementById('ev-'+e.eid);
  if(!d){d=document.createElement('div');d.id='ev-'+e.eid;d.className='ev'+(fresh?' new':'');
    d.onclick=()=>show(e.eid);fresh?$('#list').prepend(d):$('#list').append(d);}
  d.innerHTML=`<span class="n" id="n-${esc(e.eid)}">${counts[e.eid]||0} outputs</span><b>${esc(e.event)}</b> ${esc(e.eid)}<br><span class="muted">${esc(e.ts)}</span>`;}
function table(rows){if(!rows.length)return '<p class="muted">none yet</p>';
  const cols=[...new Set(rows.flatMap(r=>Object.keys(r)))];
  return '<table><tr>'+cols.map(c=>`<th>${esc(c)}</th>`).join('')+'</tr>'+rows.map(r=>'<tr>'+cols.map(c=>
    `<td>${esc(typeof r[c]==='object'&&r[c]!==null?JSON.stringify(r[c]):r[c])}</td>`).join('')+'</tr>').join('')+'</table>';}
async function show(eid){selected=eid;document.querySelectorAll('.ev').forEach(d=>d.classList.toggle('sel',d.id==='ev-'+eid));
  let d; try{d=await api('/api/events/'+encodeURIComponent(eid));}catch(e){$('#main').innerHTML=esc(e.message);return;}
  if(selected!==eid)return;
  let h=`<h2>${esc(d.event)} ${esc(d.eid)}</h2><p>${esc(d.ts)} ${esc(JSON.stringify(d.attrs))}</p>
  <p><button id="cancel">Cancel</button><button id="acc">Accelerate</button><input id="tk" type="number" value="100" min="1" style="width:6em"> tickets
  <span id="msg" class="muted"></span></p><h3>Context</h3>${table(d.context)}
  <h3>Similar past events</h3>${table(d.similar.map(s=>({eid:s.eid,ts:s.ts,score:s.score,context:s.context,resolution:s.resolution})))}`;
  for(const[op,r]of Object.entries(d.results)){if(r.similarity)continue;
    h+=`<h3>Recall ${esc(op)}</h3><p class="muted">covers ${esc((r.covered||[]).join(' to '))}, ${r.history.length} outputs/revisions</p>${table(r.current.map(c=>c.row))}`;}
  h+=`<h3>Progress</h3>${table(d.progress.map(t=>({task:t.task_id,operator:t.operator,state:t.state,chunks:t.chunks_done+'/'+t.chunks_total,tickets:t.tickets,rows:t.rows})))}`;
  if(d.boundary)h+=`<p class="muted">recall ended: ${esc(JSON.stringify(d.boundary.ended))}</p>`;
  h+=`<h3>Provenance</h3>`+(d.provenance.available?table(d.provenance.sources.map(s=>({stream:s.stream,ts:s.ts,expired:s.expired,row:s.row}))):'<p class="muted">not available</p>');
  $('#main').innerHTML=h;
  $('#cancel').onclick=()=>steer(eid,'cancel');$('#acc').onclick=()=>steer(eid,'accelerate',{tickets:+$('#tk').value});}
async function steer(eid,what,body){try{const r=await api(`/api/events/${encodeURIComponent(eid)}/${what}`,{method:'POST',body:body?JSON.stringify(body):undefined});
  $('#msg').textContent=r.message;setTimeout(()=>show(eid),300);}catch(e){$('#msg').textContent=e.message;}}
function refresh(eid){if(eid!==selected)return;clearTimeout(timer);timer=setTimeout(()=>show(eid),250);}
api('/api/events?limit=200').then(r=>r.events.forEach(e=>row(e,false))).catch(e=>$('#conn').textContent=e.message);
const es=new EventSource('/api/stream');
es.onopen=()=>$('#conn').textContent='live';es.onerror=()=>$('#conn').textContent='reconnecting';
es.addEventListener('event',m=>{const e=JSON.parse(m.data);row(e,true);});
for(const k of ['insert','update','delete','boundary'])es.addEventListener(k,m=>{const o=JSON.parse(m.data);
  counts[o.eid]=(counts[o.eid]||0)+1;const n=document.getElementById('n-'+o.eid);
  if(n)n.textContent=counts[o.eid]+' outputs'+(k==='boundary'?' (ended)':'');refresh(o.eid);});
</script></body></html>
"""
