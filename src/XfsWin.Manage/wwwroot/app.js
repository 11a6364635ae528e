'use strict';
// The page talks to `xfswin manage` with relative URLs, so every request carries the token that
// starts this page's path. api/request takes one control request (JSON) and answers with the
// service's response; api/events streams the service's events and operation progress.

const state = { hello: null, ops: new Set(), admin: true, busy: false, running: false };

// Actions offered per volume. An action shows only when the service accepts its operation
// (hello.operations) from this user: someone who is not an administrator (hello.administrator false)
// may mount and unmount only the volumes an administrator configured (configuredMountPoint), and
// not recover, check, grow or format. Grow works on an unmounted volume, or on one this service
// mounted read-write.
const adminOnly = ['recover', 'check', 'grow', 'format'];
const mayMount = v => state.admin || !!v.configuredMountPoint;
const idle = v => !v.mountPoint && v.health !== 'busy';
const growable = v => idle(v) || (!!v.mountPoint && !v.readOnly);
const volumeActions = [
  { op: 'info', label: 'Info', show: v => true, run: v => showInfo(v.source) },
  { op: 'mount', label: 'Mount', show: v => idle(v) && mayMount(v), run: v => openMount(v) },
  { op: 'unmount', label: 'Unmount', show: v => !!v.mountPoint && mayMount(v), run: v => unmount(v) },
  { op: 'recover', label: 'Recover', show: idle, run: v => openRecover(v) },
  { op: 'check', label: 'Check', show: idle, run: v => runCheck(v.source) },
  { op: 'grow', label: 'Grow', show: growable, run: v => openGrow(v) },
  { op: 'format', label: 'Format', show: idle, run: v => openFormat(v.source) },
];

// A Format button for what holds no XFS volume: a disk or image as a whole, a partition.
function formatButton(target, label) {
  if (!state.ops.has('format')) return null;
  return el('button', { type: 'button', 'data-op': 'format', 'data-target': target, onclick: () => openFormat(target) }, label);
}

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
      el('span', {}, size(d.sizeBytes)), el('span', { class: 'muted' }, d.partitionTable === 'none' ? 'no partition table' : d.partitionTable.toUpperCase()),
      d.volume ? null : el('div', { class: 'actions' }, formatButton(d.path, 'Format whole ' + (d.kind === 'image' ? 'image' : 'disk'))));
    const box = el('div', { class: 'disk', 'data-disk': d.path }, head);
    if (d.problem) box.append(el('p', { class: 'error' }, d.problem));
    const table = el('table', {}, el('thead', {}, el('tr', {}, ...['Where', 'Label', 'UUID', 'Size', 'Usage', 'Log', 'Health', 'Mounted at', ''].map(h => el('th', {}, h)))));
    const body = el('tbody');
    if (d.volume) body.append(volumeRow('whole disk', d.volume));
    for (const p of d.partitions) {
      if (p.volume) body.append(volumeRow('partition ' + p.number, p.volume));
      else body.append(el('tr', { class: 'muted' }, el('td', {}, 'partition ' + p.number), el('td', { colspan: 2 }, p.type + (p.name ? ' "' + p.name + '"' : '')),
        el('td', {}, size(p.lengthBytes)), el('td', { colspan: 4 }, p.problem || 'not XFS'),
        el('td', {}, el('div', { class: 'actions' }, formatButton(d.path + '@' + p.number, 'Format')))));
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
  document.getElementById('mount-point').value = v.configuredMountPoint || (suggestions.length ? suggestions[0] : '');
  // Offered where the service's host writes; to someone who is not an administrator only for a volume configured read-write.
  document.getElementById('mount-rw').checked = !!v.configuredReadWrite;
  document.getElementById('mount-rw-label').hidden = !state.hello.readWriteMounts || (!state.admin && !v.configuredReadWrite);
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
  const details = document.getElementById('operation-details');
  details.replaceChildren();
  state.running = true;
  try {
    const r = await call(request);
    state.running = false;
    bar.value = 1;
    document.getElementById('operation-stage').textContent = 'done';
    // after gives the result's text, or [text, node] to show a table under it.
    const out = after(r);
    if (Array.isArray(out)) { result.textContent = out[0]; details.replaceChildren(out[1]); } else result.textContent = out;
  } catch (e) {
    state.running = false;
    document.getElementById('operation-stage').textContent = 'failed';
    result.className = 'error';
    result.textContent = e.message;
  }
  await refresh();
}

// ---- check ----------------------------------------------------------------------------------

function hex(n) { return n === null || n === undefined ? '' : '0x' + n.toString(16); }

