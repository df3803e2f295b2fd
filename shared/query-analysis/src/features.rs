//! Query features: what profile selection reasons about (seed 002, section 3: entity count and
//! types, query length, visual/temporal keywords), plus the modality, complexity and the query
//! traits profiles advertise their strengths in.

use std::collections::BTreeSet;

use mesh_protocol::agents::{Complexity, Entity, EntityType, Modality, QUERY_TRAITS};

use crate::entities::extract;
use crate::lexicon::{
    AUDIO_KEYWORDS, CLAUSE_MARKERS, IMAGE_KEYWORDS, NEGATIONS, QUESTION_WORDS, TEMPORAL_KEYWORDS, TEXT_KEYWORDS,
    VIDEO_KEYWORDS, VISUAL_KEYWORDS, is_function_word,
};
use crate::tokens::Words;

/// Queries of at least this many tokens are long: they read as sentences, which full-text
/// ranking handles better than tag matching.
const LONG_QUERY_MIN_TOKENS: usize = 8;
/// Queries of at most this many tokens are short: a name or a couple of keywords.
const SHORT_QUERY_MAX_TOKENS: usize = 3;
/// A query this long is complex whatever it says.
const COMPLEX_MIN_TOKENS: usize = 10;
/// A query naming this many kinds of named entity (PERSON, ORGANIZATION, LOCATION, DATE, NUMBER)
/// combines constraints, so it is complex. CONCEPT does not count: nearly every query has one.
const COMPLEX_MIN_NAMED_ENTITY_TYPES: usize = 3;
/// A non-question with at most this many content words is simple.
const SIMPLE_MAX_CONTENT_TOKENS: usize = 3;
/// A word ending in "-ing" needs at least this many characters to be read as an activity
/// ("playing"), which rules out "king", "ring" and "sing".
const MIN_ACTIVITY_WORD_CHARS: usize = 5;
const ACTIVITY_SUFFIX: &str = "ing";
/// Question marks that end a question, ASCII and full-width.
const QUESTION_MARKS: &[char] = &['?', '？'];
/// A clause separator that needs no word ("robots; humans").
const CLAUSE_PUNCTUATION: char = ';';
/// Double quotes that open and close an exact phrase. Single quotes are left out: they are
/// apostrophes as often as quotes.
const OPENING_QUOTES: &[char] = &['"', '“', '„', '«'];
const CLOSING_QUOTES: &[char] = &['"', '”', '“', '»'];
/// Entity types that make a query an "entity" query: names and dates, what exact-match profiles
/// (titles) do well on. Numbers and concepts are in nearly every query.
const NAMED_ENTITY_TRAIT_TYPES: &[EntityType] =
    &[EntityType::Person, EntityType::Organization, EntityType::Location, EntityType::Date];

/// What the rules found in a query. Keyword lists hold lexicon forms (lowercase, e.g. "show me")
/// in query order, each once; `temporal_keywords` also holds the query's DATE entities as written.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryFeatures {
    pub token_count: usize,
    /// Ends with a question mark or starts with a question word ("how", "what", "who", ...).
    pub is_question: bool,
    pub entity_count: usize,
    /// The distinct entity types found, in [`EntityType`] order.
    pub entity_types: Vec<EntityType>,
    pub visual_keywords: Vec<String>,
    pub audio_keywords: Vec<String>,
    pub temporal_keywords: Vec<String>,
    /// A double-quoted phrase with at least one word in it.
    pub quoted_phrase: bool,
    pub modality: Modality,
    pub complexity: Complexity,
    /// The subset of [`QUERY_TRAITS`] that applies, in that list's order (see [`analyze`]).
    pub traits: Vec<&'static str>,
}

