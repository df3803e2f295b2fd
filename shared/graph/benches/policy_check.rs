//! The policy check's cost per call, served from the link cache (issue #14: goal <= 5 µs p50),
//! for each way a call can go, in a graph of 1,000 agents and 10,000 links. Two references in the
//! same run, interleaved with the checks (A, B, C, ..., A, B, C, ...) so machine drift hits all
//! alike: the open mode (what every call pays by default) and a bare two-level `HashMap` lookup
//! of the same names (the floor of any map-based check).
//!
//! Each sample times a batch of calls and divides, so the clock's own cost (tens of ns) does not
//! swamp the figure; p50 and p99 are over the batch means.
//!
//! `cargo bench -p mesh-graph --bench policy_check -- [--samples N]`

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::time::Instant;

use mesh_graph::{Decision, LinkCache};
use mesh_protocol::graph::{GraphMode, GraphPolicy, Link, LinkDirection, LinkRelationship, LinkSource};

const AGENTS: usize = 1_000;
const LINKS_PER_AGENT: usize = 10;
const CALLS_PER_SAMPLE: usize = 1_000;
const SAMPLES_DEFAULT: usize = 2_000;
const CONVERSATIONS_MAX: usize = 10_000;

fn agent(i: usize) -> String {
    format!("agent-{:04}", i % AGENTS)
}

/// Agent i links to the next ten: the first one-way (i superior), the rest two-way peers; every
/// 97th link is disabled.
fn document(mode: GraphMode) -> GraphPolicy {
    let mut links = Vec::with_capacity(AGENTS * LINKS_PER_AGENT);
    for i in 0..AGENTS {
        for step in 1..=LINKS_PER_AGENT {
            let n = links.len();
            links.push(Link {
                id: format!("link-{n}"),
                from_agent_id: agent(i),
                to_agent_id: agent(i + step),
                direction: if step == 1 { LinkDirection::OneWay } else { LinkDirection::TwoWay },
                relationship: if step == 1 { LinkRelationship::Superior } else { LinkRelationship::Peer },
                enabled: n % 97 != 0,
                source: LinkSource::Api,
                created_at: String::new(),
                updated_at: String::new(),
            });
        }
    }
    GraphPolicy { mode, links }
}

fn samples_arg() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2).find(|pair| pair[0] == "--samples").and_then(|pair| pair[1].parse().ok()).unwrap_or(SAMPLES_DEFAULT)
}

fn quantile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[index]
}

type Case<'a> = (&'a str, Box<dyn Fn(usize) -> bool + 'a>);

fn main() {
    let samples = samples_arg();
    let enforced = LinkCache::new(GraphMode::Open, CONVERSATIONS_MAX);
    enforced.load(&document(GraphMode::Enforced), None).expect("policy");
    let open = LinkCache::new(GraphMode::Open, CONVERSATIONS_MAX);
    open.load(&document(GraphMode::Open), None).expect("policy");
    // Agents whose first two links are enabled (every 97th link is not): the calls go from them.
    let callers: Vec<usize> = (0..AGENTS)
        .filter(|i| !(i * LINKS_PER_AGENT).is_multiple_of(97) && !(i * LINKS_PER_AGENT + 1).is_multiple_of(97))
        .collect();
    // The conversations the superiors started, as the subordinates' admission recorded them.
    let contexts: Vec<String> = (0..AGENTS).map(|i| format!("ctx-{i}")).collect();
    for &i in &callers {
        assert!(matches!(enforced.admit(Some(&agent(i)), &agent(i + 1), Some(&contexts[i])), Decision::Allowed(_)));
    }
    let bare: HashMap<String, HashSet<String>> =
        (0..AGENTS).map(|i| (agent(i), (1..=LINKS_PER_AGENT).map(|s| agent(i + s)).collect())).collect();
    let names: Vec<String> = (0..AGENTS + LINKS_PER_AGENT).map(agent).collect();
    let allowed = |decision: Decision| matches!(decision, Decision::Allowed(_));
    let cases: Vec<Case> = vec![
        ("reference: open mode", Box::new(|i| allowed(open.admit(Some(&names[i]), &names[i + 2], None)))),
        (
            "reference: bare HashMap lookup",
            Box::new(|i| bare.get(&names[i]).is_some_and(|t| t.contains(&names[i + 2]))),
        ),
        ("admit: two_way start", Box::new(|i| allowed(enforced.admit(Some(&names[i]), &names[i + 2], None)))),
        (
            "admit: one_way start (recorded)",
            Box::new(|i| allowed(enforced.admit(Some(&names[i]), &names[i + 1], Some(&contexts[i])))),
        ),
        (
            "permit: answer in its context",
            Box::new(|i| allowed(enforced.permit(&names[i + 1], &names[i], Some(&contexts[i])))),
        ),
        (
            "admit: denied (no link)",
            Box::new(|i| allowed(enforced.admit(Some(&names[i]), &names[(i + 500) % AGENTS], None))),
        ),
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); cases.len()];
    for sample in 0..samples {
        for (case, into) in cases.iter().zip(results.iter_mut()) {
            let start = Instant::now();
            for call in 0..CALLS_PER_SAMPLE {
                let i = callers[(sample * 7 + call * 13) % callers.len()];
                assert!(case.1(black_box(i)) || case.0.contains("denied"), "{}: agent {i}", case.0);
            }
            into.push(start.elapsed().as_nanos() as f64 / CALLS_PER_SAMPLE as f64);
        }
    }
    println!(
        "policy check per call, {AGENTS} agents, {} links, {samples} samples of {CALLS_PER_SAMPLE} calls, ns",
        AGENTS * LINKS_PER_AGENT
    );
    println!("{:<34} {:>9} {:>9}", "case", "p50", "p99");
    let mut p50s = Vec::new();
    for ((name, _), samples) in cases.iter().zip(results.iter_mut()) {
        let (p50, p99) = (quantile(samples, 0.50), quantile(samples, 0.99));
        p50s.push(p50);
        println!("{name:<34} {p50:>9.0} {p99:>9.0}");
    }
    let enforced_worst = p50s[2..].iter().copied().fold(0.0, f64::max);
    println!("slowest enforced check p50 / bare lookup p50: {:.1}", enforced_worst / p50s[1]);
    println!("slowest enforced check p50: {:.3} µs (goal <= 5 µs)", enforced_worst / 1000.0);
}
