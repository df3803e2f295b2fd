//! The ranking profiles: each a different view of the same documents, which is what makes fusing
//! them worthwhile.

use mesh_protocol::agents::Modality;

/// Score multiplier for documents of the modality the query asks for (a preference, not a filter:
/// an image of robot soccer still answers "show me robots playing soccer").
pub(super) const MODALITY_BOOST: f32 = 1.5;
/// Name of the embedding profile.
pub const DENSE_PROFILE: &str = "dense";

/// How a lexical profile weighs the fields.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct FieldWeights {
    pub(super) title: f32,
    pub(super) text: f32,
    pub(super) tags: f32,
}

/// What ranks the documents of a profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Ranker {
    /// BM25 over the analysed fields, each weighted.
    Lexical(FieldWeights),
    /// Cosine similarity of sentence embeddings of the query and of title + text.
    Dense,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct ProfileSpec {
    pub(super) name: &'static str,
    pub(super) description: &'static str,
    pub(super) strengths: &'static [&'static str],
    pub(super) ranker: Ranker,
}

/// The profiles the agent can serve, the first being the default.
pub(super) const PROFILES: &[ProfileSpec] = &[
    ProfileSpec {
        name: "bm25",
        description: "BM25 over title, description and tags, English stemming and stop words: the all-round profile",
        strengths: &["general", "question", "long_query"],
        // Title weight tuned on SciFact's train split (nDCG@10: 0.630 at 2.0, 0.675 at 1.0, 0.695
        // at 0.5); titles still count, as the dedicated `title` profile covers title-led queries.
        ranker: Ranker::Lexical(FieldWeights { title: 0.5, text: 1.0, tags: 1.5 }),
    },
    ProfileSpec {
        name: "title",
        description: "BM25 over titles only: precise for names, entities and short keyword queries",
        strengths: &["entity", "short_query", "keyword", "exact_phrase"],
        ranker: Ranker::Lexical(FieldWeights { title: 1.0, text: 0.0, tags: 0.0 }),
    },
    ProfileSpec {
        name: "tags",
        description: "BM25 over curated tags, favouring the asked-for modality: good for visual and audio browsing",
        strengths: &["visual", "audio", "keyword", "short_query"],
        ranker: Ranker::Lexical(FieldWeights { title: 0.5, text: 0.0, tags: 2.0 }),
    },
    ProfileSpec {
        name: DENSE_PROFILE,
        description: "Sentence embeddings (all-MiniLM-L6-v2), cosine similarity: finds documents that say the same \
                      thing in other words",
        strengths: &["question", "long_query", "general"],
        ranker: Ranker::Dense,
    },
];

/// The term the modality field holds for documents of `modality`; none for "any".
pub(super) fn modality_term(modality: Modality) -> Option<&'static str> {
    match modality {
        Modality::Video => Some("video"),
        Modality::Image => Some("image"),
        Modality::Audio => Some("audio"),
        Modality::Text => Some("text"),
        Modality::Any => None,
    }
}