/// Computes a query's features. The rules, each checkable by hand:
///
/// - **modality**, first match wins: Video if a video word ("video", "clip", "footage", "watch",
///   "time-lapse", ...); Image if a picture word ("photo", "image", ...); Video if a generic visual
///   request ("show me", "see", "scene") and an activity word ending in "-ing" ("show me robots
///   playing soccer": moving activity implies footage); Audio if an audio word ("podcast", "song",
///   "listen", ...); Text if a reading or explaining word ("article", "paper", "explain", "how",
///   "why", "what is", ...); else Any. A generic visual request without an activity ("show me the
///   Eiffel tower") stays Any but still gives the "visual" trait. Media words come before text
///   words because "how to tie a knot video" asks for a video.
/// - **complexity**: Complex if at least 10 tokens, a second clause (";" or a clause word such as
///   "because", "which", "but" after the first word) or at least 3 kinds of named entity;
///   otherwise Simple if not a question and at most 3 content words; otherwise Medium.
/// - **traits**: "general" always; "keyword" for a non-question under 8 tokens; "question";
///   "long_query" from 8 tokens; "short_query" up to 3 tokens; "entity" if a PERSON,
///   ORGANIZATION, LOCATION or DATE was found; "visual", "audio", "temporal" if keywords of
///   that kind were found; "exact_phrase" for a quoted phrase. An empty query is only "general".
pub fn analyze(text: &str) -> QueryFeatures {
    let words = Words::new(text);
    let extraction = extract(&words);
    let entity_types: Vec<EntityType> =
        extraction.entities.iter().map(|entity| entity.entity_type).collect::<BTreeSet<_>>().into_iter().collect();
    let visual_keywords = keywords(&words, VISUAL_KEYWORDS);
    let audio_keywords = keywords(&words, AUDIO_KEYWORDS);
    let is_question = is_question(&words);
    let modality = modality(&words, &visual_keywords, &audio_keywords);
    let mut features = QueryFeatures {
        token_count: words.len(),
        is_question,
        entity_count: extraction.entity_count,
        complexity: complexity(&words, is_question, &entity_types),
        entity_types,
        temporal_keywords: temporal_keywords(&words, &extraction.entities),
        visual_keywords,
        audio_keywords,
        quoted_phrase: has_quoted_phrase(&words.chars),
        modality,
        traits: Vec::new(),
    };
    features.traits = QUERY_TRAITS.iter().copied().filter(|query_trait| applies(query_trait, &features)).collect();
    features
}

/// Whether a trait of [`QUERY_TRAITS`] describes the query. A trait the protocol adds later is not
/// claimed until a rule for it is written here.
fn applies(query_trait: &str, features: &QueryFeatures) -> bool {
    let tokens = features.token_count;
    match query_trait {
        "general" => true,
        "keyword" => !features.is_question && (1..LONG_QUERY_MIN_TOKENS).contains(&tokens),
        "question" => features.is_question,
        "long_query" => tokens >= LONG_QUERY_MIN_TOKENS,
        "short_query" => (1..=SHORT_QUERY_MAX_TOKENS).contains(&tokens),
        "entity" => features.entity_types.iter().any(|t| NAMED_ENTITY_TRAIT_TYPES.contains(t)),
        "visual" => !features.visual_keywords.is_empty(),
        "audio" => !features.audio_keywords.is_empty(),
        "temporal" => !features.temporal_keywords.is_empty(),
        "exact_phrase" => features.quoted_phrase,
        _ => false,
    }
}

/// Entries of `lexicon` found in the query, with the character offset each starts at, in order;
/// an entry right after a negation ("photos, not videos") is left out: the query rules it out.
fn keyword_matches(words: &Words, lexicon: &[&str]) -> Vec<(usize, String)> {
    let mut matches = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let len = words.phrase_at(i, lexicon).unwrap_or(0);
        let negated = i > 0 && NEGATIONS.contains(&words.folded[i - 1].as_str());
        if len > 0 && !negated {
            matches.push((words.tokens[i].start, words.folded[i..i + len].join(" ")));
        }
        i += len.max(1);
    }
    matches
}

/// Entries of `lexicon` found in the query, each once, in query order.
fn keywords(words: &Words, lexicon: &[&str]) -> Vec<String> {
    dedup(keyword_matches(words, lexicon).into_iter().map(|(_, keyword)| keyword))
}

/// Temporal keywords and DATE entities, in query order; a keyword inside a date ("year" in "last
/// year") is not listed again.
fn temporal_keywords(words: &Words, entities: &[Entity]) -> Vec<String> {
    let dates: Vec<&Entity> = entities.iter().filter(|entity| entity.entity_type == EntityType::Date).collect();
    let mut found: Vec<(usize, String)> = keyword_matches(words, TEMPORAL_KEYWORDS)
        .into_iter()
        .filter(|(start, _)| !dates.iter().any(|date| (date.start..date.end).contains(start)))
        .chain(dates.iter().map(|date| (date.start, date.text.clone())))
        .collect();
    found.sort_by_key(|(start, _)| *start);
    dedup(found.into_iter().map(|(_, keyword)| keyword))
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut unique: Vec<String> = Vec::new();
    for item in items {
        if !unique.contains(&item) {
            unique.push(item);
        }
    }
    unique
}

