//! Changing the index: documents in and out as batches of [`Change`]s, each batch one tantivy
//! commit. A batch is prepared first (what actually changes, and the vectors it needs, computed on
//! every core while searches go on), then written.
//!
//! A commit also records how far into the shared document log ([`crate::log`]) the index is, in
//! tantivy's commit payload: documents and position are committed together, so a process killed
//! at any point restarts with an index and a position that agree, and applies the rest again
//! (applying an entry twice leaves the index as applying it once).

use std::collections::BTreeMap;
use std::sync::Arc;

use mesh_embedding::MODEL_ID;
use mesh_protocol::call::validate_tenant_id;
use serde::{Deserialize, Serialize};
use tantivy::{IndexWriter, TantivyDocument, Term};

use super::keys::document_key;
use super::schema::entry;
use super::{IngestReport, SearchIndex};
use crate::corpus::Document;
use crate::embed::embed_documents;
use crate::error::SearchError;

/// A document's vector and the model that made it: a vector of another model is never mixed in.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentVector {
    pub values: Vec<f32>,
    pub model: String,
}

/// One change to the documents of one owner (`tenant`: `None` for the shared corpus).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Adds or replaces a document; its vector when one was computed already (by the replica that
    /// ingested it), so this one need not run the model again.
    Upsert {
        tenant: Option<String>,
        document: Document,
        vector: Option<DocumentVector>,
    },
    Delete {
        tenant: Option<String>,
        id: String,
    },
}

impl Change {
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Self::Upsert { tenant, .. } | Self::Delete { tenant, .. } => tenant.as_deref(),
        }
    }

    pub fn id(&self) -> &str {
        match self {
            Self::Upsert { document, .. } => &document.id,
            Self::Delete { id, .. } => id,
        }
    }

    pub fn key(&self) -> String {
        document_key(self.tenant(), self.id())
    }
}

/// What the commit payload holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CommitPayload {
    /// The last document log entry the index holds (0: none).
    applied_sequence: u64,
}

/// The payload of a commit bringing the index to log entry `sequence`.
fn payload(sequence: u64) -> Result<String, SearchError> {
    serde_json::to_string(&CommitPayload { applied_sequence: sequence })
        .map_err(|e| SearchError::Worker(format!("cannot write the commit payload: {e}")))
}

/// The log entry a stored commit payload names; 0 for an index never brought up to a log.
pub(super) fn applied_sequence(payload: Option<&str>) -> u64 {
    payload.and_then(|p| serde_json::from_str::<CommitPayload>(p).ok()).map_or(0, |p| p.applied_sequence)
}

/// A batch of changes ready to write: only what differs from the index, each document with the
/// vector the index will keep.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Document keys to delete.
    deletes: Vec<String>,
    upserts: Vec<(Option<String>, Document, Option<DocumentVector>)>,
    unchanged: usize,
    embedded: usize,
}

impl Prepared {
    /// The changes, in a form the document log stores.
    pub fn changes(&self) -> Vec<Change> {
        let deletes = self.deletes.iter().map(|key| {
            let (tenant, id) = super::keys::split_key(key);
            Change::Delete { tenant: tenant.map(str::to_owned), id: id.to_owned() }
        });
        let upserts = self.upserts.iter().map(|(tenant, document, vector)| Change::Upsert {
            tenant: tenant.clone(),
            document: document.clone(),
            vector: vector.clone(),
        });
        deletes.chain(upserts).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.upserts.is_empty()
    }

    /// The report of writing this batch on the index it was prepared against: documents new to
    /// it, documents replaced, and those left alone.
    pub fn report(&self, index: &SearchIndex) -> IngestReport {
        let catalog = index.catalog.read().unwrap_or_else(|e| e.into_inner());
        let replaced = self
            .upserts
            .iter()
            .filter(|(tenant, document, _)| {
                catalog.documents.contains_key(&document_key(tenant.as_deref(), &document.id))
            })
            .count();
        let deleted = self.deletes.iter().filter(|key| catalog.documents.contains_key(*key)).count();
        IngestReport {
            added: self.upserts.len() - replaced,
            replaced,
            unchanged: self.unchanged,
            embedded: self.embedded,
            deleted,
        }
    }
}

