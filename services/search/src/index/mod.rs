//! The corpus on tantivy, and the ranking profiles that query it.
//!
//! Queries are built from analysed terms (never parsed as query syntax), so any user text is a
//! valid query: quotes, colons or `AND` in a question cannot make it fail.
//!
//! The index is the one durable copy of everything: each document is stored with its vector
//! (and the model that made it), so a restart reloads the index without computing anything, and
//! an add or a delete is one tantivy commit, never two stores that could disagree.
//!
//! Documents belong to the shared corpus or to one tenant ([`keys`]); every lookup and search
//! names the tenant it acts for.

mod keys;
mod profiles;
mod schema;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use mesh_embedding::{Encoder, MODEL_ID, QUERY_CACHE_ENTRIES_DEFAULT, QueryCache, QueryCacheStats};
use mesh_protocol::agents::{Modality, SearchProfile};
use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::query::{AllQuery, BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Value};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

pub use keys::{document_key, split_key};
pub use profiles::DENSE_PROFILE;
pub(crate) use schema::{vector_from_bytes, vector_to_bytes};
pub use write::{Change, DocumentVector, Prepared, deletions_outside};

use self::keys::{tenant_term, visible_to};
use self::profiles::{FieldWeights, MODALITY_BOOST, PROFILES, ProfileSpec, Ranker, modality_term};
use self::schema::{Fields, StoredEntry, StoredFields, WRITER_MEMORY_BYTES, open_directory, prepared, read_entry};
use crate::corpus::Document;
use crate::dense::{DenseMethod, DenseVectors};
use crate::error::SearchError;

/// Where the index lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexLocation {
    /// Gone with the process: tests, evaluation runs.
    Memory,
    /// A tantivy directory, created when absent and reloaded when present.
    Directory(PathBuf),
}

/// Documents and vectors as searches see them, by document key, updated after every commit.
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
    /// Documents deleted.
    pub deleted: usize,
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
    /// Vectors of recent queries: a repeated query costs no forward pass.
    queries: QueryCache,
    embedding_threads: usize,
    /// The last document log entry the index holds, as its last commit recorded (0: none).
    applied: AtomicU64,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("documents", &self.len())
            .field("dense", &self.encoder.is_some())
            .finish_non_exhaustive()
    }
}

/// Document keys with their scores, best first.
type Hits = Vec<(String, f64)>;

impl SearchIndex {
    /// Opens the index at `location` (creating it when new) and loads its documents and vectors.
    /// With an `encoder`, documents stored without a vector of that model get one now.
    pub fn open(
        location: &IndexLocation,
        encoder: Option<Arc<Encoder>>,
        embedding_threads: usize,
    ) -> Result<Self, SearchError> {
        let (schema, fields) = schema::schema();
        let index = prepared(match location {
            IndexLocation::Memory => Index::create_in_ram(schema),
            IndexLocation::Directory(path) => open_directory(path, schema, &fields)?,
        });
        let writer = index.writer_with_num_threads::<TantivyDocument>(1, WRITER_MEMORY_BYTES).map_err(|e| {
            SearchError::IndexDirectory { path: describe(location), reason: format!("cannot write to the index: {e}") }
        })?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let applied = write::applied_sequence(index.load_metas()?.payload.as_deref());
        let dimensions = encoder.as_ref().map_or(0, |e| e.dimensions());
        let this = Self {
            index,
            reader,
            writer: Mutex::new(writer),
            fields,
            catalog: RwLock::new(Catalog { documents: HashMap::new(), vectors: DenseVectors::new(dimensions) }),
            encoder,
            queries: QueryCache::new(QUERY_CACHE_ENTRIES_DEFAULT),
            embedding_threads: embedding_threads.max(1),
            applied: AtomicU64::new(applied),
        };
        let stale = this.load()?;
        if !stale.is_empty() {
            tracing::info!(owners = stale.len(), "computing the vectors the stored index lacks");
            for (tenant, documents) in stale {
                this.upsert(tenant.as_deref(), documents, &|_| {})?;
            }
        }
        Ok(this)
    }