function describeCheck(c) {
  const box = el('div', { class: 'check', 'data-clean': String(c.clean) });
  box.append(el('div', { class: 'check-status' }, badge(c.clean ? 'clean' : 'corrupt'),
    el('span', {}, c.clean ? 'clean: no problems found' : c.problemCount + ' problem' + (c.problemCount === 1 ? '' : 's') + ' found'),
    el('span', { class: 'muted' }, c.agCount + ' AGs, ' + c.inodesInUse + ' inodes in use, ' + c.directories + ' directories; log ' + c.logState +
      '; ' + c.elapsedSeconds.toFixed(2) + ' s')));
  if (c.problems.length) {
    const body = el('tbody');
    for (const p of c.problems)
      body.append(el('tr', {}, el('td', {}, p.structure), el('td', {}, p.ag ?? ''), el('td', { class: 'mono' }, hex(p.daddr)), el('td', {}, p.message)));
    box.append(el('table', { class: 'problems' },
      el('thead', {}, el('tr', {}, ...['Structure', 'AG', 'Disk address (512-byte units)', 'Problem'].map(h => el('th', {}, h)))), body));
    if (c.problemCount > c.problems.length) box.append(el('p', { class: 'muted' }, '… and ' + (c.problemCount - c.problems.length) + ' more'));
  }
  for (const n of c.notes) box.append(el('p', { class: 'muted' }, 'Note: ' + n));
  return [c.message, box];
}

async function runCheck(source) {
  state.busy = true;
  try {
    await runOperation('Check ' + source, { op: 'check', source }, r => describeCheck(r.check));
  } finally { state.busy = false; }
}

// ---- format ---------------------------------------------------------------------------------

const formatFeatures = ['crc', 'finobt', 'sparse', 'rmapbt', 'reflink', 'bigtime', 'inobtcount', 'nrext64', 'exchange', 'parent', 'metadir'];
// What the dialog was filled with (mkfs.xfs's defaults for this target): only changes are sent,
// so options that depend on each other keep mkfs.xfs's own rules.
let formatTarget = null, formatDefaults = null, formatPlan = null, formatOptions = null;

function field(name) { return document.getElementById('format-' + name); }

async function openFormat(target) {
  formatTarget = target;
  document.getElementById('format-target').textContent = target;
  field('error').textContent = '';
  const holds = document.getElementById('format-holds');
  holds.textContent = 'Reading the defaults for this device…';
  let d;
  try {
    d = (await call({ op: 'format', source: target, format: { dryRun: true } })).format;
  } catch (e) {
    // The target cannot be formatted at all (mounted, too small, unreadable): say why where results show.
    document.getElementById('operation-section').hidden = false;
    document.getElementById('operation-title').textContent = 'Format ' + target;
    document.getElementById('operation-stage').textContent = 'failed';
    const result = document.getElementById('operation-result');
    result.className = 'error';
    result.textContent = e.message;
    document.getElementById('operation-details').replaceChildren();
    return;
  }
  formatDefaults = d;
  holds.textContent = size(d.sizeBytes) + '. ' + (d.existing ? 'Holds ' + d.existing + '.' : 'Nothing recognisable is on it.');
  field('label').value = '';
  field('blockSize').value = String(d.blockSize);
  field('inodeSize').value = String(d.inodeSize);
  field('agcount').value = String(d.agcount);
  field('logSize').value = '';
  field('logSize').placeholder = 'default: ' + d.logBlocks + ' blocks (' + size(d.logBlocks * d.blockSize) + ')';
  for (const f of formatFeatures) field(f).checked = d.features.includes(f);
  document.getElementById('format-dialog').showModal();
}

function chosenFormatOptions() {
  const d = formatDefaults, o = {};
  const label = field('label').value.trim();
  if (label) o.label = label;
  const bs = Number(field('blockSize').value), is = Number(field('inodeSize').value), ag = Number(field('agcount').value);
  if (bs !== d.blockSize) o.blockSize = bs;
  if (is !== d.inodeSize) o.inodeSize = is;
  if (field('agcount').value !== '' && ag !== d.agcount) o.agcount = ag;
  const log = field('logSize').value.trim();
  if (log) o.logSize = log;
  for (const f of formatFeatures) if (field(f).checked !== d.features.includes(f)) o[f] = field(f).checked;
  return o;
}

async function confirmFormat() {
  formatOptions = chosenFormatOptions();
  try {
    formatPlan = (await call({ op: 'format', source: formatTarget, format: { ...formatOptions, dryRun: true } })).format;
  } catch (e) {
    field('error').textContent = e.message;
    return;
  }
  document.getElementById('format-dialog').close();
  document.getElementById('format-confirm-target').textContent = formatTarget;
  document.getElementById('format-confirm-destroys').textContent = formatPlan.existing
    ? 'This destroys ' + formatPlan.existing + ' and everything on it.'
    : 'Nothing recognisable is on it; whatever it holds is overwritten.';
  document.getElementById('format-confirm-summary').textContent = formatPlan.summary;
  document.getElementById('format-confirm-dialog').showModal();
}

async function runFormat() {
  document.getElementById('format-confirm-dialog').close();
  // Force only what the user was shown: the service refuses anything else it finds.
  const request = { op: 'format', source: formatTarget, format: { ...formatOptions, force: !!formatPlan.existing } };
  state.busy = true;
  try {
    await runOperation('Format ' + formatTarget, request, r => r.format.message + '\n\n' + r.format.summary);
  } finally { state.busy = false; }
}

