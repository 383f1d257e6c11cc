// Driven by bench/check_outputs (which installs onnxruntime-node first); run it
// from the repository root. Runs each model once in ONNX Runtime and once
// through `kiln run`, on the same random inputs (written as .npy files), and
// holds Kiln's outputs against ORT's.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ARRAYS, ORT_VERSION, commonOptions, firstLine, inputShapes, modelsFrom, ort, parseDims, randomFeeds, sessionOptions } from './ort_common.mjs';

const USAGE = `usage: bench/check_outputs [MODEL.onnx ...] [options]
  --models-dir DIR     models when none are named (default bench/models; build_zoo.py fills it)
  --batch 1,8          batch sizes (the leading symbolic dimension of every input)
  --dim SYM=N          other symbolic dimensions, repeatable (default sequence=128; unknown ones are 1)
  --threads N          threads for both runtimes (default 2)
  --kiln PATH          Kiln binary (default build/bin/kiln)
  --kernels K          Kiln's cpu kernels: native or portable (default native)
  --ort-level L        ORT's graph optimization level: all (default), basic or disabled;
                       disabled evaluates a quantized model's QDQ operators as written
  --rtol X, --atol X   a float output passes when max |Kiln - ORT| <= rtol * max |ORT| + atol
                       (defaults 1e-3 and 1e-6: relative to the output's scale, which for
                       randomly initialised networks can be 1e-14)
  --json FILE          also write every comparison
Integer and bool outputs must be equal. An output that differs passes if it holds the
same rows (along its first axis) in another order, which is said: a detector's
detections with tied scores. Exit status 1 if any output fails, or if Kiln fails where
ORT runs; a 2-D float output's argmax per row is shown, not judged (--batch 200 gives the
top-1 agreement over 200 random inputs), and so is the difference in quantization steps
of an output that takes at most 256 distinct values.`;

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    ...commonOptions,
    kernels: { type: 'string', default: 'native' },
    'ort-level': { type: 'string', default: 'all' },
    rtol: { type: 'string', default: '1e-3' },
    atol: { type: 'string', default: '1e-6' },
  },
});
if (opt.help) { console.log(USAGE); process.exit(0); }
if (!fs.existsSync(opt.kiln)) { console.error(`${opt.kiln} is missing (scripts/build.sh builds it)`); process.exit(2); }
const threads = Number(opt.threads);
const dims = parseDims(opt.dim);
const [rtol, atol] = [Number(opt.rtol), Number(opt.atol)];

// .npy version 1.0, little-endian, C order: what `kiln run --input` reads.
const DESCR = { float32: '<f4', float64: '<f8', int64: '<i8', int32: '<i4', int8: '|i1', uint8: '|u1', bool: '|b1' };
const TYPE_OF = Object.fromEntries(Object.entries(DESCR).map(([t, d]) => [d, t]));

