//! Latency statistics shared by the benchmarks.
#![allow(dead_code)] // each benchmark binary uses a different part

/// Latency samples in microseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn push(&mut self, micros: f64) {
        self.0.push(micros);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `p`-quantile (0..=1) by nearest rank.
    pub fn quantile(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[index]
    }

    pub fn p50(&self) -> f64 {
        self.quantile(0.50)
    }

    pub fn p99(&self) -> f64 {
        self.quantile(0.99)
    }
}

/// Reads `--name value` from the command line (cargo bench passes its own flags too).
pub fn arg(name: &str, default: u64) -> u64 {
    text_arg(name).and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// The value of `--name value` on the command line, if given.
pub fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2).find(|pair| pair[0] == name).map(|pair| pair[1].clone())
}
