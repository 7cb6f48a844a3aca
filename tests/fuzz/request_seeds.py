#!/usr/bin/python3
"""Seeds for fuzz_request: valid JSON and binary requests for its model.
usage: request_seeds.py DIR"""
import json
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
img = {"name": "image", "shape": [2, 3, 2, 2], "datatype": "FP32", "data": [float(i) for i in range(24)]}
ids = {"name": "ids", "shape": [2, 3], "datatype": "INT64", "data": [[1, 2, 3], [4, 5, 6]]}
seeds = {
    "json": (None, json.dumps({"id": "x", "inputs": [img, ids]}).encode()),
    "outputs": (None, json.dumps({"inputs": [ids, img], "outputs": [{"name": "mask"}, {"name": "scores", "parameters": {"binary_data": True}}]}).encode()),
}
hdr = json.dumps({"inputs": [dict(img, data=None, parameters={"binary_data_size": 96}),
                             dict(ids, data=None, parameters={"binary_data_size": 48})],
                  "parameters": {"binary_data_output": True}}).replace(', "data": null', "").encode()
seeds["binary"] = (len(hdr), hdr + struct.pack("<24f", *range(24)) + struct.pack("<6q", *range(6)))
flags = {}
files = [b"\xff\xd8\xff\xe0fakejpeg", b"\x89PNG\r\n\x1a\nfakepng"]
blob = b"".join(struct.pack("<I", len(f)) + f for f in files)
hdr = json.dumps({"inputs": [{"name": "image", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(blob)}},
                             dict(ids, data=None, parameters={"binary_data_size": 48})]}).replace(', "data": null', "").encode()
seeds["images"] = (len(hdr), hdr + blob + struct.pack("<6q", *range(6)))
flags["images"] = 2
for name, (hl, body) in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([(1 if hl is not None else 0) | flags.get(name, 0)]) + struct.pack("<H", hl or 0) + body)
