//! Waiting for what a test expects to happen, rather than sleeping for as long as it might take:
//! a sleep either wastes time or, on a loaded machine, ends before the thing happened.

use std::time::Duration;

/// How often [`eventually`] checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Checks `check` every [`POLL_INTERVAL`] until it holds; fails the test, naming `what`, once
/// `deadline` has passed without it. Make `deadline` generous: it only bounds a failing run.
pub async fn eventually(what: &str, deadline: Duration, mut check: impl AsyncFnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + deadline;
    while !check().await {
        assert!(tokio::time::Instant::now() < give_up, "gave up after {deadline:?} waiting for {what}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_once_the_condition_holds() {
        let mut checks = 0;
        eventually("the third check", Duration::from_secs(10), async || {
            checks += 1;
            checks == 3
        })
        .await;
        assert_eq!(checks, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "gave up after 50ms waiting for nothing")]
    async fn fails_naming_what_it_waited_for_after_the_deadline() {
        eventually("nothing", Duration::from_millis(50), async || false).await;
    }
}
