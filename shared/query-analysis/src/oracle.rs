//! The planners' oracle: queries with the entities and the profile a person would pick, written
//! by hand, never computed by this crate. The rules' unit tests and both planning agents' HTTP
//! tests check their answers against these tables (feature `testing`), so a wrong rule fails
//! them instead of agreeing with itself.
//!
//! The expectations follow the conventions the rules document (every content word is a CONCEPT,
//! no compounds, offsets in characters). Where the rules knowingly fall short of what a person
//! would say, the row holds what they give and a comment says what a person would expect and
//! why the rules stop there.

use mesh_protocol::agents::EntityType::{Concept, Date, Location, Number, Organization, Person};
use mesh_protocol::agents::Modality::{Any, Audio, Image, Text, Video};
use mesh_protocol::agents::{EntityType, Modality, SearchProfile};

/// A query and its entities as a person would mark them.
#[derive(Debug, Clone, Copy)]
pub struct EntityCase {
    pub query: &'static str,
    /// `(text, type, start, end)` in text order, offsets in characters, end exclusive.
    pub entities: &'static [(&'static str, EntityType, usize, usize)],
}

/// A query and the profile a person would pick for it among [`example_profiles`].
#[derive(Debug, Clone, Copy)]
pub struct ProfileCase {
    pub query: &'static str,
    pub selected_profile: &'static str,
    pub intent: &'static str,
    pub modality: Modality,
}

