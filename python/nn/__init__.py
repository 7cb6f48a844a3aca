"""nn: run ONNX models with the nn engine from Python.

    import nn, numpy as np
    model = nn.load("model.onnx", batch_size=8)
    y = model.predict(x)              # any number of samples along the batch axis
    fut = model.predict_async(x)      # concurrent.futures.Future; batches pipelined
    print(model.inputs, model.outputs, model.stats)

Errors raise nn.Error subclasses carrying the engine's one-line message.
"""
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import threading

import numpy as np

from . import _nn

__version__ = _nn.version
__all__ = ["load", "scan_batch", "Model", "IOInfo", "Error", "FileError", "ParseError", "InvalidModel",
           "Unsupported", "ShapeError", "OutOfMemory", "ArgumentError", "DeviceError", "InternalError"]


class Error(Exception):
    """A failure reported by the engine; str() is its one-line message, .status its nn_status number."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status

    def __str__(self):
        return self.message


class FileError(Error, OSError):
    """NN_ERR_IO: a file is missing, unreadable or truncated."""


class ParseError(Error):
    """NN_ERR_PARSE: not a valid ONNX protobuf or tensor file."""


class InvalidModel(Error):
    """NN_ERR_INVALID: the model is malformed."""


class Unsupported(Error):
    """NN_ERR_UNSUPPORTED: an operator, dtype or feature the engine does not implement."""


class ShapeError(Error, ValueError):
    """NN_ERR_SHAPE: shapes that do not fit the operator or the model."""


class OutOfMemory(Error, MemoryError):
    """NN_ERR_NOMEM: an allocation failed or sizes overflow (or a max_memory limit refused the model)."""


class ArgumentError(Error, ValueError):
    """NN_ERR_ARG: a bad argument (unknown input name, wrong dtype, bad option)."""


class DeviceError(Error):
    """NN_ERR_DEVICE: the requested device is not available."""


class InternalError(Error):
    """NN_ERR_INTERNAL: an engine bug; please report it with the message."""


# index = nn_status (engine/nn.h)
_nn.set_errors([None, FileError, ParseError, InvalidModel, Unsupported, ShapeError, OutOfMemory, ArgumentError,
                DeviceError, InternalError])

IOInfo = collections.namedtuple("IOInfo", "name shape dtype batch_axis")
IOInfo.__doc__ = """An input or output: shape has None on the batch axis (batch_axis, or None when it has none)
and on dimensions known only at run time; dtype is None when only a run tells."""


def _info(rows):
    out = []
    for name, dims, typenum, axis, ndim in rows:
        shape = None if ndim < 0 else tuple(None if d == axis else (None if n < 0 else n) for d, n in enumerate(dims))
        out.append(IOInfo(name, shape, None if typenum < 0 else np.dtype(_typenum(typenum)),
                          None if axis < 0 else axis))
    return out


def _typenum(n):
    for t in (np.float32, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.bool_, np.float16,
              np.float64, np.uint32, np.uint64):
        if np.dtype(t).num == n:
            return t
    raise InternalError("unknown NumPy type number %d" % n)


def _fail(fut, e):
    """The first error of a request completes its future; later ones (batches already queued) are dropped."""
    try:
        fut.set_exception(e)
    except concurrent.futures.InvalidStateError:
        pass


class Model:
    """A loaded model; see nn.load.  Safe to share between threads: predictions on one model run one at a time
    (they share its planned memory), predictions on different models run in parallel."""

    def __init__(self, path, batch_size=1, device="cpu", threads=0, optimize=True, cache=True, cache_dir=None,
                 precision="fp32", micro_batch=0, max_memory=None, profile=False, winograd=True):
        if precision not in ("fp32", "bf16", "tf32", "fp16"):
            raise ArgumentError("precision must be 'fp32', 'bf16', 'tf32' or 'fp16', got %r" % (precision,))
        kw = dict(batch=int(batch_size), device=str(device), threads=int(threads), optimize=bool(optimize),
                  cache=bool(cache), micro_batch=int(micro_batch), max_memory=int(max_memory or 0),
                  fp16=precision == "fp16", tf32=precision == "tf32", bf16=precision == "bf16", profile=bool(profile),
                  winograd=bool(winograd))
        if cache_dir is not None:
            kw["cache_dir"] = os.fspath(cache_dir)
        self._m = _nn.Model(os.fspath(path), **kw)
        self.path = os.fspath(path)
        self.batch_size = int(batch_size)
        self.inputs = _info(self._m.inputs())
        self.outputs = _info(self._m.outputs())
        self._names = [i.name for i in self.inputs]
        self._profile = bool(profile)
        self._pipe_lock = threading.Lock()
        self._prep = self._compute = None
        self._window = threading.Semaphore(2)  # batches prepared ahead of the engine: double buffering

    def __repr__(self):
        return "<nn.Model %s batch_size=%d inputs=%s outputs=%s>" % (
            self.path, self.batch_size, [i.name for i in self.inputs], [o.name for o in self.outputs])

    @property
    def stats(self):
        """The engine's facts about the model (nn_model_stats) as a dict."""
        return self._m.stats()

    def profile(self):
        """Time per operator type over every prediction so far (load with profile=True)."""
        if not self._profile:
            raise ArgumentError("profile() needs the model loaded with profile=True")
        return self._m.profile()

    def _ordered(self, x):
        """The inputs in the model's order from an array, a dict name -> array, or a list."""
        if isinstance(x, dict):
            for name in x:
                if name not in self._names:
                    self._m.index(str(name))  # raises the engine's "no input named" ArgumentError
            missing = [n for n in self._names if n not in x]
            if missing:
                raise ArgumentError("input '%s' is missing (the model takes %s)" % (missing[0], self._names))
            return [x[n] for n in self._names]
        if isinstance(x, (list, tuple)):
            if len(x) != len(self._names):
                raise ArgumentError("model takes %d inputs, got a list of %d" % (len(self._names), len(x)))
            return list(x)
        if len(self._names) != 1:
            raise ArgumentError("model takes %d inputs %s: pass a dict or a list" % (len(self._names), self._names))
        return [x]

    def _result(self, outs):
        if len(outs) == 1:
            return outs[0]
        return {o.name: a for o, a in zip(self.outputs, outs)}

    def predict(self, x):
        """Run the model on x (an array for a single-input model, a dict name -> array, or a list in input
        order) holding any number of samples along the batch axis.  Returns an array (one output) or a dict
        name -> array.  Arrays that are C-contiguous and of the input's dtype are used in place."""
        return self._result(self._m.run(self._ordered(x)))

    def predict_async(self, x):
        """Like predict, but returns a concurrent.futures.Future at once.  The samples are split into batches
        of batch_size; a preparing thread converts and copies batch k+1 while the engine computes batch k,
        and the engine writes each batch straight into the result arrays.  Futures complete in call order."""
        fut = concurrent.futures.Future()
        with self._pipe_lock:
            if self._prep is None:
                self._prep = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nn-prepare")
                self._compute = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nn-compute")
            self._prep.submit(self._pipeline, x, fut)
        return fut

    def _convert(self, arrays, lo, hi):
        out = []
        for info, a in zip(self.inputs, arrays):
            if info.batch_axis is not None:
                a = a[lo:hi]
            out.append(np.ascontiguousarray(a, dtype=info.dtype))
        return out

    def _pipeline(self, x, fut):
        """The preparing thread: split, convert and queue one batch at a time, at most two ahead."""
        if not fut.set_running_or_notify_cancel():
            return
        try:
            arrays = [np.asarray(a) for a in self._ordered(x)]
            samples = {a.shape[0] for i, a in zip(self.inputs, arrays) if i.batch_axis is not None and a.ndim}
            if len(samples) > 1:
                raise ShapeError("batched inputs disagree on the sample count (%s)" % sorted(samples))
            total = samples.pop() if samples else 0
            step = self.batch_size
            shapes = None
            if total > step:
                first = self._convert(arrays, 0, step)
                shapes = self._m.output_shapes(first)
            if shapes is None:
                first = self._convert(arrays, 0, None)
            if shapes is None:  # one batch, or shapes known only after the run: one engine call
                chunks = [(first, None)]
                outs = None
            else:
                outs = []
                for o, s in zip(self.outputs, shapes):
                    outs.append(np.empty((total,) + tuple(s[1:]) if o.batch_axis is not None else s, o.dtype))
                chunks = None
        except BaseException as e:  # noqa: B902 - the future carries it
            _fail(fut, e)
            return
        state = {"left": 1 if chunks else (total + step - 1) // step, "failed": False}

        def compute(inp, lo, hi):
            try:
                if state["failed"]:
                    return
                if outs is None:
                    fut.set_result(self._result(self._m.run(inp)))
                    return
                self._m.run(inp, [o[lo:hi] if i.batch_axis is not None else o for i, o in zip(self.outputs, outs)])
                state["left"] -= 1
                if state["left"] == 0:
                    fut.set_result(self._result(outs))
            except BaseException as e:  # noqa: B902
                state["failed"] = True
                _fail(fut, e)
            finally:
                self._window.release()

        if chunks:
            self._window.acquire()
            self._compute.submit(compute, first, 0, None)
            return
        for lo in range(0, total, step):
            hi = min(lo + step, total)
            self._window.acquire()
            if state["failed"]:
                self._window.release()
                return
            try:
                inp = first if lo == 0 else self._convert(arrays, lo, hi)
            except BaseException as e:  # noqa: B902
                self._window.release()
                state["failed"] = True
                _fail(fut, e)
                return
            self._compute.submit(compute, inp, lo, hi)

    def close(self):
        """Finish queued asynchronous work and stop the pipeline threads (also done when the model is freed)."""
        with self._pipe_lock:
            if self._prep is not None:
                self._prep.shutdown()
                self._compute.shutdown()
                self._prep = self._compute = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load(path, batch_size=1, device="cpu", threads=0, optimize=True, cache=True, cache_dir=None, precision="fp32",
         micro_batch=0, max_memory=None, profile=False, winograd=True):
    """Load and prepare an ONNX model.

    batch_size: samples per run of the plan (bound to the symbolic batch dimension); predict takes any count.
    device: "cpu" or "gpuN".  threads: 0 = all cores.  optimize: run the graph optimizer.
    cache / cache_dir: keep the optimized plan in a cache file (default $NN_CACHE_DIR, else ~/.cache/nn).
    precision: "fp32"; on the CPU "bf16" (AVX512-BF16 only, docs/precision.md); on a GPU "tf32" / "fp16".  micro_batch: CPU micro-batch size (0 = chosen).
    max_memory: refuse a model needing more bytes than this.  profile: time every node (Model.profile()).
    """
    return Model(path, batch_size, device, threads, optimize, cache, cache_dir, precision, micro_batch, max_memory,
                 profile, winograd)


def _measure(path, batch, iters, warmup, threads, device):
    """One --scan-batch row, in this process (scan_batch runs it in a child)."""
    import resource
    import time
    t0 = time.perf_counter()
    m = load(path, batch_size=batch, threads=threads, device=device)
    load_ms = (time.perf_counter() - t0) * 1e3
    rng = np.random.default_rng(0)
    x = []
    for i in m.inputs:
        shape = tuple(batch if d is None else d for d in i.shape)
        x.append(rng.standard_normal(shape).astype(i.dtype) if i.dtype.kind == "f" else np.zeros(shape, i.dtype))
    for _ in range(warmup):
        m.predict(x)
    lat = []
    start = time.perf_counter()
    for _ in range(iters):
        r0 = time.perf_counter()
        m.predict(x)
        lat.append((time.perf_counter() - r0) * 1e3)
    total = time.perf_counter() - start
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))]

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"batch": batch, "ok": True, "load_ms": load_ms,
            "latency_ms": {"median": pct(50), "p90": pct(90), "p99": pct(99)},
            "throughput": batch * iters / total, "peak_rss_mb": rss}


