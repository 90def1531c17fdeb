# The front door. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
MEMBERS := broker consumer gazctl operator spark
SRC_DIRS := $(foreach m,$(MEMBERS),$(m)/src)
# Where `make up` keeps etcd data, spools and the file:// store.
DATA   ?= .local
# Extra flags of `make up` (`.venv/bin/python -m devcluster --help`): ports derive from
# etcd's E (peer E+1) and the first broker's B (broker i: gRPC B+2i, HTTP B+2i+1), e.g.
# UP_ARGS="--port-base 9000" (etcd 9000, brokers 9002..9007) or "--etcd-port 0 --broker-port 0" (any).
UP_ARGS ?=
# SECURE=1: `make up` with mutual TLS and bearer tokens (a throwaway CA under $(DATA)/tls).
SECURE ?=
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

PROTOS := broker/src/gazette/broker/protocol/protocol.proto \
          consumer/src/gazette/consumer/recoverylog/recorded_op.proto \
          consumer/src/gazette/consumer/protocol/protocol.proto \
          examples/word_count/word_count.proto

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

# The native data plane (Rust, built by maturin with cargo): its build is kept in the
# tool cache, so a fresh clone compiles only what changed.
DATAPLANE_SRC := $(shell find broker/dataplane -name '*.rs' -o -name Cargo.toml -o -name pyproject.toml) \
                 broker/src/gazette/broker/protocol/protocol.proto
export CARGO_TARGET_DIR ?= $(shell e2e/cache-root.sh cargo-target)

$(VENV)/.installed: constraints.txt requirements/dev.in $(foreach m,$(MEMBERS),$(m)/pyproject.toml) $(DATAPLANE_SRC)
	@echo "installing the virtualenv in $(VENV) (every member and the dev tools; a few minutes the first time)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check "uv==$$(sed -n 's/^uv==//p' requirements/tools.txt)"
	@e2e/pyspark-wheel.sh $(PY) "$$(sed -n 's/^pyspark==//p' constraints.txt)"
	@command -v cargo >/dev/null || { echo "cargo is needed to build broker/dataplane (https://rustup.rs)"; exit 1; }
	$(UV) pip install --python $(PY) -c constraints.txt --find-links "$$(e2e/cache-root.sh wheels)" -r requirements/dev.in
	@touch $@

.PHONY: install
install: $(VENV)/.installed ## Create .venv and install every member (editable) with the dev tools.

