#!/usr/bin/python3
"""Export torchvision CNNs with seeded random weights to ONNX, with test data.

    models/export.py --out DIR [--only NAME,...] [--force]
        DIR/<name>.onnx, DIR/<name>.input.npy (batch 2), DIR/<name>.output.npy
    models/export.py --default
        models/mobilenetv2.onnx, .input.npy, .output.npy at batch 1 (committed)
    models/export.py --out DIR --only rnn
        the recurrent set (LSTM / GRU models, never part of a full run),
        checked by tests/check_rnn.sh
    models/export.py --out DIR --only real     (or zoo, or model names)
        models/zoo.py's groups: `real` (Swin-T, ViT-B/16, a BERT-style
        encoder, three detectors) checked by tests/check_zoo.sh, `zoo` the
        models of `make bench ZOO=1`; never part of a full run

Nothing is downloaded: weights come from torchvision's initializers under a
per-model seed, so any subset exports the same files as a full run.  Freshly
initialized BatchNorm layers are the identity (mean 0, var 1, weight 1, bias
0), which would let a broken BN fold pass unnoticed, and the plain initializers
make activations vanish or explode over 50+ layers.  So every BN gets random
affine parameters and running statistics measured on a random calibration
batch, then jittered: the file holds non-trivial BN nodes and activations stay
in a realistic range.  Conv/Linear biases, zero from the initializers, get
small random values too, so bias handling is tested (and identical zero
tensors do not turn into Identity nodes when torch deduplicates initializers).  The export keeps BatchNormalization nodes (no
Conv+BN peephole) so the engine's own folding is what gets tested.

Runs under Debian's /usr/bin/python3 (python3-torch, python3-torchvision,
python3-onnx for the checks).
"""
import argparse
import os
import re
import sys
import time
import warnings
import zlib

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (the zoo: transformers, detection, segmentation, audio)

# name -> keyword arguments for the torchvision constructor.  GoogLeNet's
# aux heads only run in training; init_weights=True picks its own
# initializer explicitly (the default warns about the change).
MODELS = {
    "resnet50": {},
    "vgg19": {},
    "densenet201": {},
    "efficientnet_b0": {},
    "googlenet": {"aux_logits": False, "init_weights": True},
    "mobilenet_v2": {},
}
DEFAULT_MODEL = "mobilenet_v2"
DEFAULT_STEM = "mobilenetv2"
OPSET = 13
CALIBRATION_BATCH = 4
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def seed_of(name, salt):
    return zlib.crc32(f"{name}/{salt}".encode())


def randomize(model, name, calib):
    """CALIB: a batch, or a list of input tuples (one pass each).  Random biases and BN affine parameters, then BN running statistics
    from a calibration pass (BN layers in batch-statistics mode, everything
    else in eval so dropout and stochastic depth stay off), then a
    per-channel jitter.  Returns the number of BN layers."""
    gen = torch.Generator().manual_seed(seed_of(name, "randomize"))
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) and m.bias is not None:
                m.bias.uniform_(-0.1, 0.1, generator=gen)
        if not bns:
            return 0
        momenta = [bn.momentum for bn in bns]
        for bn in bns:
            bn.weight.uniform_(0.5, 1.5, generator=gen)
            bn.bias.uniform_(-0.25, 0.25, generator=gen)
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average: one batch sets the stats
            bn.train()
        for c in [(calib,)] if torch.is_tensor(calib) else calib:
            model(*c)
        for bn, momentum in zip(bns, momenta):
            bn.momentum = momentum
            bn.eval()
            # A channel that was constant in calibration would have var ~0 and
            # blow up 300x at eps=1e-5 on other data; keep a floor.
            var = bn.running_var.clamp_min(1e-2)
            jitter = torch.empty_like(var).uniform_(0.5, 2.0, generator=gen)
            shift = torch.empty_like(var).normal_(0.0, 0.1, generator=gen)
            bn.running_mean.add_(shift * var.sqrt())
            bn.running_var.copy_(var * jitter)
    return len(bns)


def build(name):
    torch.manual_seed(seed_of(name, "weights"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(torchvision.models, name)(weights=None, **MODELS[name])
    model.eval()
    calib = torch.from_numpy(random_input(name, "calibration", CALIBRATION_BATCH))
    n_bn = randomize(model, name, calib)
    return model.eval(), n_bn


def random_input(name, salt, batch):
    rng = np.random.default_rng(seed_of(name, salt))
    return rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)


def export_onnx(model, x, path):
    with warnings.catch_warnings():
        # PRESERVE with a model in eval mode exports inference BN; the
        # constant-folding advice in the warning is about training mode.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, torch.from_numpy(x), path,
            opset_version=OPSET,
            input_names=["input"], output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            training=torch.onnx.TrainingMode.PRESERVE,
            do_constant_folding=True,
        )


