//! The corpus on tantivy, and the ranking profiles that query it.
//!
//! Queries are built from analysed terms (never parsed as query syntax), so any user text is a
//! valid query: quotes, colons or `AND` in a question cannot make it fail.
//!
//! The index is the one durable copy of everything: each document is stored with its vector
//! (and the model that made it), so a restart reloads the index without computing anything, and
//! an add or a delete is one tantivy commit, never two stores that could disagree.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use mesh_embedding::{Encoder, MODEL_ID};
use mesh_protocol::agents::{Modality, SearchProfile};
use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::directory::MmapDirectory;
use tantivy::query::{AllQuery, BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

use crate::corpus::Document;
use crate::dense::DenseVectors;
use crate::embed::embed_documents;
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
/// Name of the embedding profile.
pub const DENSE_PROFILE: &str = "dense";

/// How a profile weighs the fields; each is a different view of the same documents, which is
/// what makes fusing them worthwhile.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FieldWeights {
    title: f32,
    text: f32,
    tags: f32,
}

/// What ranks the documents of a profile.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ranker {
    /// BM25 over the analysed fields, each weighted.
    Lexical(FieldWeights),
    /// Cosine similarity of sentence embeddings of the query and of title + text.
    Dense,
}

#[derive(Debug, Clone, PartialEq)]
struct ProfileSpec {
    name: &'static str,
    description: &'static str,
    strengths: &'static [&'static str],
    ranker: Ranker,
}

/// The profiles the agent can serve, the first being the default.
const PROFILES: &[ProfileSpec] = &[
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

#[derive(Debug, Clone, Copy)]
struct Fields {
    id: Field,
    title: Field,
    text: Field,
    tags: Field,
    modality: Field,
    /// The document's unit vector, little-endian f32s; absent without a model.
    embedding: Field,
    /// The model that made `embedding`; a vector of another model is recomputed, never mixed in.
    embedding_model: Field,
}

/// Where the index lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexLocation {
    /// Gone with the process: tests, evaluation runs.
    Memory,
    /// A tantivy directory, created when absent and reloaded when present.
    Directory(PathBuf),
}

/// Documents and vectors as searches see them, updated after every commit.
#[derive(Debug, Default)]
struct Catalog {
    documents: HashMap<String, Arc<Document>>,
    vectors: DenseVectors,
}

/// What one ingestion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct IngestReport {
    /// Documents new to the index.
    pub added: usize,
    /// Documents whose id was already indexed, now replaced.
    pub replaced: usize,
    /// Documents already indexed exactly so, left alone.
    pub unchanged: usize,
    /// Documents given a vector.
    pub embedded: usize,
}

/// A corpus on tantivy with an optional embedding model; searches run while documents are
/// added or deleted.
pub struct SearchIndex {
    index: Index,
    reader: IndexReader,
    /// One writer per index (tantivy locks the directory, so a second process fails clearly);
    /// ingestions take turns on it.
    writer: Mutex<IndexWriter<TantivyDocument>>,
    fields: Fields,
    catalog: RwLock<Catalog>,
    encoder: Option<Arc<Encoder>>,
    embedding_threads: usize,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("documents", &self.len())
            .field("dense", &self.encoder.is_some())
            .finish_non_exhaustive()
    }
}

/// Document ids with their scores, best first.
type Hits = Vec<(String, f64)>;

