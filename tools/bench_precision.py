#!/usr/bin/python3
"""bf16 against fp32 (docs/precision.md): accuracy over random inputs, and speed.

    /usr/bin/python3 tools/bench_precision.py [--models A,B] [--samples 100] [--batch 8]
    /usr/bin/python3 tools/bench_precision.py --speed resnet50 --batch 64 --rounds 3 --iters 1

Accuracy: each model (default: the six seed CNNs in build/models) is loaded
twice through the Python binding (build/python: make python-build), fp32
and precision="bf16", and both run on the same N standard-normal inputs
(seeded); printed per model: the relative L2 of bf16's outputs against
fp32's over all samples (||bf16 - fp32|| / ||fp32||), its median per sample,
top-1 agreement (argmax of the last axis, per sample), and how many distinct
classes fp32's top-1 takes over the inputs (the seed models' weights are
random: few distinct classes make agreement easy), and top-1 agreement of
the outputs less fp32's mean output over the inputs (the input-dependent
part, whose top-1 varies from input to input), with that part's share of
the output (||fp32 - mean|| / ||fp32||) and bf16's error relative to it: a
random-weight network's output barely depends on its input, and where the
share is below bf16's error the centered top-1 is noise.

Speed: `nnrun MODEL --batch B --warmup W --iters N --json --no-cache` alternating fp32
and bf16 for R rounds; printed: the median samples/s of each and the median
of the per-round ratios.  On a shared machine, mark the figures "shared".
Needs AVX512-BF16 (bf16 is refused elsewhere).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = ["resnet50", "mobilenet_v2", "efficientnet_b0", "googlenet", "densenet201", "vgg19"]


def accuracy(args):
    sys.path.insert(0, os.path.join(ROOT, args.build, "python"))
    import nn
    rng = np.random.default_rng(args.seed)
    print("model            samples  rel.L2 all  rel.L2 median  top-1 agree  fp32 classes  input share  "
          "rel.L2 of the input part  centered top-1 agree")
    for name in args.models.split(","):
        path = os.path.join(ROOT, args.build, "models", name + ".onnx")
        m32 = nn.load(path, batch_size=args.batch, threads=args.threads, cache=False)
        m16 = nn.load(path, batch_size=args.batch, threads=args.threads, cache=False, precision="bf16")
        shape = [args.samples] + [d if isinstance(d, int) and d > 0 else 1 for d in m32.inputs[0].shape[1:]]
        x = rng.standard_normal(shape, dtype=np.float32)
        y32 = m32.predict(x).astype(np.float64)
        y16 = m16.predict(x).astype(np.float64)
        y32 = y32.reshape(args.samples, -1)
        y16 = y16.reshape(args.samples, -1)
        total = np.linalg.norm(y16 - y32) / np.linalg.norm(y32)
        per = np.linalg.norm(y16 - y32, axis=1) / np.linalg.norm(y32, axis=1)
        agree = float(np.mean(y16.argmax(1) == y32.argmax(1)))
        classes = len(set(y32.argmax(1).tolist()))
        # the input-dependent part: fp32's mean output over the inputs taken from both
        mean = y32.mean(0)
        centered = float(np.mean((y16 - mean).argmax(1) == (y32 - mean).argmax(1)))
        share = np.linalg.norm(y32 - mean) / np.linalg.norm(y32)
        part = np.linalg.norm(y16 - y32) / np.linalg.norm(y32 - mean)
        print("%-16s %7d  %10.2e  %13.2e  %10.1f%%  %12d  %11.2e  %24.2e  %19.1f%%" %
              (name, args.samples, total, np.median(per), 100 * agree, classes, share, part, 100 * centered),
              flush=True)
        m32.close()
        m16.close()


def speed(args):
    nnrun = os.path.join(ROOT, args.build, "nnrun")
    path = os.path.join(ROOT, args.build, "models", args.speed + ".onnx")
    rate = {"fp32": [], "bf16": []}
    ratios = []
    for r in range(args.rounds):
        got = {}
        for p in ("fp32", "bf16"):
            cmd = [nnrun, path, "--no-cache", "--batch", str(args.batch), "--warmup", str(args.warmup), "--iters",
                   str(args.iters), "--json", "--precision", p]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            got[p] = json.loads(out)["throughput"]
            rate[p].append(got[p])
        ratios.append(got["bf16"] / got["fp32"])
        print("round %d: fp32 %.2f  bf16 %.2f samples/s  (x%.2f)" % (r + 1, got["fp32"], got["bf16"], ratios[-1]),
              flush=True)
    print("%s batch %d, median of %d rounds: fp32 %.2f, bf16 %.2f samples/s; bf16/fp32 %.2f" %
          (args.speed, args.batch, args.rounds, statistics.median(rate["fp32"]), statistics.median(rate["bf16"]),
           statistics.median(ratios)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default=",".join(SEED))
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--batch", type=int, default=None, help="accuracy: 8; speed: 1")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--speed", metavar="MODEL", help="time MODEL instead of measuring accuracy")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    if args.batch is None:
        args.batch = 1 if args.speed else 8
    speed(args) if args.speed else accuracy(args)


if __name__ == "__main__":
    main()
