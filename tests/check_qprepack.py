"""The integer ops with constant weights, which nn packs once at load:
QLinearMatMul, MatMulInteger, QLinearConv (grouped, strided, per-channel, 3x3 stride 1 with pads, convs over
padded planes: dilated, 7x7 planes, grouped 5x5 ConvInteger, stride-2 and stride-3 phase planes)
ConvInteger (pointwise), QLinearAdd (int8 and uint8), and depthwise QLinearConv / ConvInteger (strided,
dilated, uneven pads, 7x7 planes; summed directly over phase planes,
weights read as they are), built here with onnx.helper and run by nnrun
(fresh load, then from the plan cache, under each ISA given), against a
reference computed here with numpy in 64-bit integers and ONNX Runtime's
float32 requantization order.  Outputs must be equal, byte for byte.

usage: check_qprepack.py NNRUN WORKDIR ISA...

NN_QPREPACK_ARGS in the environment: more nnrun options, e.g.
"--disable-pass layout_nhwc" to keep the convs in NCHW, which the
channels-last pass otherwise takes over (both layouts must give these bytes).
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def requant(acc, mult, zp, dtype):
    lo, hi = (-128, 127) if dtype == np.int8 else (0, 255)
    v = acc.astype(np.float32) * mult.astype(np.float32)
    return np.clip(np.rint(v) + zp, lo, hi).astype(dtype)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def onnx_type(dt):
    return {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int32: TensorProto.INT32}[dt]


def model(node, x, inits, out_dtype, out_shape):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type(x.dtype.type), x.shape)],
                          [helper.make_tensor_value_info("y", onnx_type(out_dtype), out_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def qmatmul():
    x = rng.integers(0, 256, (3, 5, 37), dtype=np.uint8)
    b = rng.integers(-128, 128, (37, 45), dtype=np.int8)
    xs, xz = np.float32(0.02), np.uint8(131)
    bs = rng.uniform(0.001, 0.01, 45).astype(np.float32)
    bz = rng.integers(-5, 6, 45).astype(np.int8)
    ys, yz = np.float32(0.7), np.uint8(120)
    acc = np.einsum("bmk,kn->bmn", x.astype(np.int64) - int(xz), b.astype(np.int64) - bz.astype(np.int64))
    want = requant(acc, (xs * bs) / ys, int(yz), np.uint8)
    node = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"])
    inits = [const("xs", xs), const("xz", xz), const("b", b), const("bs", bs), const("bz", bz), const("ys", ys),
             const("yz", yz)]
    return model(node, x, inits, np.uint8, want.shape), x, want


def matmulinteger():
    x = rng.integers(0, 256, (7, 70), dtype=np.uint8)
    b = rng.integers(0, 256, (70, 33), dtype=np.uint8)
    xz = np.uint8(17)
    bz = rng.integers(0, 256, 33).astype(np.uint8)
    want = ((x.astype(np.int64) - int(xz)) @ (b.astype(np.int64) - bz.astype(np.int64))).astype(np.int32)
    node = helper.make_node("MatMulInteger", ["x", "b", "xz", "bz"], ["y"])
    return model(node, x, [const("b", b), const("xz", xz), const("bz", bz)], np.int32, want.shape), x, want


def conv_ref(x, w, xz, wz, group, stride, pad, dil=1):
    """Conv sums; pad: one for every side, or (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    pt, pl, pb, pr = (pad,) * 4 if np.isscalar(pad) else pad
    xp = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - (kh - 1) * dil - 1) // stride + 1
    ow = (wd + pl + pr - (kw - 1) * dil - 1) // stride + 1
    wi = w.astype(np.int64) - np.asarray(wz, dtype=np.int64).reshape(-1, 1, 1, 1)
    out = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for gi in range(group):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * dil:i * dil + stride * oh:stride,
                           j * dil:j * dil + stride * ow:stride]
                out[:, gi * mg:(gi + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, wi[gi * mg:(gi + 1) * mg, :, i, j])
    return out


def qlinearconv():
    x = rng.integers(0, 256, (2, 6, 9, 9), dtype=np.uint8)
    w = rng.integers(-127, 128, (8, 3, 3, 3), dtype=np.int8)
    xs, xz = np.float32(0.03), np.uint8(128)
    ws = rng.uniform(0.001, 0.01, 8).astype(np.float32)
    wz = np.zeros(8, np.int8)
    ys, yz = np.float32(0.25), np.uint8(100)
    bias = rng.integers(-3000, 3000, 8).astype(np.int32)
    acc = conv_ref(x, w, int(xz), wz, 2, 2, 1) + bias.reshape(1, -1, 1, 1)
    want = requant(acc, ((xs * ws) / ys).reshape(1, -1, 1, 1), int(yz), np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"], group=2,
                            strides=[2, 2], pads=[1, 1, 1, 1])
    inits = [const("xs", xs), const("xz", xz), const("w", w), const("ws", ws), const("wz", wz), const("ys", ys),
             const("yz", yz), const("bias", bias)]
    return model(node, x, inits, np.uint8, want.shape), x, want


def convinteger():
    x = rng.integers(0, 256, (1, 4, 8, 8), dtype=np.uint8)
    w = rng.integers(0, 256, (5, 4, 1, 1), dtype=np.uint8)
    xz, wz = np.uint8(9), np.uint8(3)
    want = conv_ref(x, w, int(xz), [int(wz)] * 5, 1, 1, 0).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])
    return model(node, x, [const("w", w), const("xz", xz), const("wz", wz)], np.int32, want.shape), x, want


