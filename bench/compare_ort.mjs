// Driven by bench/compare_ort (which installs onnxruntime-node first); run it
// from the repository root. Times ONNX Runtime in this process and Kiln through
// `kiln run --json`, on the same models, batches, threads and input shapes.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ORT_VERSION, commonOptions, firstLine, inputShapes as shapesFor, median, modelsFrom, ort, parseDims, randomFeeds, sessionOptions as optionsFor } from './ort_common.mjs';

const USAGE = `usage: bench/compare_ort [MODEL.onnx ...] [options]
  --models-dir DIR     models when none are named (default bench/models; build_zoo.py fills it)
  --batch 1,8          batch sizes (the leading symbolic dimension of every input)
  --dim SYM=N          other symbolic dimensions, repeatable (default sequence=128; unknown ones are 1)
  --threads N          intra-op threads for both runtimes (default 2)
  --repeat N           timed ORT runs (default: about 2 s worth, 5..100)
  --kiln-repeat N      timed Kiln runs (default: about 10 s worth, 1..ORT's count)
  --kiln-timeout S     skip Kiln when load + two runs exceed S seconds (default 120)
  --kiln PATH          Kiln binary (default build/bin/kiln)
  --rounds K           time ORT and Kiln K times each, alternating, first calls included; every
                       column is then the median over the rounds, Kiln/ORT that of the K paired ratios (default 1)
  --json FILE          also write the raw numbers`;

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    ...commonOptions,
    repeat: { type: 'string' },
    'kiln-repeat': { type: 'string' },
    'kiln-timeout': { type: 'string', default: '120' },
    rounds: { type: 'string', default: '1' },
    'first-call-child': { type: 'boolean' },  // internal: time one first call in this fresh process and exit
  },
});
if (opt.help) { console.log(USAGE); process.exit(0); }

const threads = Number(opt.threads);
const batches = opt.batch.split(',').map(Number);
const dims = parseDims(opt.dim);
const kilnTimeoutS = Number(opt['kiln-timeout']);
const rounds = Number(opt.rounds);
if (!Number.isInteger(rounds) || rounds < 1) { console.error(`--rounds wants a whole number >= 1, not '${opt.rounds}'`); process.exit(2); }
const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, Math.round(x)));
const models = modelsFrom(positionals, opt['models-dir']);
const sessionOptions = optionsFor(threads);
const inputShapes = (session, batch) => shapesFor(session, batch, dims);

async function timeRun(session, feeds) {
  const t = performance.now();
  await session.run(feeds);
  return performance.now() - t;
}

// Session creation + first run, in the calling process.
async function firstCall(model, batch) {
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(model, sessionOptions);
  const sessionMs = performance.now() - t0;
  try {
    const shapes = inputShapes(session, batch);
    const feeds = randomFeeds(shapes);
    const t1 = performance.now();
    await session.run(feeds);
    return { session, shapes, feeds, session_ms: sessionMs, first_run_ms: sessionMs + performance.now() - t1 };
  } catch (e) {
    await session.release();
    throw e;
  }
}

// Kiln's cold first call is a new process, which pays its one-time set-up
// (threads, LLVM, oneDNN); ORT's is timed the same way: a new node process
// whose first session also creates ORT's environment and thread pool. The
// first call in this process, after other sessions, is kept in the JSON.
function firstCallInNewProcess(model, batch) {
  const args = [process.argv[1], '--first-call-child', model, '--batch', String(batch), '--threads', String(threads), ...opt.dim.flatMap((d) => ['--dim', d])];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 600000, maxBuffer: 1 << 20 });
  if (r.status !== 0) throw new Error(`ORT first call in a new process: ${r.error?.message ?? r.stderr.trim().split('\n').pop()}`);
  return JSON.parse(r.stdout).first_run_ms;
}

if (opt['first-call-child']) {
  const first = await firstCall(positionals[0], batches[0]);
  await first.session.release();
  console.log(JSON.stringify({ first_run_ms: first.first_run_ms }));
  process.exit(0);
}