impl SearchIndex {
    /// Adds `documents` to those of `tenant` (`None`: the shared corpus), replacing those whose
    /// id it holds already (a later duplicate in the batch wins). Vectors are computed first, on
    /// every core, so searches run meanwhile; `progress` hears how many documents each finished
    /// batch of vectors held. One commit makes the whole batch visible at once, or none of it.
    pub fn upsert(
        &self,
        tenant: Option<&str>,
        documents: Vec<Document>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<IngestReport, SearchError> {
        let tenant = tenant.map(str::to_owned);
        let changes =
            documents.into_iter().map(|document| Change::Upsert { tenant: tenant.clone(), document, vector: None });
        let prepared = self.prepare(changes.collect(), progress)?;
        self.write(prepared, None)
    }

    /// Deletes the documents of `ids` of `tenant` (`None`: the shared corpus); returns how many
    /// were indexed.
    pub fn delete(&self, tenant: Option<&str>, ids: &[String]) -> Result<usize, SearchError> {
        let tenant = tenant.map(str::to_owned);
        let changes = ids.iter().map(|id| Change::Delete { tenant: tenant.clone(), id: id.clone() }).collect();
        Ok(self.write(self.prepare(changes, &|_| {})?, None)?.deleted)
    }

    /// Makes `changes` (a later change of a document wins) and records that the index holds the
    /// document log up to entry `sequence`, in one commit.
    pub fn apply(&self, changes: Vec<Change>, sequence: u64) -> Result<IngestReport, SearchError> {
        let prepared = self.prepare(changes, &|_| {})?;
        self.write(prepared, Some(sequence))
    }

    /// What of `changes` differs from the index, with vectors: a change's own vector when it is of
    /// this index's model, else one computed now (when there is a model). A deletion of a document
    /// the index lacks, and a document stored exactly so (with its vector when there is a model),
    /// are left out. Re-ingesting a corpus so costs only what changed.
    pub fn prepare(&self, changes: Vec<Change>, progress: &(dyn Fn(usize) + Sync)) -> Result<Prepared, SearchError> {
        // In key order: tantivy breaks score ties by document address, so equal scores rank by id.
        let mut by_key: BTreeMap<String, Change> = BTreeMap::new();
        for change in changes {
            if let Some(tenant) = change.tenant() {
                validate_tenant_id(tenant).map_err(SearchError::InvalidParameters)?;
            }
            by_key.insert(change.key(), change);
        }
        let dimensions = self.encoder.as_ref().map(|encoder| encoder.dimensions());
        let mut prepared = Prepared::default();
        let mut to_embed: Vec<usize> = Vec::new();
        {
            let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
            for (key, change) in by_key {
                match change {
                    Change::Delete { .. } => {
                        if catalog.documents.contains_key(&key) {
                            prepared.deletes.push(key);
                        }
                    }
                    Change::Upsert { tenant, document, vector } => {
                        let stored = catalog.documents.get(&key).is_some_and(|stored| **stored == document);
                        if stored && (dimensions.is_none() || catalog.vectors.contains(&key)) {
                            prepared.unchanged += 1;
                            continue;
                        }
                        let usable = vector
                            .as_ref()
                            .is_some_and(|vector| vector.model == MODEL_ID && Some(vector.values.len()) == dimensions);
                        if dimensions.is_some() && !usable {
                            to_embed.push(prepared.upserts.len());
                        }
                        prepared.upserts.push((tenant, document, vector));
                    }
                }
            }
        }
        if let (Some(encoder), false) = (&self.encoder, to_embed.is_empty()) {
            let documents: Vec<Document> = to_embed.iter().map(|&i| prepared.upserts[i].1.clone()).collect();
            let vectors = embed_documents(encoder, &documents, self.embedding_threads, progress)?;
            for (row, &i) in to_embed.iter().enumerate() {
                let values = vectors.row(row).to_vec();
                prepared.upserts[i].2 = Some(DocumentVector { values, model: MODEL_ID.to_owned() });
            }
            prepared.embedded = to_embed.len();
        }
        Ok(prepared)
    }

    /// Writes a prepared batch in one commit, which also records log entry `sequence` as applied
    /// when given (the position never moves back).
    pub fn write(&self, prepared: Prepared, sequence: Option<u64>) -> Result<IngestReport, SearchError> {
        let applied = self.applied_sequence();
        let sequence = sequence.map_or(applied, |sequence| sequence.max(applied));
        if prepared.is_empty() && sequence == applied {
            return Ok(prepared.report(self));
        }
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let report = prepared.report(self);
        for key in &prepared.deletes {
            writer.delete_term(Term::from_field_text(self.fields.key, key));
        }
        for (tenant, document, vector) in &prepared.upserts {
            writer.delete_term(Term::from_field_text(self.fields.key, &document_key(tenant.as_deref(), &document.id)));
            let vector = vector.as_ref().map(|v| (v.values.as_slice(), v.model.as_str()));
            writer.add_document(entry(&self.fields, tenant.as_deref(), document, vector))?;
        }
        self.commit(&mut writer, sequence)?;
        let mut catalog = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        for key in &prepared.deletes {
            catalog.documents.remove(key);
            catalog.vectors.remove(key);
        }
        for (tenant, document, vector) in prepared.upserts {
            let key = document_key(tenant.as_deref(), &document.id);
            match vector.filter(|vector| vector.model == MODEL_ID) {
                // A vector of the wrong length is refused here (kept only in the stored document).
                Some(vector) => {
                    catalog.vectors.upsert(&key, &vector.values);
                }
                None => catalog.vectors.remove(&key),
            }
            catalog.documents.insert(key, Arc::new(document));
        }
        self.applied.store(sequence, std::sync::atomic::Ordering::Release);
        Ok(report)
    }

    /// The last document log entry the index holds (0: none, or no log).
    pub fn applied_sequence(&self) -> u64 {
        self.applied.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Commits, with the applied log position in the payload when there is one.
    fn commit(&self, writer: &mut IndexWriter<TantivyDocument>, sequence: u64) -> Result<(), SearchError> {
        let committed = match writer.prepare_commit() {
            Ok(mut commit) => {
                if sequence > 0 {
                    commit.set_payload(&payload(sequence)?);
                }
                commit.commit().map(|_| ())
            }
            Err(error) => Err(error),
        };
        if let Err(error) = committed {
            // Drop what the failed commit held so the next ingestion starts clean.
            let _ = writer.rollback();
            return Err(error.into());
        }
        Ok(self.reader.reload()?)
    }

    /// Keys of every document indexed, of every owner.
    pub fn keys(&self) -> Vec<String> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).documents.keys().cloned().collect()
    }

