#!/usr/bin/python3
"""Quantizes zoo models to int8 in ONNX Runtime's layouts (bench time only, not CI).

Needs only Debian's python3-onnx and python3-numpy, plus Kiln's `kiln run`
to evaluate the float model during calibration; run with /usr/bin/python3.

  /usr/bin/python3 bench/quantize_zoo.py [--models mlp,lenet,...] [--out bench/models] [--samples 200]

Static (QDQ) models, written as NAME_qdq.onnx: the constant weights of Conv,
Gemm and MatMul become int8 initializers with symmetric per-output-channel
scales and a DequantizeLinear; their biases become int32 with scale
input_scale * weight_scale; their activation inputs and outputs pass through
a uint8 QuantizeLinear -> DequantizeLinear pair with a per-tensor scale and
zero point, from the min/max seen over --samples calibration inputs.

Dynamic models, written as NAME_dynamic.onnx (the encoder by default):
every MatMul with a constant 2-D weight becomes DynamicQuantizeLinear on the
activation -> MatMulInteger (uint8 x int8, per-tensor symmetric weight) ->
Cast to float -> Mul by activation_scale * weight_scale.

--reduce-range keeps weights on [-64, 64], as ORT's reduce_range does.
Each written model is checked with onnx.checker and run with `kiln run`
next to the float model on held-out inputs; the largest difference is
printed (and, for the trained digits model, the accuracy of both).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZOO = ["mlp", "lenet", "squeezenet1_1", "mobilenet_v2", "resnet18", "resnet50", "efficientnet_b0", "encoder"]
# The one trained model in the tree, with its own images: calibration on real
# data, and an accuracy to compare rather than only a difference.
DIGITS = os.path.join(ROOT, "examples", "digits")
DEFAULT_MODE = {"encoder": "dynamic"}
QUANTIZED_OPS = ("Conv", "Gemm", "MatMul")


class Graph:
    """Constants of a graph (initializers, Constant nodes and Identity chains over them) and tensor consumers."""

    def __init__(self, model):
        self.model = model
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.producer = {o: n for n in self.g.node for o in n.output}
        self.graph_outputs = {o.name for o in self.g.output}
        self.used_names = set(self.inits) | {i.name for i in self.g.input} | set(self.producer)

    def constant(self, name):
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.producer.get(name)
        if node is None:
            return None
        if node.op_type == "Identity":
            return self.constant(node.input[0])
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
        return None

    def fresh(self, name):
        base, i = name, 1
        while name in self.used_names:
            name, i = f"{base}_{i}", i + 1
        self.used_names.add(name)
        return name

    def add_init(self, name, array):
        name = self.fresh(name)
        self.g.initializer.append(numpy_helper.from_array(array, name))
        return name


def targets(graph):
    """Nodes to quantize with their constant weight: (node, weight, weight output axis)."""
    found = []
    for node in graph.g.node:
        if node.op_type not in QUANTIZED_OPS or len(node.input) < 2:
            continue
        w = graph.constant(node.input[1])
        if w is None or w.dtype != np.float32:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            axis = 0
        elif node.op_type == "Gemm":
            if attrs.get("transA", 0):
                continue
            axis = 0 if attrs.get("transB", 0) else 1
        else:
            if w.ndim != 2:
                continue
            axis = 1
        found.append((node, w, axis))
    return found


def symmetric_int8(w, axis, qmax):
    """Symmetric int8 on [-qmax, qmax] (ORT's quantizer: 127, or 64 with reduce_range), per channel along axis."""
    if axis is None:
        absmax = np.array(np.abs(w).max(), dtype=np.float32)
    else:
        other = tuple(d for d in range(w.ndim) if d != axis)
        absmax = np.abs(w).max(axis=other).astype(np.float32)
    scale = np.where(absmax == 0, 1.0, absmax / qmax).astype(np.float32)  # 1: an all-zero channel
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
    return q, scale


def uint8_params(lo, hi):
    """Asymmetric uint8 scale and zero point for a range widened to hold 0 (DynamicQuantizeLinear's rule)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    if scale == 0:
        return np.float32(1.0), np.uint8(0)
    zp = np.clip(np.rint(-lo / scale), 0, 255)
    return np.float32(scale), np.uint8(zp)


# ---------------------------------------------------------------- inputs and running


def model_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def make_inputs(model, count, rng, dims):
    """Random inputs as bench/compare_ort draws them: float uniform in [-1, 1), integers in 0..9."""
    feeds = {}
    for info in model_inputs(model):
        tt = info.type.tensor_type
        shape = [count]
        for d in tt.shape.dim[1:]:
            shape.append(d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1))
        if tt.elem_type == TensorProto.FLOAT:
            feeds[info.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        elif tt.elem_type == TensorProto.INT64:
            feeds[info.name] = rng.integers(0, 10, shape).astype(np.int64)
        else:
            sys.exit(f"{info.name}: input type {tt.elem_type} is not drawn here (float or int64 expected)")
    return feeds


def kiln_run(kiln, model_path, feeds, threads):
    """Outputs of `kiln run` on the feeds, keyed by the file name kiln gives them."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [kiln, "run", model_path, "--no-cache", "--threads", str(threads), "-o", os.path.join(tmp, "out")]
        for name, value in feeds.items():
            path = os.path.join(tmp, f"in{len(args)}.npy")
            np.save(path, value)
            args += ["--input", f"{name}={path}"]
        done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            sys.exit(f"kiln run {model_path} failed:\n{done.stderr}")
        out = os.path.join(tmp, "out")
        return {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out)}


