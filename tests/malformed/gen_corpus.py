"""Generate the malformed-model corpus: hostile and broken ONNX files that
nn must reject with a clear one-line error (or, for random damage that may
leave a valid model, load cleanly), never crash on.

usage: /usr/bin/python3 tests/malformed/gen_corpus.py OUT_DIR

Writes OUT_DIR/<case>.onnx (external-data cases get a folder of their own)
and OUT_DIR/cases.tsv with one line per case:
    path<TAB>expect<TAB>keyword
expect is `error` (the load must fail and the one-line message contain
keyword), `any` (success or a clean error: random damage that may leave a
valid model) or `ok` (a well-formed control case that must load and run).
Everything is derived from fixed seeds: the corpus is the same every run.
"""
import os
import random
import shutil
import sys

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
EXTERNAL = TensorProto.EXTERNAL


def finish(graph, opset=13):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def mlp():
    """y = Relu(x * w + bias), x: [N, 4]; w in float_data, bias in raw_data."""
    w = helper.make_tensor("w", FLOAT, [4], [1.0, -2.0, 3.0, -4.0])
    bias = numpy_helper.from_array(np.array([0.5, 0.5, -0.5, 0.25], np.float32), "bias")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["t0"], name="mul"),
        helper.make_node("Add", ["t0", "bias"], ["t1"], name="add"),
        helper.make_node("Relu", ["t1"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", FLOAT, ["N", 4])], [w, bias])
    return finish(graph)


def convnet():
    """Conv 3x3 -> Relu -> Reshape [N, 50] -> Concat with itself -> y [N, 100]."""
    rng = np.random.default_rng(7)
    weight = numpy_helper.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "W")
    bias = numpy_helper.from_array(np.array([0.1, -0.1], np.float32), "B")
    shape = numpy_helper.from_array(np.array([-1, 50], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
        helper.make_node("Concat", ["flat", "flat"], ["y"], name="concat", axis=1),
    ]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", FLOAT, ["N", 1, 5, 5])],
                              [helper.make_tensor_value_info("y", FLOAT, ["N", 100])], [weight, bias, shape])
    return finish(graph)


class Corpus:
    def __init__(self, out):
        self.out = out
        self.lines = []
        self.names = set()

    def add(self, name, model, expect, keyword="", folder=False):
        """model: a ModelProto or bytes.  folder: write into OUT/name/ (for external data)."""
        assert name not in self.names, name
        assert expect in ("error", "any", "ok")
        assert expect != "error" or keyword, name
        self.names.add(name)
        data = model if isinstance(model, bytes) else model.SerializeToString()
        rel = f"{name}/model.onnx" if folder else f"{name}.onnx"
        with open(os.path.join(self.out, rel), "wb") as f:
            f.write(data)
        self.lines.append(f"{rel}\t{expect}\t{keyword}")

    def folder(self, name):
        path = os.path.join(self.out, name)
        os.makedirs(path)
        return path

    def write_manifest(self):
        with open(os.path.join(self.out, "cases.tsv"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def node_named(model, name):
    return next(n for n in model.graph.node if n.name == name)


def init_named(model, name):
    return next(t for t in model.graph.initializer if t.name == name)


def parses(data):
    try:
        onnx.ModelProto.FromString(data)
        return True
    except DecodeError:
        return False


# ---- truncation and random damage
def truncations(c):
    for base_name, base in (("mlp", mlp()), ("convnet", convnet())):
        data = base.SerializeToString()
        # every offset in the header, then ~60 spread over the rest
        offsets = sorted(set(range(1, 48)) | set(range(48, len(data), max(1, len(data) // 60))))
        for cut in offsets:
            piece = data[:cut]
            # a cut between two top-level fields leaves a shorter valid message: still no crash allowed,
            # but the message may be about what went missing rather than about decoding
            if parses(piece):
                c.add(f"truncated_{base_name}_{cut:05d}", piece, "any")
            else:
                c.add(f"truncated_{base_name}_{cut:05d}", piece, "error", "not a valid ONNX protobuf")


def byte_flips(c):
    rng = random.Random(20261122)
    for base_name, base in (("mlp", mlp()), ("convnet", convnet())):
        data = base.SerializeToString()
        for i in range(60):
            damaged = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            c.add(f"byteflip_{base_name}_{i:03d}", bytes(damaged), "any")


# ---- protobuf nesting deep enough to exhaust a recursive decoder's stack
def varint(v):
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number, payload_len):
    return varint(number << 3 | 2) + varint(payload_len)


def deep_subgraphs(levels):
    """ModelProto{graph: Graph{node: Node{op_type 'If', attribute: Attr{name 'g', type GRAPH, g: Graph{...}}}}}
    nested `levels` times.  Sizes are computed inside-out, then the headers are
    written outside-in (each nested message is the last field of its parent),
    so building it costs O(levels)."""
    op = field(4, 2) + b"If"
    attr_head = field(1, 1) + b"g" + varint(20 << 3) + varint(5)  # name 'g', type GRAPH
    graph = 0  # the innermost graph is empty
    levels_out_in = []
    for _ in range(levels):
        attr = len(attr_head) + len(field(6, graph)) + graph
        node = len(op) + len(field(5, attr)) + attr
        levels_out_in.append(field(1, node) + op + field(5, attr) + attr_head + field(6, graph))
        graph = len(field(1, node)) + node
    levels_out_in.reverse()
    opset = varint(2 << 3) + varint(13)  # OperatorSetIdProto{version 13}
    return field(7, graph) + b"".join(levels_out_in) + field(8, len(opset)) + opset


def deep_sequence_type(levels):
    """A graph input whose type is sequence(sequence(...(tensor)...)) `levels` deep."""
    inner = varint(1 << 3 | 2) + varint(2) + varint(1 << 3) + varint(1)  # TypeProto{tensor_type{elem_type FLOAT}}
    # TypeProto{sequence_type(4): Sequence{elem_type(1): TypeProto}}: two headers per level
    sizes = [len(inner)]
    for _ in range(levels):
        seq = len(field(1, sizes[-1])) + sizes[-1]
        sizes.append(len(field(4, seq)) + seq)
    heads = []
    for k in range(levels, 0, -1):
        seq = len(field(1, sizes[k - 1])) + sizes[k - 1]
        heads.append(field(4, seq) + field(1, sizes[k - 1]))
    type_bytes = b"".join(heads) + inner
    value_info = field(1, 1) + b"x" + field(2, len(type_bytes)) + type_bytes
    graph = field(11, len(value_info)) + value_info
    return field(7, len(graph)) + graph


# ---- tensors: dims, data sizes, dtypes
def tensor_cases(c):
    def with_w(name, change, keyword):
        m = mlp()
        change(init_named(m, "w"))
        c.add(name, m, "error", keyword)

    def set_dims(dims):
        def change(t):
            del t.dims[:]
            t.dims.extend(dims)
        return change

    with_w("dims_negative", set_dims([-4]), "negative or overflowing dims")
    with_w("dims_huge", set_dims([1 << 40]), "dims need 1099511627776")
    with_w("dims_product_overflow", set_dims([1 << 40, 1 << 40, 1 << 40]), "negative or overflowing dims")
    with_w("dims_product_wraps_to_zero", set_dims([1 << 32, 1 << 32]), "negative or overflowing dims")
    with_w("dims_product_wraps_to_4", set_dims([(1 << 62) + 1, 4]), "negative or overflowing dims")
    with_w("dims_too_many", set_dims([1] * 9 + [4]), "at most 8")

    def zero_dims(t):
        del t.dims[:]
        t.dims.append(0)
        del t.float_data[:]
    with_w("dims_zero", zero_dims, "cannot broadcast")

    def shorten(t):
        del t.float_data[-1]
    with_w("float_data_shorter", shorten, "holds 3 values, dims need 4")
    with_w("float_data_longer", lambda t: t.float_data.append(5.0), "holds 5 values, dims need 4")

    def raw_len(delta):
        def change(t):
            t.raw_data = np.arange(4, dtype=np.float32).tobytes()[:16 + delta] + b"\0" * max(0, delta)
            del t.float_data[:]
        return change
    with_w("raw_data_shorter", raw_len(-4), "raw_data has 12 bytes, dims need 16")
    with_w("raw_data_longer", raw_len(4), "raw_data has 20 bytes, dims need 16")
    with_w("raw_data_not_element_multiple", raw_len(-1), "raw_data has 15 bytes, dims need 16")

    def typed_mismatch(t):  # FLOAT tensor whose values sit in int64_data
        del t.float_data[:]
        t.int64_data.extend([1, 2, 3, 4])
    with_w("typed_field_mismatch", typed_mismatch, "holds 0 values, dims need 4")

    def raw_and_typed(t):  # both encodings present: which one is the weight?
        t.raw_data = np.ones(4, np.float32).tobytes()
    with_w("raw_and_typed_data", raw_and_typed, "both raw_data and typed data")

    def bias_raw_and_typed():
        m = mlp()
        init_named(m, "bias").float_data.extend([1, 2, 3, 4])
        return m
    c.add("raw_and_typed_data_raw_first", bias_raw_and_typed(), "error", "both raw_data and typed data")

    for dtype, label in ((0, "UNDEFINED"), (99, "UNKNOWN"), (-3, "UNKNOWN"), (TensorProto.STRING, "STRING"),
                         (TensorProto.COMPLEX64, "COMPLEX64")):  # BFLOAT16 is a dtype nn holds
        def set_dtype(t, dtype=dtype):
            t.data_type = dtype
        with_w(f"dtype_initializer_{label.lower()}_{dtype & 0xff}", set_dtype, f"dtype {label}")

    m = mlp()
    m.graph.input[0].type.tensor_type.elem_type = 1234
    c.add("dtype_graph_input_unknown", m, "error", "dtype UNKNOWN")
    m = mlp()
    m.graph.output[0].type.tensor_type.elem_type = 77
    c.add("dtype_graph_output_unknown", m, "error", "dtype UNKNOWN")
    m = mlp()
    m.graph.node.insert(0, helper.make_node("Cast", ["x"], ["xc"], name="cast", to=99))
    node_named(m, "mul").input[0] = "xc"
    c.add("dtype_cast_to_unknown", m, "error", "cast")

    # graph input dims
    def input_dims(dims):
        m = mlp()
        shape = m.graph.input[0].type.tensor_type.shape
        del shape.dim[:]
        for d in dims:
            shape.dim.add().dim_value = d
        return m
    c.add("input_dim_negative", input_dims([-3, 4]), "error", "negative dimension")
    c.add("input_dim_zero", input_dims([2, 0]), "error", "cannot broadcast")
    c.add("input_dims_huge", input_dims([1 << 40, 4]), "error", "memory")
    # 2^62 elements fit in 64 bits, their 2^64 bytes do not
    c.add("input_bytes_overflow", input_dims([1 << 60, 4]), "error", "overflow")
    c.add("input_dims_overflow", input_dims([1 << 32, 1 << 32, 4]), "error", "overflow")
    c.add("input_too_many_dims", input_dims([1] * 9), "error", "at most 8")
    # found by the fuzzer: the product of the fixed dims overflows but one dim is left open, so the
    # model loads (run-time shapes) and the overflow waited in nn_tensor_elements for its caller
    m = input_dims([1 << 32, 1 << 32])
    m.graph.input[0].type.tensor_type.shape.dim.add().dim_param = "K"
    c.add("fuzz_input_dims_overflow_open_dim", m, "any")


# ---- attributes
def attribute_cases(c):
    m = mlp()
    relu = node_named(m, "relu")
    relu.op_type = "LeakyRelu"
    relu.attribute.append(helper.make_attribute("alpha", "x"))
    c.add("attr_string_for_float", m, "error", "attribute 'alpha' must be of type float")

    def conv_attr(name, value, keyword, attr_type=None):
        m = convnet()
        conv = node_named(m, "conv")
        for a in list(conv.attribute):
            if a.name == name:
                conv.attribute.remove(a)
        a = helper.make_attribute(name, value)
        if attr_type is not None:
            a.type = attr_type
        conv.attribute.append(a)
        return m, keyword

    cases = {
        "attr_int_for_ints": conv_attr("strides", 1, "strides"),
        "attr_floats_for_ints": conv_attr("pads", [1.0, 1.0, 1.0, 1.0], "pads"),
        "attr_strides_zero": conv_attr("strides", [0, 1], "strides"),
        "attr_strides_negative": conv_attr("strides", [-1, 1], "strides"),
        "attr_strides_wrong_length": conv_attr("strides", [1, 1, 1], "strides"),
        "attr_pads_negative": conv_attr("pads", [-5, -5, -5, -5], "pads"),
        "attr_dilations_zero": conv_attr("dilations", [0, 0], "dilations"),
        "attr_group_zero": conv_attr("group", 0, "group"),
        "attr_group_not_dividing": conv_attr("group", 3, "group"),
        "attr_kernel_shape_mismatch": conv_attr("kernel_shape", [5, 5], "kernel_shape"),
        "attr_auto_pad_unknown": conv_attr("auto_pad", "SIDEWAYS", "auto_pad"),
        # a type tag that disagrees with the value stored (an INTS tag with only `i` set)
        "attr_type_tag_disagrees": conv_attr("group", 1, "group", onnx.AttributeProto.INTS),
        "attr_type_undefined": conv_attr("group", 1, "group", onnx.AttributeProto.UNDEFINED),
        "attr_type_graph": conv_attr("group", 1, "group", onnx.AttributeProto.GRAPH),
    }
    for name, (model, keyword) in cases.items():
        c.add(name, model, "error", keyword)
    # a type number outside the enum: the python API refuses to set one, so patch the bytes
    # (GRAPHS = 10 occurs once, in the type field (20, varint) of the replaced attribute)
    model, _ = conv_attr("group", 1, "group", onnx.AttributeProto.GRAPHS)
    data = model.SerializeToString()
    tag = varint(20 << 3) + varint(onnx.AttributeProto.GRAPHS)
    assert data.count(tag) == 1
    c.add("attr_type_out_of_enum", data.replace(tag, varint(20 << 3) + varint(77)), "error", "group")

    m = mlp()
    m.graph.node.append(helper.make_node("Softmax", ["y"], ["z"], name="softmax", axis=7))
    m.graph.output[0].name = "z"
    c.add("attr_axis_out_of_range", m, "error", "axis")
    m = mlp()
    m.graph.node.append(helper.make_node("Transpose", ["y"], ["z"], name="transpose", perm=[0, 0]))
    m.graph.output[0].name = "z"
    c.add("attr_perm_repeated", m, "error", "perm")
    m = mlp()
    m.graph.node.append(helper.make_node("Transpose", ["y"], ["z"], name="transpose", perm=[0, 5]))
    m.graph.output[0].name = "z"
    c.add("attr_perm_out_of_range", m, "error", "perm")
    m = mlp()
    const = helper.make_node("Constant", [], ["k"], name="const")
    const.attribute.append(onnx.AttributeProto(name="value", type=onnx.AttributeProto.TENSOR))
    m.graph.node.insert(0, const)
    node_named(m, "mul").input[1] = "k"
    c.add("attr_tensor_missing", m, "error", "tensor attribute 'value' is empty")
    m = mlp()
    bad = helper.make_tensor("v", FLOAT, [4], [1, 2, 3, 4])
    del bad.float_data[-1]  # 3 values for 4 elements, inside an attribute
    m.graph.node.insert(0, helper.make_node("Constant", [], ["k"], name="const", value=bad))
    node_named(m, "mul").input[1] = "k"
    c.add("attr_tensor_short", m, "error", "holds 3 values, dims need 4")


# ---- graph structure
def structure_cases(c):
    def edit(name, keyword, change, base=mlp):
        m = base()
        change(m)
        c.add(name, m, "error", keyword)

    edit("node_input_never_produced", "'nowhere' is produced by no node",
         lambda m: node_named(m, "add").input.__setitem__(0, "nowhere"))
    edit("graph_output_never_produced", "graph output 'z' is produced by no node",
         lambda m: setattr(m.graph.output[0], "name", "z"))
    edit("output_produced_twice", "produced more than once",
         lambda m: node_named(m, "add").output.__setitem__(0, "t0"))
    edit("output_twice_in_one_node", "produced more than once",
         lambda m: m.graph.node.append(helper.make_node("Split", ["y"], ["a", "a"], name="split", axis=1)))
    edit("output_overwrites_input", "produced more than once",
         lambda m: node_named(m, "add").output.__setitem__(0, "x"))
    edit("output_overwrites_initializer", "produced more than once",
         lambda m: node_named(m, "add").output.__setitem__(0, "w"))
    edit("graph_input_listed_twice", "listed twice",
         lambda m: m.graph.input.append(m.graph.input[0]))
    edit("initializer_defined_twice", "defined twice",
         lambda m: m.graph.initializer.append(m.graph.initializer[0]))
    edit("cycle_two_nodes", "cycle", lambda m: node_named(m, "mul").input.__setitem__(0, "t1"))
    edit("cycle_self_loop", "cycle", lambda m: node_named(m, "relu").input.__setitem__(0, "y"))

    # an empty name stands for an absent optional input or output; required ones must be named
    # (found by the fuzzer: kernels wrote through the missing output's NULL buffer)
    def missing_first_input(m):
        node_named(m, "mul").input[0] = ""
    edit("node_input_missing_empty_name", "input 0 is required but has no name", missing_first_input)
    edit("conv_input_missing_empty_name", "input 0 is required but has no name",
         lambda m: node_named(m, "conv").input.__setitem__(0, ""), convnet)

    def unnamed_output(op, outputs, consumer, inputs=("x",), extra_inits=(), **attrs):
        def change(m):
            m.graph.initializer.extend(extra_inits)
            m.graph.node.insert(0, helper.make_node(op, list(inputs), outputs, name="multi", **attrs))
            node_named(m, consumer).input[0] = next(o for o in outputs if o)
        return change
    edit("maxpool_output_0_unnamed", "output 0 is required but has no name",
         unnamed_output("MaxPool", ["", "idx"], "conv", kernel_shape=[2, 2]), convnet)
    edit("dropout_output_0_unnamed", "output 0 is required but has no name", unnamed_output("Dropout", ["", "mask"], "mul"))
    scale = numpy_helper.from_array(np.ones(4, np.float32), "ln_scale")
    edit("layernorm_output_0_unnamed", "output 0 is required but has no name",
         unnamed_output("LayerNormalization", ["", "mean"], "mul", ("x", "ln_scale"), [scale]))
    edit("split_middle_output_unnamed", "output 1 is required but has no name",
         unnamed_output("Split", ["s0", "", "s2"], "mul", axis=1), mlp)
    edit("node_missing_required_input", "has 1 inputs, expected 2",
         lambda m: node_named(m, "mul").input.pop())
    edit("node_no_outputs", "has 0 outputs", lambda m: node_named(m, "relu").output.pop())
    edit("node_empty_output_name", "has 0 outputs",
         lambda m: node_named(m, "relu").output.__setitem__(0, ""))
    edit("op_too_many_inputs", "has 2 inputs, expected 1",
         lambda m: node_named(m, "relu").input.append("w"))
    edit("op_conv_one_input", "has 1 inputs", lambda m: node_named(m, "conv").input.__delitem__(slice(1, 3)),
         convnet)
    edit("op_concat_no_inputs", "has 0 inputs", lambda m: node_named(m, "concat").input.__delitem__(slice(0, 2)),
         convnet)
    edit("op_unknown", "unsupported operator 'Frobnicate'",
         lambda m: setattr(node_named(m, "relu"), "op_type", "Frobnicate"))
    edit("op_internal", "an op nn's optimizer makes, not an ONNX operator",
         lambda m: setattr(node_named(m, "relu"), "op_type", "QLinearAdd"))
    edit("op_empty_name", "unsupported operator ''", lambda m: setattr(node_named(m, "relu"), "op_type", ""))
    edit("op_foreign_domain", "unsupported operator 'com.evil::Relu'",
         lambda m: setattr(node_named(m, "relu"), "domain", "com.evil"))
    edit("graph_missing", "holds no graph", lambda m: m.ClearField("graph"))

    # nothing to compute: a model without outputs is a broken export
    m = mlp()
    del m.graph.output[:]
    c.add("graph_no_outputs", m, "error", "no outputs")

    # Reshape: impossible target shapes
    def reshape_to(values, dtype=np.int64):
        def change(m):
            shape = init_named(m, "shape")
            shape.CopyFrom(numpy_helper.from_array(np.array(values, dtype), "shape"))
        return change
    edit("reshape_impossible", "Reshape", reshape_to([3, 7]), convnet)
    edit("reshape_two_minus_one", "Reshape", reshape_to([-1, -1]), convnet)
    edit("reshape_negative", "Reshape", reshape_to([-2, 25]), convnet)
    edit("reshape_huge", "Reshape", reshape_to([1 << 62, 1 << 62]), convnet)
    edit("reshape_too_many_dims", "Reshape", reshape_to([1] * 9 + [-1]), convnet)
    edit("reshape_shape_float", "Reshape", reshape_to([-1.0, 50.0], np.float32), convnet)
    m = convnet()
    reshape_to([-1, 50], np.int32)(m)  # ONNX says int64; read as int32 it must still be read right
    c.add("reshape_shape_int32", m, "any")

    # Concat: inputs of different ranks / sizes
    def concat_with(name, dims):
        def change(m):
            m.graph.initializer.append(numpy_helper.from_array(np.zeros(dims, np.float32), name))
            node_named(m, "concat").input[1] = name
        return change
    edit("concat_rank_mismatch", "Concat", concat_with("flat3", (2, 5, 10)), convnet)
    edit("concat_dim_mismatch", "Concat", concat_with("other", (3, 7)), convnet)
    edit("concat_axis_out_of_range",
         "axis", lambda m: node_named(m, "concat").attribute[0].__setattr__("i", 5), convnet)

    # found by the fuzzer: a zero-sized spatial dim with padding makes windows of padding only
    def empty_spatial(op, **attrs):
        def change(m):
            shape = m.graph.input[0].type.tensor_type.shape
            shape.dim[2].dim_value = 0
            m.graph.node.insert(0, helper.make_node(op, ["x"], ["pooled"], name="pool", **attrs))
            node_named(m, "conv").input[0] = "pooled"
        return change
    edit("averagepool_empty_spatial", "spatial dim 0 of the input is empty",
         empty_spatial("AveragePool", kernel_shape=[3, 3], pads=[2, 2, 2, 2]), convnet)
    edit("maxpool_empty_spatial", "spatial dim 0 of the input is empty",
         empty_spatial("MaxPool", kernel_shape=[3, 3], pads=[2, 2, 2, 2]), convnet)

    # a convolution over padding only is defined (it gives the bias): no crash is all that is asked
    m = convnet()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 0
    next(a for a in node_named(m, "conv").attribute if a.name == "pads").ints[:] = [2, 2, 2, 2]
    c.add("conv_empty_spatial", m, "any")

    # wrong batch/shape wiring
    def bad_broadcast(m):
        t = init_named(m, "w")
        del t.dims[:]
        t.dims.append(3)
        del t.float_data[-1]
    edit("broadcast_mismatch", "cannot broadcast", bad_broadcast)

    # nesting deep enough to overflow a recursive decoder's stack
    c.add("deep_subgraph_nesting", deep_subgraphs(100000), "error", "nested")
    c.add("deep_type_nesting", deep_sequence_type(200000), "error", "nested")
    c.add("shallow_subgraph_nesting", deep_subgraphs(3), "error", "If")

    # well-formed controls: the runner must see these load and run
    c.add("valid_mlp", mlp(), "ok")
    c.add("valid_convnet", convnet(), "ok")
    m = mlp()
    node_named(m, "mul").input[1] = "x"  # x * x: the same value twice is fine
    c.add("valid_same_input_twice", m, "ok")


# ---- external data
def external_cases(c):
    weights = np.array([1.0, -2.0, 3.0, -4.0], np.float32).tobytes()

    def external_model(entries):
        m = mlp()
        t = init_named(m, "w")
        del t.float_data[:]
        t.data_location = EXTERNAL
        for k, v in entries.items():
            t.external_data.add(key=k, value=v)
        return m

    def case(name, entries, expect, keyword="", files=None, links=None, fifo=None):
        folder = c.folder(name)
        for fname, data in (files or {}).items():
            os.makedirs(os.path.dirname(os.path.join(folder, fname)), exist_ok=True)
            with open(os.path.join(folder, fname), "wb") as f:
                f.write(data)
        for fname, target in (links or {}).items():
            os.symlink(target, os.path.join(folder, fname))
        if fifo:
            os.mkfifo(os.path.join(folder, fifo))
        c.add(name, external_model(entries), expect, keyword, folder=True)

    # a file with exactly the right bytes outside every case folder: only the path checks stop it
    outside = os.path.abspath(os.path.join(c.out, "outside_secret.bin"))
    with open(outside, "wb") as f:
        f.write(weights)

    case("external_valid", {"location": "w.bin"}, "ok", files={"w.bin": weights})
    case("external_valid_offset", {"location": "w.bin", "offset": "8", "length": "16"}, "ok",
         files={"w.bin": b"\0" * 8 + weights})
    case("external_absolute", {"location": outside}, "error", "leaves the model's folder")
    case("external_dotdot", {"location": "../outside_secret.bin"}, "error", "leaves the model's folder")
    case("external_dotdot_inside", {"location": "sub/../../outside_secret.bin"}, "error",
         "leaves the model's folder", files={"sub/x": b""})
    case("external_dotdot_trailing", {"location": "sub/.."}, "error", "leaves the model's folder",
         files={"sub/x": b""})
    case("external_symlink_out", {"location": "w.bin"}, "error", "resolves outside the model's folder",
         links={"w.bin": outside})
    case("external_symlink_dir_out", {"location": "d/outside_secret.bin"}, "error",
         "resolves outside the model's folder", links={"d": os.path.abspath(c.out)})
    case("external_symlink_dev_zero", {"location": "w.bin"}, "error", "resolves outside the model's folder",
         links={"w.bin": "/dev/zero"})
    case("external_shorter", {"location": "w.bin"}, "error", "is shorter than", files={"w.bin": weights[:8]})
    case("external_offset_past_end", {"location": "w.bin", "offset": "4096"}, "error", "is shorter than",
         files={"w.bin": weights})
    case("external_offset_negative", {"location": "w.bin", "offset": "-8"}, "error", "offset",
         files={"w.bin": weights})
    case("external_offset_not_a_number", {"location": "w.bin", "offset": "8 bytes"}, "error", "offset",
         files={"w.bin": b"\0" * 8 + weights})
    case("external_offset_overflow", {"location": "w.bin", "offset": "9223372036854775807"}, "error",
         "is shorter than", files={"w.bin": weights})
    case("external_length_mismatch", {"location": "w.bin", "length": "12"}, "error", "length 12",
         files={"w.bin": weights})
    case("external_no_location", {"offset": "0"}, "error", "without a location", files={"w.bin": weights})
    case("external_missing_file", {"location": "nothere.bin"}, "error", "nothere.bin")
    case("external_is_directory", {"location": "sub"}, "error", "sub", files={"sub/x": weights})
    case("external_is_fifo", {"location": "pipe"}, "error", "pipe", fifo="pipe")
    case("external_self_model", {"location": "."}, "error", "model's folder")


def main():
    out = sys.argv[1]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    c = Corpus(out)
    truncations(c)
    byte_flips(c)
    tensor_cases(c)
    attribute_cases(c)
    structure_cases(c)
    external_cases(c)
    c.write_manifest()
    counts = {e: sum(line.split("\t")[1] == e for line in c.lines) for e in ("error", "any", "ok")}
    print(f"malformed corpus: {len(c.lines)} cases ({counts['error']} must fail, {counts['any']} random damage, "
          f"{counts['ok']} controls) in {out}")


if __name__ == "__main__":
    main()
