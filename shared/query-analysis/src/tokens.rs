//! Splitting a query into words, with offsets in characters.
//!
//! Offsets count `char`s, not bytes, because that is what the protocol's [`Entity`] offsets mean
//! and what a client in any language can index with. Everything here works on a `Vec<char>`, so no
//! byte offset is ever computed and no input, however odd its UTF-8, can make a slice panic.
//!
//! [`Entity`]: mesh_protocol::agents::Entity

use crate::lexicon::{fold, is_combining_mark, is_function_word};

/// One word of a query. `start` and `end` are character offsets into the query, end exclusive,
/// so `text == query.chars().skip(start).take(end - start).collect::<String>()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    pub start: usize,
    pub end: usize,
}

/// Characters that join two runs of letters or digits into one word ("don't", "state-of-the-art",
/// "3.5", "e.g"); anywhere else they are punctuation.
const INNER_JOINERS: &[char] = &['\'', '’', '-', '‐', '.'];

/// Apostrophes that can start a possessive "'s".
const APOSTROPHES: &[char] = &['\'', '’'];

/// Characters of a possessive ending: the apostrophe and the `s`.
const POSSESSIVE_LEN_CHARS: usize = 2;

/// Digits after a thousands separator ("10,000"); a comma followed by any other count of digits
/// separates list items ("1,2,3") instead.
const DIGITS_PER_THOUSANDS_GROUP: usize = 3;

/// Splits `text` into words: runs of letters and digits (with their combining marks), joined
/// across inner apostrophes, hyphens and periods ("don't", "state-of-the-art", "3.5") and across
/// thousands separators ("10,000"). An initialism keeps its final period ("U.S."), so it can be
/// looked up as written. A possessive "'s" is dropped ("Tokyo's" gives "Tokyo"), so names match
/// lexicons; contractions like "it's" lose only a suffix that never carries meaning for search.
/// Punctuation, symbols and emoji separate words and never become tokens.
pub fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    tokenize_chars(&chars)
}

fn tokenize_chars(chars: &[char]) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        // A word starts with a letter or digit; a stray combining mark or joiner does not start one.
        if !chars[i].is_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        let mut skipped_after = 0;
        i += 1;
        while i < chars.len() {
            if is_word_char(chars[i]) {
                i += 1;
            } else if is_possessive_at(chars, i) {
                skipped_after = POSSESSIVE_LEN_CHARS;
                break;
            } else if joins_at(chars, i) {
                // The joiner and the letter or digit after it.
                i += 2;
            } else {
                break;
            }
        }
        if chars.get(i) == Some(&'.') && is_initialism(&chars[start..i]) {
            i += 1;
        }
        tokens.push(Token { text: chars[start..i].iter().collect(), start, end: i });
        i += skipped_after;
    }
    tokens
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || is_combining_mark(c)
}

/// Whether the character at `i`, inside a word, joins it to the letter or digit that follows.
fn joins_at(chars: &[char], i: usize) -> bool {
    let Some(next) = chars.get(i + 1) else { return false };
    if INNER_JOINERS.contains(&chars[i]) {
        return next.is_alphanumeric();
    }
    chars[i] == ',' && i > 0 && chars[i - 1].is_ascii_digit() && is_thousands_group(&chars[i + 1..])
}

/// Whether `rest` starts with exactly one group of three ASCII digits.
fn is_thousands_group(rest: &[char]) -> bool {
    rest.len() >= DIGITS_PER_THOUSANDS_GROUP
        && rest[..DIGITS_PER_THOUSANDS_GROUP].iter().all(char::is_ascii_digit)
        && rest.get(DIGITS_PER_THOUSANDS_GROUP).is_none_or(|c| !c.is_ascii_digit())
}

/// Whether `i` starts an "'s" that ends the word.
fn is_possessive_at(chars: &[char], i: usize) -> bool {
    APOSTROPHES.contains(&chars[i])
        && matches!(chars.get(i + 1), Some('s' | 'S'))
        && chars.get(i + POSSESSIVE_LEN_CHARS).is_none_or(|c| !is_word_char(*c))
}

/// Single letters separated by periods ("U.S", "e.g"): the period after them belongs to the word.
fn is_initialism(word: &[char]) -> bool {
    word.len() >= 3
        && word.iter().enumerate().all(|(index, c)| if index % 2 == 0 { c.is_alphabetic() } else { *c == '.' })
}

/// A query's characters and tokens, with each token folded for lexicon lookups: what every rule
/// needs, computed once per query.
#[derive(Debug)]
pub(crate) struct Words {
    pub(crate) chars: Vec<char>,
    pub(crate) tokens: Vec<Token>,
    pub(crate) folded: Vec<String>,
    /// Whether any letter is lowercase; a query without one is shouted, and its words are not
    /// acronyms.
    pub(crate) has_lowercase: bool,
}

impl Words {
    pub(crate) fn new(text: &str) -> Self {
        let chars: Vec<char> = text.chars().collect();
        let tokens = tokenize_chars(&chars);
        let folded = tokens.iter().map(|token| fold(&token.text)).collect();
        let has_lowercase = chars.iter().any(|c| c.is_lowercase());
        Words { chars, tokens, folded, has_lowercase }
    }

    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The characters from `start` to `end` (exclusive) as a string.
    pub(crate) fn text(&self, start: usize, end: usize) -> String {
        self.chars[start..end].iter().collect()
    }

