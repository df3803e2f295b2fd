//! How documents are laid out in tantivy, and how an index written by an earlier version of the
//! agent is brought to the current layout without computing any vector again.

use std::path::{Path, PathBuf};

use tantivy::collector::DocSetCollector;
use tantivy::directory::MmapDirectory;
use tantivy::query::AllQuery;
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::{Index, TantivyDocument, doc};

use super::keys::{document_key, tenant_term};
use crate::corpus::Document;
use crate::error::SearchError;

/// Name the English analyzer is registered under.
const ENGLISH_ANALYZER: &str = "en_mesh";
/// Memory the index writer may use while ingesting.
pub(super) const WRITER_MEMORY_BYTES: usize = 50_000_000;
/// Suffixes of the sibling folders an upgrade writes the new index into, and moves the old one to
/// while the new one takes its place.
const UPGRADING_SUFFIX: &str = "upgrading";
const REPLACED_SUFFIX: &str = "replaced";

#[derive(Debug, Clone, Copy)]
pub(super) struct Fields {
    pub(super) id: Field,
    /// `{tenant}/{id}` (see [`super::keys`]): what a replacement or a deletion addresses.
    pub(super) key: Field,
    /// The owning tenant, or [`super::keys::SHARED_TENANT_TERM`] for the shared corpus.
    pub(super) tenant: Field,
    pub(super) title: Field,
    pub(super) text: Field,
    pub(super) tags: Field,
    pub(super) modality: Field,
    /// The document's unit vector, little-endian f32s; absent without a model.
    pub(super) embedding: Field,
    /// The model that made `embedding`; a vector of another model is recomputed, never mixed in.
    pub(super) embedding_model: Field,
}

pub(super) fn schema() -> (Schema, Fields) {
    let mut schema = Schema::builder();
    let english = TextOptions::default().set_stored().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ENGLISH_ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        id: schema.add_text_field("id", STRING | STORED),
        key: schema.add_text_field("key", STRING | STORED),
        tenant: schema.add_text_field("tenant", STRING | STORED),
        title: schema.add_text_field("title", english.clone()),
        text: schema.add_text_field("text", english.clone()),
        tags: schema.add_text_field("tags", english),
        modality: schema.add_text_field("modality", STRING | STORED),
        embedding: schema.add_bytes_field("embedding", STORED),
        embedding_model: schema.add_text_field("embedding_model", STRING | STORED),
    };
    (schema.build(), fields)
}

/// An index with the analyzers its fields name registered.
pub(super) fn prepared(index: Index) -> Index {
    index.tokenizers().register(ENGLISH_ANALYZER, mesh_rank::analyzer::english_analyzer());
    index
}

/// A stored document as the index gives it back.
pub(super) struct StoredEntry {
    pub(super) key: String,
    pub(super) document: Document,
    /// The vector, when one was stored with the model named.
    pub(super) vector: Option<(Vec<f32>, String)>,
}

/// Reads a stored document. `fields` may be those of an index of an earlier layout, whose
/// documents all belong to the shared corpus (it had no tenants).
pub(super) fn read_entry(stored: &TantivyDocument, fields: &StoredFields) -> StoredEntry {
    let text = |field: Field| stored.get_first(field).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let modality = text(fields.modality);
    let document = Document {
        id: text(fields.id),
        title: text(fields.title),
        text: text(fields.text),
        modality: (!modality.is_empty()).then_some(modality),
        tags: stored.get_all(fields.tags).filter_map(|v| v.as_str()).map(str::to_owned).collect(),
    };
    let key = match fields.key {
        Some(field) => text(field),
        None => document_key(None, &document.id),
    };
    let vector = stored.get_first(fields.embedding).and_then(|v| v.as_bytes()).map(vector_from_bytes);
    let model = stored.get_first(fields.embedding_model).and_then(|v| v.as_str()).map(str::to_owned);
    StoredEntry { key, document, vector: vector.zip(model) }
}

/// The stored fields of an index, of the current layout or an earlier one (found by name).
pub(super) struct StoredFields {
    id: Field,
    key: Option<Field>,
    title: Field,
    text: Field,
    tags: Field,
    modality: Field,
    embedding: Field,
    embedding_model: Field,
}

impl StoredFields {
    pub(super) fn of(schema: &Schema) -> Result<Self, SearchError> {
        let field = |name: &str| {
            schema.get_field(name).map_err(|_| {
                SearchError::Index(tantivy::TantivyError::SchemaError(format!(
                    "no field {name:?}: not an index of this agent"
                )))
            })
        };
        Ok(Self {
            id: field("id")?,
            key: schema.get_field("key").ok(),
            title: field("title")?,
            text: field("text")?,
            tags: field("tags")?,
            modality: field("modality")?,
            embedding: field("embedding")?,
            embedding_model: field("embedding_model")?,
        })
    }
}

