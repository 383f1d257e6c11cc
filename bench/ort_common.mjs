// What bench/compare_ort.mjs and bench/check_outputs.mjs share: ONNX Runtime
// as bench/.ort/ holds it, the input shapes `kiln run --random-inputs` would
// build, and random inputs for them. Run from the repository root.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.resolve('bench/.ort/package.json'));
export const ort = require('onnxruntime-node');
export const ORT_VERSION = require('onnxruntime-node/package.json').version;

export const sessionOptions = (threads) => ({ intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential' });
export const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.ceil(s.length / 2) - 1]; };
export const firstLine = (e) => String(e?.message ?? e).trim().split('\n')[0].slice(0, 160);

// The models named, else every .onnx in `dir`; exits with status 2 if there are none.
export function modelsFrom(positionals, dir) {
  if (positionals.length) return positionals;
  if (!fs.existsSync(dir)) {
    console.error(`no models: ${dir} does not exist (run /usr/bin/python3 bench/build_zoo.py, or pass --models-dir)`);
    process.exit(2);
  }
  return fs.readdirSync(dir).filter((f) => f.endsWith('.onnx')).sort().map((f) => path.join(dir, f));
}

// The command-line options both scripts take (node:util parseArgs).
export const commonOptions = {
  'models-dir': { type: 'string', default: 'bench/models' },
  batch: { type: 'string', default: '1,8' },
  dim: { type: 'string', multiple: true, default: ['sequence=128'] },
  threads: { type: 'string', default: '2' },
  kiln: { type: 'string', default: 'build/bin/kiln' },
  json: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
};

// `--dim SYM=N` values as {SYM: N}.
export const parseDims = (list) => Object.fromEntries(list.map((d) => { const [k, v] = d.split('='); return [k, Number(v)]; }));

// The same shapes Kiln's --random-inputs builds from the same --dim values: the
// leading symbolic dimension is the batch, named ones come from --dim, others 1.
// A model with no symbolic dimension at all (a detector taking one image)
// runs at its own shapes, once, as batch "fixed".
export function inputShapes(session, batch, dims) {
  const allFixed = session.inputMetadata.every((m) => m.isTensor && m.shape.every((d) => typeof d === 'number' && d >= 0));
  return session.inputMetadata.map((m) => {
    if (!m.isTensor) throw new Error(`input '${m.name}' is not a tensor`);
    const shape = m.shape.map((d, i) => {
      if (typeof d === 'number' && d >= 0) {
        if (i === 0 && d !== batch && !allFixed) throw Object.assign(new Error(`the model's batch is fixed at ${d}`), { fixedBatch: true });
        return d;
      }
      if (i === 0) return batch;
      return dims[d] ?? 1;
    });
    return { name: m.name, type: m.type, shape, batchSymbol: typeof m.shape[0] === 'string' ? m.shape[0] : null };
  });
}

export const ARRAYS = { float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array };

export function randomFeeds(shapes) {
  const feeds = {};
  for (const { name, type, shape } of shapes) {
    const Arr = ARRAYS[type];
    if (!Arr) throw new Error(`input '${name}' has type ${type}, which this script does not fill`);
    const n = shape.reduce((a, b) => a * b, 1);
    const data = new Arr(n);
    for (let i = 0; i < n; i++) {
      // Integer inputs are usually indices (token ids): keep them small and valid.
      const k = Math.floor(Math.random() * 10);
      data[i] = type === 'int64' ? BigInt(k) : type.startsWith('float') ? Math.random() * 2 - 1 : type === 'bool' ? k % 2 : k;
    }
    feeds[name] = new ort.Tensor(type, data, shape);
  }
  return feeds;
}
