//! Follow-ups in a conversation: "and what about drones" after "robots playing soccer" is searched
//! as "robots playing soccer drones", not as "drones" alone.
//!
//! The rule is deliberately small and predictable: a message is a follow-up when it opens with a
//! connective ([`FOLLOW_UP_OPENINGS`], e.g. "and", "what about", "how about", "also"). Its query
//! is the query of the user turn before it (itself built the same way) followed by what the
//! message says after its connectives. Any other message is a query of its own. Only user turns
//! count (the orchestrator's own answers are not searched), at most [`FOLLOW_UP_TURNS_MAX`] of
//! them, and a query that would pass [`QUERY_CHARS_MAX`] keeps only the follow-up.

use mesh_protocol::agents::QUERY_CHARS_MAX;
use mesh_protocol::seed::{Message, Role};

/// Openings that make a message a follow-up of the previous user turn, matched on whole words,
/// case-insensitively, and stripped (repeatedly: "and what about" is two of them).
pub const FOLLOW_UP_OPENINGS: &[&str] =
    &["what about", "how about", "and", "also", "or", "but", "same for", "now", "then", "plus", "instead"];
/// Previous user turns a follow-up may reach back over.
pub const FOLLOW_UP_TURNS_MAX: usize = 8;

/// What a follow-up adds to the previous query: the message after its openings, without the
/// trailing punctuation; `None` when the message is no follow-up.
fn follow_up_remainder(text: &str) -> Option<String> {
    let mut rest = text.trim();
    let mut stripped = false;
    'strip: loop {
        for opening in FOLLOW_UP_OPENINGS {
            let Some(head) = rest.get(..opening.len()) else { continue };
            let tail = &rest[opening.len()..];
            let whole_word = tail.is_empty() || tail.starts_with(|c: char| !c.is_alphanumeric());
            if head.eq_ignore_ascii_case(opening) && whole_word {
                rest = tail.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
                stripped = true;
                continue 'strip;
            }
        }
        break;
    }
    let rest = rest.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '?' | '!' | '.'));
    (stripped && !rest.is_empty()).then(|| rest.to_owned())
}

/// The query to search for `text`, the newest user message of `messages` (the conversation,
/// oldest first, this message last): `text` itself unless it is a follow-up.
pub fn conversation_query(messages: &[Message], text: &str) -> String {
    let Some(remainder) = follow_up_remainder(text) else { return text.to_owned() };
    let mut earlier: Vec<String> = messages.iter().filter(|m| m.role == Role::User).map(Message::text).collect();
    // The newest user message is the one being answered.
    earlier.pop();
    let mut parts = vec![remainder];
    for turn in earlier.iter().rev().take(FOLLOW_UP_TURNS_MAX) {
        match follow_up_remainder(turn) {
            Some(added) => parts.push(added),
            None => {
                parts.push(turn.trim().to_owned());
                break;
            }
        }
    }
    parts.reverse();
    let query = parts.join(" ");
    if query.chars().count() > QUERY_CHARS_MAX { parts.pop().unwrap_or_default() } else { query }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::seed::Part;

    use super::*;

    fn said(role: Role, text: &str) -> Message {
        Message { role, parts: vec![Part::Text { text: text.into() }] }
    }

    fn conversation(turns: &[&str]) -> Vec<Message> {
        turns
            .iter()
            .flat_map(|turn| [said(Role::User, turn), said(Role::Assistant, "Query: ...\n 1. [video] a result")])
            .take(turns.len() * 2 - 1)
            .collect()
    }

    #[test]
    fn a_follow_up_is_searched_with_the_turn_before_it() {
        let turns = ["robots playing soccer", "and what about drones?"];
        assert_eq!(conversation_query(&conversation(&turns), turns[1]), "robots playing soccer drones");
        let turns = ["robots playing soccer", "and what about drones", "How about, underwater."];
        assert_eq!(conversation_query(&conversation(&turns), turns[2]), "robots playing soccer drones underwater");
    }

    #[test]
    fn a_new_query_stands_alone() {
        let turns = ["robots playing soccer", "cooking pasta"];
        assert_eq!(conversation_query(&conversation(&turns), turns[1]), "cooking pasta");
        // Only whole words open a follow-up: "android" is no "and".
        let turns = ["robots playing soccer", "android phones"];
        assert_eq!(conversation_query(&conversation(&turns), turns[1]), "android phones");
        let turns = ["robots", "newest robots"];
        assert_eq!(conversation_query(&conversation(&turns), turns[1]), "newest robots");
    }

    #[test]
    fn a_follow_up_without_a_turn_before_it_or_without_words_is_taken_as_said() {
        assert_eq!(conversation_query(&conversation(&["and drones"]), "and drones"), "drones");
        let turns = ["robots", "and?"];
        assert_eq!(conversation_query(&conversation(&turns), turns[1]), "and?");
    }

    #[test]
    fn a_query_too_long_keeps_the_follow_up_and_old_turns_are_not_reached() {
        let long = "x ".repeat(QUERY_CHARS_MAX / 2 + 1);
        let turns = [long.as_str(), "and drones"];
        assert_eq!(conversation_query(&conversation(&turns), turns[1]), "drones");
        let mut turns = vec!["robots"];
        turns.extend(std::iter::repeat_n("and more", FOLLOW_UP_TURNS_MAX + 1));
        let query = conversation_query(&conversation(&turns), turns[turns.len() - 1]);
        assert!(!query.contains("robots"), "{query}");
    }
}
