#!/usr/bin/python3
"""nnserve over real HTTP on loopback: every endpoint, JSON and binary infer
against nnrun --save-outputs on the same input, the hostile-input list, 64
concurrent requests, queue limits and graceful shutdown.
usage: test_server.py BUILD_DIR"""
import concurrent.futures as cf
import http.client
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import struct
import zlib
from PIL import Image

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MODEL = "models/mobilenetv2.onnx"
TMP = tempfile.mkdtemp(prefix="nnserve-test.")
failures = 0
checks = 0


T0 = time.time()


def phase(name):
    print("test_server: %s (%.1f s)" % (name, time.time() - T0), flush=True)


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what, flush=True)


class Server:
    def __init__(self, name, *args):
        self.log = os.path.join(TMP, name + ".log")
        self.proc = subprocess.Popen([os.path.join(BUILD, "nnserve"), "--port", "0", *args],
                                     stderr=open(self.log, "w"), stdout=subprocess.DEVNULL)
        self.port = None
        end = time.time() + 120
        while time.time() < end and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(self.log).read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            raise SystemExit("nnserve did not start:\n" + open(self.log).read())
        while time.time() < end and self.proc.poll() is None:
            if self.get("/v2/health/ready")[0] == 200:
                return
            time.sleep(0.05)
        raise SystemExit("nnserve never became ready:\n" + open(self.log).read())

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), r.headers
        finally:
            c.close()

    def get(self, path):
        return self.request("GET", path)

    def infer(self, model, doc, binary=None, headers=None):
        body = json.dumps(doc).encode()
        h = {"Content-Type": "application/json"}
        if binary is not None:
            h["Inference-Header-Content-Length"] = str(len(body))
            body += binary
        h.update(headers or {})
        return self.request("POST", "/v2/models/%s/infer" % model, body, h)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -1


def decode(status, body, headers):
    """outputs of an infer response by name, JSON or binary"""
    hl = headers.get("Inference-Header-Content-Length")
    doc = json.loads(body[:int(hl)] if hl else body)
    out, off = {}, int(hl) if hl else 0
    for o in doc["outputs"]:
        if "parameters" in o and "binary_data_size" in o["parameters"]:
            n = o["parameters"]["binary_data_size"]
            out[o["name"]] = np.frombuffer(body[off:off + n], dtype=np.float32).reshape(o["shape"])
            off += n
        else:
            out[o["name"]] = np.array(o["data"], dtype=np.float32).reshape(o["shape"])
    return doc, out


def json_input(x):
    return {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.flatten().tolist()}


def bin_input(x):
    return {"name": "input", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}


