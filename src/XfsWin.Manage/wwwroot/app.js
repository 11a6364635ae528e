'use strict';
// The page talks to `xfswin manage` with relative URLs, so every request carries the token that
// starts this page's path. api/request takes one control request (JSON) and answers with the
// service's response; api/events streams the service's events and operation progress.

const state = { hello: null, ops: new Set(), busy: false };

// Actions offered per volume. An action shows only when the service accepts its operation
// (hello.operations): format, grow and check join this list when the engine has them.
const volumeActions = [
  { op: 'info', label: 'Info', show: v => true, run: v => showInfo(v.source) },
  { op: 'mount', label: 'Mount', show: v => !v.mountPoint && v.health !== 'busy', run: v => openMount(v) },
  { op: 'unmount', label: 'Unmount', show: v => !!v.mountPoint, run: v => unmount(v) },
  { op: 'recover', label: 'Recover', show: v => !v.mountPoint && v.health !== 'busy', run: v => openRecover(v) },
];

async function call(request) {
  const r = await fetch('api/request', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request) });
  const body = await r.json();
  if (!body.ok) throw new Error(body.error ? body.error.message : 'the request failed');
  return body;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k === 'width') e.style.width = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function size(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0, v = bytes;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + ' ' + units[i];
}

function badge(text) { return el('span', { class: 'badge ' + text }, text); }

function volumeRow(where, v) {
  const used = v.sizeBytes > 0 ? (v.sizeBytes - v.freeBytes) / v.sizeBytes : 0;
  const actions = el('div', { class: 'actions' });
  for (const a of volumeActions) {
    if (!state.ops.has(a.op) || !a.show(v)) continue;
    actions.append(el('button', { type: 'button', 'data-op': a.op, onclick: () => a.run(v) }, a.label));
  }
  const row = el('tr', { 'data-source': v.source },
    el('td', {}, where),
    el('td', {}, v.label || el('span', { class: 'muted' }, '(no label)')),
    el('td', { class: 'mono' }, v.uuid && v.uuid !== '00000000-0000-0000-0000-000000000000' ? v.uuid : ''),
    el('td', {}, v.sizeBytes ? size(v.sizeBytes) : ''),
    el('td', { class: 'usage' }, v.sizeBytes ? el('div', { class: 'bar', title: size(v.freeBytes) + ' free' }, el('span', { width: (used * 100).toFixed(1) + '%' })) : '',
      v.sizeBytes ? el('span', { class: 'muted' }, size(v.freeBytes) + ' free') : ''),
    el('td', {}, badge(v.logState)),
    el('td', { title: v.problem || '' }, badge(v.health)),
    el('td', { class: 'mono mountpoint' }, v.mountPoint || ''),
    el('td', {}, actions));
  return row;
}

function renderDisks(list) {
  const root = document.getElementById('disks');
  root.replaceChildren();
  if (list.disks.length === 0) {
    root.append(el('p', { class: 'muted' }, 'No disks or images. Start the service with --source IMAGE, or plug in a disk.'));
    return;
  }
  for (const d of list.disks) {
    const head = el('div', { class: 'disk-head' },
      el('span', { class: 'path' }, d.path), el('span', { class: 'muted' }, d.kind),
      el('span', {}, size(d.sizeBytes)), el('span', { class: 'muted' }, d.partitionTable === 'none' ? 'no partition table' : d.partitionTable.toUpperCase()));
    const box = el('div', { class: 'disk', 'data-disk': d.path }, head);
    if (d.problem) box.append(el('p', { class: 'error' }, d.problem));
    const table = el('table', {}, el('thead', {}, el('tr', {}, ...['Where', 'Label', 'UUID', 'Size', 'Usage', 'Log', 'Health', 'Mounted at', ''].map(h => el('th', {}, h)))));
    const body = el('tbody');
    if (d.volume) body.append(volumeRow('whole disk', d.volume));
    for (const p of d.partitions) {
      if (p.volume) body.append(volumeRow('partition ' + p.number, p.volume));
      else body.append(el('tr', { class: 'muted' }, el('td', {}, 'partition ' + p.number), el('td', { colspan: 2 }, p.type + (p.name ? ' "' + p.name + '"' : '')),
        el('td', {}, size(p.lengthBytes)), el('td', { colspan: 5 }, p.problem || 'not XFS')));
    }
    if (body.children.length === 0) body.append(el('tr', {}, el('td', { colspan: 9, class: 'muted' }, 'No XFS volume on this disk.')));
    table.append(body);
    box.append(table);
    root.append(box);
  }
}

async function refresh() {
  try {
    const r = await call({ op: 'list' });
    renderDisks(r.list);
  } catch (e) {
    document.getElementById('disks').replaceChildren(el('p', { class: 'error' }, e.message));
  }
}

async function showInfo(source) {
  const section = document.getElementById('details-section');
  section.hidden = false;
  document.getElementById('details-title').textContent = source;
  const box = document.getElementById('details');
  try {
    const v = (await call({ op: 'info', source })).volume;
    const s = v.summary;
    const rows = [
      ['Label', s.label || '(none)'], ['UUID', s.uuid], ['Format', 'XFS v' + s.formatVersion],
      ['Size', size(s.sizeBytes) + ' (' + size(s.freeBytes) + ' free)'], ['Block size', v.blockSize + ' bytes'],
      ['Allocation groups', v.agCount], ['Inodes', v.inodeCount + ' (' + v.freeInodes + ' free)'],
      ['Log', s.logState + (v.externalLog ? ' (external)' : ', ' + v.logBlocks + ' blocks')], ['Health', s.health],
      ['Mounted at', s.mountPoint || 'not mounted'], ['Features', v.features.join(', ')],
    ];
    for (const r of v.readOnlyReasons) rows.push(['Read-only', r]);
    for (const w of v.warnings) rows.push(['Warning', w]);
    const dl = el('dl', { class: 'details' });
    for (const [k, val] of rows) dl.append(el('dt', {}, k), el('dd', {}, val));
    box.replaceChildren(dl);
  } catch (e) {
    box.replaceChildren(el('p', { class: 'error' }, e.message));
  }
}

