//! The `weft-cni` executable: see the library.

use std::io::{Read as _, Write as _};

fn main() {
    let env = std::env::vars().collect();
    let mut stdin = Vec::new();
    // VERSION may come without input; a read error leaves it empty, which a command
    // that needs input reports as a decode failure.
    let _ = std::io::stdin().read_to_end(&mut stdin);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a single-threaded runtime starts");
    let out = runtime.block_on(weft_cni::run(&env, &stdin));
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(out.stdout.as_bytes());
    let _ = stdout.flush();
    std::process::exit(out.status);
}