def main():
    # the reference: nnrun on three seeded samples
    x = np.random.default_rng(29).standard_normal((3, 3, 224, 224)).astype(np.float32)
    np.save(os.path.join(TMP, "x.npy"), x)
    ref_dir = os.path.join(TMP, "ref")
    os.mkdir(ref_dir)
    subprocess.run([os.path.join(BUILD, "nnrun"), MODEL, "--input", "input=" + os.path.join(TMP, "x.npy"),
                    "--save-outputs", ref_dir, "--iters", "1", "--warmup", "0"], check=True, stdout=subprocess.DEVNULL)
    ref = np.load(os.path.join(ref_dir, "output.npy"))
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))

    # a repository entry beside a --model one: its own config, the same file
    repo = os.path.join(TMP, "repo")
    os.makedirs(os.path.join(repo, "mnv2small"))
    os.symlink(os.path.abspath(MODEL), os.path.join(repo, "mnv2small", "model.onnx"))
    with open(os.path.join(repo, "mnv2small", "nnserve.conf"), "w") as f:
        f.write("# batching off for this one\nmax_batch_size = 1\nqueue_limit = 2\ntimeout_ms = 20000\n")
    # encoded images in: the default ImageNet pre-processing (shorter side 256, center crop 224)
    os.makedirs(os.path.join(repo, "img"))
    os.symlink(os.path.abspath(MODEL), os.path.join(repo, "img", "model.onnx"))
    with open(os.path.join(repo, "img", "nnserve.conf"), "w") as f:
        f.write("image_input = input\nimage_resize = 256\nimage_max_pixels = 20000000\n")
    # ensembles of the two entries above (the same network twice: the combination is what is checked)
    for name, conf in (("ens", "ensemble = mnv2, mnv2small\ncombine = mean_softmax\n"),
                       ("enscat", "ensemble = mnv2small,mnv2\ncombine = concat\n")):
        os.makedirs(os.path.join(repo, name))
        with open(os.path.join(repo, name, "nnserve.conf"), "w") as f:
            f.write(conf)
    s = Server("main", "--model", "mnv2=" + MODEL, "--model-repository", repo, "--max-body", str(16 << 20),
               "--batch", "8", "--queue-delay-us", "5000", "--http-threads", "4")
    try:
        phase('endpoints')
        endpoints(s)
        phase('results')
        results(s, x, ref, tol)
        phase('hostile')
        hostile(s, x)
        phase('ensembles')
        ensembles(s, x, ref, tol)
        phase('images')
        images(s)
        phase('concurrent')
        concurrent(s, x, ref, tol)
        phase('queue_limit')
        queue_limit(s, x, ref, tol)
        st, body, _ = s.get("/metrics")
        text = body.decode()
        check(st == 200 and re.search(r'nn_requests_total\{model="mnv2"\} [1-9]', text), "/metrics counts requests")
        check(re.search(r'nn_request_failures_total\{model="mnv2"\} [1-9]', text) is not None, "/metrics counts failures")
        m = re.search(r'nn_batch_size_bucket\{model="mnv2",le="1"\} (\d+)', text)
        n = re.search(r'nn_batch_size_count\{model="mnv2"\} (\d+)', text)
        check(m and n and int(n.group(1)) > int(m.group(1)), "some batches merged several requests")
        check("nn_models_loaded 5" in text and "nn_compute_seconds_bucket" in text, "/metrics histograms and gauge")
    finally:
        rc = s.stop()
    check(rc == 0, "SIGTERM: exit status 0 (got %s)" % rc)
    log = open(s.log).read()
    check(re.search(r'"POST /v2/models/mnv2/infer" 200 \d+', log) is not None, "access log lines")
    phase('shutdown')
    shutdown(x, ref, tol)
    phase('nnrun --ensemble')
    nnrun = [os.path.join(BUILD, "nnrun"), MODEL, MODEL, "--iters", "1", "--warmup", "0"]
    r = subprocess.run(nnrun + ["--ensemble", "mean"], capture_output=True, text=True)
    check(r.returncode == 0 and re.search(r"sequential .* samples/s", r.stdout) and
          re.search(r"concurrent .* samples/s", r.stdout), "nnrun --ensemble mean reports both timings: " + r.stderr)
    r = subprocess.run(nnrun + ["--ensemble", "median"], capture_output=True, text=True)
    check(r.returncode == 2 and "mean or concat" in r.stderr, "nnrun --ensemble median refused")
    r = subprocess.run(nnrun, capture_output=True, text=True)
    check(r.returncode == 2 and "use --ensemble" in r.stderr, "nnrun with two models and no --ensemble refused")
    print("test_server: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


def endpoints(s):
    check(s.get("/v2/health/live")[0] == 200, "live")
    check(s.get("/v2/health/ready")[0] == 200, "ready")
    st, body, _ = s.get("/v2")
    doc = json.loads(body)
    check(st == 200 and doc["name"] == "nnserve" and "binary_tensor_data" in doc["extensions"], "server metadata")
    for path in ("/v2/models/mnv2", "/v2/models/mnv2/versions/1", "/v2/models/mnv2small"):
        st, body, _ = s.get(path)
        doc = json.loads(body) if st == 200 else {}
        check(st == 200 and doc.get("inputs") == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 224, 224]}]
              and doc["outputs"][0]["shape"] == [-1, 1000], "model metadata " + path)
    check(s.get("/v2/models/mnv2/ready")[0] == 200, "model ready")
    check(s.get("/v2/models/mnv2/versions/1/ready")[0] == 200, "model version ready")
    check(s.get("/v2/models/mnv2/versions/2")[0] == 404, "unknown version: 404")
    st, body, _ = s.get("/v2/models/nosuch")
    check(st == 404 and "error" in json.loads(body), "unknown model: 404 with an error object")
    check(s.get("/v2/nothing")[0] == 404, "unknown endpoint: 404")
    check(s.request("POST", "/v2/health/live", b"")[0] == 405, "POST on health: 405")
    check(s.get("/v2/models/mnv2/infer")[0] == 405, "GET on infer: 405")


