#!/usr/bin/python3
"""Load test for nnserve on loopback: closed-loop clients (threads, one
keep-alive connection each) send one-sample binary infer requests for
DURATION seconds; throughput and p50/p99 latency per concurrency, with
dynamic batching off (--batch 1) and on (--batch B --queue-delay-us D).
usage: bench_serve.py BUILD MODEL [--clients 1,4,16,64] [--duration S] [--batch B] [--delay-us D]
       bench_serve.py --make-jpegs DIR   (test images for build/bench_decode)"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np


def start(build, model, extra, log, image_input=None):
    if image_input:
        # a repository entry whose input takes encoded images
        repo = tempfile.mkdtemp(prefix="bench-serve-repo.")
        os.mkdir(os.path.join(repo, "m"))
        os.symlink(os.path.abspath(model), os.path.join(repo, "m", "model.onnx"))
        with open(os.path.join(repo, "m", "nnserve.conf"), "w") as f:
            f.write("image_input = %s\n" % image_input)
        where = ["--model-repository", repo]
    else:
        where = ["--model", "m=" + model]
    p = subprocess.Popen([os.path.join(build, "nnserve"), "--port", "0", "--no-access-log", *where,
                          "--queue-limit", "1024", *extra], stderr=open(log, "w"))
    end = time.time() + 300
    port = None
    while time.time() < end and p.poll() is None:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log).read())
        if m and "nnserve: ready" in open(log).read():
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if port is None:
        raise SystemExit("nnserve did not start:\n" + open(log).read())
    return p, port


def run(port, meta, clients, duration, image=None):
    inp = meta["inputs"][0]
    if image is not None:
        data = len(image).to_bytes(4, "little") + image
        hdr = json.dumps({"inputs": [{"name": inp["name"], "shape": [1], "datatype": "BYTES",
                                      "parameters": {"binary_data_size": len(data)}}],
                          "parameters": {"binary_data_output": True}}).encode()
        body = hdr + data
    else:
        shape = [1] + inp["shape"][1:]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        hdr = json.dumps({"inputs": [{"name": inp["name"], "shape": shape, "datatype": "FP32",
                                      "parameters": {"binary_data_size": x.nbytes}}],
                          "parameters": {"binary_data_output": True}}).encode()
        body = hdr + x.tobytes()
    headers = {"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"}
    lat, errors, stop = [], [0], time.time() + duration
    lock = threading.Lock()

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine = []
        while time.time() < stop:
            t = time.perf_counter()
            c.request("POST", "/v2/models/m/infer", body, headers)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                with lock:
                    errors[0] += 1
            mine.append(time.perf_counter() - t)
        c.close()
        with lock:
            lat.extend(mine)

    t0 = time.time()
    ts = [threading.Thread(target=client) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
    return len(lat) / wall, q(0.5), q(0.99), len(lat), errors[0]


def make_jpegs(folder, small=False):
    """smooth random JPEGs at the issue's three sizes (small 60x70, medium 500x375, large 3500x2800);
    small=True: fuzzer seeds instead, JPEGs (baseline, progressive, grey) and PNGs of a few pixels"""
    from PIL import Image
    os.makedirs(folder, exist_ok=True)
    base = np.random.default_rng(1).integers(0, 255, (16, 16, 3)).astype(np.uint8)
    img = lambda size: Image.fromarray(base).resize(size, Image.BILINEAR)
    if small:
        img((24, 20)).save(os.path.join(folder, "a.jpg"), "JPEG", quality=80)
        img((40, 30)).save(os.path.join(folder, "p.jpg"), "JPEG", quality=80, progressive=True)
        img((17, 9)).convert("L").save(os.path.join(folder, "g.jpg"), "JPEG")
        img((20, 24)).save(os.path.join(folder, "a.png"), "PNG")
        img((9, 7)).convert("RGBA").save(os.path.join(folder, "b.png"), "PNG")
        return
    for name, size in (("small", (60, 70)), ("medium", (500, 375)), ("large", (3500, 2800))):
        img(size).save(os.path.join(folder, name + ".jpg"), "JPEG", quality=90)


def run_images(a):
    tmp = tempfile.mkdtemp(prefix="bench-serve.")
    print("model %s, end to end from JPEG files, %.0f s per point, one image per request" % (a.model, a.duration))
    print("%-26s %7s %10s %9s %9s %7s" % ("image", "clients", "images/s", "p50 ms", "p99 ms", "errors"))
    p, port = start(a.build, a.model, ["--batch", str(a.batch), "--queue-delay-us", str(a.delay_us)],
                    os.path.join(tmp, "server.log"), a.image_input)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("GET", "/v2/models/m")
        meta = json.loads(c.getresponse().read())
        for f in a.images.split(","):
            img = open(f, "rb").read()
            run(port, meta, 1, 1, img)
            for n in [int(v) for v in a.clients.split(",")]:
                thr, p50, p99, count, err = run(port, meta, n, a.duration, img)
                print("%-26s %7d %10.1f %9.1f %9.1f %7d" % (os.path.basename(f), n, thr, p50, p99, err), flush=True)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--make-jpegs":
        return make_jpegs(sys.argv[2], "--small" in sys.argv[3:])
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--delay-us", type=int, default=2000)
    ap.add_argument("--images", help="JPEG files: end to end, one image per request (batching on only)")
    ap.add_argument("--image-input", default="input", help="the model input that takes the images")
    a = ap.parse_args()
    if a.images:
        return run_images(a)
    tmp = tempfile.mkdtemp(prefix="bench-serve.")
    print("model %s, %.0f s per point, one-sample binary requests" % (a.model, a.duration))
    print("%-26s %7s %10s %9s %9s %7s" % ("server", "clients", "samples/s", "p50 ms", "p99 ms", "errors"))
    for name, extra in (("batching off", ["--batch", "1"]),
                        ("batching on (%d, %d us)" % (a.batch, a.delay_us),
                         ["--batch", str(a.batch), "--queue-delay-us", str(a.delay_us)])):
        p, port = start(a.build, a.model, extra, os.path.join(tmp, "server.log"))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port)
            c.request("GET", "/v2/models/m")
            meta = json.loads(c.getresponse().read())
            run(port, meta, 1, 1)  # warm-up
            for n in [int(v) for v in a.clients.split(",")]:
                thr, p50, p99, count, err = run(port, meta, n, a.duration)
                print("%-26s %7d %10.1f %9.1f %9.1f %7d" % (name, n, thr, p50, p99, err), flush=True)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(60)


if __name__ == "__main__":
    main()