const fn entities(query: &'static str, entities: &'static [(&'static str, EntityType, usize, usize)]) -> EntityCase {
    EntityCase { query, entities }
}

const fn profile(
    query: &'static str,
    selected_profile: &'static str,
    intent: &'static str,
    modality: Modality,
) -> ProfileCase {
    ProfileCase { query, selected_profile, intent, modality }
}

pub const ENTITY_CASES: &[EntityCase] = &[
    // Seed 002's example: request words ("show me") are no entities; the activity is.
    entities(
        "show me robots playing soccer",
        &[("robots", Concept, 8, 14), ("playing", Concept, 15, 22), ("soccer", Concept, 23, 29)],
    ),
    entities(
        "Marathon in Tokyo on 3 March 2024",
        &[("Marathon", Concept, 0, 8), ("Tokyo", Location, 12, 17), ("3 March 2024", Date, 21, 33)],
    ),
    // Unicode: offsets count characters ("Café " is 5 characters, 6 bytes); an emoji is no word.
    entities("Café in São Paulo 🤖", &[("Café", Concept, 0, 4), ("São Paulo", Location, 8, 17)]),
    // The same place with a combining tilde: one more character, the same place.
    entities("Sa\u{0303}o Paulo traffic", &[("Sa\u{0303}o Paulo", Location, 0, 10), ("traffic", Concept, 11, 18)]),
    entities("Dr. Jane Smith from MIT", &[("Dr. Jane Smith", Person, 0, 14), ("MIT", Organization, 20, 23)]),
    // Overlapping names: "Marie Curie" is both a known person and a first name with a surname
    // (one PERSON); "Paris" is a place inside an organisation's name (the organisation wins).
    entities(
        "Marie Curie at the University of Paris",
        &[("Marie Curie", Person, 0, 11), ("University of Paris", Organization, 19, 38)],
    ),
    // "New York", not "York": the longer place.
    entities("New York marathon", &[("New York", Location, 0, 8), ("marathon", Concept, 9, 17)]),
    entities(
        "Neil Armstrong on the moon in July 1969",
        &[("Neil Armstrong", Person, 0, 14), ("moon", Concept, 22, 26), ("July 1969", Date, 30, 39)],
    ),
    // A year right after a place is a date, not a designation like "Apollo 11".
    entities("Tokyo 2020 opening", &[("Tokyo", Location, 0, 5), ("2020", Date, 6, 10), ("opening", Concept, 11, 18)]),
    // The possessive is not part of the name.
    entities(
        "Einstein's theory of relativity",
        &[("Einstein", Person, 0, 8), ("theory", Concept, 11, 17), ("relativity", Concept, 21, 31)],
    ),
    entities(
        "5 million views of Apollo 11",
        &[("5 million", Number, 0, 9), ("views", Concept, 10, 15), ("Apollo 11", Concept, 19, 28)],
    ),
    entities(
        "a 50% drop in São Paulo since 2019",
        &[("50%", Number, 2, 5), ("drop", Concept, 6, 10), ("São Paulo", Location, 14, 23), ("2019", Date, 30, 34)],
    ),
    entities(
        "storms last week in Lisbon",
        &[("storms", Concept, 0, 6), ("last week", Date, 7, 16), ("Lisbon", Location, 20, 26)],
    ),
    // Prepositions are no concepts, however rare ("since", "across").
    entities(
        "robots across Japan since the 1990s",
        &[("robots", Concept, 0, 6), ("Japan", Location, 14, 19), ("1990s", Date, 30, 35)],
    ),
    // The medium ("footage", "photos") is the query's modality, not its subject: no concept.
    entities("NASA footage of the moon", &[("NASA", Organization, 0, 4), ("moon", Concept, 20, 24)]),
    // Negation: the negating word is no entity, and what it negates is still mentioned (which
    // entities to exclude is the searcher's business, not the extractor's).
    entities(
        "robots not playing soccer",
        &[("robots", Concept, 0, 6), ("playing", Concept, 11, 18), ("soccer", Concept, 19, 25)],
    ),
    entities("no photos of Paris without rain", &[("Paris", Location, 13, 18), ("rain", Concept, 27, 31)]),
    // Empty results: nothing, blanks, only function and request words, only symbols.
    entities("", &[]),
    entities(" \t\n ", &[]),
    entities("show me what is the", &[]),
    entities("🤖🤖🤖 ?!.,;", &[]),
];

pub const PROFILE_CASES: &[ProfileCase] = &[
    // Something to look at, moving, in a few keywords: the tags profile.
    profile("show me robots playing soccer", "tags", "video_search", Video),
    profile("sunset photos", "tags", "image_search", Image),
    profile("jazz music podcast", "tags", "audio_search", Audio),
    // A question in a sentence: full text.
    profile("what is the history of the moon landing?", "bm25", "question_answering", Text),
    profile("how do robots learn to play soccer so well", "bm25", "question_answering", Text),
    // A name, a quoted phrase, a place and a date: titles.
    profile("Neil Armstrong", "title", "general_search", Any),
    profile("\"moon landing\"", "title", "general_search", Any),
    profile("Marathon in Tokyo on 3 March 2024", "title", "general_search", Any),
    // A long question for footage: full text ranks the sentence, and the user still wants video.
    profile("Is there footage of \"Apollo 11\" in Florida from July 1969 with music?", "bm25", "video_search", Video),
    // Unicode: accents do not hide a media word.
    profile("vidéos de robots", "tags", "video_search", Video),
    // Negation: a media word the query rules out is no cue; the one it asks for is.
    profile("photos, not videos, of the Eiffel tower", "tags", "image_search", Image),
    profile("podcasts without music", "tags", "audio_search", Audio),
    // A person would pick full text for a paper. The rules see a short keyword query, which
    // title and tags both claim (text modality is no trait any profile advertises), and the tie
    // goes to title, given first: a limit of the advertised strengths, not of the rules.
    profile("paper on neural networks", "title", "text_search", Text),
    // Empty: nothing to fit, so the general-purpose profile.
    profile("", "bm25", "general_search", Any),
];

/// The three profiles the search agent advertises by default, as the planners receive them.
pub fn example_profiles() -> Vec<SearchProfile> {
    [
        ("bm25", &["general", "question", "long_query"][..]),
        ("title", &["entity", "short_query", "keyword", "exact_phrase"]),
        ("tags", &["visual", "audio", "keyword", "short_query"]),
    ]
    .into_iter()
    .map(|(name, strengths)| SearchProfile {
        name: name.to_owned(),
        description: format!("the {name} profile"),
        strengths: strengths.iter().map(|s| (*s).to_owned()).collect(),
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{extract_entities, select_profile};

    #[test]
    fn the_rules_find_the_entities_a_person_would_mark() {
        // Every disagreement at once: one wrong rule often shows in several rows.
        let disagreements: Vec<String> = ENTITY_CASES
            .iter()
            .filter_map(|case| {
                let found: Vec<(String, EntityType, usize, usize)> = extract_entities(case.query)
                    .entities
                    .into_iter()
                    .map(|e| (e.text, e.entity_type, e.start, e.end))
                    .collect();
                let expected: Vec<(String, EntityType, usize, usize)> =
                    case.entities.iter().map(|&(text, t, start, end)| (text.to_owned(), t, start, end)).collect();
                (found != expected).then(|| format!("{:?}: found {found:?}, expected {expected:?}", case.query))
            })
            .collect();
        assert!(disagreements.is_empty(), "{disagreements:#?}");
    }

    #[test]
    fn the_rules_pick_the_profile_a_person_would_pick() {
        let disagreements: Vec<String> = PROFILE_CASES
            .iter()
            .filter_map(|case| {
                let selection = select_profile(case.query, &example_profiles()).expect("profiles given");
                let found = (selection.selected_profile.as_str(), selection.intent.as_str(), selection.modality);
                let expected = (case.selected_profile, case.intent, case.modality);
                (found != expected).then(|| {
                    format!("{:?}: found {found:?}, expected {expected:?} ({})", case.query, selection.reasoning)
                })
            })
            .collect();
        assert!(disagreements.is_empty(), "{disagreements:#?}");
    }

    /// The table itself: each entity's offsets index its text in the query, so a typo in a
    /// hand-written offset fails here rather than as a disagreement with the rules.
    #[test]
    fn the_table_offsets_index_the_entity_texts() {
        for case in ENTITY_CASES {
            for &(text, _, start, end) in case.entities {
                let span: String = case.query.chars().skip(start).take(end - start).collect();
                assert_eq!(span, text, "{:?}", case.query);
            }
        }
    }
}
