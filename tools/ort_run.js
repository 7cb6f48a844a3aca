#!/usr/bin/env node
// Time one ONNX model under ONNX Runtime's CPU execution provider, the
// counterpart of `nnrun --json` for tools/bench: one process per measurement,
// so the peak RSS reported is this engine's alone.
//
//   node tools/ort_run.js MODEL.onnx --input [NAME=]FILE.npy ... [--batch N] [--threads N]
//        [--warmup N] [--iters N] [--save-outputs DIR] [--profile]
//
// --input without NAME= feeds a model's only input; a model with several
// inputs (token ids and an attention mask) gets one NAME=FILE each.
//
// Prints one JSON line: load_ms, latency_ms {median, p90, p99, min, max},
// throughput (samples/s), peak_rss_mb.  --profile also prints ORT's own
// per-node times (mean over the timed runs, from its profiler's trace) on
// stderr, in the shape of nnrun --profile's node table.  onnxruntime-node is looked up in
// $NN_ORT_DIR/node_modules (default build/ort, where tools/bench installs it).
// $NN_ORT_OPT sets ORT's graph optimization level (disabled, basic, extended;
// default all, as every benchmark runs it): 'extended' leaves out the NCHWc
// layout, to see what the blocked layout buys ORT.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const ortDir = process.env.NN_ORT_DIR || path.join(__dirname, '..', 'build', 'ort');
const ort = require(path.join(ortDir, 'node_modules', 'onnxruntime-node'));
const optLevel = process.env.NN_ORT_OPT || 'all';
if (!['disabled', 'basic', 'extended', 'all'].includes(optLevel))
  die(`NN_ORT_OPT must be disabled, basic, extended or all, not "${optLevel}"`);

// .npy descr <-> ORT tensor type, for the dtypes a model input/output can have here.
const NPY_TYPES = {
  '<f4': ['float32', Float32Array],
  '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array],
  '|b1': ['bool', Uint8Array],
};

function die(msg) {
  process.stderr.write(`ort_run: ${msg}\n`);
  process.exit(2);
}

function usage() {
  die('usage: ort_run.js MODEL.onnx --input [NAME=]FILE.npy ... [--batch N] [--threads N] ' +
      '[--warmup N] [--iters N] [--save-outputs DIR] [--profile]');
}

function parseArgs(argv) {
  const a = { model: null, inputs: [], batch: 0, threads: os.cpus().length, warmup: 3, iters: 20, saveDir: null,
    profile: false };
  const ints = { '--batch': 'batch', '--threads': 'threads', '--warmup': 'warmup', '--iters': 'iters' };
  for (let i = 0; i < argv.length; i++) {
    const s = argv[i];
    if (s === '--profile') {
      a.profile = true;
      continue;
    }
    if (!s.startsWith('--')) {
      if (a.model) usage();
      a.model = s;
      continue;
    }
    const v = argv[++i];
    if (v === undefined) die(`${s} needs a value`);
    if (s in ints) {
      if (!/^\d+$/.test(v)) die(`${s} needs a non-negative integer, got '${v}'`);
      a[ints[s]] = Number(v);
    } else if (s === '--input') {
      const eq = v.indexOf('=');
      a.inputs.push(eq > 0 && !v.slice(0, eq).includes('/') ? [v.slice(0, eq), v.slice(eq + 1)] : [null, v]);
    }
    else if (s === '--save-outputs') a.saveDir = v;
    else die(`unknown option ${s}`);
  }
  if (!a.model || !a.inputs.length) usage();
  if (a.iters < 1) die('--iters must be at least 1');
  if (a.threads < 1) a.threads = os.cpus().length;
  return a;
}

// The .npy header is a Python dict literal; numpy writes it in one fixed form.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') die(`${file}: not a .npy file`);
  const major = buf[6];
  const lenBytes = major >= 2 ? 4 : 2;
  const hlen = lenBytes === 4 ? buf.readUInt32LE(8) : buf.readUInt16LE(8);
  const start = 8 + lenBytes + hlen;
  const header = buf.toString('latin1', 8 + lenBytes, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !shape || /'fortran_order':\s*True/.test(header)) die(`${file}: unsupported .npy header ${header.trim()}`);
  const type = NPY_TYPES[descr[1]];
  if (!type) die(`${file}: unsupported dtype ${descr[1]}`);
  const dims = shape[1].split(',').map((d) => d.trim()).filter((d) => d).map(Number);
  const count = dims.reduce((n, d) => n * d, 1);
  const Ctor = type[1];
  if (buf.length - start < count * Ctor.BYTES_PER_ELEMENT) die(`${file}: truncated data`);
  // Copy: the payload offset is not aligned to the element size in general.
  const data = new Ctor(count);
  Buffer.from(data.buffer).set(buf.subarray(start, start + count * Ctor.BYTES_PER_ELEMENT));
  return new ort.Tensor(type[0], data, dims);
}