def split(feeds, size):
    count = len(next(iter(feeds.values())))
    for start in range(0, count, size):
        yield {k: v[start:start + size] for k, v in feeds.items()}


def calibrate(kiln, model, tensors, feeds, chunk, threads):
    """Min and max of each tensor over the feeds, from a copy of the model that also outputs them."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    # Named outputs through Identity: tensor names like "/layer1/Relu_output_0"
    # do not survive as file names.
    names = {}
    for i, t in enumerate(tensors):
        names[f"calibration_{i}"] = t
        probe.graph.node.append(helper.make_node("Identity", [t], [f"calibration_{i}"]))
        probe.graph.output.append(helper.make_tensor_value_info(f"calibration_{i}", TensorProto.FLOAT, None))
    ranges = {t: [np.inf, -np.inf] for t in tensors}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calibration.onnx")
        onnx.save(probe, path)
        for part in split(feeds, chunk):
            for out, value in kiln_run(kiln, path, part, threads).items():
                if out in names:
                    r = ranges[names[out]]
                    r[0], r[1] = min(r[0], float(value.min())), max(r[1], float(value.max()))
    return ranges


# ---------------------------------------------------------------- rewriting


def redirect(graph, old, new):
    for node in graph.g.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new


def quantize_activation(graph, tensor, lo, hi, new_nodes):
    """A uint8 QuantizeLinear -> DequantizeLinear pair on a tensor; every consumer reads the dequantized one."""
    scale, zp = uint8_params(lo, hi)
    s = graph.add_init(tensor + "_scale", np.array(scale, dtype=np.float32))
    z = graph.add_init(tensor + "_zero_point", np.array(zp, dtype=np.uint8))
    q_out = graph.fresh(tensor + "_QuantizeLinear_Output")
    if tensor in graph.graph_outputs:
        # The graph output keeps its name, now on the DequantizeLinear's output,
        # so its consumers read the dequantized tensor as well.
        source = graph.fresh(tensor + "_QuantizeLinear_Input")
        producer = graph.producer[tensor]
        producer.output[list(producer.output).index(tensor)] = source
        dq_out = tensor
    else:
        source, dq_out = tensor, graph.fresh(tensor + "_DequantizeLinear_Output")
        redirect(graph, tensor, dq_out)
    new_nodes.append(helper.make_node("QuantizeLinear", [source, s, z], [q_out], name=tensor + "_QuantizeLinear"))
    new_nodes.append(helper.make_node("DequantizeLinear", [q_out, s, z], [dq_out], name=tensor + "_DequantizeLinear"))
    return float(scale)


def prune(graph):
    """Drops nodes and initializers nothing reads any more (the float weights' Identity chains)."""
    g = graph.g
    while True:
        read = {i for n in g.node for i in n.input} | graph.graph_outputs
        keep = [n for n in g.node if any(o in read for o in n.output)]
        if len(keep) == len(g.node):
            break
        del g.node[:]
        g.node.extend(keep)
    read = {i for n in g.node for i in n.input} | graph.graph_outputs
    keep = [t for t in g.initializer if t.name in read]
    del g.initializer[:]
    g.initializer.extend(keep)
    graph_inputs = [i for i in g.input if i.name in read or i.name not in graph.inits]
    del g.input[:]
    g.input.extend(graph_inputs)


def topological(graph):
    """Orders the nodes so each comes after the producers of its inputs (the new pairs were appended)."""
    g = graph.g
    ready = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    pending, ordered = list(g.node), []
    while pending:
        rest = []
        for n in pending:
            if all(i in ready for i in n.input):
                ordered.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            sys.exit(f"graph has a cycle or an unknown input around node {rest[0].name}")
        pending = rest
    del g.node[:]
    g.node.extend(ordered)


def quantize_static(kiln, model, feeds, chunk, threads, qmax):
    graph = Graph(model)
    found = targets(graph)
    readers = {}
    for n in graph.g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.g.output}

    def quantized_result(node):
        # A Relu that alone reads the result is quantized after, as ONNX
        # Runtime's quantizer does once it has fused the two.
        out = node.output[0]
        after = readers.get(out, [])
        if len(after) == 1 and after[0].op_type == "Relu" and out not in outputs:
            return after[0].output[0]
        return out

    activations = []
    for node, _, _ in found:
        for t in (node.input[0], quantized_result(node)):
            if t not in activations:
                activations.append(t)
    ranges = calibrate(kiln, model, activations, feeds, chunk, threads)
    # The activation pairs rename the targets' inputs; a bias's scale needs the
    # tensor the node read before.
    sources = [node.input[0] for node, _, _ in found]
    new_nodes, act_scale = [], {}
    for t in activations:
        act_scale[t] = quantize_activation(graph, t, *ranges[t], new_nodes)
    weights = {}
    for (node, w, axis), source in zip(found, sources):
        q, scale = symmetric_int8(w, axis, qmax)
        key = (node.input[1], axis)
        if key not in weights:
            name = node.input[1]
            qn = graph.add_init(name + "_quantized", q)
            sn = graph.add_init(name + "_scale", scale)
            zn = graph.add_init(name + "_zero_point", np.zeros(scale.shape, np.int8))
            out = graph.fresh(name + "_DequantizeLinear_Output")
            new_nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out], name=name + "_DequantizeLinear",
                                              axis=axis))
            weights[key] = out
        node.input[1] = weights[key]
        if len(node.input) > 2 and node.input[2]:
            b = graph.constant(node.input[2])
            if b is not None and b.ndim == 1 and b.shape[0] == scale.shape[0]:
                bscale = (act_scale[source] * scale).astype(np.float32)
                bq = np.clip(np.rint(b / bscale), -2**31, 2**31 - 1).astype(np.int32)
                name = node.input[2]
                qn = graph.add_init(name + "_quantized", bq)
                sn = graph.add_init(name + "_quantized_scale", bscale)
                zn = graph.add_init(name + "_quantized_zero_point", np.zeros(bscale.shape, np.int32))
                out = graph.fresh(name + "_DequantizeLinear_Output")
                new_nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                                  name=name + "_DequantizeLinear", axis=0))
                node.input[2] = out
    graph.g.node.extend(new_nodes)
    prune(graph)
    topological(graph)
    return model