/// The tantivy document of `document` owned by `tenant`, with its vector when there is one.
pub(super) fn entry(
    fields: &Fields,
    tenant: Option<&str>,
    document: &Document,
    vector: Option<(&[f32], &str)>,
) -> TantivyDocument {
    let mut entry = doc!(
        fields.id => document.id.clone(),
        fields.key => document_key(tenant, &document.id),
        fields.tenant => tenant_term(tenant),
        fields.title => document.title.clone(),
        fields.text => document.text.clone(),
    );
    for tag in &document.tags {
        entry.add_text(fields.tags, tag);
    }
    if let Some(modality) = &document.modality {
        entry.add_text(fields.modality, modality.to_lowercase());
    }
    if let Some((vector, model)) = vector {
        entry.add_bytes(fields.embedding, &vector_to_bytes(vector));
        entry.add_text(fields.embedding_model, model);
    }
    entry
}

/// Opens (or creates) the index in `path` with the current layout. An index of the layout before
/// tenants is rewritten first, every document into the shared corpus with its stored vector; the
/// old files are replaced only once the new index is committed, and an upgrade cut short is
/// resumed or undone at the next start.
pub(super) fn open_directory(path: &Path, schema: Schema, fields: &Fields) -> Result<Index, SearchError> {
    let failed = |reason: String| SearchError::IndexDirectory { path: path.display().to_string(), reason };
    let (upgrading, replaced) = (sibling(path, UPGRADING_SUFFIX), sibling(path, REPLACED_SUFFIX));
    if !path.exists() && replaced.exists() {
        // Cut short between the two renames: the old index is whole, the new one may not be.
        std::fs::rename(&replaced, path).map_err(|e| failed(e.to_string()))?;
    }
    for leftover in [&upgrading, &replaced] {
        if leftover.exists() {
            std::fs::remove_dir_all(leftover).map_err(|e| failed(e.to_string()))?;
        }
    }
    std::fs::create_dir_all(path).map_err(|e| failed(e.to_string()))?;
    let directory = MmapDirectory::open(path).map_err(|e| failed(e.to_string()))?;
    if Index::exists(&directory).map_err(|e| failed(e.to_string()))? {
        let existing = Index::open(directory.clone()).map_err(|e| failed(e.to_string()))?;
        if existing.schema().get_field("key").is_err() {
            let documents = upgrade(existing, &upgrading, schema.clone(), fields)
                .map_err(|e| failed(format!("upgrading the index to tenant-scoped documents: {e}")))?;
            std::fs::rename(path, &replaced).map_err(|e| failed(e.to_string()))?;
            std::fs::rename(&upgrading, path).map_err(|e| failed(e.to_string()))?;
            std::fs::remove_dir_all(&replaced).map_err(|e| failed(e.to_string()))?;
            tracing::info!(path = %path.display(), documents, "index upgraded: its documents form the shared corpus");
            return open_directory(path, schema, fields);
        }
    }
    Index::open_or_create(directory, schema)
        .map_err(|e| failed(format!("{e} (an index of another version of this agent? move it away to rebuild)")))
}

/// Writes every document of `old` into a new index in `into`, as shared documents; returns how many.
fn upgrade(old: Index, into: &Path, schema: Schema, fields: &Fields) -> Result<usize, SearchError> {
    let stored_fields = StoredFields::of(&old.schema())?;
    let reader = old.reader()?;
    let searcher = reader.searcher();
    std::fs::create_dir_all(into)
        .map_err(|e| SearchError::IndexDirectory { path: into.display().to_string(), reason: e.to_string() })?;
    let new = prepared(Index::create_in_dir(into, schema)?);
    let mut writer = new.writer_with_num_threads::<TantivyDocument>(1, WRITER_MEMORY_BYTES)?;
    let addresses = searcher.search(&AllQuery, &DocSetCollector)?;
    for address in &addresses {
        let stored: TantivyDocument = searcher.doc(*address)?;
        let StoredEntry { document, vector, .. } = read_entry(&stored, &stored_fields);
        let vector = vector.as_ref().map(|(values, model)| (values.as_slice(), model.as_str()));
        writer.add_document(entry(fields, None, &document, vector))?;
    }
    writer.commit()?;
    Ok(addresses.len())
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{suffix}"));
    path.with_file_name(name)
}

pub(crate) fn vector_to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub(crate) fn vector_from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}
