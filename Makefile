# nn — build, test, run.   make run | make test | make models | make bench | make python | make install [PREFIX=DIR] [DESTDIR=DIR]
#
# Debug build:  make DEBUG=1  (assertions + the IR verifier after every pass)

CC       := clang
BUILD    := build
PREFIX   ?= /usr/local
DEBUG    ?= 0
ONNX_PROTO := /usr/include/onnx/onnx.proto
PYTHON   := /usr/bin/python3
MODELS_DIR := $(BUILD)/models

ifeq ($(DEBUG),1)
OPTFLAGS := -O1 -gdwarf-4 -DNN_DEBUG=1
else
OPTFLAGS := -O2 -gdwarf-4
endif
# Op descriptors leave optional trailing hooks out of their initializers (they are NULL).
CFLAGS    = -std=c11 -D_GNU_SOURCE $(OPTFLAGS) -Wall -Wextra -Werror -Wno-missing-field-initializers -fPIC -fvisibility=hidden \
            -fopenmp -I$(BUILD)/proto -I$(BLAS_INC) $(shell pkg-config --cflags libprotobuf-c 2>/dev/null)
# Debian's single-threaded OpenBLAS (libopenblas-serial-dev), named by its folder and found through the
# rpath, so that it is the one loaded whichever flavour /usr/lib/<triplet>/libopenblas.so.0 points to:
# it starts no threads, so the GEMM can call it inside its own OpenMP team (ops/gemm_scalar.c).
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
BLAS_DIR  := /usr/lib/$(MULTIARCH)/openblas-serial
BLAS_INC  := /usr/include/$(MULTIARCH)/openblas-serial
LIBS     := -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas -lprotobuf-c -lxxhash -fopenmp -lm -lpthread
# The OpenMP runtime clang links (libomp), which lives beside clang's own libraries (<clang's folder>/../lib,
# where clang -fopenmp looks) and not where gcc looks: nn.pc names the folder, so that a program linking the
# static library with gcc or clang finds the one runtime the library was built for.
OMP_LIBDIR  = $(abspath $(dir $(realpath $(shell command -v $(CC))))../lib)
# The shared library's version is the engine's (engine/nn.h); its SONAME carries the major number.
VERSION  := $(shell sed -n 's/.*NN_VERSION_STRING "\(.*\)"/\1/p' engine/nn.h)
SOMAJOR  := $(firstword $(subst ., ,$(VERSION)))

# The CUDA backend (cuda/, --device gpuN) is built when a toolkit with cuDNN
# is found, as the plugin libnn_cuda.so that libnn opens for a gpuN device
# (engine/plugin.h): libnn, its programs and nn.pc link no CUDA library.
# `make CUDA_HOME=/nonexistent` builds no plugin.
CUDA_HOME   ?= /usr/local/cuda
NVCC        := $(CUDA_HOME)/bin/nvcc
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
HAVE_CUDA   := $(if $(and $(wildcard $(NVCC)),$(wildcard $(CUDA_HOME)/include/cudnn.h),$(CUDA_LIBDIR)),1)
ifeq ($(HAVE_CUDA),1)
# Ampere and Hopper machine code, plus PTX that newer GPUs compile at load
CUDA_ARCHS  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS    = -std=c++17 -O2 -g $(CUDA_ARCHS) -Werror all-warnings -DNN_HAVE_CUDA \
               -DNN_CUDA_LIBDIR='"$(CUDA_LIBDIR)"' -Xcompiler -Wall,-Wextra,-Werror,-fPIC,-fvisibility=hidden \
               -Xcompiler -fno-exceptions,-fno-rtti,-Wno-missing-field-initializers
