# mpijob-operator: top-level build.
#   make            release binaries in build/bin
#   make test       install missing packages (as root), build with ASan+UBSan, run every test
#                   (KUBEBUILDER_ASSETS=DIR: against real kube-apiserver/etcd, and with
#                   kube-controller-manager/kube-scheduler there too, a real control plane)
#   make fuzz       libFuzzer harnesses (clang-14), each run for FUZZ_SECONDS
#   make bench      benchmarks in tests/bench (figures, never pass/fail on timing); installs
#                   PyTorch and OpenBLAS too (as root), for the worker against PyTorch DDP;
#                   MPI_OPERATOR_BIN=... KUBEBUILDER_ASSETS=... adds the reference operator
#                   side by side (tests/bench/bench_peer.py)
#   make demo       the end-to-end demo (see README)
#   make images     the operator and worker images, built with podman as OCI archives in
#                   build/images (as root; scripts/images.py)

CC        ?= gcc
PKGS      := libcurl libcjson yaml-0.1 openssl libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN      := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
BASE      := -std=gnu11 -D_GNU_SOURCE -Isrc -Itests $(PKG_CFLAGS) $(WARN) -MMD -MP
REL_FLAGS := $(BASE) -O2 -g
SAN       := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_FLAGS := $(BASE) -O1 -g $(SAN)
LIBS      := $(PKG_LIBS) -lpthread -lm

# The worker links one MPI: Open MPI by default, MPICH with MPI=mpich (the pkg-config module of
# Debian's libmpich-dev); its GPU backend is a plugin built by nvcc (below).
MPI       ?= openmpi
$(if $(filter-out openmpi mpich,$(MPI)),$(error MPI=$(MPI): want openmpi or mpich))
MPI_PC    := $(if $(filter mpich,$(MPI)),mpich,ompi-c)
MPI_CFLAGS := $(shell pkg-config --cflags $(MPI_PC) 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs $(MPI_PC) 2>/dev/null)
# The CPU backend's GEMMs are OpenBLAS's (Debian's libopenblas-dev; its pkg-config module names
# the pthread build's header, and the library's run-time variant is the one Debian's alternatives
# select: pthread, openmp or serial).
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS  := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
WORKER_LIBS := $(MPI_LIBS) $(BLAS_LIBS) $(shell pkg-config --libs libcjson 2>/dev/null) -ldl -lpthread -lm
build/obj/src/worker/%.o build/obj/cmd/mpijob-worker/%.o build/asan/obj/src/worker/%.o build/asan/obj/tests/worker/%.o: EXTRA_CFLAGS := $(MPI_CFLAGS) $(BLAS_CFLAGS)
# The CPU backend's element-wise loops: -O3 is what makes gcc vectorise them (-O2's cost model
# leaves loops with a run-time trip count scalar).
build/obj/src/worker/backend_mpi.o: EXTRA_CFLAGS := $(MPI_CFLAGS) $(BLAS_CFLAGS) -O3

