"""pip install --no-build-isolation ./python : the package nn with its C extension (see docs/python.md).

Builds libnn.a with the project's Makefile first (make -C .. build/libnn.a) and links it into the
extension with clang, the compiler libnn.a's OpenMP code was built for (one OpenMP runtime, LLVM's).
Offline: it needs only Debian's python3-setuptools, python3-numpy and python3-dev.
"""
import os
import re
import subprocess
import sysconfig

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBNN = os.path.join(ROOT, "build", "libnn.a")
subprocess.check_call(["make", "-C", ROOT, "-s", "build/libnn.a"])
os.environ.setdefault("CC", "clang")
os.environ.setdefault("LDSHARED", "clang -shared")
multiarch = sysconfig.get_config_var("MULTIARCH") or ""
blas = "/usr/lib/%s/openblas-serial" % multiarch
with open(os.path.join(ROOT, "engine", "nn.h")) as f:
    version = re.search(r'NN_VERSION_STRING "([^"]+)"', f.read()).group(1)

setup(
    name="nn",
    version=version,
    description="Python binding of the nn ONNX inference engine",
    packages=["nn"],
    package_dir={"nn": os.path.relpath(os.path.join(HERE, "nn"))},
    ext_modules=[Extension(
        "nn._nn", [os.path.relpath(os.path.join(HERE, "nn", "_nn.c"))],
        include_dirs=[os.path.join(ROOT, "engine"), numpy.get_include()],
        extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-fopenmp"],
        extra_objects=[LIBNN],
        library_dirs=[blas], runtime_library_dirs=[blas],
        libraries=["openblas", "protobuf-c", "xxhash", "m", "pthread"],
        extra_link_args=["-fopenmp"],
    )],
    python_requires=">=3.9",
)