def qdepthwise():
    x = rng.integers(-128, 128, (2, 5, 11, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 1, 3, 3), dtype=np.int8)
    xs, xz = np.float32(0.05), np.int8(-3)
    ws = rng.uniform(0.001, 0.01, 5).astype(np.float32)
    wz = rng.integers(-4, 5, 5).astype(np.int8)
    ys, yz = np.float32(0.1), np.int8(5)
    bias = rng.integers(-3000, 3000, 5).astype(np.int32)
    acc = conv_ref(x, w, int(xz), wz, 5, 2, 1) + bias.reshape(1, -1, 1, 1)
    want = requant(acc, ((xs * ws) / ys).reshape(1, -1, 1, 1), int(yz), np.int8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"], group=5,
                            strides=[2, 2], pads=[1, 1, 1, 1])
    inits = [const("xs", xs), const("xz", xz), const("w", w), const("ws", ws), const("wz", wz), const("ys", ys),
             const("yz", yz), const("bias", bias)]
    return model(node, x, inits, np.int8, want.shape), x, want


def convinteger_depthwise():
    x = rng.integers(0, 256, (1, 3, 7, 300), dtype=np.uint8)  # rows wider than one 256-column chunk
    w = rng.integers(0, 256, (3, 1, 5, 5), dtype=np.uint8)
    xz, wz = np.uint8(200), np.uint8(1)
    want = conv_ref(x, w, int(xz), [int(wz)] * 3, 3, 1, 2).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=3, pads=[2, 2, 2, 2])
    return model(node, x, [const("w", w), const("xz", xz), const("wz", wz)], np.int32, want.shape), x, want