function writeNpy(file, tensor) {
  const descr = Object.keys(NPY_TYPES).find((k) => NPY_TYPES[k][0] === tensor.type);
  if (!descr) die(`output of type ${tensor.type} cannot be saved`);
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  // Version 1.0: magic + 2 version bytes + 2 length bytes + header padded to 64 with a final newline.
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

// Linear interpolation between order statistics, as nnrun computes them.
function percentile(sorted, p) {
  const pos = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const round3 = (x) => Math.round(x * 1000) / 1000;

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const tensors = a.inputs.map(([name, file]) => {
    const t = readNpy(file);
    if (a.batch && t.dims[0] !== a.batch) die(`${file}: batch ${t.dims[0]}, expected ${a.batch}`);
    return [name, t];
  });
  const input = tensors[0][1];

  const profDir = a.profile ? fs.mkdtempSync(path.join(os.tmpdir(), 'ort_run-')) : null;
  const t0 = nowMs();
  const session = await ort.InferenceSession.create(a.model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: optLevel,
    intraOpNumThreads: a.threads,
    ...(profDir ? { enableProfiling: true, profileFilePrefix: path.join(profDir, 'trace') } : {}),
  });
  const loadMs = nowMs() - t0;
  const feeds = {};
  if (tensors.length === 1 && tensors[0][0] === null) {
    if (session.inputNames.length !== 1) die(`${a.model}: ${session.inputNames.length} inputs, name them: --input NAME=FILE`);
    feeds[session.inputNames[0]] = input;
  } else {
    for (const [name, t] of tensors) {
      if (name === null) die('with several inputs, every --input needs NAME=FILE');
      if (!session.inputNames.includes(name)) die(`${a.model}: no input named ${name}`);
      feeds[name] = t;
    }
    const absent = session.inputNames.filter((n) => !(n in feeds));
    if (absent.length) die(`${a.model}: no --input for ${absent.join(', ')}`);
  }

  for (let i = 0; i < a.warmup; i++) await session.run(feeds);
  const lat = [];
  let out;
  const start = nowMs();
  for (let i = 0; i < a.iters; i++) {
    const r0 = nowMs();
    out = await session.run(feeds);
    lat.push(nowMs() - r0);
  }
  const totalMs = nowMs() - start;
  lat.sort((x, y) => x - y);

  if (a.saveDir) {
    fs.mkdirSync(a.saveDir, { recursive: true });
    for (const name of session.outputNames) writeNpy(path.join(a.saveDir, `${name.replace(/\//g, '_')}.npy`), out[name]);
  }
  if (profDir) {
    session.endProfiling();
    printProfile(profDir, a.warmup);
    fs.rmSync(profDir, { recursive: true, force: true });
  }
  const samples = input.dims.length ? input.dims[0] : 1;
  console.log(JSON.stringify({
    model: a.model,
    engine: `onnxruntime ${ort.env.versions.common}`,
    batch: samples,
    threads: a.threads,
    load_ms: round3(loadMs),
    iters: a.iters,
    latency_ms: {
      median: round3(percentile(lat, 50)),
      p90: round3(percentile(lat, 90)),
      p99: round3(percentile(lat, 99)),
      min: round3(lat[0]),
      max: round3(lat[lat.length - 1]),
    },
    throughput: round3((samples * a.iters) / (totalMs / 1e3)),
    peak_rss_mb: Math.round((peakRssKiB() / 1024) * 10) / 10,
  }));
  await session.release();
}

// ORT's trace is a JSON array of Chrome trace events: one "model_run" per
// run and one "<node>_kernel_time" per node executed, in run order.  The
// warmup runs are skipped; a node's time is its mean over the timed runs.
function printProfile(dir, warmup) {
  const file = fs.readdirSync(dir).find((f) => f.endsWith('.json'));
  if (!file) die('--profile: ONNX Runtime wrote no trace');
  const events = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
  let run = -1;
  const nodes = new Map();
  for (const e of events) {
    if (e.cat === 'Session' && e.name === 'model_run') run++;
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time') || run < warmup - 1) continue;
    // a run's node events come before its model_run event
    const name = e.name.slice(0, -'_kernel_time'.length);
    const n = nodes.get(name) || { op: (e.args && e.args.op_name) || '?', us: 0, runs: new Set() };
    n.us += e.dur;
    n.runs.add(run);
    nodes.set(name, n);
  }
  const timed = Math.max(1, run - warmup + 1);
  let total = 0;
  for (const n of nodes.values()) total += n.us / timed;
  const lines = [`${'node'.padEnd(60)} ${'operator'.padEnd(22)} ms per run   share`];
  for (const [name, n] of nodes) {
    const ms = n.us / timed / 1e3;
    lines.push(`${name.padEnd(60)} ${n.op.padEnd(22)} ${ms.toFixed(3).padStart(10)}  ${(100 * ms * 1e3 / total).toFixed(1).padStart(5)}%`);
  }
  lines.push(`${'total'.padEnd(60)} ${''.padEnd(22)} ${(total / 1e3).toFixed(3).padStart(10)}`);
  process.stderr.write(lines.join('\n') + '\n');
}

// Peak resident set in KiB: VmHWM of /proc/self/status, this process's own
// high-water mark.  resourceUsage().maxRSS is the fallback only: after
// vfork + exec (Python's subprocess) it starts at the parent's peak.
function peakRssKiB() {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]);
  } catch (e) {
    // no /proc: fall back
  }
  return process.resourceUsage().maxRSS;
}

main().catch((e) => die(e && e.message ? e.message : String(e)));
