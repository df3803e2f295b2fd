use std::future::Future;

use crate::error::LlmError;

/// Words every warning from [`llm_or_rules`] carries after a failed LLM attempt.
pub const FALLBACK_WARNING: &str = "answered with the rules";

/// Runs the LLM `attempt` when there is one, and the `rules` when there is none or it fails.
/// Returns the answer, whether the LLM gave it, and, after a failed attempt, a warning saying
/// the rules answered instead (so the caller can mark its answer partial).
pub async fn llm_or_rules<T, F>(attempt: Option<F>, rules: impl FnOnce() -> T) -> (T, bool, Option<String>)
where
    F: Future<Output = Result<T, LlmError>>,
{
    let Some(attempt) = attempt else {
        return (rules(), false, None);
    };
    match attempt.await {
        Ok(answer) => (answer, true, None),
        Err(error) => {
            tracing::warn!(%error, "LLM backend failed; answering with the rules");
            (rules(), false, Some(format!("LLM backend failed ({error}); {FALLBACK_WARNING}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn uses_the_llm_answer_and_falls_back_on_failure_or_absence() {
        let ok = llm_or_rules(Some(async { Ok::<_, LlmError>(1) }), || 2).await;
        assert_eq!(ok, (1, true, None));
        let failed = llm_or_rules(Some(async { Err::<i32, _>(LlmError::Timeout { timeout_ms: 10 }) }), || 2).await;
        assert_eq!((failed.0, failed.1), (2, false));
        assert!(failed.2.unwrap().contains("answered with the rules"));
        let absent = llm_or_rules(None::<std::future::Ready<Result<i32, LlmError>>>, || 2).await;
        assert_eq!(absent, (2, false, None));
    }
}