    /// Reads every stored document into the catalog; returns those lacking a vector of the
    /// current model (when there is one), by owning tenant.
    fn load(&self) -> Result<BTreeMap<Option<String>, Vec<Document>>, SearchError> {
        let searcher = self.reader.searcher();
        let stored_fields = StoredFields::of(&self.index.schema())?;
        let addresses = searcher.search(&AllQuery, &DocSetCollector)?;
        let mut catalog = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let mut stale: BTreeMap<Option<String>, Vec<Document>> = BTreeMap::new();
        for address in addresses {
            let stored: TantivyDocument = searcher.doc(address)?;
            let StoredEntry { key, document, vector } = read_entry(&stored, &stored_fields);
            if self.encoder.is_some() {
                match vector {
                    Some((vector, model)) if model == MODEL_ID && catalog.vectors.upsert(&key, &vector) => {}
                    _ => stale.entry(split_key(&key).0.map(str::to_owned)).or_default().push(document.clone()),
                }
            }
            catalog.documents.insert(key, Arc::new(document));
        }
        Ok(stale)
    }

    /// Documents of every owner.
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

    /// Ids of the documents of `tenant` (`None`: the shared corpus), in no particular order.
    pub fn ids(&self, tenant: Option<&str>) -> Vec<String> {
        let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        catalog
            .documents
            .keys()
            .map(|key| split_key(key))
            .filter(|(owner, _)| *owner == tenant)
            .map(|(_, id)| id.to_owned())
            .collect()
    }

    /// Document `id` of `tenant` (`None`: the shared corpus).
    pub fn document(&self, tenant: Option<&str>, id: &str) -> Option<Arc<Document>> {
        self.by_key(&document_key(tenant, id))
    }