.PHONY: constraints
constraints: ## Re-pin every dependency into constraints.txt (uv pip compile).
	@test -x $(UV) || { $(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q uv; }
	$(UV) pip compile requirements/dev.in --python-version 3.11 --quiet --upgrade \
		$(foreach m,$(MEMBERS) dataplane,--no-emit-package gazette-$(m)) -o constraints.txt

.PHONY: protos
protos: $(VENV)/.installed ## Regenerate *_pb2.py, *_pb2_grpc.py and their .pyi stubs.
	$(PY) -m grpc_tools.protoc $(foreach d,$(SRC_DIRS),-I $(d)) \
		--python_out=broker/src --grpc_python_out=broker/src \
		--mypy_out=broker/src --mypy_grpc_out=broker/src \
		broker/src/gazette/broker/protocol/protocol.proto
	$(PY) -m grpc_tools.protoc $(foreach d,$(SRC_DIRS),-I $(d)) \
		--python_out=consumer/src --mypy_out=consumer/src \
		consumer/src/gazette/consumer/recoverylog/recorded_op.proto
	$(PY) -m grpc_tools.protoc $(foreach d,$(SRC_DIRS),-I $(d)) \
		--python_out=consumer/src --grpc_python_out=consumer/src \
		--mypy_out=consumer/src --mypy_grpc_out=consumer/src \
		consumer/src/gazette/consumer/protocol/protocol.proto
	$(PY) -m grpc_tools.protoc $(foreach d,$(SRC_DIRS),-I $(d)) -I examples/word_count \
		--python_out=examples/word_count --grpc_python_out=examples/word_count \
		--mypy_out=examples/word_count --mypy_grpc_out=examples/word_count \
		examples/word_count/word_count.proto

.PHONY: protos-check
protos-check: $(VENV)/.installed ## Fail when the generated protocol code is stale.
	@$(MAKE) -s protos >/dev/null 2>&1
	@if ! git diff --quiet --exit-code -- '*_pb2*' || [ -n "$$(git ls-files --others --exclude-standard -- '*_pb2*')" ]; then \
		git --no-pager diff --stat -- '*_pb2*'; echo "generated protocol code is stale: run 'make protos' and commit"; exit 1; fi

.PHONY: crds
crds: $(VENV)/.installed ## Render crds/*.yaml from gazette.operator.crd (the one source of the CRDs), and the chart's copy.
	$(PY) -m gazette.operator.crds crds
	cp crds/*.yaml charts/gazette/crds/

IMAGES ?= broker consumer operator gazctl spark
IMAGE_TAG ?= 0.1.0
# auto: docker when its daemon answers, else podman, else buildah.
ENGINE ?= auto
# auto: the official python/rust bases when present or pullable, else assembled here
# (mmdebstrap, the host's Rust toolchain); local: always assembled; pull: never.
IMAGES_BASE ?= auto

.PHONY: images
images: ## Build images/*/Dockerfile as gazette-<name>:$(IMAGE_TAG) with docker, podman or buildah (images/build.py); bases assembled here where none can be pulled; reused while their inputs are unchanged. DRY_RUN=1 prints the builds.
	@python3 images/build.py --engine $(ENGINE) --base $(IMAGES_BASE) --tag $(IMAGE_TAG) $(if $(DRY_RUN),--dry-run) $(IMAGES)

.PHONY: helm
helm: ## Build helm, kwok and kind from their Go modules into the tool cache (e2e/cache-root.sh; slow once).
	@e2e/helm/build.sh "" helm kwok kind

# Debian packages the tests use: FUSE (libfuse2 for fusepy, fusermount) for the stalled
# spool disk, iproute2 for the partition nemesis' network namespaces.
SYSTEM_PACKAGES := fuse libfuse2 iproute2

.PHONY: system-packages
system-packages: ## Install the Debian packages the tests need (FUSE, iproute2) when missing and apt-get is at hand (root).
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	      echo "installing $$missing (apt-get)"; \
	      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	    else echo "make system-packages: missing $$missing (install them; the tests that need them say so)"; fi; \
	  fi

.PHONY: tools
tools: system-packages $(VENV)/.installed ## Build, once, every tool the tests run (Kubernetes binaries, helm, kwok, kind, promtool, Go Gazette, the Go message/recovery-log/consumer programs, fake-gcs-server, Azurite) into the tool cache outside the checkout; prints each with its time.
	@step() { name=$$1; shift; t0=$$(date +%s); echo "make tools: $$name ..."; \
	    "$$@" >/dev/null || { echo "make tools: $$name FAILED after $$(( $$(date +%s) - t0 ))s"; return 1; }; \
	    echo "make tools: $$name ready in $$(( $$(date +%s) - t0 ))s"; }; \
	  set -e; \
	  if command -v npm >/dev/null; then step "Azurite (npm)" $(PY) broker/tests/fragment/emulator_servers.py; \
	  else echo "make tools: no npm on PATH; the azure:// store tests will say so"; fi; \
	  command -v go >/dev/null || { echo "make tools: no go on PATH; the tests that need Go tools will say so"; exit 0; }; \
	  step "kube-apiserver, kubectl, controller-manager, scheduler, etcd 3.6" e2e/apiserver/build.sh; \
	  step "helm, kwok, kind" e2e/helm/build.sh "" helm kwok kind; \
	  step "promtool (the chart's alert rules; ~13 min cold)" e2e/helm/build.sh "" promtool; \
	  step "Go Gazette (brokers, gazctl, load generator)" broker/tests/interop/go/build.sh; \
	  step "Go message program" consumer/tests/interop/go/build.sh gazette-msg; \
	  step "Go recovery-log program" consumer/tests/interop/go/build.sh gazette-rlog; \
	  step "Go consumer" consumer/tests/interop/go/build.sh gazette-consumer; \
	  step "fake-gcs-server" broker/tests/fragment/emulators/fake-gcs/build.sh

.PHONY: apiserver
apiserver: ## Build kube-apiserver, kubectl, kube-controller-manager, kube-scheduler and etcd 3.6 into the tool cache's k8s/<version>/bin (Go; slow once).
	@e2e/apiserver/build.sh

.PHONY: lint
lint: $(VENV)/.installed ## ruff (format + lint), mypy --strict on src, import-linter, fresh protos and CRDs.
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	@$(MAKE) -s protos-check
	@$(PY) -m gazette.operator.crds crds --check
	cd broker/dataplane && cargo fmt --check && cargo clippy --release --all-targets --quiet -- -D warnings

.PHONY: fmt
fmt: $(VENV)/.installed ## Format and auto-fix with ruff.
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

.PHONY: unit
unit: $(VENV)/.installed ## Fast unit tests only.
	$(PY) -m pytest -m "not integration and not e2e" -q

.PHONY: integration
integration: $(VENV)/.installed ## Integration tests (real etcd, S3 server, Spark).
	$(PY) -m pytest -m "integration" -q

# pytest-xdist workers of `make test`: most tests wait on servers, leases and
# processes rather than compute, so two workers nearly halve the run on 2 cores.
TEST_WORKERS ?= 2

.PHONY: test
test: $(VENV)/.installed ## What CI runs: lint, the tools (built once), then unit and integration tests (TEST_WORKERS=2 workers).
	@$(MAKE) -s lint
	@$(MAKE) -s tools
	@$(MAKE) -s native-test
	$(PY) -m pytest -q -m "not e2e" -n $(TEST_WORKERS) --dist loadfile --durations=25

.PHONY: native-test
native-test: ## The native data plane's own tests (cargo test, broker/dataplane).
	cd broker/dataplane && cargo test --release --quiet

.PHONY: e2e
e2e: $(VENV)/.installed ## End-to-end suites (kube-apiserver + kwok; kind where Docker runs).
	$(PY) -m pytest -q -m e2e

.PHONY: e2e-images
e2e-images: $(VENV)/.installed ## The image tier: make images (cold ~45 min on 2 shared cores; again for broker/consumer after any data-plane change), then e2e/test_images.py.
	$(PY) -m pytest -q -s e2e/test_images.py

.PHONY: e2e-node
e2e-node: $(VENV)/.installed ## Tier 3 on a real node of this machine (root; after make images): containerd, kubelet and kube-proxy beside the e2e apiserver, helm install, faults (e2e/test_node.py). Puts back what it changes; make e2e-node-cleanup after a killed run.
	@[ "$$(id -u)" = 0 ] || { echo "make e2e-node: needs root (containerd, kubelet, a bridge)"; exit 1; }
	@missing=$$(for p in containerd containernetworking-plugins conntrack podman; do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then echo "installing $$missing (apt-get)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@e2e/apiserver/build.sh "" kube-apiserver kubectl kube-controller-manager kube-scheduler etcd kubelet kube-proxy >/dev/null
	GAZETTE_NODE=1 $(PY) -m pytest -q -s -m e2e e2e/test_node.py

.PHONY: e2e-node-cleanup
e2e-node-cleanup: $(VENV)/.installed ## Undo what a killed make e2e-node left (processes, mounts, netns, bridge, iptables chains, kernel settings).
	cd e2e && ../$(PY) -m node.cleanup

.PHONY: e2e-kind
e2e-kind: $(VENV)/.installed ## Tier 2 on kind (needs Docker): make images, a 3-zone kind cluster, helm install, e2e/kind (slow).
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "make e2e-kind: needs a running Docker (kind runs the Kubernetes nodes as containers)"; exit 1; }
	GAZETTE_KIND=1 $(PY) -m pytest -q -s -m e2e e2e/kind

# SIGKILLs of `make chaos`, in all (split between the spaced and the rapid scenario).
CHAOS_KILLS ?= 100

# Where `make chaos-go` keeps Go Gazette's figures, which `make chaos` prints beside ours.
CHAOS_GO_TABLE ?= $(shell e2e/cache-root.sh chaos)/go-partitions.json

.PHONY: chaos
chaos: $(VENV)/.installed ## Fault suite, long: CHAOS_KILLS (default 100) SIGKILLs, etcd/store/spool/SIGSTOP/SIGTERM/make-down/partition faults; prints a table (and Go's figures beside ours after `make chaos-go`).
	CHAOS_LONG=1 CHAOS_KILLS=$(CHAOS_KILLS) CHAOS_COMPARE=$(CHAOS_GO_TABLE) $(PY) -m pytest -s -q -m integration \
		-o tmp_path_retention_policy=all e2e/test_chaos.py  # every scenario's logs and data kept to read

.PHONY: chaos-go
chaos-go: $(VENV)/.installed ## The partition and disk scenarios (long) on Gazette's own Go brokers, as a reference: their figures, not a verdict; kept for `make chaos`.
	-CHAOS_LONG=1 CHAOS_GO=1 CHAOS_TABLE_OUT=$(CHAOS_GO_TABLE) $(PY) -m pytest -s -q -m integration e2e/test_chaos.py -k "(partition and not shard) or spool"
	@test -f $(CHAOS_GO_TABLE) && echo "Go's figures kept in $(CHAOS_GO_TABLE)"

.PHONY: bench
bench: $(VENV)/.installed ## Benchmarks (figures, not pass/fail).
	$(PY) -m bench

.PHONY: bench-go
bench-go: $(VENV)/.installed ## Ours beside Go Gazette v0.103, same etcd, same load (builds Go's binaries into the tool cache once).
	$(PY) -m bench.bench_go

.PHONY: up
up: $(VENV)/.installed ## Start etcd, 3 brokers in 2 zones and the HTTP gateway under $(DATA)/; apply examples/journals.yaml. Ports: UP_ARGS="--port-base P". SECURE=1: mutual TLS and tokens.
	$(PY) -m devcluster up --data $(DATA) $(if $(SECURE),--secure) $(UP_ARGS)

.PHONY: down
down: ## Stop what `make up` started, and only that.
	@if [ -x $(PY) ]; then $(PY) -m devcluster down --data $(DATA); fi

.PHONY: clean
clean: ## Remove the venv, caches and local cluster data.
	-@$(MAKE) -s down
	rm -rf $(VENV) $(DATA) .pytest_cache .mypy_cache .ruff_cache .cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
