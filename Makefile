# nn — build, test, run.   make run | make test | make models | make bench | make install PREFIX=DIR
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
            -fopenmp -I$(BUILD)/proto $(shell pkg-config --cflags openblas libprotobuf-c 2>/dev/null)
LIBS     := -lopenblas -lprotobuf-c -fopenmp -lm -lpthread

ENGINE_SRC := $(wildcard engine/*.c) $(wildcard ops/*.c) $(wildcard passes/*.c)
PROTO_C    := $(BUILD)/proto/onnx.pb-c.c
OBJS       := $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/proto/onnx.pb-c.o
TOOLS      := $(BUILD)/nnrun $(BUILD)/nndump
TESTS_C    := $(wildcard tests/test_*.c)
TEST_BINS  := $(TESTS_C:tests/%.c=$(BUILD)/tests/%) $(BUILD)/tests/conformance $(BUILD)/tests/compare_npy

.PHONY: all deps test-deps run test models bench install clean conformance fuzz
all: $(BUILD)/libnn.a $(BUILD)/libnn.so $(TOOLS)

# Missing Debian packages are installed before the first compile.
deps: $(BUILD)/.deps-build
$(BUILD)/.deps-build: tools/install-deps.sh
	@mkdir -p $(BUILD)
	tools/install-deps.sh build
	@touch $@
test-deps: $(BUILD)/.deps-test
$(BUILD)/.deps-test: tools/install-deps.sh
	@mkdir -p $(BUILD)
	tools/install-deps.sh test
	@touch $@

# proto/: C code generated from the schema Debian's libonnx-dev installs.
$(BUILD)/proto/onnx.pb-c.c $(BUILD)/proto/onnx.pb-c.h: $(ONNX_PROTO) | $(BUILD)/.deps-build
	@mkdir -p $(BUILD)/proto
	cp $(ONNX_PROTO) $(BUILD)/proto/onnx.proto
	cd $(BUILD)/proto && protoc-c --c_out=. onnx.proto

$(BUILD)/proto/onnx.pb-c.o: $(BUILD)/proto/onnx.pb-c.c
	$(CC) $(filter-out -Wextra,$(CFLAGS)) -c $< -o $@

$(BUILD)/%.o: %.c $(BUILD)/proto/onnx.pb-c.h | $(BUILD)/.deps-build
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DNN_BUILDING_LIBRARY -MMD -MP -c $< -o $@

-include $(OBJS:.o=.d)

$(BUILD)/libnn.a: $(OBJS)
	rm -f $@ && ar rcs $@ $^

# Only nn_* symbols are exported (NN_API marks them; everything else is hidden).
$(BUILD)/libnn.so: $(OBJS)
	$(CC) -shared -o $@ $^ $(LIBS) -Wl,-soname,libnn.so

$(BUILD)/nnrun: tools/nnrun.c $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

$(BUILD)/nndump: tools/nndump.c $(BUILD)/libnn.a
	$(CC) $(CFLAGS) -Iengine $< -o $@ $(BUILD)/libnn.a $(LIBS)

$(BUILD)/tests/%: tests/%.c tests/onnx_builder.h $(BUILD)/libnn.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine -Iops $< -o $@ $(BUILD)/libnn.a $(LIBS)

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

# ---- tests
conformance: $(BUILD)/tests/conformance all | $(BUILD)/.deps-test
	$(BUILD)/tests/conformance

test: all $(TEST_BINS) | $(BUILD)/.deps-test
	tests/run_all.sh

# ---- benchmark against ONNX Runtime
bench: all models
	tools/bench

# ---- fuzzing the loader (clang's libFuzzer + AddressSanitizer); not part of make test
FUZZ_SECONDS ?= 120
FUZZ_CORPUS  := $(BUILD)/fuzz-corpus
fuzz: $(BUILD)/proto/onnx.pb-c.c | $(BUILD)/.deps-test
	$(CC) $(filter-out -fvisibility=hidden,$(CFLAGS)) -fsanitize=fuzzer,address -Iengine \
	    tests/fuzz_load.c $(ENGINE_SRC) $(PROTO_C) -o $(BUILD)/fuzz_load $(LIBS)
	@mkdir -p $(FUZZ_CORPUS)
	@# seeds: the first byte picks the reader (0 model, 1 .npy, 2 .pb)
	@for t in abs add conv_with_strides_padding gemm_default_vector_bias reshape_negative_dim maxpool_2d_pads; do \
	    (printf '\000'; cat /usr/share/libonnx-testdata/data/node/test_$$t/model.onnx) > $(FUZZ_CORPUS)/$$t.onnx; \
	    (printf '\002'; cat /usr/share/libonnx-testdata/data/node/test_$$t/test_data_set_0/input_0.pb) > $(FUZZ_CORPUS)/$$t.pb; done
	@(printf '\001'; cat models/mobilenetv2.output.npy) > $(FUZZ_CORPUS)/output.npy
	$(BUILD)/fuzz_load -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(FUZZ_CORPUS)

install: all
	mkdir -p $(PREFIX)/lib/pkgconfig $(PREFIX)/include $(PREFIX)/bin
	cp $(BUILD)/libnn.a $(BUILD)/libnn.so $(PREFIX)/lib/
	cp engine/nn.h $(PREFIX)/include/
	cp $(TOOLS) $(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/.*NN_VERSION_STRING "\(.*\)"/\1/p' engine/nn.h)|' \
	    tools/nn.pc.in > $(PREFIX)/lib/pkgconfig/nn.pc

clean:
	rm -rf $(BUILD)/*.o $(BUILD)/engine $(BUILD)/ops $(BUILD)/passes $(BUILD)/proto $(BUILD)/tests \
	       $(BUILD)/libnn.* $(TOOLS)
