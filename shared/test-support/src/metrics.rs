//! What a component recorded through `metrics`, read from a `metrics_util` debugging recorder.
//!
//! A snapshot takes the counts and histogram samples recorded since the one before (gauges keep
//! their value), so a test reading several times keeps what each reading gave.

use metrics_util::debugging::{DebugValue, Snapshotter};

/// A metric's name, its labels (sorted) and its value.
pub type Reading = (String, Vec<(String, String)>, DebugValue);

/// What was recorded since the last snapshot.
pub fn read(snapshotter: &Snapshotter) -> Vec<Reading> {
    let readings = snapshotter.snapshot().into_vec().into_iter().map(|(key, _, _, value)| {
        let key = key.key();
        let mut labels: Vec<_> = key.labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
        labels.sort_unstable();
        (key.name().to_owned(), labels, value)
    });
    readings.collect()
}