def dw_ref(x, w, xz, wz, strides, dilations, pads):
    """Depthwise conv sums with per-axis strides, dilations and pads (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    _, _, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilations, pads
    xp = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh, ow = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    wi = w.astype(np.int64)[:, 0] - np.asarray(wz, dtype=np.int64).reshape(-1, 1, 1)
    out = np.zeros((n, c, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw]
            out += patch * wi[:, i, j].reshape(1, -1, 1, 1)
    return out


def qdepthwise_dilated():
    """Strides 2 x 1, dilations 2 x 3, uneven pads, a 3 x 5 kernel, per-channel w zero points: the phase planes."""
    x = rng.integers(0, 256, (2, 4, 13, 19), dtype=np.uint8)
    w = rng.integers(-128, 128, (4, 1, 3, 5), dtype=np.int8)
    xs, xz = np.float32(0.04), np.uint8(77)
    ws = rng.uniform(0.001, 0.01, 4).astype(np.float32)
    wz = rng.integers(-6, 7, 4).astype(np.int8)
    ys, yz = np.float32(0.2), np.uint8(128)
    bias = rng.integers(-3000, 3000, 4).astype(np.int32)
    acc = dw_ref(x, w, int(xz), wz, (2, 1), (2, 3), (3, 2, 1, 4)) + bias.reshape(1, -1, 1, 1)
    want = requant(acc, ((xs * ws) / ys).reshape(1, -1, 1, 1), int(yz), np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"], group=4,
                            strides=[2, 1], dilations=[2, 3], pads=[3, 2, 1, 4])
    inits = [const("xs", xs), const("xz", xz), const("w", w), const("ws", ws), const("wz", wz), const("ys", ys),
             const("yz", yz), const("bias", bias)]
    return model(node, x, inits, np.uint8, want.shape), x, want


def qdepthwise_7x7():
    """MobileNet's last planes: 7 x 7, stride 1, 3 x 3; 40 channels."""
    x = rng.integers(0, 256, (1, 40, 7, 7), dtype=np.uint8)
    w = rng.integers(-127, 128, (40, 1, 3, 3), dtype=np.int8)
    xs, xz = np.float32(0.02), np.uint8(0)
    ws = rng.uniform(0.001, 0.01, 40).astype(np.float32)
    wz = np.zeros(40, np.int8)
    ys, yz = np.float32(0.05), np.uint8(0)
    acc = dw_ref(x, w, int(xz), wz, (1, 1), (1, 1), (1, 1, 1, 1))
    want = requant(acc, ((xs * ws) / ys).reshape(1, -1, 1, 1), int(yz), np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], group=40,
                            pads=[1, 1, 1, 1])
    inits = [const("xs", xs), const("xz", xz), const("w", w), const("ws", ws), const("wz", wz), const("ys", ys),
             const("yz", yz)]
    return model(node, x, inits, np.uint8, want.shape), x, want


def convinteger_depthwise_extremes():
    """Every product at its largest, 255 * -255: 7 x 7 taps sum to 3.2M, exact in a float (the depthwise
    convs run through the float kernels up to 258 taps); 20 channels, blocks of 8 with a tail of 4."""
    x = rng.choice(np.array([0, 255], np.uint8), (2, 20, 23, 23))
    w = rng.choice(np.array([0, 255], np.uint8), (20, 1, 7, 7), p=[0.8, 0.2])
    xz, wz = np.uint8(0), np.uint8(255)
    want = dw_ref(x, w, int(xz), [int(wz)] * 20, (1, 1), (1, 1), (3, 3, 3, 3)).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=20, pads=[3, 3, 3, 3])
    return model(node, x, [const("w", w), const("xz", xz), const("wz", wz)], np.int32, want.shape), x, want


def convinteger_depthwise_17x17():
    """289 taps of 255 * -255 sum to 18792225, odd and past 2^24, which a float cannot hold: such kernels must
    stay on the integer path."""
    x = np.full((1, 3, 20, 20), 255, np.uint8)
    w = np.zeros((3, 1, 17, 17), np.uint8)
    xz, wz = np.uint8(0), np.uint8(255)
    want = dw_ref(x, w, int(xz), [int(wz)] * 3, (1, 1), (1, 1), (0, 0, 0, 0)).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=3)
    return model(node, x, [const("w", w), const("xz", xz), const("wz", wz)], np.int32, want.shape), x, want


def qlinearconv_same(dil, pads):
    """3 x 3 stride-1 convs whose output rows are as long as the input's (im2col's shifted-copy path), with an
    x zero point that the padding must repeat."""
    x = rng.integers(0, 256, (2, 6, 9, 11), dtype=np.uint8)
    w = rng.integers(-127, 128, (5, 6, 3, 3), dtype=np.int8)
    xs, xz = np.float32(0.02), np.uint8(77)
    ws = rng.uniform(0.001, 0.01, 5).astype(np.float32)
    wz = np.zeros(5, np.int8)
    ys, yz = np.float32(0.3), np.uint8(128)
    bias = rng.integers(-2000, 2000, 5).astype(np.int32)
    acc = conv_ref(x, w, int(xz), wz, 1, 1, pads, dil) + bias.reshape(1, -1, 1, 1)
    want = requant(acc, ((xs * ws) / ys).reshape(1, -1, 1, 1), int(yz), np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"],
                            dilations=[dil, dil], pads=list(pads))
    inits = [const("xs", xs), const("xz", xz), const("w", w), const("ws", ws), const("wz", wz), const("ys", ys),
             const("yz", yz), const("bias", bias)]
    return model(node, x, inits, np.uint8, want.shape), x, want