# cuBLASLt is opened when a model attaches to a GPU, not linked (cuda/lt.h)
CUDA_LINK   := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudnn -lcudart -ldl -lstdc++
CUDA_OBJS   := $(patsubst %.cu,$(BUILD)/%.o,$(wildcard cuda/*.cu))
CUDA_PLUGIN := $(BUILD)/libnn_cuda.so
endif

ENGINE_SRC := $(wildcard engine/*.c) $(wildcard ops/*.c) $(wildcard passes/*.c)
PROTO_C    := $(BUILD)/proto/onnx.pb-c.c
OBJS       := $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/proto/onnx.pb-c.o
TOOLS      := $(BUILD)/nnrun $(BUILD)/nndump $(BUILD)/nncache $(BUILD)/nnserve
# nnserve (server/, docs/server.md): libmicrohttpd for HTTP, jansson for JSON, TurboJPEG and libpng for images
SERVER_SRC  := $(wildcard server/*.c)
SERVER_OBJS := $(SERVER_SRC:%.c=$(BUILD)/%.o)
SERVER_LIBS := -lmicrohttpd -ljansson -lturbojpeg -lpng
# the CUDA host test checks the kernels' index arithmetic (cuda/index.h) against the CPU ops
TESTS_C    := $(filter-out $(if $(HAVE_CUDA),,tests/test_cuda_host.c),$(wildcard tests/test_*.c))
TEST_BINS  := $(TESTS_C:tests/%.c=$(BUILD)/tests/%) $(BUILD)/tests/conformance $(BUILD)/tests/compare_npy \
              $(if $(HAVE_CUDA),$(BUILD)/tests/gpu/pipeline)

.PHONY: all deps test-deps run test models bench install clean conformance fuzz
all: $(BUILD)/libnn.a $(BUILD)/libnn.so $(TOOLS) $(BUILD)/nnab $(CUDA_PLUGIN)

# Missing Debian packages are installed before the first compile.
deps: $(BUILD)/.deps-build
$(BUILD)/.deps-build: tools/install-deps.sh
	@mkdir -p $(BUILD)
	tools/install-deps.sh build
	@touch $@
test-deps: $(BUILD)/.deps-test
# after the build packages: two apt-get runs at once (make -j) fail on dpkg's lock
$(BUILD)/.deps-test: tools/install-deps.sh | $(BUILD)/.deps-build
	@mkdir -p $(BUILD)
	tools/install-deps.sh test
	@touch $@

# proto/: C code generated from the schema Debian's libonnx-dev installs.
# one recipe makes both files (a grouped target: parallel makes must not run protoc-c twice)
$(BUILD)/proto/onnx.pb-c.c $(BUILD)/proto/onnx.pb-c.h &: $(ONNX_PROTO) | $(BUILD)/.deps-build
	@mkdir -p $(BUILD)/proto
	cp $(ONNX_PROTO) $(BUILD)/proto/onnx.proto
	cd $(BUILD)/proto && protoc-c --c_out=. onnx.proto

# on a fresh machine the schema itself comes with the build dependencies
$(ONNX_PROTO): | $(BUILD)/.deps-build

$(BUILD)/proto/onnx.pb-c.o: $(BUILD)/proto/onnx.pb-c.c
	$(CC) $(filter-out -Wextra,$(CFLAGS)) -c $< -o $@

$(BUILD)/%.o: %.c $(BUILD)/proto/onnx.pb-c.h | $(BUILD)/.deps-build
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DNN_BUILDING_LIBRARY -MMD -MP -c $< -o $@

$(BUILD)/cuda/%.o: cuda/%.cu | $(BUILD)/.deps-build
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# where an installed libnn looks for its plugins when none lies beside it; the stamp holds the PREFIX it
# was built for, so that `make install PREFIX=...` with another one rebuilds it
$(BUILD)/engine/device.o: CFLAGS += -DNN_PLUGIN_DIR='"$(PREFIX)/lib"'
$(BUILD)/engine/device.o: $(BUILD)/.prefix
$(BUILD)/.prefix: FORCE
	@mkdir -p $(dir $@)
	@echo '$(PREFIX)' | cmp -s - $@ || echo '$(PREFIX)' > $@
.PHONY: FORCE

# The plugin defines the engine functions it calls as forwarders to the table libnn hands it, so it links
# no part of libnn: --no-undefined proves that nothing else is left for the loader to find.
$(CUDA_PLUGIN): $(CUDA_OBJS)
	$(CC) -shared -o $@ $^ $(CUDA_LINK) -Wl,--no-undefined -Wl,-soname,libnn_cuda.so

-include $(OBJS:.o=.d) $(CUDA_OBJS:.o=.d) $(SERVER_OBJS:.o=.d)

$(BUILD)/libnn.a: $(OBJS)
	rm -f $@ && ar rcs $@ $^

# Only nn_* symbols are exported (NN_API marks them; everything else is hidden).
# libnn.so -> libnn.so.0 (the SONAME programs record) -> libnn.so.0.x.y
$(BUILD)/libnn.so.$(VERSION): $(OBJS)
	$(CC) -shared -o $@ $^ $(LIBS) -Wl,-soname,libnn.so.$(SOMAJOR)
$(BUILD)/libnn.so: $(BUILD)/libnn.so.$(VERSION)
	ln -sf libnn.so.$(VERSION) $(BUILD)/libnn.so.$(SOMAJOR)
	ln -sf libnn.so.$(SOMAJOR) $@

NNRUN_SRC := tools/nnrun.c tools/nnrun_report.c tools/nnrun_stats.c tools/nnrun_ensemble.c
$(BUILD)/nnrun: $(NNRUN_SRC) tools/nnrun.h tools/nnrun_stats.h tools/nnrun_ensemble.h $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $(NNRUN_SRC) -o $@ $(BUILD)/libnn.a $(LIBS)

# the server's objects are built by the pattern rule with -Iengine; they use only nn.h
$(SERVER_OBJS): CFLAGS += -Iengine
$(BUILD)/nnserve: $(SERVER_OBJS) $(BUILD)/libnn.a
	$(CC) $(CFLAGS) $(SERVER_OBJS) -o $@ $(BUILD)/libnn.a $(LIBS) $(SERVER_LIBS)

$(BUILD)/nndump: tools/nndump.c $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

$(BUILD)/nncache: tools/nncache.c $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

# in-process A/B of two sets of passes (docs/perf-notes.md); built, not installed
$(BUILD)/nnab: tools/nnab.c $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

$(BUILD)/tests/%: tests/%.c tests/check.h tests/onnx_builder.h tests/op_harness.h $(BUILD)/libnn.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine -Iops $< -o $@ $(BUILD)/libnn.a $(LIBS)

# reads the plugin's own statistics (cuda/stats.h), so it links the plugin too
$(BUILD)/tests/gpu/pipeline: tests/gpu/pipeline.c $(BUILD)/libnn.a $(CUDA_PLUGIN)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS) $(CUDA_PLUGIN) -Wl,-rpath,'$$ORIGIN/../..'

# the statistics and powercap test compiles nnrun's measuring code in
$(BUILD)/tests/test_nnrun_stats: tools/nnrun_stats.c tools/nnrun_stats.h

# ---- the main job: run the committed default model
run: all
	$(BUILD)/nnrun models/mobilenetv2.onnx --batch 1 --iters 20

# ---- models: torchvision CNNs with seeded random weights (not committed).
# A changed export script re-exports everything (--force, about a minute).
models: $(MODELS_DIR)/.done
$(MODELS_DIR)/.done: models/export.py | $(BUILD)/.deps-test
	@mkdir -p $(MODELS_DIR)
	$(PYTHON) models/export.py --out $(MODELS_DIR) $(if $(wildcard $@),--force)
	@touch $@

# ---- Python: the package nn (python/nn) for $(PYTHON), its C extension linked with libnn.a (docs/python.md).
#   make python                 build it into $(BUILD)/python and install it where $(PYTHON) finds it:
#                               its site-packages for local installs (/usr/local/lib/python3.X/dist-packages
#                               on Debian) when writable, else the user's site-packages (python3 -m site)
#   make python PY_SITE=DIR     install into DIR instead
# The extension is named _nn.so, a suffix every CPython accepts: the rules need no Python at parse time.
PY_PKG  := $(BUILD)/python/nn
PY_SRC  := $(wildcard python/nn/*.py)
PY_SITE ?=
PY_CFLAGS = $(filter-out -fvisibility=hidden,$(CFLAGS)) -Wno-missing-field-initializers -Wno-cast-function-type \
            -I$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
            -I$$($(PYTHON) -c 'import numpy; print(numpy.get_include())')
$(BUILD)/.deps-python: tools/install-deps.sh
	@mkdir -p $(BUILD)
	tools/install-deps.sh python
	@touch $@
$(PY_PKG)/_nn.so: python/nn/_nn.c engine/nn.h $(BUILD)/libnn.a | $(BUILD)/.deps-python
	@mkdir -p $(PY_PKG)
	$(CC) $(PY_CFLAGS) -Iengine -shared $< -o $@ $(BUILD)/libnn.a $(LIBS)
$(PY_PKG)/%.py: python/nn/%.py
	@mkdir -p $(PY_PKG)
	cp $< $@
python-build: $(PY_PKG)/_nn.so $(PY_SRC:python/nn/%=$(PY_PKG)/%) $(CUDA_PLUGIN)
	$(if $(CUDA_PLUGIN),cp $(CUDA_PLUGIN) $(PY_PKG)/)
python: python-build
	@site="$(PY_SITE)"; \
	if [ -z "$$site" ]; then \
	    site=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	    mkdir -p "$$site" 2>/dev/null; \
	    [ -w "$$site" ] || site=$$($(PYTHON) -m site --user-site); \
	fi; \
	mkdir -p "$$site/nn" && cp $(PY_PKG)/* "$$site/nn/" && echo "installed nn into $$site/nn"
	cd / && PYTHONPATH=$(PY_SITE) $(PYTHON) -c 'import nn; print("import nn:", nn.__file__)'
.PHONY: python python-build

# ---- tests
conformance: $(BUILD)/tests/conformance all | $(BUILD)/.deps-test
	$(BUILD)/tests/conformance

test: all $(TEST_BINS) python-build | $(BUILD)/.deps-test
	tests/run_all.sh

# ---- portability: the engine must build where the x86 kernels cannot run.  Every engine/, ops/ and
# passes/ source is compiled (not linked) for generic x86-64 and for AArch64 against Debian's arm64 libc
# headers (libc6-dev-arm64-cross, a test dependency); tests/run_all.sh runs it.
PORTABLE_CFLAGS  = -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -Wno-missing-field-initializers -fopenmp \
                   -I$(BUILD)/proto
AARCH64_INCLUDE := /usr/aarch64-linux-gnu/include
# host headers that are the same on every architecture (protobuf-c, cblas) come after the target's libc
AARCH64_CFLAGS   = --target=aarch64-linux-gnu -isystem $(AARCH64_INCLUDE) -idirafter /usr/include \
                   -idirafter $(BLAS_INC)
# gcc 12 too, at -O2 where its flow warnings run: clang's loop and fp pragmas are hints it skips, and its
# maybe-uninitialized cannot follow the GEMM tile's row mask (ops/gemm_x86.c), so that one is off there
GCC_CFLAGS = -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wno-missing-field-initializers -Wno-unknown-pragmas \
             -fopenmp -I$(BUILD)/proto -I$(BLAS_INC) -Iengine
check-portable: $(BUILD)/proto/onnx.pb-c.h | $(BUILD)/.deps-test
	@test -f $(AARCH64_INCLUDE)/stdio.h || { echo "check-portable: no $(AARCH64_INCLUDE) (make test-deps)"; exit 1; }
	@for f in $(ENGINE_SRC); do \
	    $(CC) $(PORTABLE_CFLAGS) -march=x86-64 -c $$f -o /dev/null || { echo "check-portable: $$f, x86-64"; exit 1; }; \
	    gcc $(GCC_CFLAGS) $$([ $$f = ops/gemm_x86.c ] && echo -Wno-maybe-uninitialized) -c $$f -o /dev/null || { echo "check-portable: $$f, gcc"; exit 1; }; \
	    $(CC) $(PORTABLE_CFLAGS) $(AARCH64_CFLAGS) -c $$f -o /dev/null || { echo "check-portable: $$f, aarch64"; exit 1; }; \
	done; echo "check-portable: $(words $(ENGINE_SRC)) sources build for generic x86-64, for aarch64 and with gcc"
.PHONY: check-portable

# ---- benchmark against ONNX Runtime
#   make bench          the six seed CNNs at batch 1 and 64
#   make bench ZOO=1    the zoo (models/zoo.py's `zoo` group, exported into $(BUILD)/zoo) and the six
ZOO_DIR := $(BUILD)/zoo
#   make bench QDQ=1    int8: QDQ forms of eight CNNs (models/quantize.py, into $(BUILD)/q) against ORT's int8
bench: all models
	$(if $(ZOO),$(PYTHON) models/export.py --out $(ZOO_DIR) --only zoo)
	tools/bench $(if $(ZOO),--zoo) $(if $(QDQ),--qdq) $(BENCH_ARGS)

# ---- docs/operators.md, the supported-operators table (tests/run_all.sh checks it is current)
docs: | $(BUILD)/.deps-test
	$(PYTHON) tools/gen_operators.py
.PHONY: docs

# ---- the real non-CNN models against torch (Swin-T, ViT-B/16, BERT-style, three detectors)
check-models: all | $(BUILD)/.deps-test
	tests/check_zoo.sh
.PHONY: check-models

# ---- nnserve under load on loopback (bounded: 14 points of BENCH_SERVE_SECONDS each); not part of make test
BENCH_SERVE_SECONDS ?= 5
BENCH_SERVE_MODEL   ?= models/mobilenetv2.onnx
bench-serve: all $(BUILD)/bench_decode | $(BUILD)/.deps-test
	$(PYTHON) tools/bench_serve.py --make-jpegs $(BUILD)/bench-jpegs
	$(BUILD)/bench_decode 2 $(BUILD)/bench-jpegs/small.jpg $(BUILD)/bench-jpegs/medium.jpg $(BUILD)/bench-jpegs/large.jpg
	OPENBLAS_CORETYPE=Haswell $(PYTHON) tools/bench_serve.py $(BUILD) $(BENCH_SERVE_MODEL) --duration $(BENCH_SERVE_SECONDS)
	OPENBLAS_CORETYPE=Haswell $(PYTHON) tools/bench_serve.py $(BUILD) $(BENCH_SERVE_MODEL) --duration $(BENCH_SERVE_SECONDS) \
	    --clients 1,16 --images $(BUILD)/bench-jpegs/small.jpg,$(BUILD)/bench-jpegs/medium.jpg,$(BUILD)/bench-jpegs/large.jpg
# nnserve's image pre-processing alone, one thread
$(BUILD)/bench_decode: tools/bench_decode.c $(filter-out $(BUILD)/server/main.o,$(SERVER_OBJS)) $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $^ -o $@ $(LIBS) $(SERVER_LIBS)
.PHONY: bench-serve

# ---- fuzzing (clang's libFuzzer + AddressSanitizer + UBSan); not part of make test.
#   make fuzz                                  every target below, FUZZ_SECONDS each
#   make fuzz FUZZ_TARGETS=cache FUZZ_SECONDS=600   one of them
# load:  the loader (ONNX models, .npy, .pb).  Seeds: every conformance model, the malformed
#        corpus, a .npy and .pb tensors.
# cache: the plan cache reader, built to skip its key and checksum comparisons (a re-sealed
#        file passes them anyway).  Seeds: plans nnrun writes for the conformance models.
# request: nnserve's infer request parsing, JSON and the binary tensor data split (tests/fuzz/fuzz_request.c).
#        Seeds: tests/fuzz/request_seeds.py.
# image: nnserve's image decoding (tests/fuzz/fuzz_image.c).  Seeds: small JPEGs and PNGs made by
#        tools/bench_serve.py --make-jpegs.
# Finds are kept in $(BUILD)/fuzz-corpus (load) and fuzz-corpus-cache between runs; crashes land in
# $(BUILD)/fuzz-crashes.
FUZZ_SECONDS ?= 120
FUZZ_TARGETS ?= load cache request image
FUZZ_SEEDS   := $(BUILD)/fuzz-seeds
ONNX_NODE_TESTS := /usr/share/libonnx-testdata/data/node
# The loader is the same with or without the CUDA backend: the fuzzers build the CPU-only library.
FUZZ_CC = $(CC) $(filter-out -fvisibility=hidden -DNN_HAVE_CUDA,$(CFLAGS)) -fsanitize=fuzzer,address,undefined \
          -fno-sanitize-recover=all -Iengine
FUZZ_RUN = ASAN_OPTIONS=allocator_may_return_null=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1
fuzz: $(FUZZ_TARGETS:%=fuzz-%)
.PHONY: fuzz-load fuzz-cache fuzz-request fuzz-image
fuzz-image: $(BUILD)/libnn.a | $(BUILD)/.deps-test
	$(FUZZ_CC) tests/fuzz/fuzz_image.c server/image.c server/protocol.c server/queue.c server/metrics.c -o $(BUILD)/fuzz_image $(BUILD)/libnn.a \
	    $(filter-out $(CUDA_LINK),$(LIBS)) $(SERVER_LIBS)
	$(PYTHON) tools/bench_serve.py --make-jpegs $(FUZZ_SEEDS)-image --small
	@mkdir -p $(BUILD)/fuzz-corpus-image $(BUILD)/fuzz-crashes
	$(FUZZ_RUN) $(BUILD)/fuzz_image -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz-crashes/image- $(BUILD)/fuzz-corpus-image $(FUZZ_SEEDS)-image
fuzz-request: $(BUILD)/libnn.a | $(BUILD)/.deps-test
	$(FUZZ_CC) tests/fuzz/fuzz_request.c server/protocol.c -o $(BUILD)/fuzz_request $(BUILD)/libnn.a \
	    $(filter-out $(CUDA_LINK),$(LIBS)) -ljansson
	$(PYTHON) tests/fuzz/request_seeds.py $(FUZZ_SEEDS)-request
	@mkdir -p $(BUILD)/fuzz-corpus-request $(BUILD)/fuzz-crashes
	$(FUZZ_RUN) $(BUILD)/fuzz_request -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz-crashes/request- $(BUILD)/fuzz-corpus-request $(FUZZ_SEEDS)-request
fuzz-load: $(BUILD)/proto/onnx.pb-c.c | $(BUILD)/.deps-test
	$(FUZZ_CC) tests/fuzz/fuzz_load.c $(ENGINE_SRC) $(PROTO_C) -o $(BUILD)/fuzz_load $(filter-out $(CUDA_LINK),$(LIBS))
	$(PYTHON) tests/malformed/gen_corpus.py $(BUILD)/malformed
	tests/fuzz/seeds.sh $(FUZZ_SEEDS) $(ONNX_NODE_TESTS) $(BUILD)/malformed
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-crashes
	NN_CACHE_DIR=$$(mktemp -d) $(FUZZ_RUN) \
	    $(BUILD)/fuzz_load -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz-crashes/ $(BUILD)/fuzz-corpus $(FUZZ_SEEDS)
# The cache fuzzer's library is built like make sanitize's, into its own folder (incremental,
# parallel), with coverage for libFuzzer and the reader's key and checksum comparisons left out.
FUZZ_LIB := $(BUILD)/fuzz/libnn.a
.PHONY: $(FUZZ_LIB)
$(FUZZ_LIB): | $(BUILD)/.deps-test
	$(MAKE) BUILD=$(BUILD)/fuzz SANITIZE=fuzzer-no-link,address,undefined FUZZ_BUILD=1 CUDA_HOME=/nonexistent $@
fuzz-cache: $(BUILD)/nnrun $(FUZZ_LIB) | $(BUILD)/.deps-test
	$(CC) $(filter-out -DNN_HAVE_CUDA,$(CFLAGS)) -fsanitize=fuzzer,address,undefined -Iengine tests/fuzz/fuzz_cache.c \
	    -o $(BUILD)/fuzz_cache $(FUZZ_LIB) $(filter-out $(CUDA_LINK),$(LIBS))
	tests/fuzz/cache_seeds.sh $(FUZZ_SEEDS)-cache $(ONNX_NODE_TESTS) $(BUILD)/nnrun 262144
	@mkdir -p $(BUILD)/fuzz-corpus-cache $(BUILD)/fuzz-crashes
	$(FUZZ_RUN) $(BUILD)/fuzz_cache -max_total_time=$(FUZZ_SECONDS) -max_len=262144 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz-crashes/cache- $(BUILD)/fuzz-corpus-cache $(FUZZ_SEEDS)-cache
# The crafted-cache replay (tests/fuzz/cache_mutate.c) on that library, where its SLOT_MODEL works:
#   make build/fuzz/tests/cache_mutate && build/fuzz/tests/cache_mutate MODEL COUNT SEED SMALL_MODEL
$(BUILD)/fuzz/tests/cache_mutate: tests/fuzz/cache_mutate.c $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -DNN_HAVE_CUDA,$(CFLAGS)) -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
	    -Iengine $< -o $@ $(FUZZ_LIB) $(filter-out $(CUDA_LINK),$(LIBS))
# (FUZZ_BUILD=1 is how that recursive make asks for it)
ifneq ($(FUZZ_BUILD),)
CFLAGS += -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
endif

# ---- sanitizers: the same sources built into their own folders, never mixed with $(BUILD)
#   make sanitize   library, tools and tests with ASan + UBSan in build/asan, then the whole suite
#   make tsan       ThreadSanitizer build in build/tsan, then the concurrency tests
# (SANITIZE=... is how those recursive makes ask for instrumented objects.)
SANITIZE ?=
ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
LIBS   += -fsanitize=$(SANITIZE)
endif
# tests that run outside the valgrind loop (tests/run_all.sh says why)
EXTRA_TESTS := $(BUILD)/tests/nn_load $(BUILD)/tests/concurrency $(BUILD)/tests/load_free_rss
test: $(EXTRA_TESTS)
test-programs: all $(TEST_BINS) $(EXTRA_TESTS)

$(BUILD)/tests/nn_load: tests/malformed/nn_load.c $(BUILD)/libnn.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

# the crafted-cache attack (tests/fuzz/cache_mutate.c): run from an ASan + UBSan build
$(BUILD)/tests/cache_mutate: tests/fuzz/cache_mutate.c $(BUILD)/libnn.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

# allocator_may_return_null: a model declaring terabytes must get NN_ERR_NOMEM, as without ASan;
# detect_stack_use_after_return catches pointers into dead frames.  intercept_tls_get_addr=0: LLVM 14's
# runtime takes a glibc >= 2.25 dynamic-TLS block for a 2.19 one when its address happens to sit at
# offset 16 of a page, reads a bogus range from it and LeakSanitizer's tracer dies on SIGSEGV at exit
# (google/sanitizers#1322; fixed after LLVM 16).  Only dlopen-style TLS of shared libraries (libomp,
# libgfortran) goes unscanned; the engine's own thread-locals are in the executable's static TLS.
SAN_ENV := ASAN_OPTIONS=allocator_may_return_null=1:detect_stack_use_after_return=1:intercept_tls_get_addr=0 \
           UBSAN_OPTIONS=print_stacktrace=1
sanitize: | $(BUILD)/.deps-test
	$(MAKE) BUILD=$(BUILD)/asan SANITIZE=address,undefined test-programs
	$(SAN_ENV) NN_BUILD=$(BUILD)/asan NN_SANITIZER=address tests/run_all.sh

# --threads 1: libomp is not built with TSan, so the joins of its parallel regions are invisible
# to it; one thread per model leaves only our own locking (and the plan cache) to check.
TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
tsan: | $(BUILD)/.deps-test
	$(MAKE) BUILD=$(BUILD)/tsan SANITIZE=thread $(BUILD)/tsan/tests/concurrency $(BUILD)/tsan/tests/test_api \
	    $(BUILD)/tsan/tests/test_par
	$(TSAN_ENV) $(BUILD)/tsan/tests/test_par
	$(TSAN_ENV) $(BUILD)/tsan/tests/concurrency --threads 1
	$(TSAN_ENV) $(BUILD)/tsan/tests/test_api

.PHONY: sanitize tsan test-programs clean-sanitizers
clean: clean-sanitizers
clean-sanitizers:
	rm -rf $(BUILD)/asan $(BUILD)/tsan

# DESTDIR stages the tree (packagers); PREFIX is where it will live, and what nn.pc names.  The header goes to
# include/nn/nn.h, where no other nn.h can clash, and nn.pc's Cflags point into that folder, so programs
# write #include <nn.h> (or <nn/nn.h> without pkg-config).
LIBDIR  = $(DESTDIR)$(PREFIX)/lib
install: all
	mkdir -p $(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include/nn $(DESTDIR)$(PREFIX)/bin
	cp $(BUILD)/libnn.a $(BUILD)/libnn.so.$(VERSION) $(CUDA_PLUGIN) $(LIBDIR)/
	ln -sf libnn.so.$(VERSION) $(LIBDIR)/libnn.so.$(SOMAJOR)
	ln -sf libnn.so.$(SOMAJOR) $(LIBDIR)/libnn.so
	cp engine/nn.h $(DESTDIR)$(PREFIX)/include/nn/
	cp $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@BLAS_DIR@|$(BLAS_DIR)|g' -e 's|@OMP_LIBDIR@|$(OMP_LIBDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|' \
	    tools/nn.pc.in > $(LIBDIR)/pkgconfig/nn.pc

uninstall:
	rm -f $(LIBDIR)/libnn.a $(LIBDIR)/libnn.so $(LIBDIR)/libnn.so.$(SOMAJOR) $(LIBDIR)/libnn.so.$(VERSION) $(LIBDIR)/libnn_cuda.so \
	      $(LIBDIR)/pkgconfig/nn.pc $(DESTDIR)$(PREFIX)/include/nn/nn.h $(TOOLS:$(BUILD)/%=$(DESTDIR)$(PREFIX)/bin/%)
	-rmdir $(DESTDIR)$(PREFIX)/include/nn
.PHONY: uninstall

clean:
	rm -rf $(BUILD)/*.o $(BUILD)/engine $(BUILD)/server $(BUILD)/ops $(BUILD)/passes $(BUILD)/proto $(BUILD)/tests $(BUILD)/cuda \
	       $(BUILD)/libnn.* $(BUILD)/libnn_cuda.so $(TOOLS)
