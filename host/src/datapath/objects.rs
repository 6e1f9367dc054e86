//! The BPF objects, compiled from `bpf/` by the build script and embedded.

/// `bpf/to_netdev.c`: the ipcache and config maps and the `weft_to_netdev` program.
pub static TO_NETDEV_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/to_netdev.o"));

/// `bpf/baseline.c`: the empty classifier `weft_baseline`, the benchmark's baseline.
pub static BASELINE_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/baseline.o"));
