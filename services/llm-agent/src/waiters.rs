//! A2A callers waiting for the answer to the message they put on the agent's topic: the loop
//! answers through the bus, and hands the answer to whoever waits for that message in this
//! process.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use mesh_protocol::seed::ConfidenceLevel;
use tokio::sync::oneshot;

use crate::error::TurnError;

/// Callers waiting at once, at most; one more is refused (the HTTP concurrency limit is lower).
pub const WAITERS_MAX: usize = 10_000;

/// A turn's answer as its caller gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    /// Non-empty makes the A2A answer partial: what was cut or stopped.
    pub warnings: Vec<String>,
    /// How sure the model said it is ([`crate::confidence`]).
    pub confidence: ConfidenceLevel,
}

impl Answer {
    /// The answer the model wrote as `content` (as the conversation keeps it): its confidence
    /// line read and taken off the text ([`crate::confidence`]).
    pub fn from_model(content: &str, warnings: Vec<String>) -> Self {
        let (text, stated) = crate::confidence::stated(content);
        let confidence = crate::confidence::of_answer(stated, !warnings.is_empty());
        Self { text: text.to_owned(), warnings, confidence }
    }
}

type Waiting = oneshot::Sender<Result<Answer, TurnError>>;

/// Callers by the node id of the message whose answer they wait for.
#[derive(Debug, Default)]
pub struct Waiters {
    waiting: Mutex<HashMap<String, Waiting>>,
}

/// A registered wait; dropping it (the caller gave up) forgets it.
#[derive(Debug)]
pub struct Wait<'a> {
    waiters: &'a Waiters,
    message: String,
    pub answer: oneshot::Receiver<Result<Answer, TurnError>>,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.waiters.lock().remove(&self.message);
    }
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        // Each change is one insert or remove: the map is consistent whatever panicked.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the answer to message `message`; `None` when too many wait already.
    pub fn wait(&self, message: &str) -> Option<Wait<'_>> {
        let (sender, answer) = oneshot::channel();
        let mut waiting = self.lock();
        if waiting.len() >= WAITERS_MAX {
            return None;
        }
        waiting.insert(message.to_owned(), sender);
        Some(Wait { waiters: self, message: message.to_owned(), answer })
    }

    /// Hands the answer to message `message` to its caller, if one waits here.
    pub fn answer(&self, message: &str, answer: Result<Answer, TurnError>) {
        if let Some(sender) = self.lock().remove(message) {
            let _ = sender.send(answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_its_waiter_once_and_a_dropped_wait_is_forgotten() {
        let waiters = Waiters::default();
        let mut wait = waiters.wait("m1").unwrap();
        waiters.answer("m1", Ok(Answer::from_model("hi", vec![])));
        waiters.answer("m1", Ok(Answer::from_model("again", vec![])));
        assert_eq!((&mut wait.answer).await.unwrap().unwrap().text, "hi");
        let wait = waiters.wait("m2").unwrap();
        drop(wait);
        assert!(waiters.lock().is_empty());
    }
}