def results(s, x, ref, tol):
    st, body, h = s.infer("mnv2", {"id": "a1", "inputs": [json_input(x)]})
    doc, out = decode(st, body, h)
    check(st == 200 and doc.get("id") == "a1" and doc["model_name"] == "mnv2", "JSON infer answers")
    check(out["output"].shape == ref.shape and np.abs(out["output"] - ref).max() <= tol, "JSON infer = nnrun")
    st, body, h = s.infer("mnv2", {"inputs": [bin_input(x)], "outputs": [{"name": "output", "parameters": {"binary_data": True}}]},
                          binary=x.tobytes())
    doc, out = decode(st, body, h)
    check(st == 200 and h.get("Inference-Header-Content-Length") is not None, "binary infer answers binary")
    check(np.abs(out["output"] - ref).max() <= tol, "binary infer = nnrun")
    st, body, h = s.infer("mnv2", {"inputs": [bin_input(x)], "parameters": {"binary_data_output": True}}, binary=x.tobytes())
    check(st == 200 and np.abs(decode(st, body, h)[1]["output"] - ref).max() <= tol, "binary_data_output = nnrun")
    # nested data, the repository model (batching off), versions path
    nested = dict(json_input(x[:1]), data=x[:1].tolist())
    st, body, h = s.request("POST", "/v2/models/mnv2small/versions/1/infer", json.dumps({"inputs": [nested]}).encode())
    check(st == 200 and np.abs(decode(st, body, h)[1]["output"] - ref[:1]).max() <= tol, "nested data, repository model")


def expect4xx(s, what, st, body=b"{}", code=None):
    ok = 400 <= st < 500 and (code is None or st == code)
    try:
        ok = ok and (not body or "error" in json.loads(body))
    except ValueError:
        ok = False
    check(ok, "%s: got %s %r" % (what, st, body[:200]))


def raw(s, data, read=True):
    """bytes straight to the socket; the answer's head (b'' when dropped)"""
    c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    out = b""
    try:
        c.sendall(data)
        if not read:
            return b""
        c.shutdown(socket.SHUT_WR)
        while True:
            b = c.recv(65536)
            if not b:
                return out
            out += b
            if b"\r\n\r\n" in out:  # the status and headers are what is checked
                return out
    except OSError:  # a reset after the answer: the server closed with our data unread
        return out
    finally:
        c.close()