// Another round of ORT's steady state: a new session, its warm-up run, `runs` timed.
async function ortMedian(model, shapes, runs) {
  const session = await ort.InferenceSession.create(model, sessionOptions);
  try {
    const feeds = randomFeeds(shapes);
    await session.run(feeds);
    const times = [];
    for (let i = 0; i < runs; i++) times.push(await timeRun(session, feeds));
    return median(times);
  } finally {
    await session.release();
  }
}

async function timeOrt(model, batch) {
  const { session, shapes, feeds, session_ms: sessionMs, first_run_ms: firstInProcessMs } = await firstCall(model, batch);
  let timed;
  try {
    // The first run is the warm-up; a second one sizes the timed loop.
    const probe = await timeRun(session, feeds);
    const runs = opt.repeat ? Number(opt.repeat) : clamp(2000 / probe, 5, 100);
    const times = [];
    for (let i = 0; i < runs; i++) times.push(await timeRun(session, feeds));
    const batchSymbols = [...new Set(shapes.map((s) => s.batchSymbol).filter(Boolean))];
    timed = { session_ms: sessionMs, first_run_in_process_ms: firstInProcessMs, median_ms: median(times), runs, batchSymbols, shapes };
  } finally {
    await session.release();
  }
  return { ...timed, first_run_ms: firstCallInNewProcess(model, batch) };
}

function kilnRun(model, batch, batchSymbols, repeat, timeoutS, cacheDir) {
  const dimArgs = [...batchSymbols.map((s) => `${s}=${batch}`), ...opt.dim].flatMap((d) => ['--dim', d]);
  const args = ['run', model, '--random-inputs', ...dimArgs, '--threads', String(threads), '--repeat', String(repeat), '--json'];
  const env = { ...process.env, KILN_CACHE_DIR: cacheDir };
  delete env.KILN_CACHE;
  const r = spawnSync(opt.kiln, args, { env, encoding: 'utf8', timeout: Math.round(timeoutS * 1000), killSignal: 'SIGKILL', maxBuffer: 64 << 20 });
  if (r.error?.code === 'ETIMEDOUT' || r.signal === 'SIGKILL') throw new Error(`timed out (> ${+timeoutS.toFixed(1)} s)`);
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(r.stderr.trim().split('\n').pop() || `exit status ${r.status}`);
  const j = JSON.parse(r.stdout);
  // Making the Runtime starts its threads (as an ORT session starts its pool), so it counts.
  return { load_ms: j.load_ms, first_run_ms: (j.runtime_ms ?? 0) + j.load_ms + j.first_run_ms, median_ms: j.latency_ms.median, runs: j.latency_ms.runs,
           cache: j.specializations[0]?.cache };
}

