# weft: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all deps build plugins test lint demo bench clean

all: build

## deps: install what the build and the tests need (Debian packages), once.
deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --workspace --all-targets

## plugins: the shipped and test plugins, as wasm32-wasip2 components.
plugins: deps
	cd plugins && $(CARGO) build --release --target wasm32-wasip2

## test: unit, doc and integration tests (real etcd processes on loopback, real plugins).
## One cargo builds the tests and the executables the end-to-end tests start (weftd,
## weft-wg, weft-cni: their packages' own integration tests make cargo build them), so
## weft-testkit need not build them again (host/testkit/src/bin.rs).
test: deps plugins
	WEFT_TEST_BUILT_EXECUTABLES=1 $(CARGO) test --workspace

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p weft --no-default-features --bins -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p weft -p weft-model -p weft-kvstore -p weft-sys -p weft-hooks -p weft-plugins -p weft-state -p weft-clustermesh -p weft-datapath -p weft-wireguard -p weft-endpoint -p weft-k8s -p weft-kubeapi --no-deps

## demo: `weftd lab up` (2 clusters x 2 nodes x 2 pods: namespaces, etcd, weftd with
## WireGuard, the BPF datapath and signed plugins, pods through weft-cni, the matrix),
## `lab status`, the restart scenario and its control (plotted to target/lab-restart*.svg),
## then `lab down`. Needs root, as
## the agent does. DEMO_HOLD=1 keeps the lab (remove it with `weftd lab down --name demo`).
demo: deps plugins
	$(CARGO) build -p weft --bin weftd -p weft-wg -p weft-cni
	@W=target/debug/weftd; \
	$$W lab down --name demo >/dev/null 2>&1 || true; \
	$$W lab up --name demo && $$W lab status --name demo \
	  && $$W lab scenario restart --name demo --plot target/lab-restart.svg \
	  && $$W lab scenario restart --control --name demo --plot target/lab-restart-control.svg; \
	s=$$?; \
	if [ "$${DEMO_HOLD:-0}" = 1 ]; then echo "lab demo kept: weftd lab down --name demo"; \
	else $$W lab down --name demo >/dev/null && echo "lab demo removed"; fi; \
	exit $$s

## bench: the benchmarks of BENCHMARKS.md (mesh sync, ipcache, plugins, datapath, WireGuard,
## CNI, restart with endpoints, the lab).
bench: deps plugins
	$(CARGO) bench -p weft-e2e --bench mesh_sync
	$(CARGO) bench -p weft-state --bench ipcache
	$(CARGO) bench -p weft-plugins --bench plugins
	$(CARGO) bench -p weft-datapath --bench datapath
	$(CARGO) bench -p weft-e2e --bench wireguard
	$(CARGO) bench -p weft-e2e --bench cni
	$(CARGO) bench -p weft-e2e --bench restart
	$(CARGO) bench -p weft --bench lab

clean:
	$(CARGO) clean
