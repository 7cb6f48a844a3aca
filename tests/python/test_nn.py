"""The Python package against PyTorch's outputs and the committed reference, and its contract:
input forms, sample counts, the async pipeline, errors, threads, the GIL and reference counting."""
import gc
import os
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "build", "models")
K = 4096  # features of the two-input model: 16 KiB per sample


def rel_err(got, want):
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def torch_data(name):
    base = os.path.join(MODELS, name)
    if not os.path.exists(base + ".onnx"):
        pytest.skip("%s.onnx not exported (make models)" % name)
    return base + ".onnx", np.load(base + ".input.npy"), np.load(base + ".output.npy")


@pytest.fixture(scope="session")
def two_io(tmp_path_factory):
    """y = Relu(a + b), z = a * b over [N, K]: two inputs, two outputs, a symbolic batch."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", K])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", K])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", K])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", K])
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="relu"),
             helper.make_node("Mul", ["a", "b"], ["z"], name="mul")]
    model = helper.make_model(helper.make_graph(nodes, "two_io", [a, b], [y, z]),
                              opset_imports=[helper.make_opsetid("", 13)])
    path = str(tmp_path_factory.mktemp("models") / "two_io.onnx")
    onnx.save(model, path)
    return path


def two_io_data(n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, K), dtype=np.float32)
    b = rng.standard_normal((n, K), dtype=np.float32)
    return a, b, np.maximum(a + b, 0), a * b


@pytest.fixture(scope="session")
def mobilenet():
    path, x, y = torch_data("mobilenet_v2")
    return nn.load(path, batch_size=3), x, y


# ---- outputs against references

def test_committed_reference():
    m = nn.load(os.path.join(ROOT, "models", "mobilenetv2.onnx"))
    x = np.load(os.path.join(ROOT, "models", "mobilenetv2.input.npy"))
    want = np.load(os.path.join(ROOT, "models", "mobilenetv2.output.npy"))
    got = m.predict(x)
    assert got.shape == want.shape and got.dtype == np.float32
    assert rel_err(got, want) <= 1e-4


# the larger models once with torch's two samples; the smaller ones over several sample counts
@pytest.mark.parametrize("name,batch,counts", [
    ("resnet50", 2, [2]), ("vgg19", 2, [2]), ("densenet201", 2, [2]),
    ("efficientnet_b0", 2, [1, 3]), ("googlenet", 2, [1, 3]),
    ("mobilenet_v2", 3, [1, 2, 4, 15]),  # 1, batch - 1, batch + 1, 5 x batch
])
def test_torch_models(name, batch, counts):
    path, x, want = torch_data(name)
    m = nn.load(path, batch_size=batch)
    for n in counts:
        rows = np.arange(n) % len(x)  # torch's samples repeated
        got = m.predict(x[rows])
        assert got.shape == (n,) + want.shape[1:], (name, n, got.shape)
        err = rel_err(got, want[rows])
        assert err <= 1e-4, "%s, %d samples at batch %d: relative error %g" % (name, n, batch, err)


def test_precision_bf16():
    """precision="bf16" runs the bf16 GEMM where the CPU has AVX512-BF16 (near fp32, not equal), else is refused."""
    path, x, _ = torch_data("mobilenet_v2")
    want = nn.load(path, cache=False).predict(x[:1])
    try:
        m = nn.load(path, precision="bf16", cache=False)
    except nn.Unsupported as e:
        assert "bf16 precision needs AVX512-BF16" in str(e)
        pytest.skip("no AVX512-BF16 here: refused as it should be")
    got = m.predict(x[:1])
    assert 1e-4 < rel_err(got, want) < 1e-1


def test_forms_and_dtypes(two_io):
    m = nn.load(two_io, batch_size=4)
    a, b, y, z = two_io_data(6)
    by_dict = m.predict({"a": a, "b": b})
    by_list = m.predict([a, b])
    by_tuple = m.predict((a, b))
    for r in (by_dict, by_list, by_tuple):
        assert sorted(r) == ["y", "z"]
        np.testing.assert_allclose(r["y"], y, rtol=1e-6)
        np.testing.assert_allclose(r["z"], z, rtol=1e-6)
    # float64 and strided inputs are converted; the caller's arrays are left alone
    a64, b_t = a.astype(np.float64), np.asfortranarray(b)
    r = m.predict({"b": b_t, "a": a64})
    np.testing.assert_allclose(r["z"], z, rtol=1e-6)
    assert a64.dtype == np.float64 and not b_t.flags.c_contiguous
    # nested lists become arrays too
    r = m.predict([a[:1].tolist(), b[:1].tolist()])
    np.testing.assert_allclose(r["y"], y[:1], rtol=1e-6)


def test_array_form(mobilenet):
    m, x, want = mobilenet
    assert rel_err(m.predict(x), want) <= 1e-4
    assert rel_err(m.predict([x]), want) <= 1e-4
    assert rel_err(m.predict({"input": x} if m.inputs[0].name == "input" else {m.inputs[0].name: x}), want) <= 1e-4


def test_inputs_used_in_place(two_io):
    """A C-contiguous float32 input is not copied; a float64 one is converted (one copy)."""
    m = nn.load(two_io, batch_size=8)
    a, b, _, _ = two_io_data(64)
    a64 = a.astype(np.float64)
    m.predict([a, b])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        m.predict([a, b])
        in_place = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        m.predict([a64, b])
        converted = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    outputs = 2 * a.nbytes
    assert in_place < outputs + a.nbytes // 2, "inputs copied: peak %d bytes for %d of outputs" % (in_place, outputs)
    assert converted >= outputs + a.nbytes, "float64 input not converted? peak %d" % converted


def test_info_stats_profile(two_io):
    m = nn.load(two_io, batch_size=4, profile=True, threads=1)
    assert [(i.name, i.shape, i.dtype, i.batch_axis) for i in m.inputs] == [
        ("a", (None, K), np.float32, 0), ("b", (None, K), np.float32, 0)]
    assert [o.name for o in m.outputs] == ["y", "z"]
    s = m.stats
    assert s["batch"] == 4 and s["threads"] == 1 and s["nodes"] >= 1 and s["parameters"] == 0
    m.predict(list(two_io_data(5)[:2]))
    assert "Relu" in m.profile() or "Add" in m.profile()
    with pytest.raises(nn.ArgumentError):
        nn.load(two_io).profile()


def test_unbatched_dynamic_model():
    """lstm_seq's shapes depend on the sequence length: the engine allocates, the arrays adopt the buffers."""
    path, x, want = torch_data("lstm_seq")
    m = nn.load(path)
    got = m.predict(x)
    assert got.shape == want.shape and rel_err(got, want) <= 1e-4
    assert not got.flags.owndata and got.flags.writeable