    /// The document of a key that [`SearchIndex::rank`] gave.
    pub fn by_key(&self, key: &str) -> Option<Arc<Document>> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).documents.get(key).cloned()
    }

    /// Keeps the vectors of at most `entries` recent queries (0: none, every query is encoded).
    pub fn set_query_cache_entries(&self, entries: usize) {
        self.queries.set_capacity(entries);
    }

    /// Dense searches compare the vectors' signs first from `documents` vectors on.
    pub fn set_quantized_min_documents(&self, documents: usize) {
        self.catalog.write().unwrap_or_else(|e| e.into_inner()).vectors.set_quantized_min_rows(documents);
    }

    /// How dense searches are answered at the index's current size.
    pub fn dense_method(&self) -> DenseMethod {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).vectors.method()
    }

    /// How the query vector cache has served.
    pub fn query_cache(&self) -> QueryCacheStats {
        self.queries.stats()
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

    /// The best `limit` documents for `query` under `profile` that a search for `tenant` sees
    /// (the shared corpus, and the tenant's own documents): document keys with the profile's
    /// scores, best first, equal scores by key, and the time the query's embedding took when the
    /// profile computed one (not when its vector came from the query cache). An unknown profile or
    /// a query of stop words only yields an empty list.
    pub fn rank_timed(
        &self,
        profile: &str,
        query: &str,
        modality: Option<Modality>,
        limit: usize,
        tenant: Option<&str>,
    ) -> Result<(Hits, Option<Duration>), SearchError> {
        let Some(spec) = PROFILES.iter().find(|p| p.name == profile) else {
            return Ok((Vec::new(), None));
        };
        let weights = match spec.ranker {
            Ranker::Lexical(weights) => weights,
            Ranker::Dense => return self.rank_dense(query, limit, tenant),
        };
        self.rank_lexical(weights, query, modality, limit, tenant).map(|hits| (hits, None))
    }

    fn rank_lexical(
        &self,
        weights: FieldWeights,
        query: &str,
        modality: Option<Modality>,
        limit: usize,
        tenant: Option<&str>,
    ) -> Result<Hits, SearchError> {
        let Some(query) = self.build_query(weights, query, modality, tenant)? else {
            return Ok(Vec::new());
        };
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(limit.max(1)).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let stored: TantivyDocument = searcher.doc(address)?;
            if let Some(key) = stored.get_first(self.fields.key).and_then(|v| v.as_str()) {
                hits.push((key.to_owned(), f64::from(score)));
            }
        }
        // Documents added later sit at later addresses whatever their key: order ties by key here.
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(hits)
    }

    fn rank_dense(
        &self,
        query: &str,
        limit: usize,
        tenant: Option<&str>,
    ) -> Result<(Hits, Option<Duration>), SearchError> {
        let Some(encoder) = &self.encoder else { return Ok((Vec::new(), None)) };
        let span = if mesh_telemetry::recording() {
            tracing::info_span!(
                "embedding",
                otel.name = "search.query_embedding",
                mesh.query_chars = i64::try_from(query.chars().count()).unwrap_or(i64::MAX),
                mesh.query_cached = tracing::field::Empty
            )
        } else {
            tracing::Span::none()
        };
        let started = Instant::now();
        let (vector, cached) = span.in_scope(|| self.queries.vector(query, |text| encoder.encode_one(text)))?;
        span.record("mesh.query_cached", cached);
        // A cached vector took no forward pass: there is no embedding time to report.
        let embedding = (!cached).then(|| started.elapsed());
        let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        Ok((catalog.vectors.nearest(&vector, limit, |key| visible_to(tenant, key)), embedding))
    }

    fn build_query(
        &self,
        weights: FieldWeights,
        text: &str,
        modality: Option<Modality>,
        tenant: Option<&str>,
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
        let mut scoped = vec![(Occur::Must, matches), (Occur::Must, self.visible_documents(tenant))];
        if let Some(name) = modality.and_then(modality_term) {
            let term = Term::from_field_text(self.fields.modality, name);
            let boost = BoostQuery::new(Box::new(TermQuery::new(term, IndexRecordOption::Basic)), MODALITY_BOOST);
            scoped.push((Occur::Should, Box::new(boost)));
        }
        Ok(Some(Box::new(BooleanQuery::new(scoped))))
    }

    /// Matches the documents a search for `tenant` sees, adding nothing to their scores.
    fn visible_documents(&self, tenant: Option<&str>) -> Box<dyn Query> {
        let owner = |tenant: Option<&str>| -> Box<dyn Query> {
            let term = Term::from_field_text(self.fields.tenant, tenant_term(tenant));
            Box::new(TermQuery::new(term, IndexRecordOption::Basic))
        };
        let owners: Box<dyn Query> = match tenant {
            None => owner(None),
            Some(tenant) => {
                Box::new(BooleanQuery::new(vec![(Occur::Should, owner(None)), (Occur::Should, owner(Some(tenant)))]))
            }
        };
        Box::new(ConstScoreQuery::new(owners, 0.0))
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

fn describe(location: &IndexLocation) -> String {
    match location {
        IndexLocation::Memory => "(in memory)".into(),
        IndexLocation::Directory(path) => path.display().to_string(),
    }
}

/// The index directory of a search agent under its data directory.
pub fn index_directory(data_dir: &Path) -> PathBuf {
    data_dir.join("index")
}

/// The index's tantivy schema as JSON: part of what a persisted evaluation index is keyed on.
pub fn schema_json() -> String {
    serde_json::to_string(&schema::schema().0).unwrap_or_default()
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
        index.upsert(None, documents, &|_| {}).unwrap();
        index
    }

    impl SearchIndex {
        /// [`SearchIndex::rank_timed`] without the timing.
        fn rank(
            &self,
            profile: &str,
            query: &str,
            modality: Option<Modality>,
            limit: usize,
            tenant: Option<&str>,
        ) -> Result<Hits, SearchError> {
            self.rank_timed(profile, query, modality, limit, tenant).map(|(hits, _)| hits)
        }
    }

    /// The ids of ranked keys, all of which must be of the shared corpus.
    fn shared_ids(hits: &[(String, f64)]) -> Vec<&str> {
        hits.iter()
            .map(|(key, _)| match split_key(key) {
                (None, id) => id,
                (Some(tenant), id) => panic!("{id} of tenant {tenant} ranked"),
            })
            .collect()
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
        let hits = index.rank("bm25", "the robot played soccer", None, 10, None).unwrap();
        let ids = shared_ids(&hits);
        assert_eq!(ids[0], "v1");
        assert!(ids.contains(&"i1"));
        assert!(!ids.contains(&"t1"));
        assert!(index.rank("bm25", "the of and", None, 10, None).unwrap().is_empty(), "stop words alone match nothing");
    }

    #[test]
    fn profiles_see_different_fields() {
        let index = index();
        // Only the description of i1 says "match"; the title profile cannot see it.
        let bm25 = index.rank("bm25", "match", None, 10, None).unwrap();
        let title = index.rank("title", "match", None, 10, None).unwrap();
        assert!(shared_ids(&bm25).contains(&"i1"));
        assert!(title.is_empty());
        let tags = index.rank("tags", "sports", None, 10, None).unwrap();
        assert_eq!(shared_ids(&tags), ["v2"]);
    }

    #[test]
    fn modality_is_a_preference_not_a_filter() {
        let index = index();
        let images = index.rank("bm25", "robot soccer", Some(Modality::Image), 10, None).unwrap();
        assert_eq!(shared_ids(&images)[0], "i1");
        assert!(shared_ids(&images).contains(&"v1"), "other modalities still answer");
    }

    #[test]
    fn query_syntax_is_just_text() {
        let index = index();
        for query in ["title:robot", "\"unclosed", "robot AND (", "-soccer", "🤖 soccer", "São Paulo?"] {
            index.rank("bm25", query, None, 5, None).unwrap();
        }
        assert!(index.rank("nope", "robot", None, 5, None).unwrap().is_empty());
    }

    #[test]
    fn the_index_persists_and_reloads_with_adds_replacements_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let location = IndexLocation::Directory(index_directory(dir.path()));
        {
            let index = SearchIndex::open(&location, None, 1).unwrap();
            let report = index
                .upsert(
                    None,
                    vec![
                        doc("a", "Alpha robots", "Robots in the lab.", "text", &["robotics"]),
                        doc("b", "Beta volcano", "Magma.", "video", &[]),
                        doc("a", "Alpha robots, revised", "Robots in the field.", "text", &["robotics"]),
                    ],
                    &|_| {},
                )
                .unwrap();
            assert_eq!((report.added, report.replaced, report.unchanged), (2, 0, 0));
            let again = index.upsert(None, vec![doc("b", "Beta volcano", "Magma.", "video", &[])], &|_| {}).unwrap();
            assert_eq!((again.added, again.unchanged), (0, 1), "an identical document is left alone");
            let changed = index.upsert(None, vec![doc("b", "Beta volcano", "Lava.", "video", &[])], &|_| {}).unwrap();
            assert_eq!(changed.replaced, 1);
            index.upsert(None, vec![doc("c", "Gamma", "Soccer.", "image", &[])], &|_| {}).unwrap();
            assert_eq!(index.delete(None, &["c".into(), "missing".into()]).unwrap(), 1);
        }
        let reopened = SearchIndex::open(&location, None, 1).unwrap();
        assert_eq!(reopened.len(), 2);
        let alpha = reopened.document(None, "a").unwrap();
        assert_eq!(
            (alpha.title.as_str(), alpha.tags.as_slice()),
            ("Alpha robots, revised", &["robotics".to_owned()][..])
        );
        assert_eq!(reopened.document(None, "b").unwrap().text, "Lava.");
        assert_eq!(reopened.document(None, "b").unwrap().modality.as_deref(), Some("video"));
        assert!(reopened.document(None, "c").is_none());
        let hits = reopened.rank("bm25", "robots field", None, 10, None).unwrap();
        assert_eq!(shared_ids(&hits), ["a"], "one copy of a, none of c");
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
        index.upsert(None, vec![doc("b", "Same words", "", "text", &[])], &|_| {}).unwrap();
        index
            .upsert(
                None,
                vec![doc("z", "Same words", "", "text", &[]), doc("a", "Same words", "", "text", &[])],
                &|_| {},
            )
            .unwrap();
        let hits = index.rank("title", "same words", None, 10, None).unwrap();
        assert_eq!(shared_ids(&hits), ["a", "b", "m", "z"]);
    }

    #[test]
    fn without_a_model_there_is_no_dense_profile() {
        let index = index();
        assert!(!index.has_dense());
        assert!(!index.has_profile(DENSE_PROFILE));
        assert!(index.profiles().iter().all(|p| p.name != DENSE_PROFILE));
        assert!(index.rank(DENSE_PROFILE, "robots", None, 5, None).unwrap().is_empty());
        assert_eq!(index.embedded(), 0);
    }

    #[test]
    fn a_tenant_sees_the_shared_corpus_and_its_own_documents_never_another_tenants() {
        let index = index();
        let acme = doc("a1", "Robot welder", "Acme's robots weld soccer goals.", "text", &["robotics"]);
        let globex = doc("g1", "Robot painter", "Globex robots paint soccer balls.", "text", &["robotics"]);
        index.upsert(Some("acme"), vec![acme.clone()], &|_| {}).unwrap();
        index.upsert(Some("globex"), vec![globex], &|_| {}).unwrap();
        // The same id in two owners' hands: two documents, neither replacing the other.
        let shadow = doc("v1", "Acme's own v1", "Robots soccer.", "text", &[]);
        assert_eq!(index.upsert(Some("acme"), vec![shadow], &|_| {}).unwrap().added, 1);
        for profile in ["bm25", "title", "tags"] {
            let keys: Vec<String> =
                index.rank(profile, "robot soccer", None, 50, Some("acme")).unwrap().into_iter().map(|h| h.0).collect();
            assert!(keys.iter().all(|k| split_key(k).0 != Some("globex")), "{profile}: {keys:?}");
            let shared = index.rank(profile, "robot soccer", None, 50, None).unwrap();
            shared_ids(&shared);
        }
        let keys: Vec<String> =
            index.rank("bm25", "robot soccer", None, 50, Some("acme")).unwrap().into_iter().map(|h| h.0).collect();
        for expected in ["acme/a1", "acme/v1", "/v1", "/i1"] {
            assert!(keys.contains(&expected.to_owned()), "{expected} in {keys:?}");
        }
        assert_eq!(index.document(Some("acme"), "a1").as_deref(), Some(&acme));
        assert!(index.document(None, "a1").is_none() && index.document(Some("globex"), "a1").is_none());
        assert_eq!(index.document(None, "v1").unwrap().title, "Robots playing soccer at RoboCup");
        assert_eq!(index.ids(Some("globex")), ["g1"]);
        assert_eq!(index.delete(Some("globex"), &["a1".into()]).unwrap(), 0, "not globex's to delete");
        assert_eq!(index.delete(Some("acme"), &["v1".into()]).unwrap(), 1);
        assert!(index.document(None, "v1").is_some(), "deleting acme's v1 leaves the shared one");
        assert!(matches!(
            index.upsert(Some("a/b"), vec![doc("x", "", "", "text", &[])], &|_| {}),
            Err(SearchError::InvalidParameters(_))
        ));
    }

    #[test]
    fn an_index_written_before_tenants_is_upgraded_into_the_shared_corpus_keeping_its_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let path = index_directory(dir.path());
        std::fs::create_dir_all(&path).unwrap();
        let vector = [0.6f32, 0.8];
        {
            // The layout of the releases before tenants: no key, no tenant.
            let mut builder = tantivy::schema::Schema::builder();
            let current = schema::schema().0;
            for name in ["id", "title", "text", "tags", "modality", "embedding", "embedding_model"] {
                let field = current.get_field(name).unwrap();
                builder.add_field(current.get_field_entry(field).clone());
            }
            let old = builder.build();
            let index = prepared(Index::create_in_dir(&path, old.clone()).unwrap());
            let mut writer = index.writer_with_num_threads::<TantivyDocument>(1, WRITER_MEMORY_BYTES).unwrap();
            let field = |name: &str| old.get_field(name).unwrap();
            let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut d1 = TantivyDocument::default();
            d1.add_text(field("id"), "d1");
            d1.add_text(field("title"), "Volcano robots");
            d1.add_text(field("text"), "Lava.");
            d1.add_bytes(field("embedding"), &bytes);
            d1.add_text(field("embedding_model"), MODEL_ID);
            let mut d2 = TantivyDocument::default();
            d2.add_text(field("id"), "d2");
            d2.add_text(field("title"), "Soccer");
            writer.add_document(d1).unwrap();
            writer.add_document(d2).unwrap();
            writer.commit().unwrap();
        }
        let location = IndexLocation::Directory(path.clone());
        {
            let upgraded = SearchIndex::open(&location, None, 1).unwrap();
            assert_eq!(upgraded.ids(None).len(), 2);
            assert_eq!(upgraded.document(None, "d1").unwrap().title, "Volcano robots");
            assert_eq!(shared_ids(&upgraded.rank("bm25", "volcano", None, 5, Some("acme")).unwrap()), ["d1"]);
            let stored = upgraded.reader.searcher();
            let fields = StoredFields::of(&upgraded.index.schema()).unwrap();
            let address = stored
                .search(
                    &TermQuery::new(Term::from_field_text(upgraded.fields.key, "/d1"), IndexRecordOption::Basic),
                    &DocSetCollector,
                )
                .unwrap();
            let entry = read_entry(&stored.doc(*address.iter().next().unwrap()).unwrap(), &fields);
            assert_eq!(
                entry.vector,
                Some((vector.to_vec(), MODEL_ID.to_owned())),
                "the vector is kept, not recomputed"
            );
        }
        let siblings: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(siblings, ["index"], "no upgrade folder is left behind");
        let reopened = SearchIndex::open(&location, None, 1).unwrap();
        assert_eq!(reopened.len(), 2, "a second start finds the upgraded index as it is");
    }
}