def qlinearconv_same_pad1():
    return qlinearconv_same(1, (1, 1, 1, 1))


def qlinearconv_same_uneven():
    return qlinearconv_same(1, (2, 0, 0, 2))


def qlinearconv_same_dilated():
    return qlinearconv_same(2, (2, 2, 2, 2))


def qlinearconv_padded(shape, m, dil, pads, wz=None, k=3, stride=1):
    """Convs run over padded planes (taps read as shifted rows of the plane, or of its stride x stride phase planes;
    the output grid's extra columns dropped): shapes whose grid rounds to few enough extra 32-column panels.
    Per-channel w zero points that differ take the GEMM's general epilogue; equal ones (the default, all 0) its
    folded one."""
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    w = rng.integers(-120, 121, (m, shape[1], k, k), dtype=np.int8)
    xs, xz = np.float32(0.02), np.uint8(140)
    ws = rng.uniform(0.0005, 0.004, m).astype(np.float32)
    wz = np.zeros(m, np.int8) if wz is None else wz
    ys, yz = np.float32(0.3), np.uint8(128)
    bias = rng.integers(-2000, 2000, m).astype(np.int32)
    acc = conv_ref(x, w, int(xz), wz, 1, stride, pads, dil) + bias.reshape(1, -1, 1, 1)
    want = requant(acc, ((xs * ws) / ys).reshape(1, -1, 1, 1), int(yz), np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"],
                            dilations=[dil, dil], pads=list(pads), strides=[stride, stride])
    inits = [const("xs", xs), const("xz", xz), const("w", w), const("ws", ws), const("wz", wz), const("ys", ys),
             const("yz", yz), const("bias", bias)]
    return model(node, x, inits, np.uint8, want.shape), x, want


def qlinearconv_phases_s2():
    """Stride 2 with dilation 2 and uneven pads (top, left, bottom, right): four phase planes; the input's last
    rows and columns past what any tap reads."""
    return qlinearconv_padded((1, 8, 32, 43), 10, 2, (2, 1, 0, 0), stride=2)


def qlinearconv_phases_s3():
    """A 5x5 kernel at stride 3: nine phase planes."""
    return qlinearconv_padded((1, 6, 33, 64), 7, 1, (2, 2, 2, 2), k=5, stride=3)


def qlinearconv_padded_dilated():
    return qlinearconv_padded((1, 8, 20, 40), 7, 2, (2, 2, 2, 2))


def qlinearconv_padded_7x7():
    """A 7x7 plane (49 outputs, grid 61: two panels either way), 40 input channels (k 360), 40 rows."""
    return qlinearconv_padded((2, 40, 7, 7), 40, 1, (1, 1, 1, 1))


def qlinearconv_wz_per_channel():
    return qlinearconv_padded((1, 12, 14, 14), 9, 1, (1, 1, 1, 1), rng.integers(-6, 7, 9).astype(np.int8))


def convinteger_padded_grouped():
    """ConvInteger (int32 out, so a 4-byte grid), two groups, a 5x5 kernel, uint8 weights with a zero point."""
    x = rng.integers(0, 256, (1, 4, 16, 40), dtype=np.uint8)
    w = rng.integers(0, 256, (6, 2, 5, 5), dtype=np.uint8)
    xz, wz = np.uint8(31), np.uint8(129)
    want = conv_ref(x, w, int(xz), [int(wz)] * 6, 2, 1, 2).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=2, pads=[2, 2, 2, 2])
    return model(node, x, [const("w", w), const("xz", xz), const("wz", wz)], np.int32, want.shape), x, want


