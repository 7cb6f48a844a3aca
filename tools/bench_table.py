#!/usr/bin/python3
"""Markdown tables from `tools/bench --json FILE`: one row per model and batch
size, grouped by family, then the geometric mean of nn / ORT per family and per
batch size.  For the README and docs/benchmarks.md:

    tools/bench_table.py build/bench/zoo.json
"""
import json
import math
import sys

FAMILIES = [
    ("seed CNNs", ["resnet50", "vgg19", "densenet201", "efficientnet_b0", "googlenet", "mobilenet_v2"]),
    ("classification CNNs", ["convnext_tiny", "regnet_y_400mf", "mnasnet1_0", "inception_v3", "resnext50_32x4d",
                             "resnet18", "shufflenet_v2_x1_0", "squeezenet1_1", "alexnet", "mobilenet_v3_small",
                             "mobilenet_v3_large"]),
    ("transformers", ["vit_b_16", "swin_t", "bert_base", "bert_small"]),
    ("segmentation", ["deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50"]),
    ("detection", ["ssdlite320_mobilenet_v3_large", "retinanet_resnet50_fpn",
                   "fasterrcnn_mobilenet_v3_large_320_fpn"]),
    ("audio", ["wav2vec2_features"]),
]


def family(model):
    for name, models in FAMILIES:
        if model in models:
            return name
    return "other"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tools/bench_table.py BENCH.json")
    with open(sys.argv[1]) as f:
        data = json.load(f)
    rows = data["rows"]
    order = {m: i for i, m in enumerate(m for _, ms in FAMILIES for m in ms)}
    rows.sort(key=lambda r: (order.get(r["model"], len(order)), r["batch"]))
    print("| family | model | batch | nn samples/s | ORT samples/s | nn / ORT | load nn | load ORT "
          "| peak RSS nn | peak RSS ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, t = r["ours"], r["ort"]
        print(f"| {family(r['model'])} | {r['model']} | {r['batch']} | {o['rate']:.2f} | {t['rate']:.2f} "
              f"| **{r['ratio']:.2f}** | {o['load_ms']:.0f} ms | {t['load_ms']:.0f} ms "
              f"| {o['peak_rss_mb']:.0f} MB | {t['peak_rss_mb']:.0f} MB |")
    for f in data.get("failures", []):
        print(f"| {family(f['model'])} | {f['model']} | {f['batch']} | failed: {f['error']} | | | | | | |")
    batches = sorted({r["batch"] for r in rows})
    print()
    print("| geomean nn / ORT | " + " | ".join(f"batch {b}" for b in batches) + " |")
    print("|---|" + "---|" * len(batches))
    for name, _ in FAMILIES + [("all", None)]:
        cells = []
        for b in batches:
            xs = [r["ratio"] for r in rows if r["batch"] == b and (name == "all" or family(r["model"]) == name)]
            cells.append(f"{geomean(xs):.2f} ({len(xs)})" if xs else "")
        if any(cells):
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