fn is_question(words: &Words) -> bool {
    let ends_with_mark =
        words.chars.iter().rev().find(|c| !c.is_whitespace()).is_some_and(|c| QUESTION_MARKS.contains(c));
    ends_with_mark || words.folded.first().is_some_and(|first| QUESTION_WORDS.contains(&first.as_str()))
}

/// See [`analyze`] for the precedence.
fn modality(words: &Words, visual_keywords: &[String], audio_keywords: &[String]) -> Modality {
    let has_visual = |lexicon: &[&str]| visual_keywords.iter().any(|keyword| lexicon.contains(&keyword.as_str()));
    if has_visual(VIDEO_KEYWORDS) {
        Modality::Video
    } else if has_visual(IMAGE_KEYWORDS) {
        Modality::Image
    } else if !visual_keywords.is_empty() && names_activity(words) {
        // Only generic visual requests are left.
        Modality::Video
    } else if !audio_keywords.is_empty() {
        Modality::Audio
    } else if !keyword_matches(words, TEXT_KEYWORDS).is_empty() {
        Modality::Text
    } else {
        Modality::Any
    }
}

/// Whether a content word ends in "-ing" ("playing", "dancing"): an activity, best seen moving.
fn names_activity(words: &Words) -> bool {
    words.folded.iter().any(|word| {
        word.ends_with(ACTIVITY_SUFFIX) && word.chars().count() >= MIN_ACTIVITY_WORD_CHARS && !is_function_word(word)
    })
}

/// See [`analyze`] for the thresholds.
fn complexity(words: &Words, is_question: bool, entity_types: &[EntityType]) -> Complexity {
    // A clause word opening the query ("which robots ...") starts the only clause.
    let has_second_clause = words.chars.contains(&CLAUSE_PUNCTUATION)
        || words.folded.iter().skip(1).any(|word| CLAUSE_MARKERS.contains(&word.as_str()));
    let named_types = entity_types.iter().filter(|t| **t != EntityType::Concept).count();
    let content_tokens = words.folded.iter().filter(|word| !is_function_word(word)).count();
    if words.len() >= COMPLEX_MIN_TOKENS || has_second_clause || named_types >= COMPLEX_MIN_NAMED_ENTITY_TYPES {
        Complexity::Complex
    } else if !is_question && content_tokens <= SIMPLE_MAX_CONTENT_TOKENS {
        Complexity::Simple
    } else {
        Complexity::Medium
    }
}

