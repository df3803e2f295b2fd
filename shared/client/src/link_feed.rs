//! Feeds an agent's link cache from the registry's policy (`GET /api/policy`), polled with
//! `If-None-Match` so an unchanged policy costs a `304`. A failed poll leaves the last good copy
//! in force (see [`mesh_graph::LinkCache`] for what holds before the first one).

use std::time::Duration;

use mesh_graph::LinkCache;

use crate::registry::RegistryClient;

/// Default time between polls: a link change reaches every agent within this.
pub const GRAPH_REFRESH_MS_DEFAULT: u64 = 2_000;

/// Polls the policy every `every`, forever; run it beside the agent.
pub async fn follow_policy(registry: RegistryClient, cache: &LinkCache, every: Duration) {
    loop {
        refresh_policy(&registry, cache).await;
        tokio::time::sleep(every).await;
    }
}

/// One poll: loads a changed policy into `cache`, or records why the poll failed.
pub async fn refresh_policy(registry: &RegistryClient, cache: &LinkCache) {
    let etag = cache.etag();
    let error = match registry.policy(etag.as_deref()).await {
        Ok(None) => return cache.unchanged(),
        Ok(Some((policy, etag))) => {
            let before = cache.report();
            match cache.load(&policy, etag) {
                Ok(()) => {
                    if !before.feed.loaded || before.mode != policy.mode || before.links != policy.links.len() {
                        tracing::info!(mode = ?policy.mode, links = policy.links.len(), "link policy loaded");
                    }
                    return;
                }
                Err(error) => error.to_string(),
            }
        }
        Err(error) => error.to_string(),
    };
    // Warned once per outage, not at every poll.
    if cache.report().feed.last_error.is_none() {
        tracing::warn!(registry = registry.base_url(), %error, "cannot refresh the link policy; keeping the last good copy");
    }
    cache.failed(error);
}
