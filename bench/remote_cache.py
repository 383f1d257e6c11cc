#!/usr/bin/env python3
"""The fleet's remote cache, measured (docs/cache.md#a-fleets-cache-on-redis).

Starts a redis-server of its own on a loopback port and a key file, then:
1. warm starts: a host whose local cache has the entry (local hit) against a
   host with an empty local cache and the entry in Redis (remote hit),
   alternating, ROUNDS times each; prints the medians and their ratio;
2. a cold fleet: 8 `kiln compile` processes on 2 hosts (4 each, separate
   cache directories) at once on an empty Redis, asking for 2 shapes;
   prints the codegen runs in total against one compile's.

    /usr/bin/python3 bench/remote_cache.py [bench/models/resnet50.onnx] [--rounds 9]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.path.join(ROOT, "build", "bin", "kiln")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compile_on(model, host_dir, env, batch, threads):
    e = dict(os.environ, KILN_CACHE_DIR=host_dir, **env)
    out = subprocess.run([KILN, "compile", model, "--dim", f"batch={batch}", "--threads", str(threads), "--json"],
                         env=e, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kiln compile failed: {out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=os.path.join(ROOT, "bench", "models", "resnet50.onnx"))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln_remote_bench_")
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
    try:
        key = os.path.join(work, "fleet.key")
        with open(key, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(key, 0o600)
        env = {"KILN_CACHE_KEY_FILE": key, "KILN_REMOTE_CACHE": f"redis://127.0.0.1:{port}"}
        time.sleep(0.3)
        first = compile_on(args.model, os.path.join(work, "origin"), env, 1, args.threads)
        print(f"{os.path.basename(args.model)} batch 1: compiled in {first['compile_ms']:.0f} ms "
              f"({first['codegen_runs']} codegen runs), uploaded")
        local, remote = [], []
        for i in range(args.rounds):
            l = compile_on(args.model, os.path.join(work, "origin"), env, 1, args.threads)
            assert l["cache"] == "hit", l
            local.append(l["compile_ms"])
            fresh = os.path.join(work, f"fresh{i}")
            r = compile_on(args.model, fresh, env, 1, args.threads)
            assert r["cache"] == "hit (remote)" and r["codegen_runs"] == 0, r
            remote.append(r["compile_ms"])
            shutil.rmtree(fresh)
        ml, mr = statistics.median(local), statistics.median(remote)
        print(f"warm start, median of {args.rounds}: local hit {ml:.1f} ms, remote hit (empty local cache) {mr:.1f} ms, "
              f"ratio {mr / ml:.2f}, codegen 0")

        subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], check=True, capture_output=True)
        procs = []
        for i in range(8):
            host = os.path.join(work, "cold_" + ("a" if i < 4 else "b"))
            e = dict(os.environ, KILN_CACHE_DIR=host, **env)
            procs.append(subprocess.Popen([KILN, "compile", args.model, "--dim", f"batch={1 + i % 2}", "--threads", "1",
                                           "--json"], env=e, stdout=subprocess.PIPE, text=True))
        results = [json.loads(p.communicate()[0]) for p in procs]
        outcomes = {}
        for r in results:
            outcomes[r["cache"]] = outcomes.get(r["cache"], 0) + 1
        total = sum(r["codegen_runs"] for r in results)
        print(f"cold fleet, 8 processes on 2 hosts, 2 shapes: codegen runs {total} in total "
              f"(one compile runs {first['codegen_runs']}), outcomes {outcomes}")
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
