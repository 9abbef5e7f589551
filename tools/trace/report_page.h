// The page of `journey-trace report`: HTML, CSS and the script that draws every panel from the
// data report.cpp embeds. Markers: @@DIAGRAMS@@ (one <div class="diagram"> per layer, inline SVG)
// and @@DATA@@ (the JSON of report_data()). Nothing is fetched: the page works from a file:// URL
// with the network off. The script keeps one state (selected position, step, layer, head) and
// redraws every panel from it; window.journeyReport exposes that state and what was drawn.
#pragma once

namespace journey::tracer {

inline constexpr const char* kReportPage = R"PAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>journey report</title>
<style>
:root{--sel:#e0683c;--step:#fde7c8;--ink:#222;--muted:#666;--line:#ddd;--blue:#3b6fd6}
*{box-sizing:border-box}
body{font-family:system-ui,Helvetica,Arial,sans-serif;margin:0;color:var(--ink);background:#fafafa}
header{padding:.8em 1.5em .4em;background:#fff;border-bottom:1px solid var(--line)}
h1{font-size:1.25em;margin:.1em 0} h2{font-size:1em;margin:.2em 0 .5em;color:#333}
.muted{color:var(--muted);font-size:.85em} code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em}
pre{white-space:pre-wrap;background:#f4f4f4;padding:.5em;margin:.3em 0}
#strip{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line);padding:.4em 1.5em}
#tokens{display:flex;flex-wrap:wrap;gap:2px;max-height:7.5em;overflow:auto}
.tok{font-family:ui-monospace,monospace;font-size:.82em;border:1px solid #c9cfe0;border-radius:3px;padding:1px 4px;background:#eef2ff;cursor:pointer;white-space:pre;user-select:none}
.tok.gen{background:#effaea;border-color:#a9d39c} .tok.special{color:#7a2bb5;font-style:italic}
.tok.instep{background:var(--step)} .tok.sel{outline:2px solid var(--sel);background:#fff2ea}
.tok.last{border-style:dashed}
#controls{display:flex;flex-wrap:wrap;align-items:center;gap:1em;margin-top:.35em;font-size:.88em}
#step{width:min(520px,60vw)} #steplabel{min-width:16em;font-family:ui-monospace,monospace}
main{display:grid;grid-template-columns:minmax(380px,1.05fr) minmax(420px,1fr);gap:1em;padding:1em 1.5em}
@media (max-width:1000px){main{grid-template-columns:1fr}}
.panel{background:#fff;border:1px solid var(--line);border-radius:6px;padding:.6em .8em;margin-bottom:1em}
#diagrams{overflow:auto;max-height:1150px} .diagram svg{max-width:none;height:auto}
.diagram g.node.selected-layer path,.diagram g.node.selected-layer polygon{stroke:var(--sel);stroke-width:2}
table{border-collapse:collapse;font-size:.82em} td,th{border:1px solid var(--line);padding:2px 5px}
th{background:#f3f3f3;font-weight:600}
.bars .row{display:flex;align-items:center;gap:4px;margin:1px 0;font-size:.82em}
.bars .lab{width:8.5em;overflow:hidden;text-overflow:ellipsis;white-space:pre;font-family:ui-monospace,monospace}
.bars .bar{height:11px;background:#7a5cc7;min-width:1px} .bars .row.pick .bar{background:var(--sel)} .bars .row.pick .lab{font-weight:700}
.bars .row.truth .lab{text-decoration:underline}
#lens td.cell{font-family:ui-monospace,monospace;white-space:pre;min-width:5.5em}
#lens td.truth{outline:2px solid var(--sel);outline-offset:-2px}
#pipeline{display:flex;gap:6px;overflow-x:auto} .stage{min-width:9.5em;border:1px solid var(--line);border-radius:4px;padding:3px 5px;font-size:.8em}
.stage h3{font-size:1em;margin:0 0 2px} .stage .kind{color:var(--muted);font-size:.9em}
.stage .row{display:flex;justify-content:space-between;gap:4px;font-family:ui-monospace,monospace;white-space:pre}
.stage .row.cut{color:#bbb;text-decoration:line-through} .stage .row.pick{color:var(--sel);font-weight:700}
.stage .arrow{color:var(--muted)}
#kv{display:flex;flex-wrap:wrap;gap:6px;align-items:flex-start}
.block{border:1px solid #4a9;border-radius:3px;padding:2px;font-size:.72em;text-align:center;background:#fff}
.block.shared{border-color:#b58900;background:#fff8df} .cells{display:flex;gap:1px}
.cellkv{width:11px;height:16px;background:#eef;border:1px solid #cde}
.cellkv.used{background:#7cc4a8} .cellkv.new{background:#2f9a70} .cellkv.cached{background:#d9b44a} .cellkv.sel{outline:2px solid var(--sel)}
#attn-section{padding:0 1.5em} canvas{image-rendering:pixelated}
#heads{display:flex;flex-wrap:wrap;gap:6px} #heads figure{margin:0;font-size:.72em;text-align:center;cursor:pointer}
#heads figure.sel canvas{outline:2px solid var(--sel)}
#lensgrid td{font-family:ui-monospace,monospace;font-size:.75em;white-space:pre;cursor:pointer;max-width:6em;overflow:hidden}
#lensgrid td.selcol{outline:2px solid var(--sel);outline-offset:-2px}
#verdict{margin:.6em 1.5em;padding:.5em .8em;border-radius:6px} #verdict.ok{background:#e6f6e6} #verdict.bad{background:#ffe8e0}
.legend span{display:inline-block;padding:0 6px;margin-right:4px;border:1px solid #aaa;font-size:.8em}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;font-size:.75em;padding:2px 5px;border-radius:3px;display:none;z-index:10;white-space:pre}
details>summary{cursor:pointer}
</style></head><body>
<header>
<h1 id="title">journey</h1>
<div class="muted" id="meta"></div>
<div id="answer"></div>
<div id="tp"></div>
<details id="tp-partials-box" hidden open><summary class="muted">tensor parallel: each rank's share of every layer's two sums</summary><div id="tp-partials"></div></details>
<details><summary class="muted">how this run was made</summary><pre id="command"></pre><div id="template"></div></details>
</header>
<div id="verdict" hidden></div>
<div id="strip">
 <div id="tokens" role="listbox" aria-label="tokens"></div>
 <div id="controls">
  <label>step <input type="range" id="step" min="0" value="0"></label>
  <button id="prev" title="previous step">◀</button><button id="next" title="next step">▶</button>
  <span id="steplabel"></span>
  <label>layer <select id="layer"></select></label>
  <span class="muted">click a token · ←/→ move the selection · the scrubber walks the steps</span>
 </div>
</div>
<main>
 <div>
  <div class="panel"><h2>The journey of the selected step <span class="muted" id="diagram-caption"></span></h2>
   <div class="legend muted" id="legend" hidden></div>
   <div id="diagrams">@@DIAGRAMS@@</div></div>
 </div>
 <div>
  <div class="panel" id="card"></div>
  <div class="panel"><h2>Next token: what the model predicts after the selected token</h2><div id="nexttok" class="bars"></div></div>
  <div class="panel"><h2>Logit lens: the prediction if the model stopped after each layer</h2>
   <div class="muted">final RMSNorm + LM head applied to the residual stream after every layer (the <code>logit_lens</code> stages); the last row is the model's real output. Outlined: the token that actually came next.</div>
   <table id="lens"></table></div>
  <div class="panel"><h2>Sampling: from logits to the token drawn</h2><div class="muted" id="pipeline-note"></div><div id="pipeline"></div></div>
  <div class="panel" id="grammar-panel" hidden><h2>Grammar mask: what the model wanted, what the grammar allowed</h2>
   <div class="muted" id="grammar-note"></div><svg id="grammar-chart" width="100%" height="48"></svg><div id="grammar"></div></div>
  <div class="panel"><h2>KV cache: blocks at this step</h2><div class="muted" id="kv-note"></div><div id="kv"></div></div>
 </div>
</main>
<section id="attn-section">
 <div class="panel"><h2>Attention: where the selected token looks, in every layer and head</h2>
  <div class="muted">one row per (layer, head); columns: the positions it may attend (0 … itself); darker = more weight. Click a row to open that head below.</div>
  <div style="overflow:auto"><canvas id="looks"></canvas></div></div>
 <div class="panel"><h2>Attention map of <span id="maptitle"></span></h2>
  <div class="muted">rows: the query at each position (prefill rows, then one row per decode step); columns: positions attended; the selected token's row is outlined. Click a row to select its token.</div>
  <div style="overflow:auto"><canvas id="map"></canvas></div>
  <div id="heads"></div></div>
 <div class="panel"><h2>Logit lens over the whole run</h2>
  <div class="muted">the top token of the lens at every position (columns) after every layer (rows); shade = its probability. Click a column to select that token.</div>
  <div style="overflow:auto"><table id="lensgrid"></table></div></div>
 <details class="panel" id="stats-box"><summary><b>Every recorded tensor</b> <span class="muted" id="stats-count"></span></summary>
  <div style="margin:.4em 0"><label>filter <input id="filter" placeholder="e.g. L0. or logits"></label>
  <label><input type="checkbox" id="stepOnly" checked> this step only</label></div>
  <table id="stats"><thead></thead><tbody></tbody></table></details>
</section>
<div id="tip"></div>
<script type="application/json" id="data">@@DATA@@</script>
<script>
(function(){
'use strict';
const D = JSON.parse(document.getElementById('data').textContent);
const $ = id => document.getElementById(id);
const esc = s => String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
const fmt = v => { if (v === 0) return '0'; const a = Math.abs(v); return (a < 1e-3 || a >= 1e4) ? v.toExponential(2) : String(+v.toPrecision(3)); };
const L = D.layers, steps = D.steps, P = D.positions;
const piece = id => (D.vocab[id] !== undefined ? D.vocab[id] : '#' + id);
const shown = s => String(s).replace(/\n/g, '↵').replace(/\t/g, '⇥');
const isSpecial = p => /^<\|.*\|>$|^<\/?s>$|^<unk>$|^<pad>$|^\[[A-Z]+\]$/.test(p);
const stepIdx = {}; steps.forEach((s, i) => stepIdx[s.step] = i);
const names = D.stats.names, nameIdx = {}; names.forEach((n, i) => nameIdx[n] = i);
const S = {sel: 0, step: 0, layer: 0, head: 0};
const drawn = {};
const settings = D.settings || {}, sampling = settings.sampling || {};

// ---- header -----------------------------------------------------------------------------
$('title').textContent = 'journey of "' + D.prompt + '"';
document.title = 'journey: ' + D.prompt;
const sampDesc = sampling.greedy ? 'greedy (temperature 0)' : ['temperature', 'top_k', 'top_p', 'min_p', 'repetition_penalty', 'seed']
  .filter(k => sampling[k] !== undefined).map(k => k + ' ' + sampling[k]).join(', ');
$('meta').innerHTML = 'model <code>' + esc(D.model.path) + '</code> (' + esc(D.model.architecture) + ') · ' +
  esc(settings.backend || '?') + ' backend, ' + esc(settings.dtype || 'f32') + ' · ' + esc(sampDesc || 'sampling not recorded') +
  ' · ' + steps.length + ' steps (prefill + ' + (steps.length - 1) + ' decode) · finish: ' + esc(settings.finish_reason || '?');
if (settings.generated_text !== undefined)
  $('answer').innerHTML = '<span class="muted">answer:</span> <b>' + esc(D.prompt) + '</b>' + esc(settings.generated_text);
$('command').textContent = D.command;
if (D.tensor_parallel) {  // journey trace --tensor-parallel N: how each layer's work was split
  const tp = D.tensor_parallel, range = a => a ? a[0] + '–' + (a[1] - 1) : '?';
  $('tp').innerHTML = '<span class="muted">tensor parallel: this dump is rank ' + tp.rank + ' of ' + tp.world_size +
    '. Its q, k, v, attention and attn_context hold only its heads, gate, up and act only its FFN columns; attn_out and ' +
    'ffn_out are the all-reduced sums (the two all-reduces of every layer, after o_proj and after down_proj), the same on ' +
    'every rank, and attn_out_partial and ffn_out_partial its own share before them' +
    (tp.rank === 0 ? '; logits are gathered from every rank\'s vocabulary rows (logits_partial: its own)' : '; logits_partial holds its vocabulary rows only') +
    '.</span><table class="tp"><tr><th>rank</th><th>dump</th><th>heads</th><th>KV heads</th><th>FFN columns</th><th>vocabulary</th></tr>' +
    tp.ranks.map(r => '<tr><td>' + r.rank + '</td><td>' + esc(r.dump) + '</td><td>' + range(r.shard.heads) + '</td><td>' +
      range(r.shard.kv_heads) + (r.shard.kv_heads_shared ? ' (shared)' : '') + '</td><td>' + range(r.shard.ffn_columns) +
      '</td><td>' + range(r.shard.vocabulary) + '</td></tr>').join('') + '</table>';
}
$('template').innerHTML = D.template_text ? '<div class="muted">the chat template rendered the prompt as:</div><pre>' + esc(D.template_text) + '</pre>'
  : '<div class="muted">no chat template: the prompt as written, with BOS added by the tokenizer</div>';

// ---- token strip ------------------------------------------------------------------------
const tokEls = [];
P.forEach((t, p) => {
  const el = document.createElement('span');
  const pc = piece(t[0]);
  el.className = 'tok' + (t[1] ? ' gen' : '') + (isSpecial(pc) ? ' special' : '') + (t[1] && t[2] < 0 ? ' last' : '');
  el.textContent = shown(pc);
  const sampledAt = t[3] >= 0 ? steps[stepIdx[t[3]]] : null;
  el.title = 'position ' + p + ' · id ' + t[0] + (t[2] >= 0 ? ' · fed at step ' + t[2]
    : t[1] ? ' · sampled last, never fed' : ' · not fed in this dump (taken from the prefix cache)') +
    (sampledAt && sampledAt.sampled ? ' · sampled at step ' + t[3] + ' with p = ' + sampledAt.sampled.prob : '');
  el.dataset.pos = p;
  el.setAttribute('role', 'option');
  el.addEventListener('click', () => select(p));
  $('tokens').appendChild(el); tokEls.push(el);
});

// ---- controls ---------------------------------------------------------------------------
$('step').max = steps.length - 1;
$('step').addEventListener('input', () => setStep(+$('step').value));
$('prev').onclick = () => setStep(Math.max(0, S.step - 1));
$('next').onclick = () => setStep(Math.min(steps.length - 1, S.step + 1));
for (let l = 0; l < L; ++l) $('layer').add(new Option('layer ' + l, l));
$('layer').addEventListener('change', () => { S.layer = +$('layer').value; render(); });
document.addEventListener('keydown', e => {
  if (e.target.tagName === 'INPUT' || e.target.tagName === 'SELECT') return;
  if (e.key === 'ArrowRight') { select(Math.min(P.length - 1, S.sel + 1)); e.preventDefault(); }
  if (e.key === 'ArrowLeft') { select(Math.max(0, S.sel - 1)); e.preventDefault(); }
});
const tip = $('tip');
function showTip(e, text) { tip.textContent = text; tip.style.display = 'block'; tip.style.left = (e.clientX + 12) + 'px'; tip.style.top = (e.clientY + 12) + 'px'; }
function hideTip() { tip.style.display = 'none'; }

// A position belongs to the step that fed it; the last token (sampled, never fed) to the step that sampled it.
function stepOfPosition(p) { const t = P[p]; return stepIdx[t[2] >= 0 ? t[2] : t[3]] || 0; }
function select(p) { S.sel = p; S.step = stepOfPosition(p); render(); }
function setStep(i) { S.step = i; const pos = steps[i].positions; S.sel = pos.length ? pos[pos.length - 1] : S.sel; render(); }

// ---- the diagram: one layout per layer, node lines rewritten for the step on show ---------
const diagrams = [...document.querySelectorAll('.diagram')];
diagrams.forEach(div => div.querySelectorAll('g.node').forEach(g => {
  const t = g.querySelector('title'); g.dataset.node = t ? t.textContent : '';
}));
function stat(name, si) { const i = nameIdx[name]; if (i === undefined) return null; const r = D.stats.steps[si][i]; return r === 0 ? null : r; }
function topLine(list, n) { return 'top: ' + list.slice(0, n).map(x => shown(piece(x[0])) + ' ' + fmt(x[1])).join('  '); }
function stageLines(name, si) {
  const r = stat(name, si);
  if (!r) return ['not recorded', '', ''];
  const lines = [r[0], 'rms ' + fmt(r[4]) + ' · min ' + fmt(r[1]) + ' · max ' + fmt(r[2]), ''];
  const stage = name.replace(/^L\d+\./, '');
  const st = steps[si];
  if (stage === 'logits') { const pos = st.positions[st.positions.length - 1]; if (D.next[pos]) lines[2] = topLine(D.next[pos], 3); }
  else if (stage.startsWith('probs') && st.pipeline.stages) {
    const ps = st.pipeline.stages.find(x => x.stage === stage);
    if (ps) { const order = st.pipeline.tokens.map((id, k) => [id, ps.values[k]]).sort((a, b) => b[1] - a[1]);
      lines[2] = (ps.kind === 'logit' ? 'logits ' : ps.kept + ' kept, ') + topLine(order, 2); }
  } else if (r[5] > 0) lines[2] = r[5] + ' masked (-inf)';
  if (r[6] > 0) lines[2] = r[6] + ' NaN/+inf !';
  return lines;
}
function nodeLines(id, si) {
  const st = steps[si];
  if (id.startsWith('n_')) return stageLines(id.slice(2), si);
  if (id.startsWith('layer_')) {
    const l = +id.slice(6); let n = 0;
    names.forEach((nm, i) => { if (nm.startsWith('L' + l + '.') && D.stats.steps[si][i] !== 0) ++n; });
    const out = stat('L' + l + '.layer_out', si);
    const pos = st.positions[st.positions.length - 1];
    const lens = D.lens && D.lens[pos] && D.lens[pos][l];
    return [n + ' tensors recorded', out ? 'layer_out ' + out[0] + ' rms ' + fmt(out[4]) : '', lens ? 'lens: ' + shown(piece(lens[0][0])) + ' ' + fmt(lens[0][1]) : ''];
  }
  if (id === 'tokens') {
    if (st.kind === 'prefill') {
      const ids = st.positions.map(p => P[p] ? P[p][0] : -1);
      return [ids.length + (ids.length === 1 ? ' token fed' : ' tokens fed'), ids.slice(0, 8).map(i => i + ' ' + shown(piece(i))).join(' | ') + (ids.length > 8 ? ' | …' : ''),
              'positions ' + st.positions[0] + '…' + st.positions[st.positions.length - 1]];
    }
    const p = st.positions[0];
    return ['feeds: ' + (P[p] ? P[p][0] + ' ' + shown(piece(P[p][0])) : '?'), 'position ' + p, ''];
  }
  if (id === 'kv_cache') {
    return st.kv ? ['block table: ' + st.kv.block_table.slice(0, 12).join(' '), st.kv.slots_used + ' slots used', ''] : ['paged K/V of all positions', '', ''];
  }
  if (id === 'sampling') {
    const fin = st.pipeline.stages ? st.pipeline.stages[st.pipeline.stages.length - 1] : null;
    return [sampDesc, fin ? fin.label + ': ' + fin.kept + (fin.kind === 'prob' ? ' tokens with p > 0' : ' logits') : '',
            st.sampled ? 'sampled ' + shown(piece(st.sampled.id)) + ' (id ' + st.sampled.id + ') p = ' + fmt(st.sampled.prob) : ''];
  }
  return null;
}
const MARK = {ok: '#c8ecc8', bad: '#ffc89e', first: '#ff6b6b', missing: '#d0d0d0', only: '#ffffff'};
function compareMark(name, si) {
  if (!D.compare) return null;
  const c = D.compare.steps[si][name]; if (!c) return null;
  const f = D.compare.first;
  if (f && f.name === name && f.step === steps[si].step) return 'first';
  if (c[0] === 'ok') return 'ok'; if (c[0] === 'only in ours') return 'only'; if (c[0] === 'MISSING IN OURS') return 'missing';
  return 'bad';
}
const SEVERITY = {only: 0, ok: 1, missing: 2, bad: 3, first: 4};
// Beyond tolerance, shaded by the size of the error: NMSE 1e-8 light orange ... 1e-1 and more deep orange.
function errorShade(nmse) {
  const t = Math.max(0, Math.min(1, (Math.log10(Math.max(nmse, 1e-12)) + 8) / 7));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return 'rgb(' + mix(255, 245) + ',' + mix(224, 130) + ',' + mix(178, 50) + ')';
}
function fillOf(g) { return [...g.querySelectorAll('path,polygon')].find(e => { const f = e.getAttribute('fill'); return f && f !== 'none' && f !== 'transparent'; }); }
function drawDiagram() {
  let relabelled = 0;
  diagrams.forEach(div => { div.hidden = +div.dataset.layer !== S.layer; });
  const div = diagrams[Math.min(S.layer, diagrams.length - 1)];
  if (!div) return;
  const st = steps[S.step];
  const label = div.querySelector('g.graph > text');
  if (label) label.textContent = label.textContent.replace(/step \d+ \((prefill|decode)\)/, 'step ' + st.step + ' (' + st.kind + ')');
  div.querySelectorAll('g.node').forEach(g => {
    const id = g.dataset.node, lines = nodeLines(id, S.step);
    const texts = g.querySelectorAll('text');
    if (lines) { for (let k = 1; k < texts.length && k <= lines.length; ++k) texts[k].textContent = lines[k - 1]; ++relabelled; }
    const shape = fillOf(g);
    if (shape) {
      if (!shape.dataset.fill) shape.dataset.fill = shape.getAttribute('fill');
      let mark = null;
      if (id.startsWith('n_')) mark = compareMark(id.slice(2), S.step);
      else if (id.startsWith('layer_') && D.compare) {
        const pre = 'L' + id.slice(6) + '.';
        Object.keys(D.compare.steps[S.step]).filter(n => n.startsWith(pre)).forEach(n => {
          const m = compareMark(n, S.step); if (m && (!mark || SEVERITY[m] > SEVERITY[mark])) mark = m; });
      }
      let fill = mark ? MARK[mark] : shape.dataset.fill;
      if (mark === 'bad' && id.startsWith('n_')) fill = errorShade(D.compare.steps[S.step][id.slice(2)][1]);
      shape.setAttribute('fill', fill);
    }
    g.classList.toggle('selected-layer', id === 'layer_' + S.layer);
  });
  $('diagram-caption').textContent = '— step ' + st.step + ' (' + st.kind + '), layer ' + S.layer + ' expanded';
  drawn.diagramNodes = relabelled;
}

// ---- panels that follow the selected token ------------------------------------------------
function bars(list, pick, truth, kind) {
  const max = Math.max(...list.map(x => x[1]), 1e-9);
  return list.map(x => '<div class="row' + (x[0] === pick ? ' pick' : '') + (x[0] === truth ? ' truth' : '') + '"><span class="lab">' +
    esc(shown(piece(x[0]))) + '</span><span class="bar" style="width:' + Math.round(180 * x[1] / max) + 'px"></span>' + fmt(x[1]) + '</div>').join('');
}
function drawCard() {
  const p = S.sel, t = P[p], st = steps[S.step];
  const truth = P[p + 1] ? P[p + 1][0] : null;
  $('card').innerHTML = '<h2>Selected: <code>' + esc(shown(piece(t[0]))) + '</code> at position ' + p + '</h2><div class="muted">id ' + t[0] +
    (t[1] ? ' · generated' : ' · prompt') + ' · step ' + st.step + ' (' + st.kind + ') feeds positions ' + st.positions[0] + '…' +
    st.positions[st.positions.length - 1] + (truth !== null ? ' · next token: <code>' + esc(shown(piece(truth))) + '</code>' : ' · the last token: never fed back') + '</div>';
}
function drawNext() {
  const p = S.sel, list = D.next[p];
  const truth = P[p + 1] ? P[p + 1][0] : null;
  $('nexttok').innerHTML = list ? bars(list, truth, null) + '<div class="muted">softmax of the logits at position ' + p + ' (before any sampling setting); orange: the token that came next</div>'
    : '<div class="muted">no logits recorded for position ' + p + ' (trace with logits; the prefill keeps every row)</div>';
  drawn.nextRows = list ? list.length : 0;
}
function drawLens() {
  const p = S.sel, rows = D.lens && D.lens[p];
  const truth = P[p + 1] ? P[p + 1][0] : null;
  if (!rows) { $('lens').innerHTML = '<tr><td class="muted">no logit lens at position ' + p + ' (trace with the logit_lens stages)</td></tr>'; drawn.lensRows = 0; return; }
  const K = (rows.find(r => r) || []).length;
  let h = '<tr><th>after</th>' + Array.from({length: K}, (_, k) => '<th>' + (k + 1) + '</th>').join('') + '</tr>';
  const row = (label, list) => '<tr><th>' + label + '</th>' + (list || []).map(x => '<td class="cell' + (x[0] === truth ? ' truth' : '') +
    '" style="background:rgba(122,92,199,' + (0.08 + 0.8 * x[1]).toFixed(2) + ')">' + esc(shown(piece(x[0]))) + ' ' + fmt(x[1]) + '</td>').join('') + '</tr>';
  rows.forEach((list, l) => { h += row('layer ' + l, list); });
  if (D.next[p]) h += row('output', D.next[p].slice(0, K));
  $('lens').innerHTML = h;
  drawn.lensRows = rows.filter(r => r).length;
}
function drawPipeline() {
  const p = S.sel;
  const owner = steps.find(s => s.positions.length && s.positions[s.positions.length - 1] === p);
  if (!owner || !owner.pipeline.stages) {
    $('pipeline-note').textContent = !owner
      ? 'nothing is sampled at position ' + p + ': it is inside the prompt, so its next token is given, not drawn. Select the last token of a step (the scrubber does).'
      : 'step ' + owner.step + (owner.sampled ? ' sampled ' + shown(piece(owner.sampled.id)) + ' (p = ' + fmt(owner.sampled.prob) + ')' : ' sampled nothing') +
        '; the sampler\'s distributions are not in this dump (journey serve --trace-dir records token ids and KV blocks; journey trace records every stage).';
    $('pipeline').innerHTML = ''; drawn.pipelineStages = 0; return;
  }
  const pl = owner.pipeline, pick = owner.sampled ? owner.sampled.id : -1;
  $('pipeline-note').textContent = 'step ' + owner.step + ': the same ' + pl.tokens.length + ' tokens through every stage of src/sampling (the raw logits\' top ' +
    Math.min(10, pl.tokens.length) + ', the sampled token, the top of the last stage). ' +
    (sampling.greedy ? 'Greedy: the argmax of the penalized logits is taken, nothing is drawn.' : 'Probabilities are renormalized after each filter; struck out: removed.');
  let h = '';
  pl.stages.forEach((st, k) => {
    const order = pl.tokens.map((id, j) => [id, st.values[j]]);
    if (k > 0) h += '<div class="arrow">→</div>';
    h += '<div class="stage"><h3>' + esc(st.label) + '</h3><div class="kind">' + (st.kind === 'logit' ? 'logits (scores, not probabilities)' : 'probabilities') +
      ' · ' + st.kept + (st.kind === 'prob' ? ' with p &gt; 0' : ' tokens') + '</div>';
    order.forEach(x => { const cut = st.kind === 'prob' && x[1] === 0;
      h += '<div class="row' + (cut ? ' cut' : '') + (x[0] === pick ? ' pick' : '') + '"><span>' + esc(shown(piece(x[0]))) + '</span><span>' + fmt(x[1]) + '</span></div>'; });
    h += '</div>';
  });
  if (owner.sampled) h += '<div class="arrow">→</div><div class="stage"><h3>' + (sampling.greedy ? 'argmax' : 'drawn') + '</h3><div class="row pick"><span>' +
    esc(shown(piece(owner.sampled.id))) + '</span><span>p ' + fmt(owner.sampled.prob) + '</span></div><div class="kind">id ' + owner.sampled.id + '</div></div>';
  $('pipeline').innerHTML = h;
  drawn.pipelineStages = pl.stages.length;
}
// Structured output (the grammar_mask stage): ids allowed at every step, and at the selected step
// the raw logits' top tokens (struck out: forbidden) next to the top tokens the grammar allowed.
function drawGrammar() {
  const withMask = steps.filter(s => s.grammar);
  $('grammar-panel').hidden = withMask.length === 0;
  if (!withMask.length) return;
  const V = withMask[0].grammar.vocab, w = Math.max(1, 100 / steps.length);
  $('grammar-chart').innerHTML = steps.map((s, i) => { if (!s.grammar) return '';
    const h = 46 * Math.log(1 + s.grammar.allowed) / Math.log(1 + V);
    return '<rect x="' + (i * w) + '%" y="' + (47 - h) + '" width="' + (w * 0.8) + '%" height="' + h + '" fill="' + (i === S.step ? '#c33' : '#69c') + '"><title>step ' + s.step + ': ' + s.grammar.allowed + ' of ' + V + ' ids allowed</title></rect>'; }).join('');
  const st = steps[S.step];
  if (!st.grammar) { $('grammar-note').textContent = 'ids allowed per step (log scale, of ' + V + '); step ' + st.step + ' has no mask (nothing drawn).'; $('grammar').innerHTML = ''; return; }
  const g = st.grammar;
  $('grammar-note').textContent = 'ids allowed per step (log scale, of ' + V + '). Step ' + st.step + ': ' + g.allowed + ' of ' + V + ' ids allowed; every other logit became -inf before the sampler.';
  const list = (title, rows, kind) => '<div class="stage"><h3>' + title + '</h3><div class="kind">' + kind + '</div>' + rows.map(x =>
    '<div class="row' + (x[2] === false ? ' cut' : '') + (st.sampled && x[0] === st.sampled.id ? ' pick' : '') + '"><span>' + esc(shown(piece(x[0]))) + '</span><span>' + fmt(x[1]) + '</span></div>').join('') + '</div>';
  $('grammar').innerHTML = g.wanted ? '<div style="display:flex;gap:6px;overflow-x:auto">' + list('what the model wanted', g.wanted, 'raw logits; struck out: forbidden') +
    '<div class="arrow">→</div>' + list('what the grammar allowed', g.permitted, 'top allowed ids by logit') + '</div>' : '';
  drawn.grammarSteps = withMask.length;
}
function drawKV() {
  const st = steps[S.step];
  if (!st.kv) { $('kv-note').textContent = 'no kv_blocks stage in this dump'; $('kv').innerHTML = ''; drawn.kvBlocks = 0; return; }
  const kv = st.kv, bs = kv.block_size, first = st.positions[0], server = st.server || {};
  const shared = {}; (server.shared_blocks || []).forEach(b => shared[b.block] = b.ref_count);
  const cached = server.cached_prompt_tokens || 0;
  const nb = kv.block_table.length;
  $('kv-note').textContent = nb + (nb === 1 ? ' block' : ' blocks') + ' of ' + bs + ' slots hold ' + kv.slots_used + ' positions; dark: written in this step' +
    (cached ? ', gold: ' + cached + ' prompt positions found in the prefix cache' : '') +
    (Object.keys(shared).length ? ', yellow blocks are shared with other sequences' : '') + '. The selected token is outlined.';
  let h = '';
  kv.block_table.forEach((b, i) => {
    let cells = '';
    for (let j = 0; j < bs; ++j) {
      const pos = i * bs + j;
      let c = 'cellkv';
      if (pos < kv.slots_used) c += pos >= first ? ' new' : (pos < cached ? ' cached' : ' used');
      if (pos === S.sel) c += ' sel';
      cells += '<div class="' + c + '" title="position ' + pos + (P[pos] ? ': ' + esc(shown(piece(P[pos][0]))) : '') + '"></div>';
    }
    h += '<div class="block' + (shared[b] ? ' shared' : '') + '"><div class="cells">' + cells + '</div>block ' + b + (shared[b] ? ' ×' + shared[b] : '') + '</div>';
  });
  $('kv').innerHTML = h;
  drawn.kvBlocks = kv.block_table.length;
}

// ---- attention ------------------------------------------------------------------------------
const A = D.attention;
let W = null, tri = 0, H = 0;
if (A) {
  const bin = atob(A.weights); W = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; ++i) W[i] = bin.charCodeAt(i);
  tri = A.positions * (A.positions + 1) / 2; H = A.heads.length;
}
const hasLayer = l => A && A.layers.indexOf(l) >= 0;
const weight = (l, h, p, c) => W[(l * H + h) * tri + p * (p + 1) / 2 + c] / 255;
function colour(v) { const x = Math.sqrt(Math.max(0, Math.min(1, v))); return 'rgb(' + Math.round(255 - 215 * x) + ',' + Math.round(255 - 160 * x) + ',' + Math.round(255 - 50 * x) + ')'; }
function drawLooks() {
  const c = $('looks'), ctx = c.getContext('2d');
  if (!A || S.sel >= A.positions) { c.width = 400; c.height = 30; ctx.fillStyle = '#666'; ctx.font = '12px sans-serif';
    ctx.fillText(A ? 'position ' + S.sel + ' is past the attention kept in this report' : 'no attn_weights in this dump', 4, 18); drawn.looksCells = 0; return; }
  const p = S.sel, cols = p + 1, cw = Math.max(4, Math.min(26, Math.floor(900 / cols))), rh = 9, left = 58, top = 70, gap = 4;
  c.width = left + cols * cw + 10; c.height = top + L * (H * rh + gap) + 4;
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, c.width, c.height);
  let cells = 0;
  for (let l = 0; l < L; ++l) {
    if (!hasLayer(l)) continue;
    for (let h = 0; h < H; ++h) {
      const y = top + l * (H * rh + gap) + h * rh;
      for (let k = 0; k <= p; ++k) { ctx.fillStyle = colour(weight(l, h, p, k)); ctx.fillRect(left + k * cw, y, cw - 1, rh - 1); ++cells; }
      ctx.fillStyle = (l === S.layer && h === S.head) ? '#e0683c' : '#444'; ctx.font = '8px monospace'; ctx.textBaseline = 'top';
      ctx.fillText('L' + l + ' h' + A.heads[h], 2, y);
    }
  }
  ctx.fillStyle = '#333'; ctx.font = '10px monospace';
  for (let k = 0; k <= p; ++k) { ctx.save(); ctx.translate(left + k * cw + cw / 2, top - 3); ctx.rotate(-Math.PI / 3); ctx.fillText(shown(piece(P[k][0])).slice(0, 10), 0, 0); ctx.restore(); }
  c.onclick = e => { const r = c.getBoundingClientRect(); const y = (e.clientY - r.top) * c.height / r.height - top;
    const l = Math.floor(y / (H * rh + gap)), h = Math.floor((y - l * (H * rh + gap)) / rh);
    if (l >= 0 && l < L && h >= 0 && h < H) { S.layer = l; S.head = h; render(); } };
  c.onmousemove = e => { const r = c.getBoundingClientRect(); const x = (e.clientX - r.left) * c.width / r.width - left, y = (e.clientY - r.top) * c.height / r.height - top;
    const k = Math.floor(x / cw), l = Math.floor(y / (H * rh + gap)), h = Math.floor((y - l * (H * rh + gap)) / rh);
    if (k >= 0 && k <= p && l >= 0 && l < L && h >= 0 && h < H && hasLayer(l)) showTip(e, 'layer ' + l + ' head ' + A.heads[h] + ': ' + shown(piece(P[p][0])) + ' → ' + shown(piece(P[k][0])) + ' (position ' + k + ') ' + weight(l, h, p, k).toFixed(3)); else hideTip(); };
  c.onmouseleave = hideTip;
  drawn.looksCells = cells;
}
function drawMap(canvas, l, h, big) {
  const N = A.positions, cell = big ? Math.max(3, Math.min(14, Math.floor(620 / N))) : Math.max(1, Math.floor(110 / N));
  const pad = big ? 80 : 0;
  canvas.width = pad + N * cell + 2; canvas.height = pad + N * cell + 2;
  const ctx = canvas.getContext('2d'); ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let p = 0; p < N; ++p) for (let k = 0; k <= p; ++k) { ctx.fillStyle = colour(weight(l, h, p, k)); ctx.fillRect(pad + k * cell, pad + p * cell, cell, cell); }
  if (big) {
    ctx.fillStyle = '#333'; ctx.font = Math.max(6, Math.min(11, cell)) + 'px monospace'; ctx.textBaseline = 'middle';
    for (let p = 0; p < N; ++p) { ctx.textAlign = 'right'; ctx.fillText(shown(piece(P[p][0])).slice(0, 10) + ' ' + p, pad - 3, pad + p * cell + cell / 2); }
    for (let k = 0; k < N; ++k) { ctx.save(); ctx.translate(pad + k * cell + cell / 2, pad - 3); ctx.rotate(-Math.PI / 2); ctx.textAlign = 'left'; ctx.fillText(shown(piece(P[k][0])).slice(0, 10), 0, 0); ctx.restore(); }
    if (S.sel < N) { ctx.strokeStyle = '#e0683c'; ctx.lineWidth = 2; ctx.strokeRect(pad, pad + S.sel * cell, (S.sel + 1) * cell, cell); }
    canvas.onclick = e => { const r = canvas.getBoundingClientRect(); const p = Math.floor(((e.clientY - r.top) * canvas.height / r.height - pad) / cell); if (p >= 0 && p < N) select(p); };
    canvas.onmousemove = e => { const r = canvas.getBoundingClientRect(); const x = (e.clientX - r.left) * canvas.width / r.width - pad, y = (e.clientY - r.top) * canvas.height / r.height - pad;
      const p = Math.floor(y / cell), k = Math.floor(x / cell);
      if (p >= 0 && p < N && k >= 0 && k <= p) showTip(e, shown(piece(P[p][0])) + ' (' + p + ') → ' + shown(piece(P[k][0])) + ' (' + k + '): ' + weight(l, h, p, k).toFixed(3)); else hideTip(); };
    canvas.onmouseleave = hideTip;
  }
}
function drawAttention() {
  drawLooks();
  const l = S.layer;
  if (!A || !hasLayer(l)) { $('maptitle').textContent = 'layer ' + l + ': not recorded'; $('heads').innerHTML = ''; drawn.heatmaps = 0; return; }
  S.head = Math.min(S.head, H - 1);
  $('maptitle').textContent = 'layer ' + l + ', head ' + A.heads[S.head] + (A.truncated ? ' (first ' + A.positions + ' positions)' : '');
  drawMap($('map'), l, S.head, true);
  const box = $('heads'); box.innerHTML = '';
  for (let h = 0; h < H; ++h) {
    const f = document.createElement('figure'); if (h === S.head) f.className = 'sel';
    const c = document.createElement('canvas'); f.appendChild(c);
    const cap = document.createElement('figcaption'); cap.textContent = 'head ' + A.heads[h]; f.appendChild(cap);
    f.onclick = () => { S.head = h; render(); };
    box.appendChild(f); drawMap(c, l, h, false);
  }
  drawn.heatmaps = 1 + H;
}

// ---- the logit lens over the whole run --------------------------------------------------------
function drawLensGrid() {
  if (!D.lens) { $('lensgrid').innerHTML = '<tr><td class="muted">no logit lens in this dump</td></tr>'; return; }
  if (!drawLensGrid.built) {
    let h = '<tr><th></th>' + P.map((t, p) => '<th data-pos="' + p + '">' + esc(shown(piece(t[0]))) + '</th>').join('') + '</tr>';
    for (let l = 0; l < L; ++l) {
      h += '<tr><th>L' + l + '</th>';
      P.forEach((t, p) => { const e = D.lens[p] && D.lens[p][l];
        h += e ? '<td data-pos="' + p + '" style="background:rgba(122,92,199,' + (0.08 + 0.8 * e[0][1]).toFixed(2) + ')" title="' + esc(fmt(e[0][1])) + '">' + esc(shown(piece(e[0][0]))) + '</td>' : '<td data-pos="' + p + '"></td>'; });
      h += '</tr>';
    }
    $('lensgrid').innerHTML = h;
    $('lensgrid').onclick = e => { const td = e.target.closest('[data-pos]'); if (td) select(+td.dataset.pos); };
    drawLensGrid.built = true;
  }
  $('lensgrid').querySelectorAll('[data-pos]').forEach(td => td.classList.toggle('selcol', +td.dataset.pos === S.sel));
}

// ---- statistics -------------------------------------------------------------------------------
function drawStats() {
  const box = $('stats-box');
  $('stats-count').textContent = '(' + names.length + ' tensors × ' + steps.length + ' steps)';
  if (!box.open) return;
  const cmp = !!D.compare;
  document.querySelector('#stats thead').innerHTML = '<tr><th>tensor</th><th>step</th><th>shape</th><th>min</th><th>max</th><th>mean</th><th>rms</th><th>masked</th><th>NaN/inf</th>' +
    (cmp ? '<th>vs B</th><th>nmse</th><th>max abs err</th>' : '') + '</tr>';
  const f = $('filter').value, only = $('stepOnly').checked;
  let h = '', n = 0;
  steps.forEach((st, si) => {
    if (only && si !== S.step) return;
    names.forEach((nm, i) => {
      const r = D.stats.steps[si][i]; if (!r || (f && nm.indexOf(f) < 0) || n > 3000) return; ++n;
      const c = cmp ? D.compare.steps[si][nm] : null;
      h += '<tr><td>' + esc(nm) + '</td><td>' + st.step + '</td><td>' + r[0] + '</td><td>' + fmt(r[1]) + '</td><td>' + fmt(r[2]) + '</td><td>' + fmt(r[3]) +
        '</td><td>' + fmt(r[4]) + '</td><td>' + r[5] + '</td><td>' + r[6] + '</td>' + (cmp ? (c ? '<td>' + c[0] + '</td><td>' + fmt(c[1]) + '</td><td>' + fmt(c[2]) + '</td>' : '<td></td><td></td><td></td>') : '') + '</tr>';
    });
  });
  document.querySelector('#stats tbody').innerHTML = h;
  drawn.statsRows = n;
}
$('stats-box').addEventListener('toggle', drawStats);
$('filter').addEventListener('input', drawStats);
$('stepOnly').addEventListener('change', drawStats);

// ---- comparison verdict -------------------------------------------------------------------------
if (D.compare) {
  const v = $('verdict'), c = D.compare;
  v.hidden = false; v.className = c.ok ? 'ok' : 'bad';
  v.innerHTML = '<div><b>A</b> (this report): ' + esc(c.a) + '<br><b>B</b> (compared with): ' + esc(c.b) +
    '<br><span class="muted">' + esc(c.profile) + '</span></div>' +
    (c.ok ? '<b>SAME: every stage within tolerance</b>' : '<b>DIVERGED: first at ' + esc(c.first.name) + ' (step ' + c.first.step + ')</b> — ' +
      esc(c.first.status) + ' <button id="gofirst">show it</button><details><summary>the numbers</summary><pre>' + esc(c.first.text) + '</pre></details>');
  const lg = $('legend'); lg.hidden = false;
  lg.innerHTML = 'A against B: <span style="background:' + MARK.ok + '">within tolerance</span><span style="background:' + errorShade(1e-6) + '">beyond tolerance (darker: larger NMSE)</span><span style="background:' +
    MARK.first + '">first divergence</span><span style="background:' + MARK.missing + '">missing in A</span>';
  if ($('gofirst')) $('gofirst').onclick = () => { setStep(stepIdx[c.first.step] || 0); if (c.first.layer >= 0) { S.layer = c.first.layer; render(); } };
}

// ---- tensor parallel: every rank's partial stage beside the combined one, at the selected step -----
function drawPartials() {
  const p = D.tensor_parallel && D.tensor_parallel.partials;
  if (!p) return;
  $('tp-partials-box').hidden = false;
  const tp = D.tensor_parallel, rows = p.steps[S.step] || [];
  const range = r => { const m = tp.ranks.find(x => x.rank === r); return m ? m.shard : {}; };
  const covers = (st, r) => { const a = range(r)[st.covers]; return a ? ' ' + st.covers.replace('_', ' ') + ' ' + a[0] + '–' + (a[1] - 1) : ''; };
  const complete = p.ranks.length === tp.world_size;
  let h = '<span class="muted">‖·‖: the Frobenius norm of each rank\'s share (its stage <code>*_partial</code>, recorded before the all-reduce or ' +
    'the gather) and of the combined stage; check: max |combined − the shares summed (attn_out, ffn_out) or put side by side (logits)|, ' +
    'at most a few f32 roundings (the report adds the shares in double, the all-reduce in f32)' + (complete ? '' : ' (needs every rank\'s dump: open rank 0\'s report with DIR/rank&lt;r&gt;/ beside it)') +
    '. Step ' + steps[S.step].step + '; the selected layer is outlined.</span><table class="tp"><tr><th>stage</th><th>layer</th>' +
    p.ranks.map(r => '<th>rank ' + r + ' share</th>').join('') + '<th>combined</th><th>check</th></tr>';
  for (const [si, layer, norms, whole, check] of rows) {
    const st = p.stages[si];
    h += '<tr' + (layer === S.layer ? ' style="outline:2px solid var(--sel)"' : '') + '><td>' + esc(st.whole) + ' = ' + st.combine + ' of ' + esc(st.partial) +
      '</td><td>' + (layer < 0 ? '' : layer) + '</td>' +
      norms.map((n, i) => '<td title="' + esc(covers(st, p.ranks[i])) + '">' + (n === null ? '—' : fmt(n)) + '<span class="muted">' + esc(covers(st, p.ranks[i])) + '</span></td>').join('') +
      '<td>' + (whole === null ? '—' : fmt(whole)) + '</td><td>' + (check === null ? '—' : typeof check === 'string' ? esc(check) : fmt(check)) + '</td></tr>';
  }
  $('tp-partials').innerHTML = h + '</table>';
  drawn.partialRows = rows.length;
}

// ---- one state, every panel ---------------------------------------------------------------------
function render() {
  $('step').value = S.step; $('layer').value = S.layer;
  const st = steps[S.step];
  $('steplabel').textContent = 'step ' + st.step + ' / ' + steps[steps.length - 1].step + ' · ' + st.kind + ' · feeds ' + st.positions.length + ' token' + (st.positions.length > 1 ? 's' : '');
  const inStep = new Set(st.positions);
  tokEls.forEach((el, p) => { el.classList.toggle('sel', p === S.sel); el.classList.toggle('instep', inStep.has(p)); });
  if (tokEls[S.sel]) tokEls[S.sel].scrollIntoView({block: 'nearest', inline: 'nearest'});
  drawDiagram(); drawCard(); drawNext(); drawLens(); drawPipeline(); drawGrammar(); drawKV(); drawAttention(); drawLensGrid(); drawStats(); drawPartials();
  window.journeyReport.selected = S.sel; window.journeyReport.step = steps[S.step].step;
  window.journeyReport.layer = S.layer; window.journeyReport.head = S.head;
  window.journeyReport.renders += 1;
}
window.journeyReport = {ready: false, renders: 0, drawn: drawn, positions: P.length, steps: steps.length, layers: L,
  select: select, setStep: setStep};
S.layer = Math.min(Math.max(0, D.initial.layer), L - 1);
setStep(stepIdx[D.initial.step] || 0);
window.journeyReport.ready = true;
})();
</script>
</body></html>
)PAGE";

}  // namespace journey::tracer
