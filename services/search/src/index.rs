//! The corpus on tantivy, and the ranking profiles that query it.
//!
//! Queries are built from analysed terms (never parsed as query syntax), so any user text is a
//! valid query: quotes, colons or `AND` in a question cannot make it fail.

use std::collections::{HashMap, HashSet};

use mesh_protocol::agents::{Modality, SearchProfile};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, TantivyDocument, Term, doc};

use crate::corpus::Document;
use crate::error::SearchError;

/// Name the English analyzer is registered under.
const ENGLISH_ANALYZER: &str = "en_mesh";
/// Tokens longer than this are dropped (URLs, hashes): they never match a query word.
const TOKEN_CHARS_MAX: usize = 40;
/// Memory the index writer may use while ingesting.
const WRITER_MEMORY_BYTES: usize = 50_000_000;
/// Score multiplier for documents of the modality the query asks for (a preference, not a filter:
/// an image of robot soccer still answers "show me robots playing soccer").
const MODALITY_BOOST: f32 = 1.5;

/// How a profile weighs the fields; each is a different view of the same documents, which is
/// what makes fusing them worthwhile.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FieldWeights {
    title: f32,
    text: f32,
    tags: f32,
}

#[derive(Debug, Clone, PartialEq)]
struct ProfileSpec {
    name: &'static str,
    description: &'static str,
    strengths: &'static [&'static str],
    weights: FieldWeights,
}

/// The lexical profiles the agent serves, the first being the default.
const PROFILES: &[ProfileSpec] = &[
    ProfileSpec {
        name: "bm25",
        description: "BM25 over title, description and tags, English stemming and stop words: the all-round profile",
        strengths: &["general", "question", "long_query"],
        // Title weight tuned on SciFact's train split (nDCG@10: 0.630 at 2.0, 0.675 at 1.0, 0.695
        // at 0.5); titles still count, as the dedicated `title` profile covers title-led queries.
        weights: FieldWeights { title: 0.5, text: 1.0, tags: 1.5 },
    },
    ProfileSpec {
        name: "title",
        description: "BM25 over titles only: precise for names, entities and short keyword queries",
        strengths: &["entity", "short_query", "keyword", "exact_phrase"],
        weights: FieldWeights { title: 1.0, text: 0.0, tags: 0.0 },
    },
    ProfileSpec {
        name: "tags",
        description: "BM25 over curated tags, favouring the asked-for modality: good for visual and audio browsing",
        strengths: &["visual", "audio", "keyword", "short_query"],
        weights: FieldWeights { title: 0.5, text: 0.0, tags: 2.0 },
    },
];

#[derive(Debug, Clone, Copy)]
struct Fields {
    id: Field,
    title: Field,
    text: Field,
    tags: Field,
    modality: Field,
}

/// An in-memory index of a corpus.
pub struct SearchIndex {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    documents: HashMap<String, Document>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex").field("documents", &self.documents.len()).finish_non_exhaustive()
    }
}

impl SearchIndex {
    /// Indexes `documents`; a later document with an id seen before replaces the earlier one.
    pub fn build(documents: Vec<Document>) -> Result<Self, SearchError> {
        let mut schema = Schema::builder();
        let english = TextOptions::default().set_stored().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(ENGLISH_ANALYZER)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        );
        let fields = Fields {
            id: schema.add_text_field("id", STRING | STORED),
            title: schema.add_text_field("title", english.clone()),
            text: schema.add_text_field("text", english.clone()),
            tags: schema.add_text_field("tags", english),
            modality: schema.add_text_field("modality", STRING | STORED),
        };
        let index = Index::create_in_ram(schema.build());
        index.tokenizers().register(ENGLISH_ANALYZER, english_analyzer());
        let mut by_id = HashMap::with_capacity(documents.len());
        for document in documents {
            by_id.insert(document.id.clone(), document);
        }
        // Indexed in id order by one thread: tantivy breaks score ties by document address, so
        // this makes tied documents rank by id, the same in every process and replica.
        let mut ordered: Vec<&Document> = by_id.values().collect();
        ordered.sort_by(|a, b| a.id.cmp(&b.id));
        let mut writer = index.writer_with_num_threads::<TantivyDocument>(1, WRITER_MEMORY_BYTES)?;
        for document in ordered {
            let mut entry = doc!(
                fields.id => document.id.clone(),
                fields.title => document.title.clone(),
                fields.text => document.text.clone(),
            );
            for tag in &document.tags {
                entry.add_text(fields.tags, tag);
            }
            if let Some(modality) = &document.modality {
                entry.add_text(fields.modality, modality.to_lowercase());
            }
            writer.add_document(entry)?;
        }
        writer.commit()?;
        let reader = index.reader()?;
        Ok(Self { index, reader, fields, documents: by_id })
    }

    pub fn len(&self) -> usize {
        self.documents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    pub fn document(&self, id: &str) -> Option<&Document> {
        self.documents.get(id)
    }

    /// The profiles as advertised in the agent card.
    pub fn profiles() -> Vec<SearchProfile> {
        PROFILES
            .iter()
            .map(|p| SearchProfile {
                name: p.name.to_owned(),
                description: p.description.to_owned(),
                strengths: p.strengths.iter().map(|s| s.to_string()).collect(),
            })
            .collect()
    }

    pub fn default_profile() -> &'static str {
        PROFILES[0].name
    }

    pub fn has_profile(name: &str) -> bool {
        PROFILES.iter().any(|p| p.name == name)
    }

    /// The best `limit` documents for `query` under `profile`: ids with the profile's scores, best
    /// first. An unknown profile or a query of stop words only yields an empty list.
    pub fn rank(
        &self,
        profile: &str,
        query: &str,
        modality: Option<Modality>,
        limit: usize,
    ) -> Result<Vec<(String, f64)>, SearchError> {
        let Some(spec) = PROFILES.iter().find(|p| p.name == profile) else {
            return Ok(Vec::new());
        };
        let Some(query) = self.build_query(spec.weights, query, modality)? else {
            return Ok(Vec::new());
        };
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(limit.max(1)).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let stored: TantivyDocument = searcher.doc(address)?;
            if let Some(id) = stored.get_first(self.fields.id).and_then(|v| v.as_str()) {
                hits.push((id.to_owned(), f64::from(score)));
            }
        }
        Ok(hits)
    }

    fn build_query(
        &self,
        weights: FieldWeights,
        text: &str,
        modality: Option<Modality>,
    ) -> Result<Option<Box<dyn Query>>, SearchError> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (field, weight) in
            [(self.fields.title, weights.title), (self.fields.text, weights.text), (self.fields.tags, weights.tags)]
        {
            if weight <= 0.0 {
                continue;
            }
            for term in self.terms(field, text)? {
                let query = TermQuery::new(term, IndexRecordOption::WithFreqs);
                clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(query), weight))));
            }
        }
        if clauses.is_empty() {
            return Ok(None);
        }
        let matches: Box<dyn Query> = Box::new(BooleanQuery::new(clauses));
        let preferred = modality.and_then(modality_term);
        Ok(Some(match preferred {
            Some(name) => {
                let term = Term::from_field_text(self.fields.modality, name);
                let boost = BoostQuery::new(Box::new(TermQuery::new(term, IndexRecordOption::Basic)), MODALITY_BOOST);
                Box::new(BooleanQuery::new(vec![(Occur::Must, matches), (Occur::Should, Box::new(boost))]))
            }
            None => matches,
        }))
    }

    /// The distinct analysed terms of `text` for `field`, in first-seen order.
    fn terms(&self, field: Field, text: &str) -> Result<Vec<Term>, SearchError> {
        let mut analyzer = self.index.tokenizer_for_field(field)?;
        let mut stream = analyzer.token_stream(text);
        let mut seen = HashSet::new();
        let mut terms: Vec<Term> = Vec::new();
        while let Some(token) = stream.next() {
            if seen.insert(token.text.clone()) {
                terms.push(Term::from_field_text(field, &token.text));
            }
        }
        Ok(terms)
    }
}

