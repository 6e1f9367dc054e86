//! The BPF objects, compiled from `bpf/` by the build script and embedded.

/// `bpf/generation.c`: one generation's maps (ipcache, endpoints, policy; the config
/// and conntrack maps pinned by name) and its programs, `weft_to_netdev` and the
/// endpoint programs.
pub static GENERATION_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/generation.o"));

/// `bpf/baseline.c`: the empty classifier `weft_baseline`, the benchmark's baseline.
pub static BASELINE_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/baseline.o"));
