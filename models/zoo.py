"""The model zoo of models/export.py: transformers, detection, segmentation,
audio and more classification CNNs, each with seeded random weights.

Every model is described by a Spec: how to build it, its inputs (per-sample
shape, dtype, value range), its output names, the batch its test files are
exported at, and the batch sizes the benchmark may use.  Two groups are
exported on request (never in a full run of export.py):

    real  the models tests/check_zoo.sh compares with torch (issue 24 item 3)
    zoo   the models of `make bench ZOO=1` (tools/bench --zoo)

Files per model NAME in the output folder:
    NAME.onnx, NAME.inputs/INPUT.npy, NAME.outputs/OUTPUT.npy (torch's),
    NAME.json (the spec: inputs, outputs, batches; written last).
"""
import collections
import functools
import json
import os
import time
import warnings

import numpy as np
import torch
import torchvision

ZOO_OPSET = 14  # LayerNormalization is opset 17; 14 has Trilu and the attention ops torch emits


def _tv(name, **kw):
    """A torchvision classifier (weights=None: nothing is downloaded)."""
    def make():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(torchvision.models, name)(weights=None, **kw)
    return make


class _Segment(torch.nn.Module):
    """torchvision's segmentation models return an OrderedDict; ONNX wants tensors."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def _seg(name):
    def make():
        fn = getattr(torchvision.models.segmentation, name)
        kw = {} if name.startswith("lraspp") else {"aux_loss": False}
        return _Segment(fn(weights=None, weights_backbone=None, **kw))
    return make


class _Detect(torch.nn.Module):
    """A detector over an (N, 3, H, W) batch (N > 1 only to calibrate BN): the
    first image's boxes, scores, labels."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        d = self.m(list(x))[0]
        return d["boxes"], d["scores"], d["labels"]


def _det(name, **kw):
    def make():
        fn = getattr(torchvision.models.detection, name)
        return _Detect(fn(weights=None, weights_backbone=None, **kw))
    return make


class Bert(torch.nn.Module):
    """A BERT-style encoder: token + position + segment embeddings, LayerNorm,
    post-norm TransformerEncoder layers (GELU), the attention mask (1 = token,
    0 = padding) as the key padding mask.  Returns the last hidden states."""

    def __init__(self, vocab, hidden, layers, heads, ffn, seq):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Parameter(torch.randn(seq, hidden) * 0.02)
        self.seg = torch.nn.Parameter(torch.randn(hidden) * 0.02)
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-12)
        layer = torch.nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0, activation="gelu",
                                                 batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # TransformerEncoder deep-copies one layer: without fresh weights every
        # layer would be the same (and the file would hold them once)
        for lay in self.enc.layers:
            lay.self_attn._reset_parameters()
            torch.nn.init.normal_(lay.self_attn.in_proj_bias, 0.0, 0.05)
            lay.linear1.reset_parameters()
            lay.linear2.reset_parameters()

    def forward(self, ids, mask):
        x = self.norm(self.tok(ids) + self.pos[: ids.shape[1]] + self.seg)
        return self.enc(x, src_key_padding_mask=mask == 0)


class Wav2Vec2Features(torch.nn.Module):
    """wav2vec2's feature extractor: Conv1d(1, 512, 10, 5) + GroupNorm(512 groups)
    + GELU, six Conv1d(512, 512, 3 or 2, 2) + GELU, then LayerNorm and the
    projection to 768 features per frame."""

    def __init__(self):
        super().__init__()
        convs = [torch.nn.Conv1d(1, 512, 10, 5, bias=False), torch.nn.GroupNorm(512, 512), torch.nn.GELU()]
        for k in (3, 3, 3, 3, 2, 2):
            convs += [torch.nn.Conv1d(512, 512, k, 2, bias=False), torch.nn.GELU()]
        self.conv = torch.nn.Sequential(*convs)
        self.norm = torch.nn.LayerNorm(512)
        self.proj = torch.nn.Linear(512, 768)

    def forward(self, wave):
        x = self.conv(wave.unsqueeze(1)).transpose(1, 2)
        return self.proj(self.norm(x))


IMG = lambda size: [("input", (3, size, size), "float32", None)]  # noqa: E731
Spec = collections.namedtuple("Spec", "make inputs outputs batch batches grad_export logit_scale")
# token ids in [0, vocab); the mask: ones, then zeros past a per-row length
TOKENS = lambda vocab, seq: [("ids", (seq,), "int64", vocab), ("mask", (seq,), "mask", None)]  # noqa: E731
DETECT_OUT = ["boxes", "scores", "labels"]


def _spec(make, inputs, outputs=("output",), batch=2, batches=(1, 64), grad_export=False, logit_scale=None):
    return Spec(make, inputs, list(outputs), batch, list(batches), grad_export, logit_scale)