# ---- async pipeline

def test_async_matches_predict_and_torch(mobilenet):
    m, x, want = mobilenet
    rows = np.arange(16) % 2
    got = m.predict_async(x[rows]).result(timeout=300)
    assert got.shape == (16, 1000) and rel_err(got, want[rows]) <= 1e-4


def test_async_ordering(two_io):
    m = nn.load(two_io, batch_size=4)
    done, futs, expect = [], [], []
    for i, n in enumerate([1, 9, 3, 4, 17, 2, 8, 5] * 3):
        a, b, y, z = two_io_data(n, seed=i)
        f = m.predict_async({"a": a, "b": b})
        f.add_done_callback(lambda _f, i=i: done.append(i))
        futs.append(f)
        expect.append((y, z))
    for f, (y, z) in zip(futs, expect):
        r = f.result(timeout=60)
        np.testing.assert_allclose(r["y"], y, rtol=1e-6)
        np.testing.assert_allclose(r["z"], z, rtol=1e-6)
    assert done == sorted(done), "futures completed out of order: %s" % done
    m.close()


def test_async_errors(two_io):
    m = nn.load(two_io, batch_size=4)
    a, b, _, _ = two_io_data(10)
    with pytest.raises(nn.ShapeError):
        m.predict_async([a, b[:, :7]]).result(timeout=60)
    with pytest.raises(nn.ShapeError):
        m.predict_async([a, b[:9]]).result(timeout=60)
    with pytest.raises(nn.ArgumentError):
        m.predict_async({"a": a}).result(timeout=60)
    # the pipeline goes on after a failure
    np.testing.assert_allclose(m.predict_async([a, b]).result(timeout=60)["z"], a * b, rtol=1e-6)