// Two processes on a fresh cache directory: the first compiles (cold: load +
// compile + store + run), the second loads what it stored (warm: load + cache
// hit + run) and is the one timed in a loop. With --rounds, each of the K-1
// further rounds repeats all of it beside ORT (its steady state and a first
// call in a new process): where the machine's speed drifts from one minute to
// the next, pairs taken close together compare better than one long run of
// each, and a first call, measured once per round, is the column that drifts most.
async function timeKiln(model, batch, batchSymbols, ort) {
  let runs, timeoutS;  // set by the first round's cold run, kept for the others
  const round = () => {
    const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'compare_ort-cache-'));
    try {
      const cold = kilnRun(model, batch, batchSymbols, 1, kilnTimeoutS, cacheDir);
      // The cold run also decides whether Kiln is worth waiting for and how
      // many runs fit, since the reference interpreter can be 100x slower than ORT.
      runs ??= opt['kiln-repeat'] ? Number(opt['kiln-repeat']) : clamp(10000 / cold.median_ms, 1, ort?.runs ?? 50);
      timeoutS ??= kilnTimeoutS + (3 * runs * cold.median_ms) / 1000;
      const warm = kilnRun(model, batch, batchSymbols, Math.max(runs, 1), timeoutS, cacheDir);
      return { ...warm, cold_first_run_ms: cold.first_run_ms, warm_first_run_ms: warm.cache === 'hit' ? warm.first_run_ms : null };
    } finally {
      fs.rmSync(cacheDir, { recursive: true, force: true });
    }
  };
  const first = round();
  const kiln = [first];
  if (ort && rounds > 1) {
    const ortRounds = [{ median_ms: ort.median_ms, first_run_ms: ort.first_run_ms }];
    for (let r = 1; r < rounds; r++) {
      ortRounds.push({ median_ms: await ortMedian(model, ort.shapes, ort.runs), first_run_ms: firstCallInNewProcess(model, batch) });
      kiln.push(round());
    }
    ort.round_medians_ms = ortRounds.map((o) => o.median_ms);
    ort.round_first_runs_ms = ortRounds.map((o) => o.first_run_ms);
    ort.median_ms = median(ort.round_medians_ms);
    ort.first_run_ms = median(ort.round_first_runs_ms);
  }
  const result = { ...first };
  if (kiln.length > 1) {
    const column = (key) => kiln.map((k) => k[key]);
    result.round_medians_ms = column('median_ms');
    result.round_cold_first_runs_ms = column('cold_first_run_ms');
    result.round_warm_first_runs_ms = column('warm_first_run_ms');
    result.median_ms = median(result.round_medians_ms);
    result.cold_first_run_ms = median(result.round_cold_first_runs_ms);
    result.warm_first_run_ms = result.round_warm_first_runs_ms.includes(null) ? null : median(result.round_warm_first_runs_ms);
    result.paired_ratio = median(kiln.map((k, r) => k.median_ms / ort.round_medians_ms[r]));
  }
  return result;
}

// A one-node Identity model, written as protobuf bytes by hand so no Python is
// needed: its latency is what ORT spends per call regardless of the model.
function identityModel() {
  const varint = (n) => { const b = []; do { b.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0)); n >>>= 7; } while (n); return b; };
  const num = (f, v) => [...varint(f << 3), ...varint(v)];
  const msg = (f, bytes) => [...varint((f << 3) | 2), ...varint(bytes.length), ...bytes];
  const str = (f, s) => msg(f, [...Buffer.from(s)]);
  const valueInfo = (f, name) => msg(f, [...str(1, name), ...msg(2, msg(1, [...num(1, 1), ...msg(2, msg(1, num(1, 1)))]))]);
  const node = msg(1, [...str(1, 'x'), ...str(2, 'y'), ...str(4, 'Identity')]);
  const graph = msg(7, [...node, ...str(2, 'identity'), ...valueInfo(11, 'x'), ...valueInfo(12, 'y')]);
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'compare_ort-')), 'identity.onnx');
  fs.writeFileSync(file, Buffer.from([...num(1, 8), ...graph, ...msg(8, num(2, 13))]));
  return file;
}

async function identityOverhead() {
  const file = identityModel();
  const session = await ort.InferenceSession.create(file, sessionOptions);
  const feeds = { x: new ort.Tensor('float32', new Float32Array([1]), [1]) };
  for (let i = 0; i < 100; i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < 1000; i++) times.push(await timeRun(session, feeds));
  await session.release();
  fs.rmSync(path.dirname(file), { recursive: true });
  return median(times);
}

