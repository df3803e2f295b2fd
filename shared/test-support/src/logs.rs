//! Log lines a test can wait on. Some behaviour leaves no other trace: a step the code took and
//! chose to do nothing in (a late turn that leaves the task alone) cannot be told apart from a
//! step that has not happened yet, except by what the code logs when it takes it. [`capture`]
//! installs, once per test binary, a global subscriber that keeps the recent lines of the
//! targets asked for, as text; [`logged`] says whether a line with every given piece was seen, and
//! [`count`] how many such lines were.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// Lines kept at most; older ones go first. Tests look for lines of the moment.
const LINES_KEPT_MAX: usize = 20_000;

static LINES: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
static INSTALLED: OnceLock<String> = OnceLock::new();

/// Starts keeping the lines of `targets` (a `tracing` filter such as
/// `"mesh_a2a_server::engine=debug"`) for the rest of the test binary's run. Every test of a
/// binary must ask for the same targets: the subscriber is global and installed once.
///
/// # Panics
/// When another global subscriber was installed first, or another test of the binary asked for
/// other targets: the lines the test waits on would not be kept.
pub fn capture(targets: &str) {
    let installed = INSTALLED.get_or_init(|| {
        let filter: Targets = targets.parse().unwrap_or_else(|e| panic!("log targets {targets:?}: {e}"));
        let format = tracing_subscriber::fmt::layer().with_ansi(false).without_time().with_writer(|| Lines);
        let subscriber = tracing_subscriber::registry().with(format.with_filter(filter));
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in this test binary");
        targets.to_owned()
    });
    assert_eq!(installed, targets, "every test of a binary captures the same log targets");
}

/// Whether a kept line holds every one of `pieces`.
pub fn logged(pieces: &[&str]) -> bool {
    count(pieces) > 0
}

/// How many kept lines hold every one of `pieces`: for what must be logged once, not on every
/// repetition.
pub fn count(pieces: &[&str]) -> usize {
    lines().iter().filter(|line| pieces.iter().all(|piece| line.contains(piece))).count()
}

fn lines() -> std::sync::MutexGuard<'static, VecDeque<String>> {
    LINES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where the format layer writes one event: each write is one whole line (the layer formats an
/// event into a buffer and writes it at once).
struct Lines;

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut lines = lines();
        if lines.len() == LINES_KEPT_MAX {
            lines.pop_front();
        }
        lines.push_back(String::from_utf8_lossy(bytes).into_owned());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_a_captured_target_is_seen_and_others_are_not() {
        capture("mesh_test_support=debug");
        tracing::debug!(task = "t-1", "a step was taken");
        tracing::trace!(task = "t-2", "below the level asked for");
        tracing::debug!(task = "t-1", "a step was taken");
        assert!(logged(&["a step was taken", "task=\"t-1\""]));
        assert_eq!(count(&["a step was taken", "task=\"t-1\""]), 2);
        assert!(!logged(&["a step was taken", "t-2"]));
        assert!(!logged(&["below the level asked for"]));
    }
}