def known_ops():
    with open(os.path.join(REPO, "ops", "ops.def")) as f:
        return set(re.findall(r"^NN_OP\((\w+),", f.read(), re.M))


def check_onnx(path, expect_bn):  # expect_bn None: any count
    """onnx.checker, BN kept as single-output inference nodes, op types used.
    Returns {op_type: count}."""
    try:
        import onnx
    except ImportError:
        print("  (python3-onnx missing: ONNX checks skipped)")
        return {}
    onnx.checker.check_model(path)
    graph = onnx.load(path, load_external_data=False).graph
    ops = {}
    for node in graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
        if node.op_type == "BatchNormalization" and len(node.output) != 1:
            raise SystemExit(f"{path}: BatchNormalization {node.name} has {len(node.output)} outputs")
    if expect_bn is not None and ops.get("BatchNormalization", 0) != expect_bn:
        raise SystemExit(f"{path}: {ops.get('BatchNormalization', 0)} BatchNormalization nodes, "
                         f"model has {expect_bn} BN layers")
    return ops


def mib(path):
    return os.path.getsize(path) / (1 << 20)


def export_one(name, out_dir, stem, batch, force, ops_def):
    paths = [os.path.join(out_dir, stem + ext) for ext in (".onnx", ".input.npy", ".output.npy")]
    if not force and all(os.path.exists(p) for p in paths):
        print(f"{name}: up to date ({mib(paths[0]):.1f} MiB)")
        return
    t0 = time.time()
    if name in RNN_MODELS:
        model, n_bn = build_rnn(name)
        x = rnn_input(name)
    else:
        model, n_bn = build(name)
        x = random_input(name, "input", batch)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy()
        # torch's own fp32 rounding noise, to set against the test tolerance
        y64 = model.double()(torch.from_numpy(x).double()).numpy()
    model.float()
    noise = np.linalg.norm(y - y64) / np.linalg.norm(y64)
    # Write to temporaries first so an interrupted run is not "up to date".
    tmp = [p + ".tmp" for p in paths]
    if name in RNN_MODELS:
        export_rnn_onnx(name, model, x, tmp[0])
    else:
        export_onnx(model, x, tmp[0])
    ops = check_onnx(tmp[0], n_bn)
    with open(tmp[1], "wb") as f:
        np.save(f, x)
    with open(tmp[2], "wb") as f:
        np.save(f, y.astype(np.float32))
    for t, p in zip(tmp, paths):
        os.replace(t, p)
    print(f"{name}: {mib(paths[0]):.1f} MiB, {sum(ops.values())} nodes, {n_bn} BN, "
          f"output {tuple(y.shape)} std {y.std():.3g}, fp32-vs-fp64 rel err {noise:.1e}, "
          f"{time.time() - t0:.1f} s")
    if ops:
        print("  ops: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
        missing = sorted(set(ops) - ops_def)
        if missing:
            print("  NOT IN ops/ops.def: " + ", ".join(missing))


# ---- The recurrent set: small LSTM / GRU models (seeded random weights,
# fixed initial states, a Linear head).  Exported only when named with
# --only (rnn, or a model's name), so the CNN set and its bench are unchanged.
# Shapes are static: the sequence is dim 0 of an LSTM input, not a batch.
RNN_OPSET = 14
RNN_SEQ, RNN_BATCH, RNN_INPUT = 10, 3, 16


class LstmNet(torch.nn.Module):
    """2-layer bidirectional LSTM (seq-major), its outputs at every step
    through a Linear head, plus a projection of the final h and c states."""

    def __init__(self, gen):
        super().__init__()
        hidden, layers = 32, 2
        self.rnn = torch.nn.LSTM(RNN_INPUT, hidden, num_layers=layers, bidirectional=True)
        self.head = torch.nn.Linear(2 * hidden, 8)
        self.state_head = torch.nn.Linear(2 * 2 * layers * hidden, 8)
        self.register_buffer("h0", torch.randn(2 * layers, RNN_BATCH, hidden, generator=gen) * 0.5)
        self.register_buffer("c0", torch.randn(2 * layers, RNN_BATCH, hidden, generator=gen) * 0.5)

    def forward(self, x):
        y, (h, c) = self.rnn(x, (self.h0, self.c0))
        state = torch.cat([h, c], 0).permute(1, 0, 2).reshape(x.shape[1], -1)
        return self.head(y) + self.state_head(state).unsqueeze(0)


class GruNet(torch.nn.Module):
    """2-layer GRU (batch-major: torch exports it with Transposes around a
    layout-0 GRU, linear_before_reset=1), the last step and the final states
    through Linear heads."""

    def __init__(self, gen):
        super().__init__()
        hidden, layers = 24, 2
        self.rnn = torch.nn.GRU(RNN_INPUT, hidden, num_layers=layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, 8)
        self.state_head = torch.nn.Linear(layers * hidden, 8)
        self.register_buffer("h0", torch.randn(layers, RNN_BATCH, hidden, generator=gen) * 0.5)

    def forward(self, x):
        y, h = self.rnn(x, self.h0)
        return self.head(y) + self.state_head(h.permute(1, 0, 2).reshape(x.shape[0], -1)).unsqueeze(1)


class LstmSeqNet(torch.nn.Module):
    """1-layer LSTM exported with a symbolic sequence length (dim 0): the
    engine must not take that dim for a batch it may split."""

    def __init__(self, gen):
        super().__init__()
        self.rnn = torch.nn.LSTM(RNN_INPUT, 20)
        self.head = torch.nn.Linear(20, 8)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


# name -> (module class, input shape, symbolic sequence length)
RNN_MODELS = {
    "lstm_bidi2": (LstmNet, (RNN_SEQ, RNN_BATCH, RNN_INPUT), False),
    "gru2": (GruNet, (RNN_BATCH, RNN_SEQ, RNN_INPUT), False),
    "lstm_seq": (LstmSeqNet, (RNN_SEQ, RNN_BATCH, RNN_INPUT), True),
}


def build_rnn(name):
    """Weights uniform in +-0.3 (wider than torch's 1/sqrt(hidden) so the
    gates leave their linear range) and biases in +-0.1, all seeded."""
    torch.manual_seed(seed_of(name, "weights"))
    gen = torch.Generator().manual_seed(seed_of(name, "states"))
    model = RNN_MODELS[name][0](gen)
    with torch.no_grad():
        for pname, prm in model.named_parameters():
            bound = 0.1 if "bias" in pname else 0.3
            prm.uniform_(-bound, bound, generator=gen)
    return model.eval(), 0


def rnn_input(name):
    rng = np.random.default_rng(seed_of(name, "input"))
    return rng.standard_normal(RNN_MODELS[name][1], dtype=np.float32)


def export_rnn_onnx(name, model, x, path):
    """With a symbolic sequence length, the recurrent nodes also get their
    default activations spelled out, so the importer's string lists are
    exercised (torch leaves the attribute out)."""
    dynamic = RNN_MODELS[name][2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that batch_first GRUs export with Transposes
        torch.onnx.export(model, torch.from_numpy(x), path, opset_version=RNN_OPSET,
                          input_names=["input"], output_names=["output"], do_constant_folding=True,
                          dynamic_axes={"input": {0: "seq"}, "output": {0: "seq"}} if dynamic else None)
    if dynamic:
        import onnx
        m = onnx.load(path)
        defaults = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
        for node in m.graph.node:
            if node.op_type in defaults:
                node.attribute.append(onnx.helper.make_attribute("activations", defaults[node.op_type]))
        onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--only", help="comma-separated subset of: " + ", ".join(MODELS) +
                    "; or of the recurrent set (not in a full run): rnn = " + ", ".join(RNN_MODELS) +
                    "; or of models/zoo.py (not in a full run): " +
                    "; ".join(f"{g} = {', '.join(m)}" for g, m in zoo.GROUPS.items()))
    ap.add_argument("--force", action="store_true", help="re-export existing models")
    ap.add_argument("--default", action="store_true",
                    help=f"write models/{DEFAULT_STEM}.{{onnx,input.npy,output.npy}} at batch 1")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    ops_def = known_ops()
    t0 = time.time()
    if args.default:
        export_one(DEFAULT_MODEL, os.path.join(REPO, "models"), DEFAULT_STEM, 1, True, ops_def)
        return
    if not args.out:
        ap.error("--out DIR or --default is required")
    names = args.only.split(",") if args.only else list(MODELS)
    names = [m for n in names for m in (RNN_MODELS if n == "rnn" else zoo.GROUPS.get(n, [n]))]
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in MODELS and n not in RNN_MODELS and n not in zoo.ZOO]
    if unknown:
        ap.error("unknown model(s): " + ", ".join(unknown))
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        if name in zoo.ZOO:
            ops = zoo.export_zoo(name, args.out, args.force, seed_of, randomize, check_onnx)
            missing = sorted(set(ops or {}) - ops_def)
            if ops:
                print("  ops: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
            if missing:
                print("  NOT IN ops/ops.def: " + ", ".join(missing))
        else:
            export_one(name, args.out, name, 2, args.force, ops_def)
    print(f"done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