ZOO = {
    # ---- transformers
    "vit_b_16": _spec(_tv("vit_b_16"), IMG(224), batch=1, grad_export=True),
    "swin_t": _spec(_tv("swin_t"), IMG(224), batch=1),
    "bert_small": _spec(functools.partial(Bert, 1000, 256, 4, 4, 1024, 64), TOKENS(1000, 64), grad_export=True),
    "bert_base": _spec(functools.partial(Bert, 30522, 768, 12, 12, 3072, 128), TOKENS(30522, 128), batch=1,
                       grad_export=True),
    # ---- detection (batch 1: the wrappers take one image)
    # logit_scale: random weights leave every class logit near its bias, the scores
    # within 1% of each other; spread 10x, fewer detections hang on the last bit
    "retinanet_resnet50_fpn": _spec(_det("retinanet_resnet50_fpn", min_size=320, max_size=320,
                                         detections_per_img=100),
                                    IMG(320), DETECT_OUT, batch=1, batches=(1,),
                                    logit_scale=("m.head.classification_head.cls_logits", 10.0)),
    "ssdlite320_mobilenet_v3_large": _spec(_det("ssdlite320_mobilenet_v3_large"), IMG(320), DETECT_OUT,
                                           batch=1, batches=(1,)),
    # box_score_thresh: softmax over 91 classes of random weights stays near 1/91,
    # under the default 0.05, which would leave no detection to compare
    "fasterrcnn_mobilenet_v3_large_320_fpn": _spec(_det("fasterrcnn_mobilenet_v3_large_320_fpn",
                                                        box_score_thresh=0.001),
                                                   IMG(320), DETECT_OUT, batch=1, batches=(1,)),
    # ---- classification CNNs beyond the six seed models
    "convnext_tiny": _spec(_tv("convnext_tiny"), IMG(224)),
    "regnet_y_400mf": _spec(_tv("regnet_y_400mf"), IMG(224)),
    "mnasnet1_0": _spec(_tv("mnasnet1_0"), IMG(224)),
    "inception_v3": _spec(_tv("inception_v3", aux_logits=False, init_weights=True), IMG(299)),
    "resnext50_32x4d": _spec(_tv("resnext50_32x4d"), IMG(224)),
    "resnet18": _spec(_tv("resnet18"), IMG(224)),
    "shufflenet_v2_x1_0": _spec(_tv("shufflenet_v2_x1_0"), IMG(224)),
    "squeezenet1_1": _spec(_tv("squeezenet1_1"), IMG(224)),
    "alexnet": _spec(_tv("alexnet"), IMG(224)),
    "mobilenet_v3_small": _spec(_tv("mobilenet_v3_small"), IMG(224)),
    "mobilenet_v3_large": _spec(_tv("mobilenet_v3_large"), IMG(224)),
    # ---- segmentation
    "deeplabv3_mobilenet_v3_large": _spec(_seg("deeplabv3_mobilenet_v3_large"), IMG(224)),
    "lraspp_mobilenet_v3_large": _spec(_seg("lraspp_mobilenet_v3_large"), IMG(224)),
    # batch 1 only (batch 64 of 224x224 at stride 8 is minutes a run): exported at batch 1, static
    "fcn_resnet50": _spec(_seg("fcn_resnet50"), IMG(224), batch=1, batches=(1,)),
    # ---- audio: one second at 16 kHz
    "wav2vec2_features": _spec(Wav2Vec2Features, [("input", (16000,), "float32", None)]),
}

GROUPS = {
    "real": ["swin_t", "vit_b_16", "bert_small", "retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large",
             "fasterrcnn_mobilenet_v3_large_320_fpn"],
    "zoo": ["convnext_tiny", "regnet_y_400mf", "mnasnet1_0", "inception_v3", "resnext50_32x4d", "resnet18",
            "shufflenet_v2_x1_0", "squeezenet1_1", "alexnet", "mobilenet_v3_small", "mobilenet_v3_large",
            "vit_b_16", "swin_t", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50",
            "ssdlite320_mobilenet_v3_large", "bert_base", "wav2vec2_features"],
}
# The zoo also benchmarks the six seed CNNs' exports (build/models/NAME.onnx) through the same path.


