//! Choosing a search profile by how much of the query's traits its advertised strengths cover.
//!
//! Seed 002 (section 3) has a model weigh complexity, intent, modality and entities; these rules
//! weigh the same features, expressed as the query traits profiles advertise strengths in, so the
//! choice is deterministic and its reasoning can be checked against the profile list by hand.

use std::error::Error;
use std::fmt;

use mesh_protocol::agents::{EntityType, Modality, ProfileScore, ProfileSelection, SearchProfile};

use crate::RULES_METHOD;
use crate::features::{QueryFeatures, analyze};

const GENERAL_TRAIT: &str = "general";
/// Every query is "general", so a profile claiming it only shows it can serve as a fallback.
const GENERAL_TRAIT_WEIGHT: f64 = 0.25;
/// Traits of the query's shape (length, keyword-style): they matter, but say less about what
/// the user wants than its content does.
const SHAPE_TRAITS: &[&str] = &["keyword", "short_query", "long_query"];
const SHAPE_TRAIT_WEIGHT: f64 = 0.75;
/// Traits of the query's content (question, entity, visual, audio, temporal, exact_phrase): the
/// rarer, more telling signals.
const CONTENT_TRAIT_WEIGHT: f64 = 1.0;
/// Share of the confidence that comes from the best score; the rest comes from its lead over the
/// runner-up.
const SCORE_SHARE_OF_CONFIDENCE: f64 = 0.5;
/// The most confidence a choice gets when the winner matched only "general": a fallback, not a fit.
const GENERAL_ONLY_MAX_CONFIDENCE: f64 = 0.3;

/// Why no profile could be selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectionError {
    /// The list of available profiles was empty: there is nothing to choose from.
    NoProfiles,
}

impl fmt::Display for SelectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectionError::NoProfiles => f.write_str("no search profiles to choose from"),
        }
    }
}

impl Error for SelectionError {}

/// How well one profile fits the query.
#[derive(Debug)]
struct Fit<'a> {
    profile: &'a SearchProfile,
    /// The query's traits the profile lists among its strengths, in [`QUERY_TRAITS`] order.
    ///
    /// [`QUERY_TRAITS`]: mesh_protocol::agents::QUERY_TRAITS
    matched: Vec<&'static str>,
    score: f64,
}

impl<'a> Fit<'a> {
    /// Score = the weight of the query's traits the profile lists as strengths, over the weight of
    /// all the query's traits: the share of what the query needs that the profile claims to do well.
    fn new(features: &QueryFeatures, profile: &'a SearchProfile) -> Self {
        let matched: Vec<&'static str> = features
            .traits
            .iter()
            .copied()
            .filter(|query_trait| profile.strengths.iter().any(|strength| strength == query_trait))
            .collect();
        // Never zero: every query has the "general" trait.
        let total = total_weight(&features.traits);
        Fit { profile, score: total_weight(&matched) / total, matched }
    }

    fn matched_only_general(&self) -> bool {
        self.matched == [GENERAL_TRAIT]
    }
}

fn trait_weight(query_trait: &str) -> f64 {
    if query_trait == GENERAL_TRAIT {
        GENERAL_TRAIT_WEIGHT
    } else if SHAPE_TRAITS.contains(&query_trait) {
        SHAPE_TRAIT_WEIGHT
    } else {
        CONTENT_TRAIT_WEIGHT
    }
}

fn total_weight(traits: &[&str]) -> f64 {
    traits.iter().map(|query_trait| trait_weight(query_trait)).sum()
}