// Measured first, which also creates ORT's process-wide environment so that
// the first model's session time does not carry that one-time cost.
const overheadMs = await identityOverhead();
const kilnMissing = !fs.existsSync(opt.kiln);
const rows = [];
for (const model of models) {
  const name = path.basename(model, '.onnx');
  let kilnTimedOut = false; // a timeout at a small batch also holds for the larger ones
  for (const batch of batches) {
    const row = { model: name, batch, ort: null, kiln: null, notes: [] };
    rows.push(row);
    try {
      row.ort = await timeOrt(model, batch);
    } catch (e) {
      row.notes.push(`${e.fixedBatch ? 'skipped' : 'ORT'}: ${firstLine(e)}`);
      if (e.fixedBatch) continue;
    }
    if (kilnMissing) row.notes.push(`Kiln: ${opt.kiln} is missing (scripts/build.sh builds it)`);
    else if (kilnTimedOut) row.notes.push('Kiln: skipped, timed out at a smaller batch');
    else {
      try {
        const symbols = row.ort?.batchSymbols ?? ['batch'];
        row.kiln = await timeKiln(model, batch, symbols, row.ort);
      } catch (e) {
        row.notes.push(`Kiln: ${firstLine(e)}`);
        kilnTimedOut ||= /timed out/.test(e.message);
      }
    }
    if (row.ort && row.kiln) row.ratio = row.kiln.paired_ratio ?? row.kiln.median_ms / row.ort.median_ms;
    const fixed = row.ort?.batchSymbols.length === 0;
    if (row.ort) delete row.ort.batchSymbols, delete row.ort.shapes;
    process.stderr.write(`${name} batch ${batch}: done\n`);
    if (fixed) {
      row.batch = 'fixed';
      break;
    }
  }
}

const fmt = (x) => (x === undefined || x === null ? '-' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x >= 1 ? x.toFixed(2) : x.toFixed(3));
const header = ['model', 'batch', 'ORT first ms', 'Kiln cold ms', 'Kiln warm ms', 'warm/ORT', 'ORT median ms', 'Kiln median ms', 'Kiln/ORT', 'runs ORT/Kiln'];
const warmRatio = (r) => (r.ort && r.kiln?.warm_first_run_ms ? (r.kiln.warm_first_run_ms / r.ort.first_run_ms).toFixed(2) : '-');
const table = rows.map((r) => [r.model, String(r.batch), fmt(r.ort?.first_run_ms), fmt(r.kiln?.cold_first_run_ms), fmt(r.kiln?.warm_first_run_ms), warmRatio(r),
  fmt(r.ort?.median_ms), fmt(r.kiln?.median_ms), r.ratio ? r.ratio.toFixed(2) : '-', `${r.ort?.runs ?? '-'}/${r.kiln?.runs ?? '-'}`]);
const widths = header.map((h, i) => Math.max(h.length, ...table.map((t) => t[i].length)));
const line = (cells) => cells.map((c, i) => (i < 1 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
console.log(`ONNX Runtime ${ORT_VERSION} (onnxruntime-node, CPU) vs Kiln, ${threads} thread(s); first = ORT session / Kiln Runtime + load, plus the first run,`);
if (rounds > 1) console.log(`every column the median over ${rounds} alternating rounds; Kiln/ORT is the median of the ${rounds} paired ratios`);
console.log('each in a new process; Kiln cold = compiling (and storing) it, warm = loading it from the cache the cold process filled');
console.log(line(header));
console.log(widths.map((w) => '-'.repeat(w)).join('  '));
for (const t of table) console.log(line(t));
const ratios = rows.filter((r) => r.ratio).map((r) => r.ratio);
const geomean = ratios.length ? Math.exp(ratios.reduce((a, r) => a + Math.log(r), 0) / ratios.length) : null;
console.log(`geometric mean Kiln/ORT: ${geomean ? geomean.toFixed(2) : '-'} over ${ratios.length} row(s)`);
console.log(`ORT per-call overhead (1-node Identity, median of 1000): ${overheadMs.toFixed(4)} ms; medians near it measure the call, not the model`);
for (const r of rows) for (const n of r.notes) console.log(`note: ${r.model} batch ${r.batch}: ${n}`);

if (opt.json) {
  const out = { ort_version: ORT_VERSION, threads, batches, dims, rounds, identity_overhead_ms: overheadMs, geomean_ratio: geomean, rows };
  fs.writeFileSync(opt.json, JSON.stringify(out, null, 2) + '\n');
}
