#!/usr/bin/python3
"""Holds the cpu backend's outputs against the reference interpreter's on the
model zoo (bench-time only: needs numpy, and the reference takes seconds per
model). Both backends get the same random inputs: `kiln run --random-inputs`
draws them from a fixed seed.

    /usr/bin/python3 bench/check_zoo.py [--models-dir DIR] [--rtol X] [--batch 1,8] [MODEL.onnx ...]

Exit status 1 if any output differs by more than --rtol 1e-3 / atol 1e-4 (of
the output's largest magnitude; one step for an output that is a dequantized
8-bit tensor), if argmax per row differs, or if any node of
the cpu backend's specialization ran on a reference kernel (`fallback`): the
quantized zoo (bench/quantize_zoo.py) must compile whole, as the float one does.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(kiln, model, backend, batch, out_dir):
    """The outputs, and how many nodes ran on reference kernels."""
    done = subprocess.run([kiln, "run", model, "--random-inputs", "--dim", f"batch={batch}", "--dim", "sequence=128",
                           "--backend", backend, "-o", out_dir, "--json"], check=True, stdout=subprocess.PIPE)
    fallback = sum(s["fallback_nodes"] for s in json.loads(done.stdout)["specializations"])
    return {f: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))}, fallback


def quantization_step(ref):
    """The step between an output's levels if it takes at most 256 distinct
    values (a dequantized 8-bit tensor), else None."""
    levels = np.unique(ref)
    return float(np.diff(levels).min()) if 1 < len(levels) <= 256 and ref.dtype.kind == "f" else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--models-dir", default=os.environ.get("KILN_BENCH_MODELS", "bench/models"))
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--kiln", default="build/bin/kiln")
    ap.add_argument("--rtol", type=float, default=1e-3,
                    help="of the output's largest magnitude; a quantized model whose output is not itself "
                         "quantized (squeezenet's mean over 169 quantized values) needs about 3e-3")
    args = ap.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(args.models_dir, "*.onnx")))
    if not models:
        sys.exit(f"no models in {args.models_dir} (run /usr/bin/python3 bench/build_zoo.py)")
    bad = 0
    print(f"{'model':<18} {'batch':>5} {'fallback':>8} {'output':<14} {'max abs diff':>12} {'max |ref|':>10}  argmax")
    for model in models:
        for batch in [int(b) for b in args.batch.split(",")]:
            with tempfile.TemporaryDirectory() as cpu_dir, tempfile.TemporaryDirectory() as ref_dir:
                got, fallback = run(args.kiln, model, "cpu", batch, cpu_dir)
                want, _ = run(args.kiln, model, "reference", batch, ref_dir)
                for name, ref in want.items():
                    out = got[name]
                    diff = float(np.abs(out.astype(np.float64) - ref).max()) if ref.size else 0.0
                    scale = float(np.abs(ref).max()) if ref.size else 0.0
                    tolerance = 1e-4 * max(scale, 1.0) + args.rtol * scale
                    step = quantization_step(ref)
                    if step:  # compiled kernels requantize in float, the reference in double: one step
                        tolerance = max(tolerance, step * 1.001)
                    ok = out.shape == ref.shape and diff <= tolerance
                    same_argmax = ref.ndim != 2 or bool((out.argmax(-1) == ref.argmax(-1)).all())
                    ok = ok and same_argmax and fallback == 0
                    bad += not ok
                    print(f"{os.path.basename(model)[:-5]:<18} {batch:>5} {fallback:>8} {name[:-4]:<14} {diff:>12.3g} {scale:>10.3g}  "
                          f"{'same' if same_argmax else 'DIFFERS'}{'' if ok else '  FAIL'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