function writeNpy(file, tensor) {
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${DESCR[tensor.type]}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';  // the data starts at a multiple of 64
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head.writeUInt8(1, 6);
  head.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

function readNpy(file) {
  const bytes = fs.readFileSync(file);
  if (bytes.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file} is not a .npy file`);
  const v2 = bytes[6] >= 2;
  const len = v2 ? bytes.readUInt32LE(8) : bytes.readUInt16LE(8);
  const start = (v2 ? 12 : 10) + len;
  const header = bytes.toString('latin1', v2 ? 12 : 10, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const type = TYPE_OF[descr];
  if (!type) throw new Error(`${file}: dtype ${descr} is not compared`);
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const dims = (/'shape':\s*\(([^)]*)\)/.exec(header)?.[1] ?? '').split(',').map((d) => d.trim()).filter(Boolean).map(Number);
  const body = bytes.subarray(start);
  const copy = new Uint8Array(body.length);  // aligned for the typed array
  copy.set(body);
  return { type, dims, data: new ARRAYS[type](copy.buffer) };
}

// Whether `got` holds `want`'s rows (along the first axis) in another order,
// each within `close` of one not yet matched: a detector's boxes, sorted by
// scores that tie to within rounding, come out in either order.
function sameRowsReordered(got, want, close) {
  const rows = want.dims[0] ?? 0;
  if (rows < 2 || rows > 20000) return false;
  const len = want.data.length / rows;
  const used = new Uint8Array(rows);
  for (let r = 0; r < rows; r++) {
    let found = false;
    for (let w = 0; w < rows && !found; w++) {
      if (used[w]) continue;
      let c = 0;
      while (c < len && close(got.data[r * len + c], want.data[w * len + c])) c++;
      if (c === len) found = used[w] = 1;
    }
    if (!found) return false;
  }
  return true;
}

// The step between an output's levels when it takes at most 256 distinct
// values (the dequantized result of an 8-bit tensor): the smallest gap
// between two of them, exact once two neighbouring levels occur, which a few
// thousand values all but ensure. Undefined for an output that is not so.
function quantizationStep(data) {
  const levels = new Set();
  for (const v of data) {
    if (!Number.isFinite(v)) return undefined;
    levels.add(v);
    if (levels.size > 256) return undefined;
  }
  const sorted = [...levels].sort((a, b) => a - b);
  let step = Infinity;
  for (let i = 1; i < sorted.length; i++) step = Math.min(step, sorted[i] - sorted[i - 1]);
  return Number.isFinite(step) ? step : undefined;
}

// Kiln's output against ORT's: shape, then values, then (if the values
// differ) the same rows in another order.
function compare(name, got, want) {
  const row = { output: name, shape: want.dims.join('x') || 'scalar', ok: true, notes: [] };
  if (got.dims.join('x') !== want.dims.join('x') || got.type !== want.type) {
    row.ok = false;
    row.notes.push(`Kiln gave ${got.type} ${got.dims.join('x')}, ORT ${want.type} ${want.dims.join('x')}`);
    return row;
  }
  const n = want.data.length;
  let close;
  if (want.type.startsWith('float')) {
    let diff = 0, scale = 0;
    for (let i = 0; i < n; i++) {
      const d = Math.abs(got.data[i] - want.data[i]);
      diff = Number.isNaN(d) ? (Number.isNaN(got.data[i]) && Number.isNaN(want.data[i]) ? diff : Infinity) : Math.max(diff, d);
      scale = Math.max(scale, Math.abs(want.data[i]) || 0);
    }
    Object.assign(row, { max_abs_diff: diff, max_abs_ort: scale });
    const step = quantizationStep(want.data);
    if (step) row.steps = diff / step;
    const tolerance = rtol * scale + atol;
    close = (a, b) => Math.abs(a - b) <= tolerance || (Number.isNaN(a) && Number.isNaN(b));
    row.ok = diff <= tolerance;
    // Shown, not judged: where the values agree, a differing argmax is a near-tie.
    if (want.dims.length === 2 && want.dims[1] > 1) {
      const [rows, cols] = want.dims;
      const argmax = (a, r) => { let k = 0; for (let c = 1; c < cols; c++) if (a[r * cols + c] > a[r * cols + k]) k = c; return k; };
      let differ = 0;
      for (let r = 0; r < rows; r++) differ += argmax(got.data, r) !== argmax(want.data, r);
      row.argmax = differ ? `differs in ${differ} of ${rows}` : 'same';
    }
  } else {
    let differ = 0;
    for (let i = 0; i < n; i++) differ += got.data[i] !== want.data[i];
    row.max_abs_diff = differ ? NaN : 0;
    close = (a, b) => a === b;
    row.ok = differ === 0;
    if (differ) row.notes.push(`${differ} of ${n} elements differ`);
  }
  if (!row.ok && sameRowsReordered(got, want, close)) {
    row.ok = row.reordered = true;
    row.notes.push('the same rows in another order (ties broken differently)');
  }
  return row;
}

const byOrt = (e) => Object.assign(e, { ort: true });

async function check(model, batch, dir) {
  const options = { ...sessionOptions(threads), graphOptimizationLevel: opt['ort-level'] };
  const session = await ort.InferenceSession.create(model, options).catch((e) => { throw byOrt(e); });
  try {
    const shapes = inputShapes(session, batch, dims);
    const feeds = randomFeeds(shapes);
    const args = ['run', model, '--threads', String(threads), '--kernels', opt.kernels, '--no-cache', '--json', '--output-dir', path.join(dir, 'out')];
    for (const [name, tensor] of Object.entries(feeds)) {
      const file = path.join(dir, `input_${Object.keys(feeds).indexOf(name)}.npy`);
      writeNpy(file, tensor);
      args.push('--input', `${name}=${file}`);
    }
    const want = await session.run(feeds).catch((e) => { throw byOrt(e); });
    const r = spawnSync(opt.kiln, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.status !== 0) {
      const lines = r.stderr.trim().split('\n');
      throw new Error(lines.find((l) => /error/i.test(l)) ?? (lines.pop() || `kiln exit status ${r.status}`));
    }
    const summary = JSON.parse(r.stdout);
    return {
      fixed: shapes.every((s) => s.batchSymbol === null),
      outputs: summary.outputs.map((o) => {
        const ortOut = want[o.name];
        if (!ortOut) return { output: o.name, ok: false, notes: ['ORT has no output of this name'] };
        return compare(o.name, readNpy(o.file), { type: ortOut.type, dims: ortOut.dims.map(Number), data: ortOut.data });
      }),
    };
  } finally {
    await session.release();
  }
}

const results = [];
for (const model of modelsFrom(positionals, opt['models-dir'])) {
  for (const batch of opt.batch.split(',').map(Number)) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'check_outputs-'));
    const result = { model: path.basename(model, '.onnx'), batch, outputs: [], notes: [] };
    let fixed = false;
    try {
      const r = await check(model, batch, dir);
      result.outputs = r.outputs;
      fixed = r.fixed;
    } catch (e) {
      // A model ORT cannot run says nothing about Kiln.
      result.failed = !e.fixedBatch && !e.ort;
      result.notes.push(`${e.fixedBatch ? 'skipped' : e.ort ? 'ORT' : 'Kiln'}: ${firstLine(e)}`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    if (fixed) result.batch = 'fixed';
    results.push(result);
    process.stderr.write(`${result.model} batch ${result.batch}: done\n`);
    if (fixed) break;
  }
}

const fmt = (x) => (x === undefined ? '-' : Number.isNaN(x) ? 'differs' : x === 0 ? '0' : Math.abs(x) < 1e-3 ? x.toExponential(2) : x.toPrecision(3));
const header = ['model', 'batch', 'output', 'shape', 'max |Kiln-ORT|', 'max |ORT|', 'relative', 'steps', 'argmax', ''];
const relative = (o) => (o.max_abs_ort > 0 ? fmt(o.max_abs_diff / o.max_abs_ort) : '-');
const table = [];
for (const r of results) {
  for (const o of r.outputs)
    table.push([r.model, String(r.batch), o.output, o.shape ?? '-', fmt(o.max_abs_diff), fmt(o.max_abs_ort), relative(o), o.steps === undefined ? '-' : String(Math.round(o.steps * 100) / 100), o.argmax ?? '-', o.reordered ? 'ok, reordered' : o.ok ? 'ok' : 'FAIL']);
  if (r.outputs.length === 0) table.push([r.model, String(r.batch), '-', '-', '-', '-', '-', '-', '-', r.failed ? 'FAIL' : 'skipped']);
}
const widths = header.map((h, i) => Math.max(h.length, ...table.map((t) => t[i].length)));
const line = (cells) => cells.map((c, i) => (i < 4 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ').trimEnd();
console.log(`Kiln (${opt.kernels} kernels) against ONNX Runtime ${ORT_VERSION} (onnxruntime-node, CPU, graph optimizations ${opt['ort-level']}), ${threads} thread(s), the same random inputs;`);
console.log(`a float output passes when max |Kiln-ORT| <= ${rtol} * max |ORT| + ${atol}; relative = max |Kiln-ORT| / max |ORT|;`);
console.log('steps = max |Kiln-ORT| in steps of the output\'s quantization, for an output of at most 256 distinct values');
console.log(line(header));
console.log(widths.map((w) => '-'.repeat(w)).join('  '));
for (const t of table) console.log(line(t));
for (const r of results) {
  for (const n of r.notes) console.log(`note: ${r.model} batch ${r.batch}: ${n}`);
  for (const o of r.outputs) for (const n of o.notes) console.log(`note: ${r.model} batch ${r.batch} ${o.output}: ${n}`);
}
const failed = results.filter((r) => r.failed || r.outputs.some((o) => !o.ok));
console.log(failed.length ? `${failed.length} of ${results.length} model/batch rows FAIL` : `all ${results.length} model/batch rows agree`);
if (opt.json) fs.writeFileSync(opt.json, JSON.stringify({ ort_version: ORT_VERSION, ort_level: opt['ort-level'], threads, rtol, atol, kernels: opt.kernels, results }, null, 2) + '\n');
process.exit(failed.length ? 1 : 0);
