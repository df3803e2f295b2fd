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

/// CPU time process `pid` has used (user and system), in seconds: a benchmark reads it around
/// its measured window to give each server's CPU per request, which the load generator sharing
/// the cores does not blur as it does requests per second.
pub fn process_cpu_s(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command (which may hold spaces): utime and stime are the 12th and
    // 13th, in clock ticks of 1/100 s (USER_HZ).
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    Ok((ticks(11) + ticks(12)) / 100.0)
}