def quantize_dynamic(model, qmax):
    graph = Graph(model)
    new_nodes, quantized_inputs = [], {}
    for node, w, _ in targets(graph):
        if node.op_type != "MatMul":
            continue
        a, y = node.input[0], node.output[0]
        if a not in quantized_inputs:
            outs = [graph.fresh(a + s) for s in ("_quantized", "_scale", "_zero_point")]
            new_nodes.append(helper.make_node("DynamicQuantizeLinear", [a], outs, name=a + "_QuantizeLinear"))
            quantized_inputs[a] = outs
        aq, ascale, azp = quantized_inputs[a]
        q, scale = symmetric_int8(w, None, qmax)
        wname = node.input[1]
        qn = graph.add_init(wname + "_quantized", q)
        sn = graph.add_init(wname + "_scale", scale)
        zn = graph.add_init(wname + "_zero_point", np.array(0, np.int8))
        integer = graph.fresh(y + "_quantized")
        cast = graph.fresh(y + "_quantized_cast_output")
        both = graph.fresh(y + "_scales_mul")
        base = node.name or y
        new_nodes += [
            helper.make_node("MatMulInteger", [aq, qn, azp, zn], [integer], name=base + "_quant"),
            helper.make_node("Cast", [integer], [cast], name=base + "_quant_cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", [ascale, sn], [both], name=base + "_quant_scales_mul"),
            helper.make_node("Mul", [cast, both], [y], name=base + "_quant_output_scale_mul"),
        ]
        node.output[0] = graph.fresh(y + "_float_unused")
    graph.g.node.extend(new_nodes)
    prune(graph)
    topological(graph)
    return model


