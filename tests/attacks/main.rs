//! Attacks and overloads found by the review of issue #34, each played against real servers on
//! port 0: one module a finding, each test shown to fail before its fix.

#[path = "../common/secured.rs"]
mod secured;

mod durable_answers;
mod link_history;
mod lone_agent;
mod origin_and_host;
mod push_fairness;
mod rate_limit_buckets;
mod serving_timeouts;
mod small_findings;
mod ui_websocket;
