//! Compiles the BPF programs in `bpf/` with Debian's clang-19 into `OUT_DIR`, where
//! `datapath::objects` embeds them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The programs, one object each.
const PROGRAMS: [&str; 2] = ["generation", "baseline"];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let bpf = manifest.join("../../bpf");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed={}", bpf.display());
    println!("cargo:rerun-if-env-changed=WEFT_CLANG");
    let clang = std::env::var("WEFT_CLANG").unwrap_or_else(|_| "clang-19".into());
    // The kernel headers include <asm/types.h>, which Debian keeps per architecture.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    for program in PROGRAMS {
        let source = bpf.join(format!("{program}.c"));
        let object = out.join(format!("{program}.o"));
        let result = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
            .arg(format!("-I{multiarch}"))
            .arg(format!("-I{}", bpf.join("include").display()))
            .arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(&object)
            .status();
        match result {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("{clang} failed ({s}) compiling {}", source.display()),
            Err(e) => panic!(
                "cannot run {clang} ({e}) to compile the BPF programs in {}: install the \
                 Debian packages clang-19 and libbpf-dev (`make deps` does), or set WEFT_CLANG",
                Path::new(&bpf).display()
            ),
        }
    }
}
