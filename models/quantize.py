#!/usr/bin/python3
"""Turn an fp32 CNN export (models/export.py) into a QDQ model laid out as
ONNX Runtime's static quantizer (QuantFormat.QDQ, per_channel=True,
activations QUInt8, weights QInt8, MinMax calibration) lays it out.

  /usr/bin/python3 models/quantize.py build/models/resnet50.onnx build/models/resnet50_qdq.onnx \
      [--calib 8] [--test-inputs 8 --name resnet50]

What it does, in order:
  1. Constant nodes become initializers; BatchNormalization folds into the
     Conv before it (in float64), as ORT's pre-processing does.
  2. Calibration: the folded graph runs in torch on --calib seeded random
     images (images(): N(0,1) with a random per-channel gain and offset);
     each activation keeps its min and max.
  3. Relu and Clip right after a Conv, Gemm or Add whose output feeds
     nothing else are removed, their output taking the producer's place
     (ORT's QDQRemovableActivation): the uint8 range calibrated on the
     activation's output, with zero point 0 at its low end, clamps as the
     activation did.
  4. Every activation read or written by a Conv, Gemm, MatMul or Add gets
     one QuantizeLinear -> DequantizeLinear pair after its producer (uint8,
     asymmetric: scale = (max(rmax,0) - min(rmin,0)) / 255, zero point
     round(-rmin / scale)); every consumer reads the DequantizeLinear.
     Weights are stored as int8, symmetric per output channel (axis 0,
     [-127, 127], zero point 0) behind a DequantizeLinear; biases as int32
     with scale x_scale * w_scale[c] behind one.  MaxPool,
     GlobalAveragePool and Flatten stay in float between a DQ and a Q.

With --test-inputs N --name NAME it also writes, next to the output model,
STEM.input.npy (N images as for calibration, from a seed of their own) and STEM.torch.npy,
the fp32 logits of the torch model models/export.py builds for NAME (the
same seeded weights), and STEM.json with the output's quantization step.
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper, TensorProto

QUANTIZED_OPS = {"Conv", "Gemm", "MatMul", "Add"}
REMOVABLE = {"Relu", "Clip"}


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def fold(model):
    """Constants into initializers, BatchNormalization into the Conv before it."""
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    nodes = []
    for n in g.node:
        if n.op_type == "Constant":
            inits[n.output[0]] = numpy_helper.to_array(attrs(n)["value"])
        else:
            nodes.append(n)
    uses = {}
    for n in nodes:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    producer, out = {}, []
    for n in nodes:
        src = producer.get(n.input[0]) if n.input else None
        if (n.op_type == "BatchNormalization" and src is not None and src.op_type == "Conv"
                and uses.get(n.input[0]) == 1 and all(i in inits for i in n.input[1:])):
            eps = attrs(n).get("epsilon", 1e-5)
            scale, shift, mean, var = (inits[i].astype(np.float64) for i in n.input[1:5])
            w = inits[src.input[1]].astype(np.float64)
            b = inits[src.input[2]].astype(np.float64) if len(src.input) > 2 else np.zeros(w.shape[0])
            f = scale / np.sqrt(var + eps)
            wname, bname = src.input[1] + "_bnfolded", n.output[0] + "_bias"
            inits[wname] = (w * f.reshape(-1, 1, 1, 1)).astype(np.float32)
            inits[bname] = ((b - mean) * f + shift).astype(np.float32)
            x0 = src.input[0]
            del src.input[:]
            src.input.extend([x0, wname, bname])
            src.output[0] = n.output[0]
            producer[n.output[0]] = src
            continue
        out.append(n)
        for o in n.output:
            producer[o] = n
    used = {i for n in out for i in n.input}
    return out, {k: v for k, v in inits.items() if k in used}


def run_torch(nodes, inits, inputs):
    """Evaluate the folded graph in torch (fp32); yield (name, value) of every tensor."""
    env = {k: torch.from_numpy(np.array(v)) for k, v in inits.items()}
    env.update(inputs)
    for k, v in inputs.items():
        yield k, v
    for n in nodes:
        a, x = attrs(n), [env[i] if i else None for i in n.input]
        t = n.op_type
        if t == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            xin = F.pad(x[0], (pads[1], pads[3], pads[0], pads[2]))
            y = F.conv2d(xin, x[1], x[2] if len(x) > 2 else None, a.get("strides", [1, 1]), 0,
                         a.get("dilations", [1, 1]), a.get("group", 1))
        elif t == "Relu":
            y = torch.relu(x[0])
        elif t == "Clip":
            y = torch.clamp(x[0], float(x[1]), float(x[2]))
        elif t == "Add":
            y = x[0] + x[1]
        elif t == "MaxPool":
            pads = a.get("pads", [0, 0, 0, 0])
            xin = F.pad(x[0], (pads[1], pads[3], pads[0], pads[2]), value=-float("inf"))
            y = F.max_pool2d(xin, a["kernel_shape"], a.get("strides", [1, 1]), 0, ceil_mode=bool(a.get("ceil_mode", 0)))
        elif t == "GlobalAveragePool":
            y = x[0].mean(dim=(2, 3), keepdim=True)
        elif t == "Flatten":
            y = x[0].reshape(x[0].shape[0], -1)
        elif t == "Gemm":
            b = x[1].t() if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * (x[0] @ b) + a.get("beta", 1.0) * x[2]
        elif t == "Sigmoid":
            y = torch.sigmoid(x[0])
        elif t == "HardSigmoid":
            y = torch.clamp(a.get("alpha", 0.2) * x[0] + a.get("beta", 0.5), 0.0, 1.0)
        elif t == "HardSwish":
            y = F.hardswish(x[0])
        elif t == "Mul":
            y = x[0] * x[1]
        elif t == "ReduceMean":
            axes = a.get("axes", x[1].tolist() if len(x) > 1 and x[1] is not None else None)
            y = x[0].mean(dim=tuple(axes), keepdim=bool(a.get("keepdims", 1))) if axes else \
                x[0].mean().reshape([1] * x[0].dim() if a.get("keepdims", 1) else [])
        else:
            sys.exit(f"quantize.py: op {t} is not supported by the calibration interpreter")
        env[n.output[0]] = y
        yield n.output[0], y


def seed_of(name, salt):
    return zlib.crc32(f"{name}/{salt}".encode())


def images(rng, n):
    """n images N(0,1), each with its own per-channel gain and offset, so
    that the seeded random-weight model does not put every image in one
    class; calibration and test images come from here alike."""
    x = rng.standard_normal((n, 3, 224, 224), dtype=np.float32)
    return x * rng.uniform(0.5, 2.0, (n, 3, 1, 1)).astype(np.float32) + \
        rng.uniform(-1.0, 1.0, (n, 3, 1, 1)).astype(np.float32)


def act_params(lo, hi):
    """ORT's asymmetric uint8 parameters for the range [lo, hi]."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / 255.0)
    if scale < np.finfo(np.float32).tiny:
        return np.float32(1.0), np.uint8(0)
    return scale, np.uint8(np.clip(np.round(0.0 - lo / scale), 0, 255))