/// Picks the profile whose strengths best cover the query's traits (see [`crate::analyze`]).
///
/// - **score** (0-1): the weighted share of the query's traits the profile lists as strengths,
///   weighing "general" 0.25, shape traits (keyword, short_query, long_query) 0.75 and content
///   traits (question, entity, visual, audio, temporal, exact_phrase) 1. Strengths are compared
///   exactly; ones outside `QUERY_TRAITS` never match.
/// - **ties** go to the profile given first, so the answer depends only on the input.
/// - **confidence** = 0.5 × best score + 0.5 × (best score − runner-up score), clamped to 0-1: high
///   when the winner covers the query well *and* clearly beats the next one, at most half its score
///   on a tie, equal to its score when it is the only profile. When the winner matched only
///   "general", the confidence is capped at 0.3.
/// - **alternatives**: the other profiles with their scores, best first.
/// - **intent**: `video_search`, `image_search` or `audio_search` for those modalities, even when
///   phrased as a question (the user wants the media); otherwise `question_answering` for a
///   question, `text_search` for text, `general_search` for the rest.
///
/// Fails with [`SelectionError::NoProfiles`] when `profiles` is empty.
pub fn select_profile(text: &str, profiles: &[SearchProfile]) -> Result<ProfileSelection, SelectionError> {
    let features = analyze(text);
    let mut ranked: Vec<Fit> = profiles.iter().map(|profile| Fit::new(&features, profile)).collect();
    // Stable: equal scores keep the order the profiles were given in.
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    let Some((best, others)) = ranked.split_first() else { return Err(SelectionError::NoProfiles) };
    let runner_up = others.first();
    let intent = intent(&features);
    Ok(ProfileSelection {
        selected_profile: best.profile.name.clone(),
        confidence: confidence(best, runner_up),
        alternatives: others
            .iter()
            .map(|fit| ProfileScore { profile: fit.profile.name.clone(), score: fit.score })
            .collect(),
        intent: intent.to_owned(),
        modality: features.modality,
        complexity: features.complexity,
        reasoning: format!("{} suggesting {intent}; {}.", describe_query(&features), describe_choice(best, runner_up)),
        method: RULES_METHOD.to_owned(),
    })
}

/// See [`select_profile`] for the formula.
fn confidence(best: &Fit, runner_up: Option<&Fit>) -> f64 {
    let lead = best.score - runner_up.map_or(0.0, |fit| fit.score);
    let confidence =
        (SCORE_SHARE_OF_CONFIDENCE * best.score + (1.0 - SCORE_SHARE_OF_CONFIDENCE) * lead).clamp(0.0, 1.0);
    if best.matched_only_general() { confidence.min(GENERAL_ONLY_MAX_CONFIDENCE) } else { confidence }
}

/// See [`select_profile`] for the mapping.
fn intent(features: &QueryFeatures) -> &'static str {
    match features.modality {
        Modality::Video => "video_search",
        Modality::Image => "image_search",
        Modality::Audio => "audio_search",
        Modality::Text | Modality::Any if features.is_question => "question_answering",
        Modality::Text => "text_search",
        Modality::Any => "general_search",
    }
}

/// "Short keyword query with visual cues (show me) and named entities (location)".
fn describe_query(features: &QueryFeatures) -> String {
    let has = |query_trait: &str| features.traits.contains(&query_trait);
    let kind = if features.is_question {
        "question"
    } else if has("keyword") {
        "keyword query"
    } else {
        "query"
    };
    let shape = if has("short_query") {
        format!("Short {kind}")
    } else if has("long_query") {
        format!("Long {kind}")
    } else {
        capitalize(kind)
    };
    let mut cues = Vec::new();
    for (label, keywords) in [
        ("visual", &features.visual_keywords),
        ("audio", &features.audio_keywords),
        ("temporal", &features.temporal_keywords),
    ] {
        if !keywords.is_empty() {
            cues.push(format!("{label} cues ({})", keywords.join(", ")));
        }
    }
    let named: Vec<String> = features
        .entity_types
        .iter()
        .filter(|t| !matches!(t, EntityType::Number | EntityType::Concept))
        .map(|t| format!("{t:?}").to_lowercase())
        .collect();
    if !named.is_empty() {
        cues.push(format!("named entities ({})", named.join(", ")));
    }
    if features.quoted_phrase {
        cues.push("a quoted phrase".to_owned());
    }
    if cues.is_empty() { shape } else { format!("{shape} with {}", join_with_and(&cues)) }
}