/// Whether an opening double quote is later closed with at least one letter or digit between.
fn has_quoted_phrase(chars: &[char]) -> bool {
    let mut inside = false;
    let mut has_word = false;
    for c in chars {
        if inside && CLOSING_QUOTES.contains(c) {
            if has_word {
                return true;
            }
            inside = false;
        } else if inside {
            has_word |= c.is_alphanumeric();
        } else if OPENING_QUOTES.contains(c) {
            inside = true;
            has_word = false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn seed_example_is_a_simple_visual_keyword_query_for_video() {
        let features = analyze("show me robots playing soccer");
        assert_eq!(features.token_count, 5);
        assert!(!features.is_question);
        assert_eq!(features.entity_count, 3);
        assert_eq!(features.entity_types, [EntityType::Concept]);
        assert_eq!(features.visual_keywords, strings(&["show me"]));
        assert!(features.audio_keywords.is_empty() && features.temporal_keywords.is_empty());
        assert_eq!(features.modality, Modality::Video);
        assert_eq!(features.complexity, Complexity::Simple);
        assert_eq!(features.traits, ["general", "keyword", "visual"]);
    }

    #[test]
    fn modality_precedence() {
        for (text, modality) in [
            ("how to tie a knot video", Modality::Video),
            ("time-lapse of a flower", Modality::Video),
            ("watch the eclipse", Modality::Video),
            ("show me dancing robots", Modality::Video),
            ("I want to see rockets launching", Modality::Video),
            ("show me photos of people dancing", Modality::Image),
            ("show me the Eiffel tower", Modality::Any),
            ("photos of the clip art", Modality::Video),
            ("photos of Paris", Modality::Image),
            ("podcast about photosynthesis", Modality::Audio),
            ("jazz music from the 1920s", Modality::Audio),
            ("paper on neural networks", Modality::Text),
            ("what is photosynthesis", Modality::Text),
            ("why is the sky blue", Modality::Text),
            ("robots soccer", Modality::Any),
            ("", Modality::Any),
        ] {
            assert_eq!(analyze(text).modality, modality, "{text:?}");
        }
    }

    #[test]
    fn questions_by_mark_or_question_word() {
        assert!(analyze("robots playing soccer?").is_question);
        assert!(analyze("  is this real？  ").is_question);
        assert!(analyze("Who won the 2010 World Cup").is_question);
        assert!(!analyze("robots playing soccer").is_question);
        assert!(!analyze("videos when it rains").is_question, "a question word later on is not a question");
    }

    #[test]
    fn complexity_levels() {
        for (text, complexity) in [
            ("robots soccer", Complexity::Simple),
            ("show me robots playing soccer", Complexity::Simple),
            ("what is a robot", Complexity::Medium),
            ("robots playing soccer on grass fields", Complexity::Medium),
            ("robots that play soccer", Complexity::Complex),
            ("robots; soccer", Complexity::Complex),
            ("Dr. Jane Smith from MIT in Paris", Complexity::Complex),
            ("one two three four five six seven eight nine ten", Complexity::Complex),
        ] {
            assert_eq!(analyze(text).complexity, complexity, "{text:?}");
        }
    }

    #[test]
    fn keywords_in_query_order_once_each_in_lexicon_form() {
        let features = analyze("Watch VIDEO clips, more videos, and listen to the Song of the Sea");
        assert_eq!(features.visual_keywords, strings(&["watch", "video", "clips", "videos"]));
        assert_eq!(features.audio_keywords, strings(&["listen", "song"]));
    }

    #[test]
    fn temporal_keywords_include_dates_without_repeating_their_words() {
        let features = analyze("history of robots before 1990 and last year");
        assert_eq!(features.temporal_keywords, strings(&["history", "before", "1990", "last year"]));
        assert!(features.traits.contains(&"temporal"));
        // "time-lapse" is a filming technique, not a time.
        assert!(analyze("time-lapse of clouds").temporal_keywords.is_empty());
    }

    #[test]
    fn quoted_phrases_need_closing_quote_and_a_word() {
        assert!(analyze("\"moon landing\" footage").quoted_phrase);
        assert!(analyze("“moon landing”").quoted_phrase);
        assert!(analyze("\"\" then \"x\"").quoted_phrase);
        assert!(!analyze("\"moon landing").quoted_phrase);
        assert!(!analyze("\" \" footage").quoted_phrase);
        assert!(!analyze("don't 'quote' me").quoted_phrase);
    }

    #[test]
    fn traits_by_rule() {
        let traits = |text: &str| analyze(text).traits;
        assert_eq!(traits("Neil Armstrong"), ["general", "keyword", "short_query", "entity"]);
        assert_eq!(traits("how do robots learn to play soccer so well"), ["general", "question", "long_query"]);
        assert_eq!(
            traits("\"moon landing\" podcast 1969"),
            ["general", "keyword", "entity", "audio", "temporal", "exact_phrase"]
        );
        assert_eq!(traits("seven robots"), ["general", "keyword", "short_query"], "a NUMBER is not a named entity");
        assert_eq!(traits(""), ["general"]);
        assert_eq!(traits("?"), ["general", "question"]);
    }

    #[test]
    fn traits_are_query_traits_in_protocol_order() {
        let features = analyze("Is there footage of \"Apollo 11\" in Florida from July 1969 with music?");
        let positions: Vec<usize> =
            features.traits.iter().map(|t| QUERY_TRAITS.iter().position(|q| q == t).expect("a QUERY_TRAIT")).collect();
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{:?}", features.traits);
        assert_eq!(
            features.traits,
            ["general", "question", "long_query", "entity", "visual", "audio", "temporal", "exact_phrase"]
        );
        assert_eq!(features.entity_types, [EntityType::Location, EntityType::Date, EntityType::Concept]);
    }
}
