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
test: deps plugins
	$(CARGO) test --workspace

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p weft --no-deps

## demo: two clusters on loopback, one etcd and one weftd each; barriers go from
## pending to synced in `weftd status`. Cleans up on exit.
demo: deps plugins
	$(CARGO) build -p weft --bin weftd --bin weft-wg
	scripts/demo.sh

## bench: the benchmarks of BENCHMARKS.md (mesh sync, ipcache, plugins, datapath, WireGuard,
## CNI, restart with endpoints).
bench: deps plugins
	$(CARGO) bench -p weft --bench mesh_sync
	$(CARGO) bench -p weft --bench ipcache
	$(CARGO) bench -p weft --bench plugins
	$(CARGO) bench -p weft --bench datapath
	$(CARGO) bench -p weft --bench wireguard
	$(CARGO) bench -p weft --bench cni
	$(CARGO) bench -p weft --bench restart

clean:
	$(CARGO) clean
