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
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Plugins are built for wasm32-wasip2.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "installing the wasm32-wasip2 target"
  rustup target add wasm32-wasip2
fi