let mountTarget = null;
function openMount(v) {
  mountTarget = v;
  document.getElementById('mount-source').textContent = v.source;
  const suggestions = state.hello.suggestedMountPoints || [];
  const list = document.getElementById('mount-suggestions');
  list.replaceChildren(...suggestions.map(s => el('option', { value: s })));
  document.getElementById('mount-hint').textContent = state.hello.mountPointKind === 'directory'
    ? 'Give a directory; it is created if it does not exist.' : 'Give a free drive letter (X:) or an empty folder.';
  document.getElementById('mount-point').value = suggestions.length ? suggestions[0] : '';
  document.getElementById('mount-dialog').showModal();
}

async function runOperation(title, request, after) {
  const section = document.getElementById('operation-section');
  section.hidden = false;
  document.getElementById('operation-title').textContent = title;
  const bar = document.getElementById('operation-progress');
  bar.value = 0;
  document.getElementById('operation-stage').textContent = 'working…';
  const result = document.getElementById('operation-result');
  result.textContent = '';
  result.className = '';
  try {
    const r = await call(request);
    bar.value = 1;
    document.getElementById('operation-stage').textContent = 'done';
    result.textContent = after(r);
  } catch (e) {
    document.getElementById('operation-stage').textContent = 'failed';
    result.className = 'error';
    result.textContent = e.message;
  }
  await refresh();
}

async function unmount(v) {
  await runOperation('Unmount ' + v.source, { op: 'unmount', source: v.source }, r => 'Unmounted from ' + r.mount.mountPoint + '.');
}

let recoverTarget = null;
function openRecover(v) {
  recoverTarget = v;
  document.getElementById('recover-source').textContent = v.source;
  document.getElementById('recover-dry-run').checked = false;
  document.getElementById('recover-dialog').showModal();
}

function describeRecover(r) {
  const lines = [r.message];
  if (r.logStateBefore !== 'clean') {
    lines.push('Transactions replayed: ' + r.transactionsReplayed + ' (' + Math.round(r.logBytesReplayed / 1024) + ' KiB of log)');
    for (const [kind, n] of Object.entries(r.unfinishedIntents || {})) lines.push('Unfinished ' + kind + ' intents: ' + n);
    if (r.unlinkedInodes) lines.push('Inodes unlinked while open: ' + r.unlinkedInodes);
  }
  for (const w of r.warnings || []) lines.push('Warning: ' + w);
  return lines.join('\n');
}

function addEvent(e) {
  const list = document.getElementById('events');
  const when = new Date(e.time).toLocaleTimeString();
  list.prepend(el('li', { class: e.ok ? '' : 'failed', 'data-kind': e.kind }, when + ' — ' + e.kind + ': ' + e.message));
}

function listen() {
  const source = new EventSource('api/events');
  source.addEventListener('control', m => {
    const e = JSON.parse(m.data);
    addEvent(e);
    if (!state.busy && (e.kind === 'unmounted' || e.kind === 'volume-read-only')) refresh();
  });
  source.addEventListener('progress', m => {
    const p = JSON.parse(m.data);
    document.getElementById('operation-progress').value = p.fraction;
    document.getElementById('operation-stage').textContent = p.stage + ' ' + Math.round(p.fraction * 100) + '%';
  });
}

async function start() {
  document.getElementById('refresh').addEventListener('click', refresh);
  document.getElementById('mount-cancel').addEventListener('click', () => document.getElementById('mount-dialog').close());
  document.getElementById('recover-cancel').addEventListener('click', () => document.getElementById('recover-dialog').close());
  document.getElementById('mount-form').addEventListener('submit', async ev => {
    ev.preventDefault();
    document.getElementById('mount-dialog').close();
    const mountPoint = document.getElementById('mount-point').value.trim();
    const v = mountTarget;
    await runOperation('Mount ' + v.source, { op: 'mount', source: v.source, mountPoint },
      r => 'Mounted read-only at ' + r.mount.mountPoint + ' (' + r.mount.host + ').' + (r.mount.warnings.length ? '\n' + r.mount.warnings.join('\n') : ''));
  });
  document.getElementById('recover-form').addEventListener('submit', async ev => {
    ev.preventDefault();
    document.getElementById('recover-dialog').close();
    const v = recoverTarget, dryRun = document.getElementById('recover-dry-run').checked;
    state.busy = true;
    try {
      await runOperation((dryRun ? 'Recover (dry run) ' : 'Recover ') + v.source, { op: 'recover', source: v.source, dryRun }, r => describeRecover(r.recover));
    } finally { state.busy = false; }
  });
  try {
    state.hello = (await call({ op: 'hello' })).hello;
    state.ops = new Set(state.hello.operations);
    document.getElementById('server').textContent = state.hello.server + ' on ' + state.hello.platform + ' · protocol v' + state.hello.protocolVersion;
  } catch (e) {
    document.getElementById('server').textContent = e.message;
    document.getElementById('server').className = 'error';
    return;
  }
  listen();
  await refresh();
  document.body.dataset.ready = 'true';
}

start();
