#!/usr/bin/python3
"""Holds frozen bundles' outputs against the JIT's on any models (bench-time
only: needs numpy and a C compiler). For each model: `kiln aot-freeze` with
the given batch sizes (portable kernels unless --kernels native), a C driver
(bench/bundle_check.c) linked with plain cc, the same random inputs through
the bundle and through `kiln run` (the JIT, native kernels), at each batch
size asked for (sizes that were not compiled are stitched by the bundle).

    /usr/bin/python3 bench/check_bundles.py [--batch-sizes 1,4] [--batches 1,3,6]
        [--kernels portable|native] [--freeze-arg=--shape=x=1x128 ...] MODEL.onnx ...

Exit status 1 if a model fails to freeze, link or run, or if any output
differs by more than rtol 1e-3 / atol 1e-4 of the output's largest magnitude.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32, "uint8": np.uint8,
          "int8": np.int8, "bool": np.bool_}
LINE = re.compile(r'^ \*\s+(input|output)\s+(\d+) "(.*)" (\w+) \[(.*)\]$')


def header_tensors(header):
    found = {"input": [], "output": []}
    for line in open(header):
        m = LINE.match(line.rstrip())
        if m:
            dims = [d.strip() for d in m.group(5).split(",") if d.strip()]
            found[m.group(1)].append((m.group(3), m.group(4), dims))
    return found["input"], found["output"]


def item_shape(dims):
    if not dims or dims[0] != "B":
        raise ValueError(f"dims {dims} do not start with the batch")
    return [int(d) for d in dims[1:]]


def random_input(rng, dtype, shape):
    if dtype.startswith("float"):
        return rng.uniform(-1, 1, shape).astype(DTYPES[dtype])
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 100, shape).astype(DTYPES[dtype])


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return r.stdout


def check(args, model, work):
    name = "m"
    out = os.path.join(work, "bundle")
    sh([args.kiln, "aot-freeze", model, "-o", out, "--name", name, "--batch-sizes", args.batch_sizes,
        "--kernels", args.kernels, "--no-cache", *args.freeze_arg])
    inputs, outputs = header_tensors(os.path.join(out, f"{name}.h"))
    out_items = [int(np.prod(item_shape(d))) * np.dtype(DTYPES[t]).itemsize for _, t, d in outputs]
    driver = os.path.join(work, "check")
    libs = ["-ldnnl", "-lm"] if args.kernels == "native" else ["-lm"]
    sh(["cc", "-O2", f"-DPREFIX={name}", f"-DUPREFIX={name.upper()}", "-include", os.path.join(out, f"{name}.h"),
        "-DOUTPUT_ITEM_BYTES={" + ",".join(map(str, out_items)) + "}",
        os.path.join(os.path.dirname(__file__), "bundle_check.c"), os.path.join(out, f"{name}.o"), *libs, "-o", driver])
    rng = np.random.default_rng(7)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        feeds, cmd = [], [args.kiln, "run", model, "--threads", "2", "-o", os.path.join(work, f"jit{batch}")]
        for i, (iname, dtype, dims) in enumerate(inputs):
            x = random_input(rng, dtype, [batch] + item_shape(dims))
            raw, npy = os.path.join(work, f"in{i}_{batch}.bin"), os.path.join(work, f"in{i}_{batch}.npy")
            x.tofile(raw)
            np.save(npy, x)
            feeds.append(raw)
            cmd += ["--input", f"{iname}={npy}"]
        got_files = [os.path.join(work, f"out{o}_{batch}.bin") for o in range(len(outputs))]
        sh([driver, os.path.join(out, f"{name}.weights.bin"), str(batch), *feeds, *got_files])
        sh(cmd)
        for o, (oname, dtype, dims) in enumerate(outputs):
            got = np.fromfile(got_files[o], dtype=DTYPES[dtype]).reshape([batch] + item_shape(dims)).astype(np.float64)
            want = np.load(os.path.join(work, f"jit{batch}", re.sub(r"[^A-Za-z0-9_.-]", "_", oname) + ".npy"))
            scale = float(np.max(np.abs(want))) if want.size else 0.0
            want = want.astype(np.float64)
            same = got.shape == want.shape
            diff = float(np.max(np.abs(got - want), initial=0.0)) if same else float("inf")
            ok = same and bool(np.all(np.abs(got - want) <= 1e-4 * scale + 1e-3 * np.abs(want)))
            # How much the outputs of different items differ: near 0, the
            # output hardly depends on the input, and agreeing says little.
            spread = float(np.max(np.abs(want - want[:1]), initial=0.0)) / scale if batch > 1 and scale else None
            rows.append((batch, oname, diff, scale, spread, ok))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--batches", default="1,3,6")
    ap.add_argument("--kernels", default="portable")
    ap.add_argument("--freeze-arg", action="append", default=[])
    ap.add_argument("--kiln", default="build/bin/kiln")
    args = ap.parse_args()
    bad = 0
    print(f"{'model':<22} {'batch':>5} {'output':<16} {'max abs diff':>12} {'max |jit|':>10} {'spread':>8}")
    for model in args.models:
        label = os.path.basename(model)[:-5] if model.endswith(".onnx") else os.path.basename(model)
        with tempfile.TemporaryDirectory() as work:
            try:
                rows = check(args, model, work)
            except (RuntimeError, ValueError) as e:
                print(f"{label:<22} FAILED: {e}")
                bad += 1
                continue
        for batch, oname, diff, scale, spread, ok in rows:
            note = "" if ok else "  DIFFERS"
            if spread is not None and spread < 1e-3:
                note += "  (items' outputs barely differ: a weak check)"
            spread_text = "-" if spread is None else f"{spread:.2g}"
            print(f"{label:<22} {batch:>5} {oname[:16]:<16} {diff:>12.3g} {scale:>10.3g} {spread_text:>8}{note}")
            bad += not ok
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
