//! The service binaries the end-to-end tests run as processes, beside the tests' own binaries,
//! where `cargo test --workspace` puts them. Included by path (`#[path]`) by the tests that need
//! it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding the binaries `names`. Missing ones (a run of one test alone) are built,
/// in the workspace's default feature set; present ones are used as they are, so that a test
/// never rebuilds (with other features, for minutes) what the workspace's test build just built.
pub fn service_binaries(names: &[&str]) -> PathBuf {
    let directory = Path::new(env!("CARGO_BIN_EXE_a2a-mesh")).parent().unwrap().to_owned();
    if names.iter().all(|name| directory.join(name).exists()) {
        return directory;
    }
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "--workspace"]);
    for name in names {
        build.args(["--bin", name]);
    }
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    assert!(build.status().expect("cargo runs").success(), "cannot build {names:?}");
    directory
}
