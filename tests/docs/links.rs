//! Relative links and their anchors in README.md, ARCHITECTURE.md and docs/: each must name a
//! file or folder of the repository, and an anchor a heading of its page. External links are
//! not fetched.

use std::collections::BTreeSet;
use std::path::Path;

use super::{read, repo_root, tables::book_pages};

/// The anchors of a page's headings, as GitHub and mdBook derive them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else { continue };
        if in_code {
            continue;
        }
        let title = heading.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        // A repeated heading gets -1, -2, ... on both sites.
        let mut candidate = slug.clone();
        let mut n = 0;
        while !found.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
    }
    found
}

/// The targets of a page's markdown links, outside code blocks and code spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Drop code spans: their brackets are not links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let end = after.find(')').unwrap_or(after.len());
            targets.push(after[..end].split_whitespace().next().unwrap_or("").to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// `file: target (reason)` for every link that does not resolve.
pub fn broken_links() -> Vec<String> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    pages.extend(book_pages());
    let mut broken = Vec::new();
    for page in &pages {
        let text = read(page);
        let shown = page.strip_prefix(&root).unwrap_or(page).display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() { page.clone() } else { page.parent().unwrap_or(Path::new("")).join(path) };
            if !file.exists() {
                broken.push(format!("{shown}: {target} (no such file)"));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            if file.extension().is_none_or(|e| e != "md") {
                broken.push(format!("{shown}: {target} (an anchor into a file that is not markdown)"));
            } else if !anchors(&read(&file)).contains(anchor) {
                broken.push(format!("{shown}: {target} (no such heading)"));
            }
        }
    }
    broken
}
