//! Benchmark and measurement tables, each rendered from a result file kept beside its page
//! (`results/*.toml`: the command, the commit and the machine it was measured with, then the
//! rows). A page holds a table between `<!-- table: results/NAME.toml -->` and
//! `<!-- end table -->`; what lies between is generated.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{read, repo_root};

const TABLE_START: &str = "<!-- table: ";
const TABLE_START_END: &str = " -->";
const TABLE_END: &str = "<!-- end table -->";

/// One measurement, as its result file records it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Results {
    /// What was run, as typed.
    command: String,
    /// The commit whose tree was measured (or that recorded the figures, as `commit_note` says).
    commit: String,
    commit_note: Option<String>,
    /// The machine, and how quiet it was.
    machine: String,
    date: String,
    columns: Vec<String>,
    /// One letter per column: `l` left, `r` right.
    align: String,
    rows: Vec<Vec<String>>,
}

fn render_table(results_path: &Path) -> String {
    let text = read(results_path);
    let results: Results = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", results_path.display()));
    let width = results.columns.len();
    assert_eq!(results.align.len(), width, "{}: one alignment letter per column", results_path.display());
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", results.columns.join(" | "));
    let rules: Vec<&str> = results.align.chars().map(|a| if a == 'r' { "---:" } else { "---" }).collect();
    let _ = writeln!(out, "|{}|", rules.join("|"));
    for row in &results.rows {
        assert_eq!(row.len(), width, "{}: row {row:?} has not {width} cells", results_path.display());
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    let note = results.commit_note.map_or(String::new(), |n| format!(" ({n})"));
    let _ = write!(
        out,
        "\nMeasured with `{}` at commit `{}`{note}, on {}, {}.\n",
        results.command, results.commit, results.machine, results.date
    );
    out
}

fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            // The rendered book is not a source.
            if path.file_name().is_some_and(|n| n != "book") {
                markdown_files(&path, found);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

/// Every markdown file of the book.
pub fn book_pages() -> Vec<PathBuf> {
    let mut found = Vec::new();
    markdown_files(&repo_root().join("docs"), &mut found);
    found.sort();
    found
}

/// Each page holding tables, with its tables rendered afresh.
pub fn render_pages() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    for page in book_pages() {
        let text = read(&page);
        if !text.contains(TABLE_START) {
            continue;
        }
        let mut rendered = String::new();
        let mut rest = text.as_str();
        while let Some(start) = rest.find(TABLE_START) {
            let after_marker = &rest[start + TABLE_START.len()..];
            let name_end = after_marker.find(TABLE_START_END).expect("a table marker closes with -->");
            let name = &after_marker[..name_end];
            let end = rest.find(TABLE_END).unwrap_or_else(|| panic!("{}: {name} has no `{TABLE_END}`", page.display()));
            let results = page.parent().expect("a page's folder").join(name);
            let _ = write!(
                rendered,
                "{}{TABLE_START}{name}{TABLE_START_END}\n{}{TABLE_END}",
                &rest[..start],
                render_table(&results)
            );
            rest = &rest[end + TABLE_END.len()..];
        }
        rendered.push_str(rest);
        let relative = page.strip_prefix(repo_root()).expect("a page in the repository");
        pages.push((relative.display().to_string(), rendered));
    }
    pages
}