# ---------------------------------------------------------------- driver


def source_of(name, models_dir):
    if name == "digits":
        return os.path.join(DIGITS, "digits.onnx")
    return os.path.join(models_dir, name + ".onnx")


def compare(kiln, float_path, quant_path, feeds, labels, threads):
    want = kiln_run(kiln, float_path, feeds, threads)
    got = kiln_run(kiln, quant_path, feeds, threads)
    for out, ref in sorted(want.items()):
        value = got[out]
        diff = float(np.abs(value.astype(np.float64) - ref).max())
        scale = float(np.abs(ref).max())
        line = f"  {out}: max abs diff {diff:.3g} (max |float| {scale:.3g}, relative {diff / max(scale, 1e-30):.3g})"
        if ref.ndim == 2:
            agree = float((value.argmax(-1) == ref.argmax(-1)).mean())
            line += f", argmax agrees on {agree:.1%} of {len(ref)}"
            if labels is not None:
                line += (f", accuracy float {float((ref.argmax(-1) == labels).mean()):.1%}"
                         f" quantized {float((value.argmax(-1) == labels).mean()):.1%}")
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="", help="comma-separated zoo names and/or 'digits' "
                    "(default: every zoo model in --models-dir, and digits)")
    ap.add_argument("--models-dir", default=os.path.join(HERE, "models"), help="float models (build_zoo.py's output)")
    ap.add_argument("--out", default=os.path.join(HERE, "models"), help="where NAME_qdq.onnx / NAME_dynamic.onnx go")
    ap.add_argument("--mode", choices=["auto", "qdq", "dynamic"], default="auto",
                    help="auto: dynamic for the encoder, static QDQ for the rest")
    ap.add_argument("--samples", type=int, default=200, help="calibration inputs")
    ap.add_argument("--check-samples", type=int, default=16, help="held-out inputs for the float/quantized comparison")
    ap.add_argument("--chunk", type=int, default=8, help="calibration inputs per kiln run")
    ap.add_argument("--dim", action="append", default=[], help="SYMBOL=N for symbolic dimensions other than the "
                    "batch (default sequence=128)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reduce-range", action="store_true", help="7-bit weights ([-64, 64]): ORT's own int8 kernels "
                    "on AVX2 without VNNI can saturate a uint8 x int8 pair sum at full range")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "bin", "kiln"))
    args = ap.parse_args()
    dims = {"sequence": 128}
    for d in args.dim:
        key, _, value = d.partition("=")
        dims[key] = int(value)
    if args.models:
        names = args.models.split(",")
    else:
        names = [n for n in ZOO if os.path.exists(source_of(n, args.models_dir))] + ["digits"]
    qmax = 64 if args.reduce_range else 127
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for name in names:
        path = source_of(name, args.models_dir)
        if not os.path.exists(path):
            sys.exit(f"{name}: no {path} (run /usr/bin/python3 bench/build_zoo.py)")
        mode = DEFAULT_MODE.get(name, "qdq") if args.mode == "auto" else args.mode
        model = onnx.load(path)
        labels = None
        if name == "digits":
            images = np.load(os.path.join(DIGITS, "test_images.npy"))
            all_labels = np.load(os.path.join(DIGITS, "test_labels.npy"))
            input_name = model_inputs(model)[0].name
            calibration = {input_name: images[:args.samples]}
            held_out = {input_name: images[args.samples:]}
            labels = all_labels[args.samples:]
            if not len(labels):
                held_out, labels = {input_name: images}, all_labels
                print(f"{name}: all {len(images)} images calibrate; the comparison reuses them")
        else:
            calibration = make_inputs(model, args.samples, rng, dims)
            held_out = make_inputs(model, args.check_samples, rng, dims)
        if mode == "qdq":
            model = quantize_static(args.kiln, model, calibration, args.chunk, args.threads, qmax)
        else:
            model = quantize_dynamic(model, qmax)
        onnx.checker.check_model(model, full_check=True)
        out = os.path.join(args.out, f"{name}_{mode}.onnx")
        onnx.save(model, out)
        counts = {}
        for n in model.graph.node:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        quant_ops = {k: v for k, v in counts.items() if "quant" in k.lower() or "Integer" in k}
        print(f"wrote {out}: {quant_ops}")
        compare(args.kiln, path, out, held_out, labels, args.threads)


if __name__ == "__main__":
    main()