# ---- errors

def expect_error(cls, fn, needle):
    with pytest.raises(cls) as e:
        fn()
    msg = str(e.value)
    assert needle in msg, msg
    assert "\n" not in msg and isinstance(e.value, nn.Error)
    return e.value


def test_errors(tmp_path, two_io):
    expect_error(nn.FileError, lambda: nn.load(str(tmp_path / "missing.onnx")), "missing.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xff\xff\xff this is not protobuf")
    expect_error(nn.ParseError, lambda: nn.load(garbage), "not a valid ONNX")

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    dangling = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], "g", [x], [y])
    onnx.save(helper.make_model(dangling, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "d.onnx"))
    expect_error(nn.InvalidModel, lambda: nn.load(tmp_path / "d.onnx"), "ghost")
    unknown = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")], "g", [x], [y])
    onnx.save(helper.make_model(unknown, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "u.onnx"))
    expect_error(nn.Unsupported, lambda: nn.load(tmp_path / "u.onnx"), "NoSuchOp")

    m = nn.load(two_io, batch_size=2)
    a, b, _, _ = two_io_data(3)
    expect_error(nn.ShapeError, lambda: m.predict([a, b[:, :5]]), "input 'b' dimension 1 must be %d, got 5" % K)
    expect_error(nn.ShapeError, lambda: m.predict([a, b[:2]]), "disagree")
    expect_error(nn.ArgumentError, lambda: m.predict({"a": a, "c": b}), "no input named 'c'")
    expect_error(nn.ArgumentError, lambda: m.predict({"a": a}), "'b' is missing")
    expect_error(nn.ArgumentError, lambda: m.predict(a), "pass a dict or a list")
    expect_error(nn.ArgumentError, lambda: m.predict([a]), "takes 2 inputs")
    expect_error(nn.ArgumentError, lambda: nn.load(two_io, device="tpu0"), "unknown device 'tpu0'")
    expect_error(nn.ArgumentError, lambda: nn.load(two_io, batch_size=0), "batch size")
    expect_error(nn.ArgumentError, lambda: nn.load(two_io, precision="int4"), "precision")
    expect_error(nn.DeviceError, lambda: nn.load(two_io, device="gpu999"), "gpu999")
    e = expect_error(nn.OutOfMemory, lambda: nn.load(two_io, max_memory=1000, cache=False), "")
    assert isinstance(e, MemoryError) and e.status == 6
    assert issubclass(nn.ShapeError, ValueError) and issubclass(nn.FileError, OSError)


# ---- threads and the GIL

def test_threads_share_a_model(two_io):
    m = nn.load(two_io, batch_size=4)
    failures = []

    def work(seed):
        for i in range(30):
            a, b, y, z = two_io_data(1 + (seed + i) % 9, seed=seed * 100 + i)
            r = m.predict([a, b])
            if not (np.array_equal(r["y"], y) and np.allclose(r["z"], z, rtol=1e-6)):
                failures.append((seed, i))

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not failures


def test_models_in_parallel_threads(mobilenet):
    _, x, want = mobilenet
    path = os.path.join(MODELS, "mobilenet_v2.onnx")
    results = {}

    def work(k):
        results[k] = nn.load(path, batch_size=1, threads=1).predict(x)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(rel_err(results[k], want) <= 1e-4 for k in range(2))


def test_gil_released_while_computing(mobilenet):
    m, x, _ = mobilenet
    xs = x[np.arange(12) % 2]
    m.predict(xs)
    count, stop = [0], [False]

    def spin():
        while not stop[0]:
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    t0, before = time.perf_counter(), count[0]
    m.predict(xs)
    elapsed, during = time.perf_counter() - t0, count[0] - before
    stop[0] = True
    t.join()
    # with the GIL held through the engine call the spinning thread would not count at all meanwhile
    assert during > 1000, "%d increments during a %.0f ms prediction" % (during, elapsed * 1e3)