def make_inputs(spec, name, salt, batch, seed_of):
    """Seeded inputs at BATCH: N(0,1) floats, token ids, attention masks."""
    rng = np.random.default_rng(seed_of(name, salt))
    out = collections.OrderedDict()
    for iname, shape, dtype, high in spec.inputs:
        if dtype == "float32":
            out[iname] = rng.standard_normal((batch,) + shape, dtype=np.float32)
        elif dtype == "int64":
            out[iname] = rng.integers(0, high, (batch,) + shape, dtype=np.int64)
        else:  # a mask: every row keeps at least half its tokens
            seq = shape[-1]
            lengths = rng.integers(seq // 2, seq + 1, batch)
            lengths[0] = seq
            out[iname] = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return out


def randomize_extra(model, gen):
    """Beyond export.randomize: LayerNorm / GroupNorm affine parameters, so
    they are not the identity either, and weights initialized to zero (ViT's
    classifier head) drawn at random: a zero head would make the output the
    bias alone, whatever the input."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not m.weight.any():
                m.weight.normal_(0.0, 0.02, generator=gen)
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm)) and m.weight is not None:
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.25, 0.25, generator=gen)


def _as_tensors(inputs):
    return tuple(torch.from_numpy(v) for v in inputs.values())


def _outputs(y):
    return [t.detach() for t in (y if isinstance(y, (tuple, list)) else (y,))]


def export_zoo(name, out_dir, force, seed_of, randomize, check_onnx):
    """Build, calibrate, run and export one zoo model (see the module doc for the files)."""
    spec = ZOO[name]
    stem = os.path.join(out_dir, name)
    if not force and os.path.exists(stem + ".json") and os.path.exists(stem + ".onnx"):
        print(f"{name}: up to date ({os.path.getsize(stem + '.onnx') / (1 << 20):.1f} MiB)")
        return
    for p in (stem + ".json",):
        if os.path.exists(p):
            os.remove(p)
    t0 = time.time()
    torch.manual_seed(seed_of(name, "weights"))
    model = spec.make()
    model.eval()
    gen = torch.Generator().manual_seed(seed_of(name, "layernorm"))
    randomize_extra(model, gen)
    inputs = make_inputs(spec, name, "input", spec.batch, seed_of)
    n_bn = 0
    if spec.inputs[0][2] == "float32":
        # BN statistics from a few random batches (BN layers alone in train mode)
        calib_batch, passes = 4, (1 if spec.batch > 1 else 3)
        calibs = [_as_tensors(make_inputs(spec, name, f"calibration{i}", calib_batch, seed_of))
                  for i in range(passes)]
        n_bn = randomize(model, name, calibs)
    if spec.logit_scale:
        layer = functools.reduce(getattr, spec.logit_scale[0].split("."), model)
        with torch.no_grad():
            layer.weight.mul_(spec.logit_scale[1])
    model.eval()
    with torch.no_grad():
        ref = _outputs(model(*_as_tensors(inputs)))
    if len(ref) != len(spec.outputs):
        raise SystemExit(f"{name}: {len(ref)} outputs, spec names {len(spec.outputs)}")
    tmp = stem + ".onnx.tmp"
    batch_dim = {0: "batch"} if spec.batches != [1] else {}
    dyn = {n: batch_dim for n, *_ in spec.inputs} if batch_dim else None
    if dyn:
        dyn.update({o: batch_dim for o in spec.outputs})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if spec.grad_export:
            # torch 1.13 traces nn.MultiheadAttention's fused fast path
            # unless gradients are on and the parameters require them.
            for p in model.parameters():
                p.requires_grad_(True)
            ctx = torch.enable_grad()
        else:
            ctx = torch.no_grad()
        with ctx:
            torch.onnx.export(model, _as_tensors(inputs), tmp, opset_version=ZOO_OPSET,
                              input_names=[n for n, *_ in spec.inputs], output_names=spec.outputs,
                              dynamic_axes=dyn, training=torch.onnx.TrainingMode.PRESERVE,
                              do_constant_folding=True)
    ops = check_onnx(tmp, None)
    for d, arrays in (("inputs", inputs), ("outputs", dict(zip(spec.outputs, ref)))):
        os.makedirs(f"{stem}.{d}", exist_ok=True)
        for k, v in arrays.items():
            np.save(os.path.join(f"{stem}.{d}", k + ".npy"), v.numpy() if torch.is_tensor(v) else v)
    os.replace(tmp, stem + ".onnx")
    meta = {"inputs": [{"name": n, "shape": list(s), "dtype": d, "high": h} for n, s, d, h in spec.inputs],
            "outputs": spec.outputs, "batch": spec.batch, "batches": spec.batches}
    with open(stem + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    shapes = ", ".join(f"{o} {tuple(r.shape)}" for o, r in zip(spec.outputs, ref))
    print(f"{name}: {os.path.getsize(stem + '.onnx') / (1 << 20):.1f} MiB, {sum(ops.values())} nodes, "
          f"{n_bn} BN, {shapes}, {time.time() - t0:.1f} s")
    return ops