def weight_params(w):
    """Symmetric int8 per output channel (axis 0), [-127, 127]."""
    absmax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
    scale = (2 * absmax / 254.0).astype(np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(np.round(w / scale.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127).astype(np.int8)
    return q, scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--calib", type=int, default=8, help="calibration images (default 8)")
    ap.add_argument("--test-inputs", type=int, default=0, help="also write N test images and torch's logits")
    ap.add_argument("--name", help="export.py's model name (with --test-inputs)")
    args = ap.parse_args()
    torch.set_num_threads(2)

    model = onnx.load(args.src)
    g = model.graph
    nodes, inits = fold(model)
    in_name, out_name = g.input[0].name, g.output[0].name

    # ---- calibration
    lo, hi = {}, {}
    with torch.no_grad():
        for i in range(args.calib):
            rng = np.random.default_rng(seed_of(os.path.basename(args.src), f"quant-calib-{i}"))
            x = torch.from_numpy(images(rng, 1))
            for name, v in run_torch(nodes, inits, {in_name: x}):
                if name in inits:
                    continue
                a, b = float(v.min()), float(v.max())
                lo[name], hi[name] = min(lo.get(name, a), a), max(hi.get(name, b), b)

    # ---- removable activations: Relu / Clip whose input has no other reader
    uses = {}
    for n in nodes:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    producer = {o: n for n in nodes for o in n.output}
    kept = []
    for n in nodes:
        src = producer.get(n.input[0])
        if (n.op_type in REMOVABLE and src is not None and src.op_type in QUANTIZED_OPS
                and uses[n.input[0]] == 1 and n.input[0] != out_name):
            src.output[0] = n.output[0]
            producer[n.output[0]] = src
            continue
        kept.append(n)
    nodes = kept

    # ---- which activations get a Q -> DQ pair
    quant = []
    for n in nodes:
        if n.op_type in QUANTIZED_OPS:
            data_inputs = n.input[:1] if n.op_type in ("Conv", "Gemm") else n.input
            for t in list(data_inputs) + list(n.output):
                if t not in inits and t not in quant:
                    quant.append(t)

    new_inits = {}
    qparams = {}
    for t in quant:
        s, z = act_params(lo[t], hi[t])
        qparams[t] = (s, z)
        new_inits[t + "_scale"] = np.array(s, dtype=np.float32)
        new_inits[t + "_zero_point"] = np.array(z, dtype=np.uint8)

    # ---- weights and biases
    out_nodes = []
    for n in nodes:
        if n.op_type in ("Conv", "Gemm") and n.input[1] in inits:
            w = inits[n.input[1]]
            if n.op_type == "Gemm" and not attrs(n).get("transB", 0):
                sys.exit("quantize.py: Gemm without transB is not supported")
            q, ws = weight_params(w)
            wn = n.input[1]
            new_inits[wn + "_quantized"] = q
            new_inits[wn + "_scale"] = ws
            new_inits[wn + "_zero_point"] = np.zeros(ws.shape, dtype=np.int8)
            out_nodes.append(helper.make_node("DequantizeLinear", [wn + "_quantized", wn + "_scale", wn + "_zero_point"],
                                              [wn + "_dequantized"], name=wn + "_DequantizeLinear", axis=0))
            n.input[1] = wn + "_dequantized"
            if len(n.input) > 2 and n.input[2] in inits:
                bn = n.input[2]
                bs = (qparams[n.input[0]][0] * ws).astype(np.float32)
                new_inits[bn + "_quantized"] = np.round(inits[bn] / bs).astype(np.int32)
                new_inits[bn + "_scale"] = bs
                new_inits[bn + "_zero_point"] = np.zeros(bs.shape, dtype=np.int32)
                out_nodes.append(helper.make_node("DequantizeLinear",
                                                  [bn + "_quantized", bn + "_scale", bn + "_zero_point"],
                                                  [bn + "_dequantized"], name=bn + "_DequantizeLinear", axis=0))
                n.input[2] = bn + "_dequantized"

    # ---- Q -> DQ after each quantized activation's producer; readers take the DQ
    def qdq(t, src):
        return [helper.make_node("QuantizeLinear", [src, t + "_scale", t + "_zero_point"], [t + "_quantized"],
                                 name=t + "_QuantizeLinear"),
                helper.make_node("DequantizeLinear", [t + "_quantized", t + "_scale", t + "_zero_point"],
                                 [t + "_dequantized"], name=t + "_DequantizeLinear")]

    rename = {t: t + "_dequantized" for t in quant}
    if in_name in quant:
        out_nodes[:0] = qdq(in_name, in_name)
    for n in nodes:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
        outs = list(n.output)
        out_nodes.append(n)
        for o in outs:
            if o in quant:
                src = o
                if o == out_name:  # the graph output keeps its name: it becomes the last DQ's
                    src = o + "_float"
                    n.output[0] = src
                pair = qdq(o, src)
                if o == out_name:
                    pair[1].output[0] = out_name
                out_nodes.extend(pair)

    used = {i for n in out_nodes for i in n.input}
    all_inits = {k: v for k, v in inits.items() if k in used}
    all_inits.update({k: v for k, v in new_inits.items() if k in used})
    graph = helper.make_graph(out_nodes, g.name + "_qdq", list(g.input), list(g.output),
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in all_inits.items()])
    # the source's opset where it is later than 13 (MobileNetV3's HardSwish needs 14)
    src_opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] + [13])
    qm = helper.make_model(graph, opset_imports=[helper.make_opsetid("", src_opset)],
                           producer_name="nn models/quantize.py")
    qm.ir_version = model.ir_version
    onnx.checker.check_model(qm)
    onnx.save(qm, args.dst)
    counts = {}
    for n in out_nodes:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    print(f"quantize.py: {args.dst}: {len(quant)} activations quantized, nodes {counts}")

    if args.test_inputs:
        stem = args.dst[:-5] if args.dst.endswith(".onnx") else args.dst
        rng = np.random.default_rng(seed_of(args.name or "model", "quant-test"))
        x = images(rng, args.test_inputs)
        np.save(stem + ".input.npy", x)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import export  # the seeded torch model the fp32 export came from
        tm, _ = export.build(args.name)
        with torch.no_grad():
            np.save(stem + ".torch.npy", tm(torch.from_numpy(x)).numpy())
        with open(stem + ".json", "w") as f:
            json.dump({"output_scale": float(qparams[out_name][0])}, f)


if __name__ == "__main__":
    main()