/// "profile 'tags' is strong on keyword and visual (score 0.88 vs 0.38 for 'title')".
fn describe_choice(best: &Fit, runner_up: Option<&Fit>) -> String {
    let name = &best.profile.name;
    if best.matched.is_empty() {
        return format!("no profile lists any of its traits, so the first given, '{name}', is used");
    }
    let comparison = match runner_up {
        Some(fit) => format!("score {:.2} vs {:.2} for '{}'", best.score, fit.score, fit.profile.name),
        None => format!("score {:.2}, the only profile", best.score),
    };
    if best.matched_only_general() {
        return format!("profile '{name}' matches only as a general-purpose fallback ({comparison})");
    }
    let specific: Vec<&str> = best.matched.iter().copied().filter(|t| *t != GENERAL_TRAIT).collect();
    format!("profile '{name}' is strong on {} ({comparison})", join_with_and(&specific))
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// "a", "a and b", "a, b and c".
fn join_with_and<T: AsRef<str>>(items: &[T]) -> String {
    match items {
        [] => String::new(),
        [only] => only.as_ref().to_owned(),
        [init @ .., last] => {
            let init: Vec<&str> = init.iter().map(AsRef::as_ref).collect();
            format!("{} and {}", init.join(", "), last.as_ref())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::example_profiles;
    use mesh_protocol::agents::Complexity;
    use proptest::prelude::*;

    fn profile(name: &str, strengths: &[&str]) -> SearchProfile {
        SearchProfile {
            name: name.to_owned(),
            description: format!("{name} ranking"),
            strengths: strengths.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn select(text: &str) -> ProfileSelection {
        select_profile(text, &example_profiles()).expect("profiles given")
    }

    fn alternative_names(selection: &ProfileSelection) -> Vec<&str> {
        selection.alternatives.iter().map(|alternative| alternative.profile.as_str()).collect()
    }

    #[test]
    fn every_intent_is_in_the_protocol_vocabulary() {
        for query in
            ["robot soccer video", "photo of a cat", "jazz podcast", "what is a volcano?", "paper on rust", "cats"]
        {
            let intent = intent(&crate::analyze(query));
            assert!(mesh_protocol::agents::INTENTS.contains(&intent), "{query}: {intent}");
        }
    }

    #[test]
    fn seed_example_selects_tags_for_video() {
        let selection = select("show me robots playing soccer");
        assert_eq!(selection.selected_profile, "tags");
        assert_eq!(alternative_names(&selection), ["title", "bm25"]);
        // Traits general (0.25) + keyword (0.75) + visual (1) = 2; tags covers 1.75, title 0.75, bm25 0.25.
        let scores: Vec<f64> = selection.alternatives.iter().map(|a| a.score).collect();
        assert_eq!(scores, [0.375, 0.125]);
        assert!((selection.confidence - (0.5 * 0.875 + 0.5 * (0.875 - 0.375))).abs() < 1e-12);
        assert_eq!(selection.intent, "video_search");
        assert_eq!(selection.modality, Modality::Video);
        assert_eq!(selection.complexity, Complexity::Simple);
        assert_eq!(selection.method, "rules");
        assert_eq!(
            selection.reasoning,
            "Keyword query with visual cues (show me) suggesting video_search; \
             profile 'tags' is strong on keyword and visual (score 0.88 vs 0.38 for 'title')."
        );
    }

    #[test]
    fn selection_is_deterministic() {
        let profiles = example_profiles();
        for text in ["show me robots playing soccer", "Neil Armstrong", "", "what is a robot?"] {
            let first = select_profile(text, &profiles);
            assert!((0..5).all(|_| select_profile(text, &profiles) == first), "{text:?}");
        }
    }

    #[test]
    fn ties_go_to_the_profile_given_first() {
        let a = profile("a", &["keyword"]);
        let b = profile("b", &["keyword"]);
        assert_eq!(select_profile("robots", &[a.clone(), b.clone()]).map(|s| s.selected_profile), Ok("a".to_owned()));
        let selection = select_profile("robots", &[b, a]).expect("profiles given");
        assert_eq!(selection.selected_profile, "b");
        assert_eq!(alternative_names(&selection), ["a"]);
        // A tie halves the confidence: no lead over the runner-up.
        assert!((selection.confidence - 0.5 * selection.alternatives[0].score).abs() < 1e-12);
    }

    #[test]
    fn no_profiles_is_an_error() {
        let error = select_profile("robots", &[]).expect_err("nothing to choose from");
        assert_eq!(error, SelectionError::NoProfiles);
        assert_eq!(error.to_string(), "no search profiles to choose from");
        let boxed: Box<dyn Error> = Box::new(error);
        assert!(boxed.source().is_none());
    }

    #[test]
    fn a_single_profile_gets_its_score_as_confidence() {
        let selection = select_profile("Neil Armstrong", &[profile("title", &["entity", "keyword"])]).expect("given");
        assert!(selection.alternatives.is_empty());
        // general 0.25 + keyword 0.75 + short_query 0.75 + entity 1 = 2.75; covered 1.75.
        assert!((selection.confidence - 1.75 / 2.75).abs() < 1e-12);
        assert!(selection.reasoning.contains("the only profile"), "{}", selection.reasoning);
    }

    #[test]
    fn matching_only_general_caps_confidence() {
        let selection = select_profile("", &[profile("bm25", &["general"])]).expect("given");
        assert_eq!(selection.confidence, GENERAL_ONLY_MAX_CONFIDENCE);
        assert!(selection.reasoning.contains("general-purpose fallback"), "{}", selection.reasoning);
    }

    #[test]
    fn no_match_falls_back_to_the_first_profile_with_zero_confidence() {
        let profiles = [profile("sound", &["audio", "unknown-trait"]), profile("faces", &["visual"])];
        let selection = select_profile("robots", &profiles).expect("given");
        assert_eq!(selection.selected_profile, "sound");
        assert_eq!(selection.confidence, 0.0);
        assert!(selection.reasoning.contains("no profile lists any of its traits"), "{}", selection.reasoning);
    }

    #[test]
    fn reasoning_names_entities_quotes_and_length() {
        let reasoning = select("Is there footage of \"Apollo 11\" in Florida from July 1969 with music?").reasoning;
        assert_eq!(
            reasoning,
            "Long question with visual cues (footage), audio cues (music), temporal cues (July 1969), \
             named entities (location, date) and a quoted phrase suggesting video_search; \
             profile 'bm25' is strong on question and long_query (score 0.29 vs 0.29 for 'title')."
        );
    }

    #[test]
    fn helpers_join_and_capitalize() {
        assert_eq!(join_with_and::<&str>(&[]), "");
        assert_eq!(join_with_and(&["a"]), "a");
        assert_eq!(join_with_and(&["a", "b", "c"]), "a, b and c");
        assert_eq!(capitalize("query"), "Query");
        assert_eq!(capitalize(""), "");
    }

    fn arbitrary_profiles() -> impl Strategy<Value = Vec<SearchProfile>> {
        let strengths = prop::collection::vec(prop::sample::select(mesh_protocol::agents::QUERY_TRAITS), 0..5);
        prop::collection::vec(("[a-z]{1,6}", strengths), 1..5)
            .prop_map(|profiles| profiles.into_iter().map(|(name, strengths)| profile(&name, &strengths)).collect())
    }

    proptest! {
        #[test]
        fn confidence_and_scores_stay_in_unit_range(text in any::<String>(), profiles in arbitrary_profiles()) {
            let selection = select_profile(&text, &profiles).expect("profiles given");
            prop_assert!((0.0..=1.0).contains(&selection.confidence));
            prop_assert_eq!(selection.alternatives.len(), profiles.len() - 1);
            prop_assert!(selection.alternatives.iter().all(|a| (0.0..=1.0).contains(&a.score)));
            prop_assert!(selection.alternatives.windows(2).all(|pair| pair[0].score >= pair[1].score));
        }
    }
}