def hostile(s, x):
    one = x[:1]
    good = {"inputs": [json_input(one)]}
    post = lambda body, h=None, m="mnv2": s.request("POST", "/v2/models/%s/infer" % m, body, h or {})
    for what, body in [("malformed JSON", b'{"inputs": [}'), ("empty body", b""), ("not an object", b"[1,2]"),
                       ("deep nesting", b"[" * 5000 + b"]" * 5000), ("invalid UTF-8", b'{"inputs":[{"name":"\xff"}]}'),
                       ("no inputs", b'{"outputs":[]}')]:
        st, b, _ = post(body)
        expect4xx(s, what, st, b, 400)
    cases = [
        ("wrong datatype", dict(json_input(one), datatype="INT64")),
        ("unknown datatype", dict(json_input(one), datatype="FP8")),
        ("BYTES datatype", dict(json_input(one), datatype="BYTES")),
        ("wrong rank", dict(json_input(one), shape=[3, 224, 224])),
        ("wrong dimension", dict(json_input(one), shape=[1, 3, 224, 225])),
        ("data shorter than the shape", dict(json_input(one), data=one.flatten()[:-1].tolist())),
        ("data longer than the shape", dict(json_input(one), data=one.flatten().tolist() + [0.0])),
        ("huge declared shape", dict(json_input(one), shape=[1 << 40, 3, 224, 224])),
        ("overflowing shape", dict(json_input(one), shape=[1 << 62, 3, 224, 224])),
        ("negative dimension", dict(json_input(one), shape=[-1, 3, 224, 224])),
        ("zero samples", dict(json_input(one), shape=[0, 3, 224, 224], data=[])),
        ("shape with no data", dict(json_input(one), shape=[64, 3, 224, 224], data=[1.0])),
        ("string in data", dict(json_input(one), data=["a"] * one.size)),
        ("unknown input name", dict(json_input(one), name="nope")),
    ]
    for what, inp in cases:
        st, b, _ = post(json.dumps({"inputs": [inp]}).encode())
        expect4xx(s, what, st, b, 400)
    st, b, _ = post(json.dumps({"inputs": [json_input(one), json_input(one)]}).encode())
    expect4xx(s, "input given twice", st, b, 400)
    st, b, _ = post(json.dumps(dict(good, outputs=[{"name": "nope"}])).encode())
    expect4xx(s, "unknown output", st, b, 400)
    hdr = json.dumps({"inputs": [bin_input(one)]}).encode()
    data = one.tobytes()
    for what, body, h in [
        ("header length past the body", hdr + data, str(len(hdr) + len(data) + 1)),
        ("header length negative", hdr + data, "-5"),
        ("header length not a number", hdr + data, "12abc"),
        ("header length cutting the JSON", hdr + data, str(len(hdr) - 3)),
        ("binary data short", hdr + data[:-4], str(len(hdr))),
        ("binary data long", hdr + data + b"xxxx", str(len(hdr))),
    ]:
        st, b, _ = post(body, {"Inference-Header-Content-Length": h})
        expect4xx(s, what, st, b, 400)
    big = json.dumps({"inputs": [dict(bin_input(one), parameters={"binary_data_size": 1 << 40})]}).encode()
    st, b, _ = post(big + data, {"Inference-Header-Content-Length": str(len(big))})
    expect4xx(s, "binary_data_size past the body", st, b, 400)
    r = raw(s, b"POST /v2/models/mnv2/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (17 << 20))
    check(re.match(rb"HTTP/1\.[01] 413", r) is not None, "Content-Length over --max-body: 413 (%r)" % r[:40])
    # the same without a length: chunks past the limit
    chunk = b"x" * (1 << 20)
    r = raw(s, b"POST /v2/models/mnv2/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
            b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(17)) + b"0\r\n\r\n")
    check(re.match(rb"HTTP/1\.[01] 413", r) is not None, "chunked body over --max-body: 413 (%r)" % r[:40])
    st, b, _ = post(json.dumps(good).encode(), m="nosuch")
    expect4xx(s, "unknown model", st, b, 404)
    for path in ("/v2/models/..%2F..%2Fetc%2Fpasswd/infer", "/v2/models/.hidden", "/v2/models/a%00b/infer",
                 "/v2/models/mnv2%2F..%2Fmnv2/infer"):
        st, b, _ = s.request("POST", path, json.dumps(good).encode())
        expect4xx(s, "path trick " + path, st, b)
    # transport abuse: dropped connections or 4xx, and the server goes on
    r = raw(s, b"POST /v2/models/mnv2/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"inputs\":", read=False)
    r = raw(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (200 << 10) + b"\r\n\r\n")
    check(r == b"" or re.match(rb"HTTP/1\.[01] 4\d\d", r), "huge header: 4xx or dropped (%r)" % r[:40])
    r = raw(s, b"GARBAGE\r\n\r\n")
    check(r == b"" or re.match(rb"HTTP/1\.[01] 4\d\d", r), "garbage request line: 4xx or dropped")
    r = raw(s, b"POST /v2/models/mnv2/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{}extra")
    check(re.match(rb"HTTP/1\.[01] 400", r) is not None, "body longer than Content-Length: 400 (%r)" % r[:40])
    st, b, h = post(json.dumps(good).encode())
    check(st == 200, "a good request after the hostile list")