impl SearchIndex {
    /// Opens the index at `location` (creating it when new) and loads its documents and vectors.
    /// With an `encoder`, documents stored without a vector of that model get one now.
    pub fn open(
        location: &IndexLocation,
        encoder: Option<Arc<Encoder>>,
        embedding_threads: usize,
    ) -> Result<Self, SearchError> {
        let (schema, fields) = schema();
        let index = match location {
            IndexLocation::Memory => Index::create_in_ram(schema),
            IndexLocation::Directory(path) => {
                std::fs::create_dir_all(path).map_err(|source| SearchError::IndexDirectory {
                    path: path.display().to_string(),
                    reason: source.to_string(),
                })?;
                let directory = MmapDirectory::open(path).map_err(|e| SearchError::IndexDirectory {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
                Index::open_or_create(directory, schema).map_err(|e| SearchError::IndexDirectory {
                    path: path.display().to_string(),
                    reason: format!("{e} (an index of another version of this agent? move it away to rebuild)"),
                })?
            }
        };
        index.tokenizers().register(ENGLISH_ANALYZER, english_analyzer());
        let writer = index.writer_with_num_threads::<TantivyDocument>(1, WRITER_MEMORY_BYTES).map_err(|e| {
            SearchError::IndexDirectory { path: describe(location), reason: format!("cannot write to the index: {e}") }
        })?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let dimensions = encoder.as_ref().map_or(0, |e| e.dimensions());
        let this = Self {
            index,
            reader,
            writer: Mutex::new(writer),
            fields,
            catalog: RwLock::new(Catalog { documents: HashMap::new(), vectors: DenseVectors::new(dimensions) }),
            encoder,
            embedding_threads: embedding_threads.max(1),
        };
        let stale = this.load()?;
        if !stale.is_empty() {
            tracing::info!(documents = stale.len(), "computing the vectors the stored index lacks");
            this.upsert(stale, &|_| {})?;
        }
        Ok(this)
    }

    /// Reads every stored document into the catalog; returns those lacking a vector of the
    /// current model (when there is one).
    fn load(&self) -> Result<Vec<Document>, SearchError> {
        let searcher = self.reader.searcher();
        let addresses = searcher.search(&AllQuery, &DocSetCollector)?;
        let mut catalog = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let mut stale = Vec::new();
        for address in addresses {
            let stored: TantivyDocument = searcher.doc(address)?;
            let document = self.document_from(&stored);
            if self.encoder.is_some() {
                let model = stored.get_first(self.fields.embedding_model).and_then(|v| v.as_str());
                let vector = stored.get_first(self.fields.embedding).and_then(|v| v.as_bytes()).map(vector_from_bytes);
                match vector {
                    Some(vector) if model == Some(MODEL_ID) && catalog.vectors.upsert(&document.id, &vector) => {}
                    _ => stale.push(document.clone()),
                }
            }
            catalog.documents.insert(document.id.clone(), Arc::new(document));
        }
        Ok(stale)
    }

    fn document_from(&self, stored: &TantivyDocument) -> Document {
        let text = |field: Field| stored.get_first(field).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let modality = text(self.fields.modality);
        Document {
            id: text(self.fields.id),
            title: text(self.fields.title),
            text: text(self.fields.text),
            modality: (!modality.is_empty()).then_some(modality),
            tags: stored.get_all(self.fields.tags).filter_map(|v| v.as_str()).map(str::to_owned).collect(),
        }
    }

    /// Adds `documents`, replacing those whose id is indexed already (a later duplicate in the
    /// batch wins). Vectors are computed first, on every core, so searches run meanwhile;
    /// `progress` hears how many documents each finished batch of vectors held. One commit makes the
    /// whole batch visible at once, or none of it.
    pub fn upsert(
        &self,
        documents: Vec<Document>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<IngestReport, SearchError> {
        let mut by_id: HashMap<String, Document> = HashMap::with_capacity(documents.len());
        for document in documents {
            by_id.insert(document.id.clone(), document);
        }
        let unchanged = {
            let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
            let before = by_id.len();
            // Re-ingesting a corpus costs only what changed: a document stored exactly so, with
            // its vector when there is a model, is left alone.
            by_id.retain(|id, document| {
                let stored = catalog.documents.get(id).is_some_and(|stored| **stored == *document);
                !(stored && (self.encoder.is_none() || catalog.vectors.contains(id)))
            });
            before - by_id.len()
        };
        // In id order: tantivy breaks score ties by document address, so equal scores rank by id.
        let mut documents: Vec<Document> = by_id.into_values().collect();
        if documents.is_empty() {
            return Ok(IngestReport { unchanged, ..IngestReport::default() });
        }
        documents.sort_by(|a, b| a.id.cmp(&b.id));
        let vectors = match &self.encoder {
            Some(encoder) => Some(embed_documents(encoder, &documents, self.embedding_threads, progress)?),
            None => None,
        };
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        for (position, document) in documents.iter().enumerate() {
            writer.delete_term(Term::from_field_text(self.fields.id, &document.id));
            let mut entry = doc!(
                self.fields.id => document.id.clone(),
                self.fields.title => document.title.clone(),
                self.fields.text => document.text.clone(),
            );
            for tag in &document.tags {
                entry.add_text(self.fields.tags, tag);
            }
            if let Some(modality) = &document.modality {
                entry.add_text(self.fields.modality, modality.to_lowercase());
            }
            if let Some(vectors) = &vectors {
                entry.add_bytes(self.fields.embedding, &vector_to_bytes(vectors.row(position)));
                entry.add_text(self.fields.embedding_model, MODEL_ID);
            }
            writer.add_document(entry)?;
        }
        self.commit(&mut writer)?;
        let mut catalog = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let embedded = vectors.as_ref().map_or(0, |v| v.len());
        let mut report = IngestReport { added: 0, replaced: 0, unchanged, embedded };
        for (position, document) in documents.into_iter().enumerate() {
            if let Some(vectors) = &vectors {
                catalog.vectors.upsert(&document.id, vectors.row(position));
            }
            match catalog.documents.insert(document.id.clone(), Arc::new(document)) {
                Some(_) => report.replaced += 1,
                None => report.added += 1,
            }
        }
        Ok(report)
    }

    /// Deletes the documents of `ids`; returns how many were indexed.
    pub fn delete(&self, ids: &[String]) -> Result<usize, SearchError> {
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            writer.delete_term(Term::from_field_text(self.fields.id, id));
        }
        self.commit(&mut writer)?;
        let mut catalog = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let mut deleted = 0;
        for id in ids {
            if catalog.documents.remove(id).is_some() {
                deleted += 1;
            }
            catalog.vectors.remove(id);
        }
        Ok(deleted)
    }

    fn commit(&self, writer: &mut IndexWriter<TantivyDocument>) -> Result<(), SearchError> {
        if let Err(error) = writer.commit() {
            // Drop what the failed commit held so the next ingestion starts clean.
            let _ = writer.rollback();
            return Err(error.into());
        }
        Ok(self.reader.reload()?)
    }

    pub fn len(&self) -> usize {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).documents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Documents that have a vector.
    pub fn embedded(&self) -> usize {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).vectors.len()
    }

    /// Ids of every indexed document, in no particular order.
    pub fn ids(&self) -> Vec<String> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).documents.keys().cloned().collect()
    }

    pub fn document(&self, id: &str) -> Option<Arc<Document>> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).documents.get(id).cloned()
    }

    /// Whether the embedding profile can be served (a model is loaded).
    pub fn has_dense(&self) -> bool {
        self.encoder.is_some()
    }

    /// The profiles this index serves, as advertised in the agent card.
    pub fn profiles(&self) -> Vec<SearchProfile> {
        PROFILES
            .iter()
            .filter(|p| self.serves(p))
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

    pub fn has_profile(&self, name: &str) -> bool {
        PROFILES.iter().any(|p| p.name == name && self.serves(p))
    }

    fn serves(&self, profile: &ProfileSpec) -> bool {
        profile.ranker != Ranker::Dense || self.encoder.is_some()
    }

    /// The best `limit` documents for `query` under `profile`: ids with the profile's scores, best
    /// first, equal scores by id. An unknown profile or a query of stop words only yields an empty list.
    pub fn rank(
        &self,
        profile: &str,
        query: &str,
        modality: Option<Modality>,
        limit: usize,
    ) -> Result<Vec<(String, f64)>, SearchError> {
        self.rank_timed(profile, query, modality, limit).map(|(hits, _)| hits)
    }

    /// [`Self::rank`], with the time the query's embedding took when the profile computed one.
    pub fn rank_timed(
        &self,
        profile: &str,
        query: &str,
        modality: Option<Modality>,
        limit: usize,
    ) -> Result<(Hits, Option<Duration>), SearchError> {
        let Some(spec) = PROFILES.iter().find(|p| p.name == profile) else {
            return Ok((Vec::new(), None));
        };
        let weights = match spec.ranker {
            Ranker::Lexical(weights) => weights,
            Ranker::Dense => return self.rank_dense(query, limit),
        };
        self.rank_lexical(weights, query, modality, limit).map(|hits| (hits, None))
    }

    fn rank_lexical(
        &self,
        weights: FieldWeights,
        query: &str,
        modality: Option<Modality>,
        limit: usize,
    ) -> Result<Vec<(String, f64)>, SearchError> {
        let Some(query) = self.build_query(weights, query, modality)? else {
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
        // Documents added later sit at later addresses whatever their id: order ties by id here.
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(hits)
    }

    fn rank_dense(&self, query: &str, limit: usize) -> Result<(Hits, Option<Duration>), SearchError> {
        let Some(encoder) = &self.encoder else { return Ok((Vec::new(), None)) };
        let span = if mesh_telemetry::recording() {
            tracing::info_span!(
                "embedding",
                otel.name = "search.query_embedding",
                mesh.query_chars = i64::try_from(query.chars().count()).unwrap_or(i64::MAX)
            )
        } else {
            tracing::Span::none()
        };
        let started = Instant::now();
        let vector = span.in_scope(|| encoder.encode_one(query))?;
        let embedding = started.elapsed();
        Ok((self.catalog.read().unwrap_or_else(|e| e.into_inner()).vectors.nearest(&vector, limit), Some(embedding)))
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

fn schema() -> (Schema, Fields) {
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
        embedding: schema.add_bytes_field("embedding", STORED),
        embedding_model: schema.add_text_field("embedding_model", STRING | STORED),
    };
    (schema.build(), fields)
}

fn describe(location: &IndexLocation) -> String {
    match location {
        IndexLocation::Memory => "(in memory)".into(),
        IndexLocation::Directory(path) => path.display().to_string(),
    }
}

fn vector_to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn vector_from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// The index directory of a search agent under its data directory.
pub fn index_directory(data_dir: &Path) -> PathBuf {
    data_dir.join("index")
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

    fn in_memory(documents: Vec<Document>) -> SearchIndex {
        let index = SearchIndex::open(&IndexLocation::Memory, None, 1).unwrap();
        index.upsert(documents, &|_| {}).unwrap();
        index
    }

    fn index() -> SearchIndex {
        in_memory(vec![
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

    #[test]
    fn the_index_persists_and_reloads_with_adds_replacements_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let location = IndexLocation::Directory(index_directory(dir.path()));
        {
            let index = SearchIndex::open(&location, None, 1).unwrap();
            let report = index
                .upsert(
                    vec![
                        doc("a", "Alpha robots", "Robots in the lab.", "text", &["robotics"]),
                        doc("b", "Beta volcano", "Magma.", "video", &[]),
                        doc("a", "Alpha robots, revised", "Robots in the field.", "text", &["robotics"]),
                    ],
                    &|_| {},
                )
                .unwrap();
            assert_eq!((report.added, report.replaced, report.unchanged), (2, 0, 0));
            let again = index.upsert(vec![doc("b", "Beta volcano", "Magma.", "video", &[])], &|_| {}).unwrap();
            assert_eq!((again.added, again.unchanged), (0, 1), "an identical document is left alone");
            let changed = index.upsert(vec![doc("b", "Beta volcano", "Lava.", "video", &[])], &|_| {}).unwrap();
            assert_eq!(changed.replaced, 1);
            index.upsert(vec![doc("c", "Gamma", "Soccer.", "image", &[])], &|_| {}).unwrap();
            assert_eq!(index.delete(&["c".into(), "missing".into()]).unwrap(), 1);
        }
        let reopened = SearchIndex::open(&location, None, 1).unwrap();
        assert_eq!(reopened.len(), 2);
        let alpha = reopened.document("a").unwrap();
        assert_eq!(
            (alpha.title.as_str(), alpha.tags.as_slice()),
            ("Alpha robots, revised", &["robotics".to_owned()][..])
        );
        assert_eq!(reopened.document("b").unwrap().text, "Lava.");
        assert_eq!(reopened.document("b").unwrap().modality.as_deref(), Some("video"));
        assert!(reopened.document("c").is_none());
        let hits = reopened.rank("bm25", "robots field", None, 10).unwrap();
        assert_eq!(hits.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["a"], "one copy of a, none of c");
    }

    #[test]
    fn a_second_writer_on_the_same_directory_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let location = IndexLocation::Directory(dir.path().to_owned());
        let _first = SearchIndex::open(&location, None, 1).unwrap();
        let error = SearchIndex::open(&location, None, 1).unwrap_err();
        assert!(matches!(error, SearchError::IndexDirectory { .. }), "{error}");
        assert!(error.to_string().contains("cannot write to the index"), "{error}");
    }

    #[test]
    fn equal_scores_rank_by_id_whatever_the_ingestion_order() {
        let index = in_memory(vec![doc("m", "Same words", "", "text", &[])]);
        index.upsert(vec![doc("b", "Same words", "", "text", &[])], &|_| {}).unwrap();
        index
            .upsert(vec![doc("z", "Same words", "", "text", &[]), doc("a", "Same words", "", "text", &[])], &|_| {})
            .unwrap();
        let hits = index.rank("title", "same words", None, 10).unwrap();
        assert_eq!(hits.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["a", "b", "m", "z"]);
    }

    #[test]
    fn without_a_model_there_is_no_dense_profile() {
        let index = index();
        assert!(!index.has_dense());
        assert!(!index.has_profile(DENSE_PROFILE));
        assert!(index.profiles().iter().all(|p| p.name != DENSE_PROFILE));
        assert!(index.rank(DENSE_PROFILE, "robots", None, 5).unwrap().is_empty());
        assert_eq!(index.embedded(), 0);
    }
}