fn english_analyzer() -> TextAnalyzer {
    let builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(TOKEN_CHARS_MAX))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter);
    match StopWordFilter::new(Language::English) {
        Some(stop_words) => builder.filter(stop_words).filter(Stemmer::new(Language::English)).build(),
        None => builder.filter(Stemmer::new(Language::English)).build(),
    }
}

fn modality_term(modality: Modality) -> Option<&'static str> {
    match modality {
        Modality::Video => Some("video"),
        Modality::Image => Some("image"),
        Modality::Audio => Some("audio"),
        Modality::Text => Some("text"),
        Modality::Any => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, title: &str, text: &str, modality: &str, tags: &[&str]) -> Document {
        Document {
            id: id.into(),
            title: title.into(),
            text: text.into(),
            modality: Some(modality.into()),
            tags: tags.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn index() -> SearchIndex {
        SearchIndex::build(vec![
            doc(
                "v1",
                "Robots playing soccer at RoboCup",
                "Humanoid robots kick a ball.",
                "video",
                &["robotics", "soccer"],
            ),
            doc("i1", "Robot goalkeeper", "A small robot blocks a shot in a soccer match.", "image", &["robotics"]),
            doc("v2", "Cup final", "Human players in a football match.", "video", &["soccer", "sports"]),
            doc("t1", "Volcanoes explained", "How magma rises and volcanoes erupt.", "text", &["geology"]),
        ])
        .unwrap()
    }

    #[test]
    fn stems_and_ignores_stop_words() {
        let index = index();
        let hits = index.rank("bm25", "the robot played soccer", None, 10).unwrap();
        assert_eq!(hits[0].0, "v1");
        assert!(hits.iter().any(|(id, _)| id == "i1"));
        assert!(!hits.iter().any(|(id, _)| id == "t1"));
        assert!(index.rank("bm25", "the of and", None, 10).unwrap().is_empty(), "stop words alone match nothing");
    }

    #[test]
    fn profiles_see_different_fields() {
        let index = index();
        // Only the description of i1 says "match"; the title profile cannot see it.
        let bm25 = index.rank("bm25", "match", None, 10).unwrap();
        let title = index.rank("title", "match", None, 10).unwrap();
        assert!(bm25.iter().any(|(id, _)| id == "i1"));
        assert!(title.is_empty());
        let tags = index.rank("tags", "sports", None, 10).unwrap();
        assert_eq!(tags.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["v2"]);
    }

    #[test]
    fn modality_is_a_preference_not_a_filter() {
        let index = index();
        let images = index.rank("bm25", "robot soccer", Some(Modality::Image), 10).unwrap();
        assert_eq!(images[0].0, "i1");
        assert!(images.iter().any(|(id, _)| id == "v1"), "other modalities still answer");
    }

    #[test]
    fn query_syntax_is_just_text() {
        let index = index();
        for query in ["title:robot", "\"unclosed", "robot AND (", "-soccer", "🤖 soccer", "São Paulo?"] {
            index.rank("bm25", query, None, 5).unwrap();
        }
        assert!(index.rank("nope", "robot", None, 5).unwrap().is_empty());
    }
}