KUBE_SRC   := $(wildcard src/util/*.c src/kube/*.c src/mpijob/*.c src/server/*.c)
WORKER_SRC := $(wildcard src/util/*.c src/worker/*.c)
TEST_SRC   := $(wildcard tests/unit/*.c tests/integration/*.c tests/support/*.c)
WORKER_TEST_SRC := $(wildcard tests/worker/*.c)

# GPU backend: src/worker/nccl/*.cu -> build/lib/libmpijob-worker-nccl.so, loaded with dlopen.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
NCCL_SRC  := $(wildcard src/worker/nccl/*.cu)
PLUGIN    := build/lib/libmpijob-worker-nccl.so
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -O2 -std=c++17 -Isrc $(NVCC_ARCH) -Xcompiler -fPIC,-Wall,-Wextra,-Werror -shared

.PHONY: all test deps demo fuzz bench clean rbac-proof soak images

all: build/bin/mpijob-operator build/bin/mpijob-worker $(if $(and $(NVCC),$(NCCL_SRC)),$(PLUGIN))

# ---- release objects -------------------------------------------------------
build/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) $(EXTRA_CFLAGS) -c $< -o $@

build/lib/libkube.a: $(KUBE_SRC:%.c=build/obj/%.o)
	@mkdir -p $(dir $@)
	ar rcs $@ $^

build/bin/mpijob-operator: $(patsubst %.c,build/obj/%.o,$(wildcard cmd/mpijob-operator/*.c)) build/lib/libkube.a
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) -o $@ $(filter %.o,$^) build/lib/libkube.a $(LIBS)

build/bin/mpijob-worker: $(patsubst %.c,build/obj/%.o,$(wildcard cmd/mpijob-worker/*.c) $(WORKER_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) -o $@ $^ $(WORKER_LIBS)

$(PLUGIN): $(NCCL_SRC) $(wildcard src/worker/nccl/*.h) src/worker/backend.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -o $@ $(NCCL_SRC) -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart

# ---- sanitizer build for tests --------------------------------------------
build/asan/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) $(EXTRA_CFLAGS) -c $< -o $@

build/asan/lib/libkube.a: $(KUBE_SRC:%.c=build/asan/obj/%.o)
	@mkdir -p $(dir $@)
	ar rcs $@ $^

# One Criterion binary holds every unit and integration test.
build/asan/bin/mpijob-tests: $(TEST_SRC:%.c=build/asan/obj/%.o) build/asan/lib/libkube.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) -o $@ $(filter %.o,$^) build/asan/lib/libkube.a $(LIBS) -lcriterion

# The worker's tests: its modules under the sanitizers, and mpirun runs of build/bin/mpijob-worker.
# The worker's tests share the tests' deadline module (its factor scales Criterion's timeouts too).
build/asan/bin/worker-tests: $(WORKER_TEST_SRC:%.c=build/asan/obj/%.o) build/asan/obj/tests/support/deadline.o \
		$(WORKER_SRC:%.c=build/asan/obj/%.o)
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) -o $@ $^ $(WORKER_LIBS) -lcriterion

# A single test file on its own, for quick iteration: make build/asan/t/test_workqueue
build/asan/t/%: build/asan/obj/tests/unit/%.o $(patsubst %.c,build/asan/obj/%.o,$(wildcard tests/support/*.c)) build/asan/lib/libkube.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) -o $@ $(filter %.o,$^) build/asan/lib/libkube.a $(LIBS) -lcriterion
build/asan/it/%: build/asan/obj/tests/integration/%.o $(patsubst %.c,build/asan/obj/%.o,$(wildcard tests/support/*.c)) build/asan/lib/libkube.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_FLAGS) -o $@ $(filter %.o,$^) build/asan/lib/libkube.a $(LIBS) -lcriterion

deps:
	@scripts/install-deps.sh

test: deps
	@$(MAKE) --no-print-directory all build/asan/bin/mpijob-tests build/asan/bin/worker-tests
	@rm -rf build/rbac-usage.log build/test-results; mkdir -p build/test-results; \
	export PATH="$$PATH:$(CURDIR)/build/tools/kubectl/1.35.2"; \
	export MPIJOB_TEST_RESULTS=$(CURDIR)/build/test-results/python.jsonl; \
	r=build/test-results; \
	MPIJOB_TEST_WHY=$$r/main.why MPIJOB_TEST_RBAC_USAGE=$(CURDIR)/build/rbac-usage.log \
		scripts/run-tests.sh build/asan/bin/mpijob-tests --json=$$r/main.json; main=$$?; \
	python3 tests/apiserver/rbac_coverage.py deploy/mpijob-operator.yaml build/rbac-usage.log > $$r/rbac.why; \
	rbac=$$?; cat $$r/rbac.why; \
	MPIJOB_TEST_WHY=$$r/worker.why scripts/run-tests.sh build/asan/bin/worker-tests --json=$$r/worker.json; \
	worker=$$?; \
	python3 scripts/test-summary.py --criterion $$r/main.json --criterion $$r/worker.json \
		--python $$r/python.jsonl --step "the main suite=$$main:$$r/main.why" \
		--step "the RBAC coverage check=$$rbac:$$r/rbac.why" --step "the worker suite=$$worker:$$r/worker.why"; \
	[ $$main -eq 0 ] && [ $$rbac -eq 0 ] && [ $$worker -eq 0 ]

# ---- fuzzing (clang-14 + libFuzzer) ----------------------------------------
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -std=gnu11 -D_GNU_SOURCE -Isrc -Itests $(PKG_CFLAGS) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

build/fuzz/%: tests/fuzz/%.c $(KUBE_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(KUBE_SRC) $(LIBS)

fuzz: fuzz-deps $(FUZZ_TARGETS)
	@scripts/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# ---- benchmarks -------------------------------------------------------------
# The worker's benchmarks are MPI programs run by tests/bench/bench_worker.sh, not by the loop.
WORKER_BENCH_TARGETS := build/bench/bench_buckets build/bench/bench_kernels
BENCH_TARGETS := $(filter-out $(WORKER_BENCH_TARGETS),$(patsubst tests/bench/%.c,build/bench/%,$(wildcard tests/bench/bench_*.c)))
build/bench/%: tests/bench/%.c build/lib/libkube.a $(patsubst %.c,build/obj/%.o,$(wildcard tests/support/apiserver.c tests/support/command.c))
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) -o $@ $< $(filter %.o,$^) build/lib/libkube.a $(LIBS) -lcriterion

# An explicit rule, so the pattern rule above (libkube) never applies: release worker objects.
build/bench/bench_buckets: tests/bench/bench_buckets.c $(WORKER_SRC:%.c=build/obj/%.o)
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) $(MPI_CFLAGS) -o $@ $< $(filter %.o,$^) $(WORKER_LIBS)
build/bench/bench_kernels: tests/bench/bench_kernels.c $(WORKER_SRC:%.c=build/obj/%.o)
	@mkdir -p $(dir $@)
	$(CC) $(REL_FLAGS) -o $@ $< $(filter %.o,$^) $(WORKER_LIBS)

bench: bench-deps $(BENCH_TARGETS) build/bin/mpijob-operator build/bin/mpijob-worker $(WORKER_BENCH_TARGETS) \
		build/bench/plain_client
	@for b in $(BENCH_TARGETS); do echo "== $$b"; $$b || exit 1; done
	@echo "== tests/bench/bench_worker.sh"; tests/bench/bench_worker.sh
	@echo "== tests/bench/bench_ddp.py"; /usr/bin/python3 tests/bench/bench_ddp.py
	@echo "== tests/bench/bench_peer.py"; python3 tests/bench/bench_peer.py
	@echo "== tests/bench/bench_scale.py"; python3 tests/bench/bench_scale.py

demo:
	@scripts/demo.sh

images: deps
	@scripts/images.py

# Chaos, bounded: 20 MPIJobs at once through operator restarts and dropped watches (as root).
soak: deps all
	@python3 tests/e2e/soak.py

# Removes each RBAC rule in turn and shows that some integration test then fails.
rbac-proof: deps
	@scripts/rbac-proof.sh

clean:
	rm -rf build

-include $(shell find build -path build/images -prune -o -name '*.d' -type f -print 2>/dev/null)

.PHONY: fuzz-deps bench-deps
fuzz-deps:
	@scripts/install-deps.sh fuzz

# Debian's python3-torch installs for /usr/bin/python3, which tests/bench/bench_ddp.py runs on.
bench-deps:
	@scripts/install-deps.sh bench

# ---- deploy/mpijob-operator.yaml and the chart's copies of the CRD and RBAC rules (make deploy) --
.PHONY: deploy
deploy:
	@python3 scripts/gen-deploy.py
