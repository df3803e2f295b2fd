//! The documentation against the code, without a network: the settings reference is generated
//! from the configuration types, the registry's operations from its OpenAPI document, every
//! benchmark table from the result file kept beside it, and
//! every relative link and anchor of README.md, ARCHITECTURE.md and docs/ must resolve. A page
//! that drifted from what generates it fails with the command that regenerates it.

#[path = "docs/links.rs"]
mod links;
#[path = "docs/openapi.rs"]
mod openapi;
#[path = "docs/settings.rs"]
mod settings;
#[path = "docs/tables.rs"]
mod tables;

use std::path::{Path, PathBuf};

/// Set to rewrite the generated pages instead of comparing them.
const UPDATE_ENV: &str = "MESH_DOCS_UPDATE";
/// What regenerates every generated page.
const REGENERATE_COMMAND: &str = "MESH_DOCS_UPDATE=1 cargo test -p a2a-mesh --test docs";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compares the committed `relative` file with `generated`; with [`UPDATE_ENV`] set, writes it.
fn check_generated(relative: &str, generated: &str) {
    let path = repo_root().join(relative);
    if std::env::var_os(UPDATE_ENV).is_some() {
        std::fs::write(&path, generated).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let (line, committed_line, generated_line) = committed
        .lines()
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(generated.lines().map(Some).chain(std::iter::repeat(None)))
        .take_while(|pair| *pair != (None, None))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i + 1, a.unwrap_or("<end of file>"), b.unwrap_or("<end of file>")))
        .unwrap_or((0, "", ""));
    panic!(
        "{relative} is not what the code generates (first difference at line {line}:\n  committed: {committed_line}\n  generated: {generated_line})\nregenerate it with `{REGENERATE_COMMAND}`"
    );
}

#[test]
fn the_settings_reference_is_generated_from_the_configuration_types() {
    check_generated(settings::PAGE, &settings::render());
}

#[test]
fn the_registrys_operations_are_rendered_from_its_openapi_document() {
    check_generated(openapi::PAGE, &openapi::render());
}

#[test]
fn every_benchmark_table_is_rendered_from_its_result_file() {
    for (page, text) in tables::render_pages() {
        check_generated(&page, &text);
    }
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let broken = links::broken_links();
    assert!(broken.is_empty(), "{} broken links:\n{}", broken.len(), broken.join("\n"));
}
