#!/usr/bin/python3
"""Scale-out: N = 1 and 2 nnserve replicas behind Debian's nginx as a
round-robin upstream on loopback.  Answers through nginx equal the direct
ones (and nnrun's), and with two replicas both serve requests.
usage: test_nginx.py BUILD_DIR"""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402

NGINX = "/usr/sbin/nginx"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def nginx(ports, folder):
    port = free_port()
    os.makedirs(folder, exist_ok=True)
    conf = os.path.join(folder, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log;
events { worker_connections 256; }
http {
    access_log %(d)s/access.log;
    client_body_temp_path %(d)s/body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    upstream nnserve { %(servers)s keepalive 16; }
    server {
        listen 127.0.0.1:%(port)d;
        client_max_body_size 64m;
        location / {
            proxy_pass http://nnserve;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
""" % {"d": folder, "port": port, "servers": " ".join("server 127.0.0.1:%d;" % p for p in ports)})
    proc = subprocess.Popen([NGINX, "-p", folder, "-c", conf, "-g", "daemon off; user root;"],
                            stderr=open(os.path.join(folder, "stderr"), "w"))
    end = time.time() + 30
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("nginx did not start: " + open(os.path.join(folder, "stderr")).read())


def main():
    if not os.access(NGINX, os.X_OK):
        print("test_nginx: no %s (make test-deps installs nginx-light)" % NGINX)
        return 1
    x = np.random.default_rng(7).standard_normal((2, 3, 224, 224)).astype(np.float32)
    np.save(os.path.join(ts.TMP, "x.npy"), x)
    subprocess.run([os.path.join(ts.BUILD, "nnrun"), ts.MODEL, "--input", "input=" + os.path.join(ts.TMP, "x.npy"),
                    "--save-outputs", os.path.join(ts.TMP, "ref"), "--iters", "1", "--warmup", "0"], check=True,
                   stdout=subprocess.DEVNULL)
    ref = np.load(os.path.join(ts.TMP, "ref", "output.npy"))
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
    for n in (1, 2):
        replicas = [ts.Server("replica%d-%d" % (n, i), "--model", "mnv2=" + ts.MODEL) for i in range(n)]
        proc, port = nginx([r.port for r in replicas], os.path.join(ts.TMP, "nginx%d" % n))
        front = ts.Server.__new__(ts.Server)
        front.port = port
        try:
            st, body, h = replicas[0].infer("mnv2", {"inputs": [ts.bin_input(x)]}, binary=x.tobytes())
            direct = ts.decode(st, body, h)[1]["output"]
            ts.check(st == 200 and np.abs(direct - ref).max() <= tol, "N=%d: direct answer = nnrun" % n)
            same = 0
            for i in range(6):
                if i % 2:
                    st, body, h = front.infer("mnv2", {"inputs": [ts.json_input(x)]})
                else:
                    st, body, h = front.infer("mnv2", {"inputs": [ts.bin_input(x)],
                                                       "parameters": {"binary_data_output": True}}, binary=x.tobytes())
                same += st == 200 and np.abs(ts.decode(st, body, h)[1]["output"] - direct).max() <= tol
            ts.check(same == 6, "N=%d: 6 answers through nginx = the direct one (%d)" % (n, same))
            ts.check(front.get("/v2/health/ready")[0] == 200, "N=%d: readiness through nginx" % n)
            served = [len(re.findall(r'"POST /v2/models/mnv2/infer" 200', open(r.log).read())) for r in replicas]
            ts.check(all(c >= 3 if n == 2 else c >= 7 for c in served), "N=%d: round robin over replicas %s" % (n, served))
        finally:
            proc.send_signal(signal.SIGQUIT)
            proc.wait(30)
            for r in replicas:
                ts.check(r.stop() == 0, "N=%d: replica exits 0" % n)
    print("test_nginx: %d checks, %d failed" % (ts.checks, ts.failures))
    return 1 if ts.failures else 0


if __name__ == "__main__":
    sys.exit(main())
