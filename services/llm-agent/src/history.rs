//! What of a conversation the model sees: the newest messages that fit the agent's token budget
//! and, in place of the older ones, a summary. A summary is a docmem node of type `summary`
//! (seed 001 foresees them), a child of the conversation's root, whose id derives from the last
//! message it covers: a turn replayed after a restart finds the summary it wrote and does not
//! ask the model again, and each new summary extends the newest earlier one rather than
//! reading the whole conversation again.

use mesh_bus::{CachedMessage, ChatMessage, Role};

/// Bytes per token in the budget's estimate (English text with a BPE tokenizer).
pub const BYTES_PER_TOKEN: usize = 4;
/// Context type of summary nodes (`summary:agent:{bus id}`).
pub const SUMMARY_CONTEXT_TYPE: &str = "summary";
/// The summary's message starts so, so that the model knows what it reads.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:\n";
/// A summary takes at most this share of the budget (1 / divisor); the newest messages the rest.
pub const SUMMARY_BUDGET_DIVISOR: usize = 4;
/// Earlier boundaries searched for the summary to extend: past them, the summary starts afresh
/// from the dropped messages (cut from their oldest end).
pub const SUMMARY_LOOKBACK_MAX: usize = 64;

const SUMMARY_NODE_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6c6c_6d2d_6167_656e_742d_7375_6d6d_3031);

/// The summary node of conversation `root` that covers every message up to `last_covered`.
pub fn summary_node_id(root: &str, last_covered: &str) -> String {
    uuid::Uuid::new_v5(&SUMMARY_NODE_ID_NAMESPACE, format!("summary\n{root}\n{last_covered}").as_bytes()).to_string()
}

/// Index of the first of the newest messages whose text fits `tokens_max`; the newest one is
/// always kept (cut later if it alone is larger).
pub fn first_kept(messages: &[CachedMessage], tokens_max: usize) -> usize {
    let mut bytes_left = tokens_max.saturating_mul(BYTES_PER_TOKEN);
    for (index, message) in messages.iter().enumerate().rev() {
        if message.content.len() > bytes_left {
            return (index + 1).min(messages.len() - 1);
        }
        bytes_left -= message.content.len();
    }
    0
}

/// The ids of the summaries that could precede the boundary before `first`, newest first: the
/// summary covering up to message `first - 2`, then `first - 3`, ...
pub fn earlier_summary_ids(root: &str, messages: &[CachedMessage], first: usize) -> Vec<(usize, String)> {
    (0..first.saturating_sub(1))
        .rev()
        .take(SUMMARY_LOOKBACK_MAX)
        .map(|index| (index, summary_node_id(root, &messages[index].node_id)))
        .collect()
}

/// What the summariser reads: the summary so far, if any, then the messages to fold in, as
/// `me` sees them, cut from their oldest end to `bytes_max`.
pub fn transcript(previous: Option<&str>, messages: &[CachedMessage], me: &str, bytes_max: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut bytes = previous.map_or(0, str::len);
    for message in messages.iter().rev() {
        let speaker = match Role::of(&message.sender, me) {
            Role::Assistant => "you".to_owned(),
            Role::User => message.sender.clone(),
        };
        let line = format!("- {speaker}: {}", message.content);
        if bytes + line.len() > bytes_max && !lines.is_empty() {
            break;
        }
        bytes += line.len();
        lines.push(cut_to(&line, bytes_max).unwrap_or(&line).to_owned());
    }
    lines.reverse();
    match previous {
        Some(summary) => format!("Summary so far:\n{summary}\n\nMessages since:\n{}", lines.join("\n")),
        None => format!("Messages:\n{}", lines.join("\n")),
    }
}

/// The summary as the model reads it, in front of the newest messages.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage { role: Role::User, content: format!("{SUMMARY_PREFIX}{summary}") }
}

/// The newest messages whose estimated tokens fit `tokens_max`, oldest first; the newest one
/// always, cut to the budget if it alone is larger. Returns them and how many were dropped.
pub fn within_budget(mut messages: Vec<ChatMessage>, tokens_max: usize) -> (Vec<ChatMessage>, usize) {
    let mut bytes_left = tokens_max.saturating_mul(BYTES_PER_TOKEN);
    let mut kept = 0;
    for message in messages.iter_mut().rev() {
        if message.content.len() > bytes_left {
            if kept == 0 {
                message.content = cut_to(&message.content, bytes_left).unwrap_or(&message.content).to_owned();
                kept = 1;
            }
            break;
        }
        bytes_left -= message.content.len();
        kept += 1;
    }
    let dropped = messages.len() - kept;
    (messages.split_off(dropped), dropped)
}

/// `text` cut to at most `bytes` bytes on a character boundary; `None` when it fits.
pub fn cut_to(text: &str, bytes: usize) -> Option<&str> {
    if text.len() <= bytes {
        return None;
    }
    let end = (0..=bytes).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    Some(&text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(id: &str, sender: &str, content: &str) -> CachedMessage {
        CachedMessage { node_id: id.into(), sender: sender.into(), content: content.into() }
    }

    #[test]
    fn the_newest_messages_that_fit_are_kept_and_the_newest_always() {
        let messages = [cached("1", "u", &"a".repeat(40)), cached("2", "me", &"b".repeat(40)), cached("3", "u", "c")];
        // 20 tokens = 80 bytes: the last two fit, the first does not.
        assert_eq!(first_kept(&messages, 20), 1);
        assert_eq!(first_kept(&messages, 100), 0);
        assert_eq!(first_kept(&messages[..1], 1), 0, "a lone message is kept, to be cut");
        assert_eq!(first_kept(&[cached("1", "u", "x"), cached("2", "u", &"y".repeat(99))], 1), 1);
    }

    #[test]
    fn summary_ids_are_stable_and_earlier_ones_are_searched_newest_first() {
        assert_eq!(summary_node_id("root", "m1"), summary_node_id("root", "m1"));
        assert_ne!(summary_node_id("root", "m1"), summary_node_id("root", "m2"));
        let messages: Vec<CachedMessage> = (0..5).map(|i| cached(&format!("m{i}"), "u", "x")).collect();
        let earlier = earlier_summary_ids("root", &messages, 4);
        let indexes: Vec<usize> = earlier.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [2, 1, 0]);
        assert_eq!(earlier[0].1, summary_node_id("root", "m2"));
    }

    #[test]
    fn a_transcript_extends_the_summary_so_far_and_keeps_its_newest_lines() {
        let messages = [cached("1", "ui-1", "robots playing soccer"), cached("2", "me", "Here is what I found.")];
        assert_eq!(
            transcript(Some("They asked about robots."), &messages, "me", 1000),
            "Summary so far:\nThey asked about robots.\n\nMessages since:\n- ui-1: robots playing soccer\n- you: Here is what I found."
        );
        assert_eq!(transcript(None, &messages, "me", 30), "Messages:\n- you: Here is what I found.");
    }

    #[test]
    fn within_budget_keeps_the_newest_and_cuts_a_lone_huge_one() {
        let message = |content: &str| ChatMessage { role: Role::User, content: content.into() };
        let (kept, dropped) = within_budget(vec![message(&"a".repeat(40)), message("b")], 5);
        assert_eq!((kept.len(), dropped), (1, 1));
        let (kept, dropped) = within_budget(vec![message(&"é".repeat(100))], 5);
        assert_eq!((kept[0].content.len(), dropped), (20, 0));
    }
}
