#!/usr/bin/python3
"""Write docs/operators.md, the supported-operators table, from the sources.

    tools/gen_operators.py [--out docs/operators.md]   (make docs)
    tools/gen_operators.py --check                     (make test: fails when the file is stale)

Per operator of ops/ops.def (ONNX's default domain; internal ops such as
FusedElementwise are left out):
  - ONNX versions: the op's schema versions up to opset 17 (onnx.defs);
  - tested opsets and dtypes: what the ONNX backend tests that nn passes use
    (every test under /usr/share/libonnx-testdata/data with a model, minus
    the refused and set-aside ones of tests/conformance.expected): the
    opset each test's model imports, and the element types of the node's
    first input and first output;
  - notes: what the op computes differently (NOTES below, kept by hand) and
    the reasons nn gives for the backend tests of that op it refuses.
Nothing here is hard-coded from the engine's results: a test that starts
passing or refusing changes the table, and `--check` then asks for a rerun.
"""
import argparse
import os
import re
import sys

import onnx
import onnx.defs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/libonnx-testdata/data"
MAX_OPSET = 17
OUT = os.path.join(REPO, "docs", "operators.md")

# What the backend tests do not show: precision choices and limits.
NOTES = {
    "Max": "FLOAT16 compared in fp32 (exact)",
    "Min": "FLOAT16 compared in fp32 (exact)",
    "Dropout": "inference only (training mode only with a constant ratio of 0, the identity)",
    "BatchNormalization": "inference form; folded into the preceding Conv where it can be",
    "Conv": "fp32 kernels per ISA (scalar, AVX2, AVX-512), Winograd for 3x3",
    "LSTM": "see docs/recurrent.md",
    "GRU": "see docs/recurrent.md",
    "RNN": "see docs/recurrent.md",
}

DTYPE = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}


def ops_def():
    with open(os.path.join(REPO, "ops", "ops.def")) as f:
        return re.findall(r"^NN_OP\((\w+),\s*(\w+)\)", f.read(), re.M)


def schema_versions(op):
    versions = set()
    for v in range(1, MAX_OPSET + 1):
        try:
            versions.add(onnx.defs.get_schema(op, v, "").since_version)
        except onnx.defs.SchemaError:
            pass
    return sorted(versions)


def expected():
    refused = {}
    with open(os.path.join(REPO, "tests", "conformance.expected")) as f:
        for line in f:
            if line.startswith("#") or "\t" not in line:
                continue
            key, reason = line.rstrip("\n").split("\t", 1)
            refused[key] = reason
    return refused


def elem_type(types, name):
    t = types.get(name)
    if t is None or not t.HasField("tensor_type"):
        return None
    return DTYPE.get(t.tensor_type.elem_type)


def snake(op):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower()


def mentions(op, test, reason):
    """Whether a refused test says something about OP: its reason names the op,
    or names no operator and the test is named after the op."""
    if re.search(rf"\b{op}\b", reason):
        return True
    return "operator '" not in reason and test.startswith(f"test_{snake(op)}_")


def tidy(reason):
    """One line per kind of refusal: node and value names and file details dropped."""
    reason = re.sub(r"(node|input|output) '[^']*'", r"\1", reason)
    reason = re.sub(r" \(input_\d+\.pb[^)]*\)", "", reason)
    return reason.replace("node (", "(")


def scan_tests(ops):
    """{op: {"opsets": set, "dtypes": set, "refused": {reason}, "passed": n}} from the test models."""
    found = {op: {"opsets": set(), "dtypes": set(), "refused": set(), "passed": 0} for op in ops}
    refused = expected()
    for suite in sorted(os.listdir(DATA)):
        root = os.path.join(DATA, suite)
        for test in sorted(os.listdir(root)):
            path = os.path.join(root, test, "model.onnx")
            if not os.path.exists(path):
                continue
            key = f"{suite}/{test}"
            reason = refused.get(key)
            if reason and reason.startswith("training:"):
                continue
            try:
                m = onnx.load(path)
            except Exception:  # a model onnx cannot read is not a test of any op
                continue
            opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 1)
            types = {v.name: v.type for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)}
            for init in m.graph.initializer:
                types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, None))
            for node in m.graph.node:
                if node.domain not in ("", "ai.onnx") or node.op_type not in found:
                    continue
                f = found[node.op_type]
                if reason:
                    if mentions(node.op_type, test, reason):
                        f["refused"].add(tidy(reason))
                    continue
                f["passed"] += 1
                f["opsets"].add(opset)
                for name in (node.input[:1], node.output[:1]):
                    d = elem_type(types, name[0]) if name and name[0] else None
                    if d:
                        f["dtypes"].add(d)
    return found


def ranges(values):
    return ", ".join(str(v) for v in sorted(values)) if values else "–"


def opset_range(values):
    return f"{min(values)}–{max(values)}" if len(values) > 1 else ranges(values)


def render():
    entries = [(op, fam) for op, fam in ops_def() if onnx.defs.has(op)]
    # Gelu is ONNX's own since opset 20, newer than the schemas here
    newer = [op for op, _ in ops_def() if not onnx.defs.has(op) and op == "Gelu"]
    internal = [op for op, _ in ops_def() if not onnx.defs.has(op) and op != "Gelu"]
    found = scan_tests([op for op, _ in entries])
    lines = [
        "# Supported operators",
        "",
        "Generated by `tools/gen_operators.py` (`make docs`); `make test` fails when this file is stale.",
        "Every operator of `ops/ops.def` in ONNX's default domain, with:",
        "",
        "- **ONNX versions**: the op's schema versions up to opset 17 (nn reads models of any opset and "
        "parses each version's attributes);",
        "- **tested opsets** and **dtypes**: what the ONNX backend tests nn passes "
        "(`build/tests/conformance`, Debian's libonnx-testdata) use: the opset their models import, "
        "and the element types of the node's first input and output;",
        "- **notes**: precision choices, and the reasons nn gives for the backend tests of the op it refuses "
        "(`tests/conformance.expected`).",
        "",
        f"{len(entries)} operators; {', '.join(newer) or 'none'} from a newer opset than these schemas (20); "
        f"internal ones (made by nn's own passes; a model file that names one is refused): "
        f"{', '.join(internal) or 'none'}.",
        "",
        "| op | ONNX versions | tests passed | tested opsets | dtypes | notes |",
        "|---|---|---|---|---|---|",
    ]
    for op, fam in entries:
        f = found[op]
        notes = ([NOTES[op]] if op in NOTES else []) + [f"refuses: {r}" for r in sorted(f["refused"])]
        cell = "; ".join(notes).replace("|", "\\|")
        lines.append(f"| {op} | {ranges(schema_versions(op))} | {f['passed']} | {opset_range(f['opsets'])} | "
                     f"{', '.join(sorted(f['dtypes'])) or '–'} | {cell} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = ap.parse_args()
    text = render()
    if a.check:
        try:
            with open(a.out) as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print(f"{os.path.relpath(a.out, REPO)} is stale: run `make docs` and commit it")
            return 1
        rows = sum(1 for line in text.splitlines() if line.startswith("| ") and not line.startswith("| op |"))
        print(f"{os.path.relpath(a.out, REPO)} is current ({rows} operators)")
        return 0
    with open(a.out, "w") as f:
        f.write(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
