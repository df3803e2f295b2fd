//! The confidence of an LLM agent's answer comes from its model (seed 003: computed by the agent
//! that answers). The system prompt asks the model to end its final answer with a line
//! `Confidence: HIGH|MEDIUM|LOW|SPECULATIVE`; what the model writes is untrusted, so it is read by
//! one rule:
//!
//! - the last non-empty line, without Markdown emphasis (`*`, `_`, `` ` ``), is a confidence line
//!   when it starts with `confidence:` (any case); the line is taken off the A2A answer's text;
//! - its value is a level (any case), or a number from 0 to 1 (clamped to that range), mapped to
//!   a level by [`ConfidenceLevel::from_score`];
//! - no confidence line, or one whose value is neither: the fallback, [`FALLBACK_CONFIDENCE`]
//!   (an answer whose model did not say is no `HIGH` one);
//! - a partial answer (a turn cut short) is at most [`PARTIAL_CONFIDENCE_MAX`].

use mesh_protocol::seed::ConfidenceLevel;

/// The level of an answer whose model stated none (or none readable).
pub const FALLBACK_CONFIDENCE: ConfidenceLevel = ConfidenceLevel::Medium;
/// The highest level a partial answer may have, whatever the model said.
pub const PARTIAL_CONFIDENCE_MAX: ConfidenceLevel = ConfidenceLevel::Low;
/// How the confidence line opens.
const CONFIDENCE_PREFIX: &str = "confidence:";

/// An answer's text without its confidence line, and the confidence it states (`None`: none
/// readable).
pub fn stated(text: &str) -> (&str, Option<ConfidenceLevel>) {
    let trimmed = text.trim_end();
    let (before, last) = match trimmed.rfind('\n') {
        Some(at) => (&trimmed[..at], &trimmed[at + 1..]),
        None => ("", trimmed),
    };
    let line = last.trim().trim_matches(|c| matches!(c, '*' | '_' | '`')).trim();
    let is_confidence_line =
        line.get(..CONFIDENCE_PREFIX.len()).is_some_and(|h| h.eq_ignore_ascii_case(CONFIDENCE_PREFIX));
    if !is_confidence_line {
        return (text, None);
    }
    let value = line[CONFIDENCE_PREFIX.len()..].trim().trim_matches(|c| matches!(c, '*' | '_' | '`' | '.')).trim();
    (before.trim_end(), level_of(value))
}

/// A level word (any case) or a score from 0 to 1.
fn level_of(value: &str) -> Option<ConfidenceLevel> {
    let levels = [
        ("HIGH", ConfidenceLevel::High),
        ("MEDIUM", ConfidenceLevel::Medium),
        ("LOW", ConfidenceLevel::Low),
        ("SPECULATIVE", ConfidenceLevel::Speculative),
    ];
    if let Some((_, level)) = levels.iter().find(|(word, _)| value.eq_ignore_ascii_case(word)) {
        return Some(*level);
    }
    value.parse::<f64>().ok().filter(|score| score.is_finite()).map(ConfidenceLevel::from_score)
}

/// The confidence of an answer whose model stated `stated`, partial or not.
pub fn of_answer(stated: Option<ConfidenceLevel>, partial: bool) -> ConfidenceLevel {
    let level = stated.unwrap_or(FALLBACK_CONFIDENCE);
    if partial { level.at_most(PARTIAL_CONFIDENCE_MAX) } else { level }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_confidence_line_is_read_and_taken_off() {
        assert_eq!(stated("Three leagues.\nConfidence: HIGH"), ("Three leagues.", Some(ConfidenceLevel::High)));
        assert_eq!(stated("A.\n\n**Confidence: low**\n"), ("A.", Some(ConfidenceLevel::Low)));
        assert_eq!(stated("A.\n`confidence: Speculative.`"), ("A.", Some(ConfidenceLevel::Speculative)));
        assert_eq!(stated("A.\nConfidence: 0.6"), ("A.", Some(ConfidenceLevel::Medium)));
        assert_eq!(stated("A.\nConfidence: 7"), ("A.", Some(ConfidenceLevel::High)), "clamped to 1");
        assert_eq!(stated("A.\nConfidence: -3"), ("A.", Some(ConfidenceLevel::Speculative)), "clamped to 0");
        assert_eq!(stated("Confidence: MEDIUM"), ("", Some(ConfidenceLevel::Medium)));
    }

    #[test]
    fn no_line_or_an_unreadable_one_is_no_confidence() {
        assert_eq!(stated("Three leagues."), ("Three leagues.", None));
        assert_eq!(stated("A.\nConfidence: absolutely sure"), ("A.", None), "an unreadable line still goes");
        assert_eq!(stated("A.\nConfidence: NaN"), ("A.", None));
        assert_eq!(stated("My confidence: high, and more"), ("My confidence: high, and more", None));
        assert_eq!(stated("Confidence: high\nThen more text."), ("Confidence: high\nThen more text.", None));
        assert_eq!(stated("é\nConfidenc"), ("é\nConfidenc", None));
    }

    #[test]
    fn the_fallback_and_the_partial_cap_apply() {
        assert_eq!(of_answer(None, false), FALLBACK_CONFIDENCE);
        assert_eq!(of_answer(Some(ConfidenceLevel::High), false), ConfidenceLevel::High);
        assert_eq!(of_answer(Some(ConfidenceLevel::High), true), PARTIAL_CONFIDENCE_MAX);
        assert_eq!(of_answer(None, true), ConfidenceLevel::Low);
        assert_eq!(of_answer(Some(ConfidenceLevel::Speculative), true), ConfidenceLevel::Speculative);
    }
}