def ensembles(s, x, ref, tol):
    e = np.exp(ref - ref.max(axis=1, keepdims=True))
    soft = e / e.sum(axis=1, keepdims=True)
    st, b, h = s.infer("ens", {"inputs": [bin_input(x)]}, binary=x.tobytes())
    out = decode(st, b, h)[1]["output"] if st == 200 else None
    check(out is not None and out.shape == ref.shape and np.abs(out - soft).max() < 1e-5, "ensemble mean of softmax")
    st, b, h = s.infer("enscat", {"inputs": [json_input(x)]})
    out = decode(st, b, h)[1]["output"] if st == 200 else None
    check(out is not None and out.shape == (3, 2000) and np.abs(out - np.concatenate([ref, ref], 1)).max() <= tol,
          "ensemble concatenation")
    st, b, _ = s.get("/v2/models/enscat")
    check(st == 200 and json.loads(b)["outputs"][0]["shape"] == [-1, 2000], "ensemble metadata")
    st, b, _ = s.infer("ens", {"inputs": [dict(json_input(x), shape=[3, 3, 224, 223])]})
    expect4xx(s, "ensemble: wrong shape", st, b, 400)


def encode(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def image_request(s, files):
    data = b"".join(struct.pack("<I", len(f)) + f for f in files)
    return s.infer("img", {"inputs": [{"name": "input", "shape": [len(files)], "datatype": "BYTES",
                                       "parameters": {"binary_data_size": len(data)}}],
                           "parameters": {"binary_data_output": True}}, binary=data)


def images(s):
    """PNG exact and JPEG close to nnrun on the same pixels pre-processed by numpy; hostile images refused"""
    base = np.random.default_rng(5).integers(0, 255, (8, 8, 3)).astype(np.uint8)
    img = Image.fromarray(base).resize((320, 256), Image.BILINEAR)
    a = np.asarray(img).astype(np.float32)[16:240, 48:272] / 255  # shorter side already 256: crop only
    x = ((a - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).transpose(2, 0, 1)[None].astype(np.float32)
    np.save(os.path.join(TMP, "img.npy"), x)
    subprocess.run([os.path.join(BUILD, "nnrun"), MODEL, "--input", "input=" + os.path.join(TMP, "img.npy"),
                    "--save-outputs", os.path.join(TMP, "imgref"), "--iters", "1", "--warmup", "0"], check=True,
                   stdout=subprocess.DEVNULL)
    ref = np.load(os.path.join(TMP, "imgref", "output.npy"))
    png, jpg = encode(img, "PNG"), encode(img, "JPEG", quality=95)
    # a large JPEG decodes at 1/8 scale (437x350, still above 256) before the resize
    big = encode(Image.fromarray(base).resize((3500, 2800), Image.BILINEAR), "JPEG", quality=90)
    st, b, h = image_request(s, [png, jpg, big])
    out = decode(st, b, h)[1]["output"] if st == 200 else None
    check(out is not None and np.abs(out[0] - ref[0]).max() < 1e-5, "PNG image = nnrun on numpy's pre-processing")
    check(out is not None and np.abs(out[1] - ref[0]).max() < 2e-3, "JPEG image close to nnrun")
    check(out is not None and out[2].argmax() == ref[0].argmax(), "3500x2800 JPEG: same class")
    # hostile: a PNG header claiming 100000x100000, a JPEG whose frame claims 65500x65500, garbage, a lying length
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    bomb_png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    sof = jpg.index(b"\xff\xc0")
    bomb_jpg = jpg[:sof + 5] + struct.pack(">HH", 65500, 65500) + jpg[sof + 9:]
    corrupt = jpg[:200] + bytes(range(256)) * 4
    for what, files in [("PNG bomb", [bomb_png]), ("JPEG bomb", [bomb_jpg]), ("not an image", [b"hello"]),
                        ("corrupt JPEG", [corrupt]), ("empty element", [b""])]:
        st, b, _ = image_request(s, files)
        expect4xx(s, what, st, b, 400)
    data = struct.pack("<I", 1000) + png
    st, b, _ = s.infer("img", {"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                           "parameters": {"binary_data_size": len(data)}}]}, binary=data)
    expect4xx(s, "BYTES element length past the data", st, b, 400)
    # a small PNG decodes to 600 KB of FP32: 65 of them are over --max-images, whatever the body's size
    st, b, _ = image_request(s, [png] * 65)
    expect4xx(s, "more images than --max-images", st, b, 400)
    st, b, _ = s.infer("img", {"inputs": [json_input(x)]})
    expect4xx(s, "FP32 to an image input", st, b, 400)
    st, b, h = image_request(s, [png])
    check(st == 200, "an image request after the hostile ones")


def concurrent(s, x, ref, tol):
    def one(i):
        k = i % 3
        if i % 2:
            st, b, h = s.infer("mnv2", {"inputs": [json_input(x[k:k + 1])]})
        else:
            st, b, h = s.infer("mnv2", {"inputs": [bin_input(x[k:k + 1])], "parameters": {"binary_data_output": True}},
                               binary=x[k:k + 1].tobytes())
        return st == 200 and np.abs(decode(st, b, h)[1]["output"] - ref[k:k + 1]).max() <= tol
    with cf.ThreadPoolExecutor(64) as ex:
        ok = list(ex.map(one, range(64)))
    check(all(ok), "64 concurrent requests all right (%d wrong)" % ok.count(False))


def queue_limit(s, x, ref, tol):
    # mnv2small: batching off, queue limit 2: a burst of 12 gets some 503s and every other answer right
    def one(i):
        st, b, h = s.infer("mnv2small", {"inputs": [bin_input(x[:1])]}, binary=x[:1].tobytes())
        if st == 200:
            return "ok" if np.abs(decode(st, b, h)[1]["output"] - ref[:1]).max() <= tol else "wrong"
        return "full" if st == 503 and b"queue full" in b else "other %d %r" % (st, b[:100])
    with cf.ThreadPoolExecutor(12) as ex:
        res = list(ex.map(one, range(12)))
    check(set(res) <= {"ok", "full"} and "ok" in res and "full" in res, "queue limit: 503 when full (%s)" % res)


def shutdown(x, ref, tol):
    """requests queued when SIGTERM comes are answered; the server exits 0 and its plan came from the cache"""
    s = Server("drain", "--model", "mnv2=" + MODEL, "--batch", "1", "--no-access-log", "--conn-timeout", "1")
    check("plan cache hit" in open(s.log).read(), "second start loads the plan from the cache")
    # a client that stops sending mid-body is dropped after --conn-timeout
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    c.sendall(b"POST /v2/models/mnv2/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"in")
    t = time.time()
    try:
        got = c.recv(100)
    except OSError:
        got = b""
    c.close()
    check(got == b"" and time.time() - t < 8, "slow client dropped after --conn-timeout (%.1f s)" % (time.time() - t))
    n = 6
    with cf.ThreadPoolExecutor(n) as ex:
        futs = [ex.submit(s.infer, "mnv2", {"inputs": [bin_input(x[:1])]}, x[:1].tobytes()) for _ in range(n)]
        end = time.time() + 60
        while time.time() < end:
            m = re.search(r'nn_requests_total\{model="mnv2"\} (\d+)', s.get("/metrics")[1].decode())
            if m and int(m.group(1)) >= n:
                break
            time.sleep(0.01)
        s.proc.send_signal(signal.SIGTERM)
        res = [f.result() for f in futs]
    ok = [st == 200 and np.abs(decode(st, b, h)[1]["output"] - ref[:1]).max() <= tol for st, b, h in res]
    check(all(ok), "requests in flight at SIGTERM answered (%d of %d)" % (ok.count(True), n))
    check(s.proc.wait(60) == 0, "drained server exits 0")
    try:
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check(refused, "nothing listens after the drain")


if __name__ == "__main__":
    sys.exit(main())