    /// Whether tokens `i` and `i + 1` exist and only whitespace or `allowed` characters lie between.
    pub(crate) fn gap_allows(&self, i: usize, allowed: &[char]) -> bool {
        let Some(next) = self.tokens.get(i + 1) else { return false };
        self.chars[self.tokens[i].end..next.start].iter().all(|c| c.is_whitespace() || allowed.contains(c))
    }

    /// Whether tokens `i` and `i + 1` exist and are separated by whitespace only, so they can be
    /// read as one phrase.
    pub(crate) fn spaced(&self, i: usize) -> bool {
        self.gap_allows(i, &[])
    }

    pub(crate) fn is_capitalized(&self, i: usize) -> bool {
        self.tokens[i].text.chars().next().is_some_and(char::is_uppercase)
    }

    /// A capitalised word that is not a function word: a candidate part of a name.
    pub(crate) fn is_name_word(&self, i: usize) -> bool {
        self.is_capitalized(i) && !is_function_word(&self.folded[i])
    }

    /// The number of tokens of the longest entry of `phrases` that starts at token `i`. Phrase
    /// words must be separated by whitespace only: "Paris, France" is not the phrase "paris france".
    pub(crate) fn phrase_at(&self, i: usize, phrases: &[&str]) -> Option<usize> {
        phrases
            .iter()
            .filter_map(|phrase| {
                let mut len = 0;
                for word in phrase.split(' ') {
                    let index = i + len;
                    let continues = len == 0 || self.spaced(index - 1);
                    if !continues || self.folded.get(index).is_none_or(|folded| folded != word) {
                        return None;
                    }
                    len += 1;
                }
                Some(len)
            })
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn texts(text: &str) -> Vec<String> {
        tokenize(text).into_iter().map(|token| token.text).collect()
    }

    #[test]
    fn splits_on_whitespace_and_punctuation_without_punctuation_tokens() {
        assert_eq!(texts("show me, robots playing soccer!"), ["show", "me", "robots", "playing", "soccer"]);
        assert!(tokenize("?!... --- ,;:").is_empty());
    }

    #[test]
    fn keeps_inner_apostrophes_hyphens_and_periods() {
        assert_eq!(
            texts("don't state-of-the-art 3.5 U.S. e.g. rock’n’roll"),
            ["don't", "state-of-the-art", "3.5", "U.S.", "e.g.", "rock’n’roll"]
        );
    }

    #[test]
    fn trailing_sentence_period_and_edge_hyphens_are_not_part_of_the_word() {
        assert_eq!(texts("I like soccer. -robots- 'quoted'"), ["I", "like", "soccer", "robots", "quoted"]);
    }

    #[test]
    fn joins_thousands_groups_but_not_lists() {
        assert_eq!(
            texts("10,000 steps and 1,2,3 or 1,0000"),
            ["10,000", "steps", "and", "1", "2", "3", "or", "1", "0000"]
        );
        assert_eq!(texts("1,000,000"), ["1,000,000"]);
    }

    #[test]
    fn drops_possessive_s() {
        assert_eq!(
            texts("Tokyo's skyline, Einstein’s theory, what's up"),
            ["Tokyo", "skyline", "Einstein", "theory", "what", "up"]
        );
        let tokens = tokenize("Tokyo's");
        assert_eq!((tokens[0].start, tokens[0].end), (0, 5));
    }

    #[test]
    fn offsets_count_characters_not_bytes() {
        let tokens = tokenize("São Paulo 🚀 東京 café");
        let spans: Vec<_> = tokens.iter().map(|t| (t.text.as_str(), t.start, t.end)).collect();
        assert_eq!(spans, [("São", 0, 3), ("Paulo", 4, 9), ("東京", 12, 14), ("café", 15, 19)]);
    }

    #[test]
    fn combining_marks_stay_inside_their_word() {
        let text = "Sa\u{0303}o Paulo";
        let tokens = tokenize(text);
        assert_eq!(tokens[0].text, "Sa\u{0303}o");
        assert_eq!((tokens[0].start, tokens[0].end, tokens[1].start), (0, 4, 5));
        // A combining mark with nothing to attach to is not a word.
        assert!(tokenize("\u{0301} \u{0303}").is_empty());
    }

    #[test]
    fn odd_inputs_give_no_tokens_and_no_panic() {
        for text in ["", " ", "...", "🚀🎉", "-", "\u{200D}\u{FE0F}", "\u{0301}"] {
            assert!(tokenize(text).is_empty(), "{text:?}");
        }
    }

    #[test]
    fn words_match_phrases_only_across_whitespace() {
        let words = Words::new("New York, new  york; New-York");
        assert_eq!(words.phrase_at(0, &["new york", "new"]), Some(2));
        assert_eq!(words.phrase_at(1, &["york new"]), None, "comma breaks the phrase");
        assert_eq!(words.phrase_at(2, &["new york"]), Some(2));
        assert_eq!(words.phrase_at(4, &["new york"]), None, "one hyphenated token");
        assert_eq!(words.phrase_at(5, &["new"]), None, "past the end");
    }

    proptest! {
        #[test]
        fn tokens_are_ordered_substrings_of_any_input(text in any::<String>()) {
            let chars: Vec<char> = text.chars().collect();
            let mut previous_end = 0;
            for token in tokenize(&text) {
                prop_assert!(previous_end <= token.start && token.start < token.end && token.end <= chars.len());
                prop_assert_eq!(token.text, chars[token.start..token.end].iter().collect::<String>());
                previous_end = token.end;
            }
        }
    }
}
