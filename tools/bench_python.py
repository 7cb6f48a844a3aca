#!/usr/bin/python3
"""Measure the Python package's cost (a benchmark, not a test; docs/python.md reports its numbers).

usage: tools/bench_python.py [--iters N] [--batches N]     (after make python-build and make models)

1. Call overhead at batch 1: the median latency of model.predict against nnrun's on the same model, for
   a tiny model (one Relu over 16 floats: the call is all overhead) and for the committed MobileNetV2.
2. Async overlap: N batches of float64 samples (each needs a conversion to float32) run one predict per
   batch, then through one predict_async call, whose pipeline converts batch k+1 while batch k computes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("NN_BUILD", "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))
import nn  # noqa: E402


def tiny_model(path):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def median_ms(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    lat = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        lat.append((time.perf_counter() - t0) * 1e3)
    lat.sort()
    return lat[len(lat) // 2]


def nnrun_ms(path, iters, threads):
    out = subprocess.run([os.path.join(BUILD, "nnrun"), path, "--batch", "1", "--iters", str(iters), "--threads",
                          str(threads), "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print("processor: %s, %d cores" % (cpu, os.cpu_count()))

    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.onnx")
        tiny_model(tiny)
        for name, path, iters in (("tiny Relu", tiny, a.iters * 10),
                                  ("mobilenetv2", os.path.join(ROOT, "models", "mobilenetv2.onnx"), a.iters)):
            m = nn.load(path, threads=a.threads)
            x = np.random.default_rng(0).standard_normal(
                tuple(1 if d is None else d for d in m.inputs[0].shape)).astype(np.float32)
            py = median_ms(lambda: m.predict(x), iters)
            c = nnrun_ms(path, iters, a.threads)
            print("%-12s batch 1: predict median %.4f ms, nnrun %.4f ms, overhead %+.1f us" % (
                name, py, c, (py - c) * 1e3))

    path = os.path.join(BUILD, "models", "mobilenet_v2.onnx")
    if not os.path.exists(path):
        print("async overlap: %s missing (make models)" % path)
        return
    batch = 4
    m = nn.load(path, batch_size=batch, threads=a.threads)
    x = np.random.default_rng(1).standard_normal((a.batches * batch, 3, 224, 224))  # float64: converted
    m.predict(x[:batch])

    def one_by_one():
        return [m.predict(x[k:k + batch]) for k in range(0, len(x), batch)]

    def pipelined():
        return m.predict_async(x).result()

    def per_batch_async():
        futs = [m.predict_async(x[k:k + batch]) for k in range(0, len(x), batch)]
        return [f.result() for f in futs]

    seq = median_ms(one_by_one, 5, 1)
    pipe = median_ms(pipelined, 5, 1)
    many = median_ms(per_batch_async, 5, 1)
    print("async overlap, mobilenet_v2, %d batches of %d float64 samples: predict per batch %.1f ms, "
          "one predict_async %.1f ms (%.2fx), a predict_async per batch %.1f ms (%.2fx)" % (
              a.batches, batch, seq, pipe, seq / pipe, many, seq / many))
    m.close()


if __name__ == "__main__":
    main()