def scan_batch(path, sizes, latency_budget_ms=None, iters=20, warmup=3, threads=0, device="cpu"):
    """Measure each batch size in a fresh process (so each peak RSS is its own), like nnrun --scan-batch.

    Returns {"model", "scan": [row per size], "best_batch", "budget_batch"}, rows as in nnrun --json:
    batch, ok, load_ms, latency_ms {median, p90, p99}, throughput (samples/s), peak_rss_mb.
    best_batch: highest throughput; budget_batch: the largest batch whose p99 fits latency_budget_ms (-1: none).
    """
    rows = []
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for b in sizes:
        b = int(b)
        if b < 1:
            raise ArgumentError("batch sizes must be at least 1, got %d" % b)
        code = ("import json, sys; sys.path.insert(0, %r); import nn; "
                "print(json.dumps(nn._measure(%r, %d, %d, %d, %d, %r)))"
                % (pkg_parent, os.fspath(path), b, iters, warmup, threads, device))
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if p.returncode == 0:
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        else:
            rows.append({"batch": b, "ok": False, "error": (p.stderr.strip().splitlines() or [""])[-1]})
    good = [r for r in rows if r["ok"]]
    best = max(good, key=lambda r: r["throughput"])["batch"] if good else -1
    fits = [r["batch"] for r in good if latency_budget_ms is not None and r["latency_ms"]["p99"] <= latency_budget_ms]
    return {"model": os.fspath(path), "scan": rows, "best_batch": best, "budget_batch": max(fits) if fits else -1}