# ---- reference counting: 1000 calls, RSS flat

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_no_leaks_over_1000_calls(two_io):
    m = nn.load(two_io, batch_size=8)
    a, b, _, _ = two_io_data(16)  # 256 KiB per array: a leaked output a call would be 500 MB
    refs = (sys.getrefcount(a), sys.getrefcount(b))
    for _ in range(100):
        m.predict([a, b])
    gc.collect()
    start = rss_mb()
    for i in range(1000):
        r = m.predict({"a": a, "b": b} if i % 2 else [a, b])
        if i % 100 == 0:
            m.predict_async([a, b]).result()
    del r
    gc.collect()
    grown = rss_mb() - start
    assert (sys.getrefcount(a), sys.getrefcount(b)) == refs, "input reference counts changed"
    assert grown < 16, "RSS grew %.1f MB over 1000 calls" % grown


def test_no_leaks_dynamic_outputs():
    path, x, _ = torch_data("lstm_seq")
    m = nn.load(path)
    xs = np.ascontiguousarray(np.tile(x, (100, 1, 1)))  # 1000 steps: 94 KiB of output a call
    for _ in range(20):
        m.predict(xs)
    gc.collect()
    start = rss_mb()
    for _ in range(300):
        m.predict(xs)
    gc.collect()
    grown = rss_mb() - start
    assert grown < 8, "RSS grew %.1f MB over 300 calls adopting engine buffers" % grown


# ---- scan_batch

def test_scan_batch(two_io):
    r = nn.scan_batch(two_io, [1, 4], latency_budget_ms=1e6, iters=5, warmup=1)
    assert [row["batch"] for row in r["scan"]] == [1, 4] and all(row["ok"] for row in r["scan"])
    assert r["best_batch"] in (1, 4) and r["budget_batch"] == 4
    assert all(row["latency_ms"]["p99"] >= row["latency_ms"]["median"] > 0 for row in r["scan"])
    bad = nn.scan_batch(os.path.join(ROOT, "no-such.onnx"), [1], iters=1, warmup=0)
    assert not bad["scan"][0]["ok"] and "no-such.onnx" in bad["scan"][0]["error"] and bad["best_batch"] == -1


# ---- the example

def test_classify_example():
    """examples/classify.py's top-5 equals torchvision's preprocessing fed to the committed model."""
    torchvision = pytest.importorskip("torchvision")
    from PIL import Image
    import torch
    from torchvision import transforms
    image = os.path.join(ROOT, "examples", "sample.jpg")
    model = os.path.join(ROOT, "models", "mobilenetv2.onnx")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "classify.py"), model, image],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    top5 = [int(line.split()[0]) for line in out.stdout.strip().splitlines()[-5:]]
    t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    x = t(Image.open(image).convert("RGB")).unsqueeze(0).numpy()
    logits = nn.load(model).predict(x)[0]
    assert top5 == [int(i) for i in np.argsort(-logits)[:5]], (top5, np.argsort(-logits)[:5])
    assert torchvision and torch


# ---- packaging

def test_pip_install_offline(tmp_path):
    """pip install --no-build-isolation ./python builds and installs offline with Debian's setuptools."""
    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index",
                          "--no-cache-dir", "--target", str(target), os.path.join(ROOT, "python")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    env = dict(os.environ, PYTHONPATH=str(target))
    x = os.path.join(ROOT, "models", "mobilenetv2.input.npy")
    run = subprocess.run([sys.executable, "-c", "import nn, numpy as np; print(nn.__file__); "
                          "print(nn.load(%r).predict(np.load(%r)).shape)" % (
                              os.path.join(ROOT, "models", "mobilenetv2.onnx"), x)],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].startswith(str(target)) and run.stdout.splitlines()[1] == "(1, 1000)"