    /// Every document with the vector the index keeps for it (its own model's), by owner: what
    /// seeds a new document log from an index that predates it, without computing any vector.
    pub fn changes(&self) -> Vec<Change> {
        let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        let mut changes: Vec<Change> = catalog
            .documents
            .iter()
            .map(|(key, document)| {
                let tenant = super::keys::split_key(key).0.map(str::to_owned);
                let vector = catalog
                    .vectors
                    .get(key)
                    .map(|values| DocumentVector { values: values.to_vec(), model: MODEL_ID.to_owned() });
                Change::Upsert { tenant, document: (**document).clone(), vector }
            })
            .collect();
        changes.sort_by_key(Change::key);
        changes
    }
}

/// Keys of `keys` absent from `live`, as deletions: what an index must drop to hold no more than
/// the log does.
pub fn deletions_outside(keys: Vec<String>, live: &std::collections::HashSet<String>) -> Vec<Change> {
    keys.into_iter()
        .filter(|key| !live.contains(key))
        .map(|key| {
            let (tenant, id) = super::keys::split_key(&key);
            Change::Delete { tenant: tenant.map(str::to_owned), id: id.to_owned() }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IndexLocation;

    fn doc(id: &str, text: &str) -> Document {
        Document { id: id.into(), title: String::new(), text: text.into(), modality: None, tags: Vec::new() }
    }

    #[test]
    fn the_applied_position_is_committed_with_the_documents_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let location = IndexLocation::Directory(dir.path().join("index"));
        {
            let index = SearchIndex::open(&location, None, 1).unwrap();
            assert_eq!(index.applied_sequence(), 0);
            let upsert = |id: &str, text: &str| Change::Upsert { tenant: None, document: doc(id, text), vector: None };
            let report = index.apply(vec![upsert("a", "one"), upsert("b", "two"), upsert("a", "three")], 3).unwrap();
            assert_eq!((report.added, report.replaced), (2, 0));
            // The same entries again (a restart that had not recorded them): nothing changes.
            let again = index.apply(vec![upsert("a", "three"), upsert("b", "two")], 3).unwrap();
            assert_eq!((again.added, again.replaced, again.unchanged), (0, 0, 2));
            let deleted = index
                .apply(
                    vec![
                        Change::Delete { tenant: None, id: "b".into() },
                        Change::Delete { tenant: None, id: "zz".into() },
                    ],
                    5,
                )
                .unwrap();
            assert_eq!(deleted.deleted, 1);
            // A plain ingestion keeps the position.
            index.upsert(Some("acme"), vec![doc("c", "four")], &|_| {}).unwrap();
            assert_eq!(index.applied_sequence(), 5);
            // The position never moves back.
            index.apply(Vec::new(), 2).unwrap();
            assert_eq!(index.applied_sequence(), 5);
        }
        let reopened = SearchIndex::open(&location, None, 1).unwrap();
        assert_eq!(reopened.applied_sequence(), 5);
        assert_eq!(reopened.len(), 2);
        assert_eq!(reopened.document(None, "a").unwrap().text, "three");
        let mut keys = reopened.keys();
        keys.sort();
        assert_eq!(keys, ["/a", "acme/c"]);
        let live = ["/a".to_owned()].into_iter().collect();
        assert_eq!(deletions_outside(keys, &live), [Change::Delete { tenant: Some("acme".into()), id: "c".into() }]);
    }
}
