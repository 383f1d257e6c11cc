#!/usr/bin/python3
"""Holds the cpu backend's outputs against the reference interpreter's on the
model zoo (bench-time only: needs numpy, and the reference takes seconds per
model). Both backends get the same random inputs: `kiln run --random-inputs`
draws them from a fixed seed.

    /usr/bin/python3 bench/check_zoo.py [--models DIR] [--batch 1,8] [MODEL.onnx ...]

Exit status 1 if any output differs by more than rtol 1e-3 / atol 1e-4 (of
the output's largest magnitude), or if argmax per row differs.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(kiln, model, backend, batch, out_dir):
    subprocess.run([kiln, "run", model, "--random-inputs", "--dim", f"batch={batch}", "--dim", "sequence=128",
                    "--backend", backend, "-o", out_dir], check=True, stdout=subprocess.DEVNULL)
    return {f: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--models-dir", default=os.environ.get("KILN_BENCH_MODELS", "bench/models"))
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--kiln", default="build/bin/kiln")
    args = ap.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(args.models_dir, "*.onnx")))
    if not models:
        sys.exit(f"no models in {args.models_dir} (run /usr/bin/python3 bench/build_zoo.py)")
    bad = 0
    print(f"{'model':<18} {'batch':>5} {'output':<14} {'max abs diff':>12} {'max |ref|':>10}  argmax")
    for model in models:
        for batch in [int(b) for b in args.batch.split(",")]:
            with tempfile.TemporaryDirectory() as cpu_dir, tempfile.TemporaryDirectory() as ref_dir:
                got = run(args.kiln, model, "cpu", batch, cpu_dir)
                want = run(args.kiln, model, "reference", batch, ref_dir)
                for name, ref in want.items():
                    out = got[name]
                    diff = float(np.abs(out.astype(np.float64) - ref).max()) if ref.size else 0.0
                    scale = float(np.abs(ref).max()) if ref.size else 0.0
                    ok = out.shape == ref.shape and diff <= 1e-4 * max(scale, 1.0) + 1e-3 * scale
                    same_argmax = ref.ndim != 2 or bool((out.argmax(-1) == ref.argmax(-1)).all())
                    ok = ok and same_argmax
                    bad += not ok
                    print(f"{os.path.basename(model)[:-5]:<18} {batch:>5} {name[:-4]:<14} {diff:>12.3g} {scale:>10.3g}  "
                          f"{'same' if same_argmax else 'DIFFERS'}{'' if ok else '  FAIL'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
