//! Running a document's shell blocks as written: a block is fenced with an info
//! string naming it (```` ```sh walkthrough=build ````), so prose and commands stay in
//! the document and the tests run exactly what readers copy.

use std::ffi::OsString;
use std::path::Path;

/// The block of `doc` whose fence reads ```` ```{info} ````.
pub fn block(doc: &str, info: &str) -> String {
    let fence = format!("```{info}\n");
    let start = doc
        .find(&fence)
        .unwrap_or_else(|| panic!("no ```{info} block"))
        + fence.len();
    let end = doc[start..].find("```").unwrap() + start;
    doc[start..end].to_owned()
}

/// What blocks are run with: environment variables on top of the test's.
pub struct Shell {
    pub env: Vec<(&'static str, OsString)>,
}

impl Shell {
    /// Runs `script` with bash (`-euo pipefail`) in `dir`: its standard output; panics
    /// with the script and what it printed when it fails.
    pub fn run(&self, script: &str, dir: &Path) -> String {
        let out = std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "this block failed:\n{script}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}