def qadd_ref(a, sa, za, b, sb, zb, sc, zc, dtype):
    """ONNX Runtime's QLinearAdd order in float32: ((a - za) * sa + (b - zb) * sb) / sc, rounded half to even."""
    lo, hi = (-128, 127) if dtype == np.int8 else (0, 255)
    fa = (a.astype(np.int32) - int(za)).astype(np.float32) * np.float32(sa)
    fb = (b.astype(np.int32) - int(zb)).astype(np.float32) * np.float32(sb)
    v = (fa + fb) / np.float32(sc)
    return np.clip(np.rint(v) + int(zc), lo, hi).astype(dtype)


def qadd(t, yt):
    """DQ(x) + DQ(x) with two scales and zero points -> Q: the qdq pass makes it a QLinearAdd whose operands are
    both of x's type t; 5000 elements, past one 4096 chunk."""
    x = rng.integers(-128, 128, (5, 1000), dtype=np.int8) if t == np.int8 else \
        rng.integers(0, 256, (5, 1000), dtype=np.uint8)
    xs, bs, ys = np.float32(0.03), np.float32(0.05), np.float32(0.07)
    xz, bz, yz = t(-7 if t == np.int8 else 100), t(3 if t == np.int8 else 130), yt(-2 if yt == np.int8 else 120)
    want = qadd_ref(x, xs, xz, x, bs, bz, ys, yz, yt)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["a"]),
             helper.make_node("DequantizeLinear", ["x", "bs", "bz"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"])]
    inits = [const("xs", xs), const("xz", xz), const("bs", bs), const("bz", bz), const("ys", ys), const("yz", yz)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx_type(t), x.shape)],
                          [helper.make_tensor_value_info("y", onnx_type(yt), want.shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), x, want


def qadd_signed():
    return qadd(np.int8, np.int8)


def qadd_unsigned():
    return qadd(np.uint8, np.uint8)


def main():
    nnrun, work, isas = sys.argv[1], sys.argv[2], sys.argv[3:] or ["default"]
    extra = os.environ.get("NN_QPREPACK_ARGS", "").split()
    os.makedirs(work, exist_ok=True)
    bad = 0
    for make in (qmatmul, matmulinteger, qlinearconv, convinteger, qdepthwise, convinteger_depthwise,
                 qdepthwise_dilated, qdepthwise_7x7, convinteger_depthwise_extremes, convinteger_depthwise_17x17,
                 qadd_signed, qadd_unsigned, qlinearconv_same_pad1, qlinearconv_same_uneven,
                 qlinearconv_same_dilated, qlinearconv_padded_dilated, qlinearconv_padded_7x7,
                 qlinearconv_wz_per_channel, convinteger_padded_grouped, qlinearconv_phases_s2,
                 qlinearconv_phases_s3):
        m, x, want = make()
        name = make.__name__
        path, xin = os.path.join(work, name + ".onnx"), os.path.join(work, name + ".x.npy")
        onnx.save(m, path)
        np.save(xin, x)
        for isa in isas:
            env = dict(os.environ)
            if isa != "default":
                env["NN_ISA"] = isa
            cache = os.path.join(work, "cache-" + isa)
            for attempt in ("load", "cache"):
                out = os.path.join(work, "out-%s-%s-%s" % (name, isa, attempt))
                r = subprocess.run([nnrun, path, "--input", "x=" + xin, "--iters", "1", "--warmup", "0", "--quiet",
                                    "--cache-dir", cache, "--save-outputs", out] + extra, env=env,
                                   capture_output=True, text=True)
                got = np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None
                ok = got is not None and got.dtype == want.dtype and got.shape == want.shape and \
                    np.array_equal(got, want)
                if not ok:
                    bad += 1
                    diff = "" if got is None or got.shape != want.shape else \
                        " (%d of %d differ)" % (np.count_nonzero(got != want), want.size)
                    print("FAIL %s isa=%s %s%s %s" % (name, isa, attempt, diff, r.stderr.strip()[-300:]))
                else:
                    print("ok   %s isa=%s %s" % (name, isa, attempt))
    print("%d failed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