// ---- grow -----------------------------------------------------------------------------------

let growTarget = null;

function blocks(n, blockSize) { return size(n * blockSize) + ' (' + n + ' blocks)'; }

async function openGrow(v) {
  growTarget = v;
  document.getElementById('grow-source').textContent = v.source;
  document.getElementById('grow-error').textContent = '';
  document.getElementById('grow-size').value = '';
  let d;
  try {
    d = (await call({ op: 'grow', source: v.source, dryRun: true })).grow;
  } catch (e) {
    document.getElementById('operation-section').hidden = false;
    document.getElementById('operation-title').textContent = 'Grow ' + v.source;
    document.getElementById('operation-stage').textContent = 'failed';
    const result = document.getElementById('operation-result');
    result.className = 'error';
    result.textContent = e.message;
    document.getElementById('operation-details').replaceChildren();
    return;
  }
  document.getElementById('grow-where').textContent = d.online
    ? 'Mounted read-write at ' + v.mountPoint + ': it grows (or shrinks) while in use.'
    : 'Not mounted: it grows (or shrinks) offline.';
  document.getElementById('grow-current').textContent = blocks(d.oldDataBlocks, d.blockSize) + ', ' + d.oldAgCount + ' allocation groups of ' + d.agBlocks + ' blocks';
  document.getElementById('grow-device').textContent = blocks(d.deviceBlocks, d.blockSize);
  document.getElementById('grow-smallest').textContent = blocks(d.smallestBlocks, d.blockSize);
  document.getElementById('grow-dialog').showModal();
}

function describeGrow(g) {
  const lines = [g.message];
  if (g.written) {
    lines.push('Size: ' + blocks(g.oldDataBlocks, g.blockSize) + ' → ' + blocks(g.newDataBlocks, g.blockSize));
    lines.push('Allocation groups: ' + g.oldAgCount + ' → ' + g.newAgCount);
    lines.push('Free: ' + blocks(g.freeBlocksBefore, g.blockSize) + ' → ' + blocks(g.freeBlocksAfter, g.blockSize));
  }
  return lines.join('\n');
}

async function runGrow() {
  document.getElementById('grow-dialog').close();
  const v = growTarget, text = document.getElementById('grow-size').value.trim();
  const request = { op: 'grow', source: v.source };
  if (text) request.size = text;
  state.busy = true;
  try {
    await runOperation('Grow ' + v.source, request, r => describeGrow(r.grow));
  } finally { state.busy = false; }
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
    if (!state.running) return;
    document.getElementById('operation-progress').value = p.fraction;
    document.getElementById('operation-stage').textContent = p.stage + ' ' + Math.round(p.fraction * 100) + '%';
  });
}

async function start() {
  document.getElementById('refresh').addEventListener('click', refresh);
  document.getElementById('mount-cancel').addEventListener('click', () => document.getElementById('mount-dialog').close());
  document.getElementById('recover-cancel').addEventListener('click', () => document.getElementById('recover-dialog').close());
  document.getElementById('format-cancel').addEventListener('click', () => document.getElementById('format-dialog').close());
  document.getElementById('grow-cancel').addEventListener('click', () => document.getElementById('grow-dialog').close());
  document.getElementById('grow-form').addEventListener('submit', ev => { ev.preventDefault(); runGrow(); });
  document.getElementById('format-confirm-cancel').addEventListener('click', () => document.getElementById('format-confirm-dialog').close());
  document.getElementById('format-form').addEventListener('submit', ev => { ev.preventDefault(); confirmFormat(); });
  document.getElementById('format-confirm-form').addEventListener('submit', ev => { ev.preventDefault(); runFormat(); });
  document.getElementById('mount-form').addEventListener('submit', async ev => {
    ev.preventDefault();
    document.getElementById('mount-dialog').close();
    const mountPoint = document.getElementById('mount-point').value.trim();
    const v = mountTarget;
    const request = { op: 'mount', source: v.source, mountPoint };
    if (document.getElementById('mount-rw').checked && !document.getElementById('mount-rw-label').hidden) request.readOnly = false;
    await runOperation('Mount ' + v.source, request,
      r => 'Mounted ' + (r.mount.readOnly ? 'read-only' : 'read-write') + ' at ' + r.mount.mountPoint + ' (' + r.mount.host + ').' +
        (r.mount.warnings.length ? '\n' + r.mount.warnings.join('\n') : ''));
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
    state.admin = state.hello.administrator !== false;
    if (!state.admin) for (const op of adminOnly) state.ops.delete(op);
    document.getElementById('server').textContent = state.hello.server + ' on ' + state.hello.platform + ' · protocol v' + state.hello.protocolVersion +
      (state.admin ? '' : ' · ' + (state.hello.client || 'you') + ' is not an administrator: configured volumes can be mounted; ' +
        'format, grow, check and recover need the management UI as administrator');
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
