//! Document vectors computed in batches on several threads.
//!
//! Batches group documents of similar length (the longest in a batch sets its padded length, so
//! mixing one long abstract with short titles would cost the short ones the long one's time), and
//! the threads take the next batch as they finish one, so a slow batch does not hold the others.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use mesh_embedding::Encoder;

use crate::corpus::Document;
use crate::error::SearchError;

/// Documents encoded in one forward pass: large enough to amortise the per-call cost, small
/// enough that padding to the batch's longest stays cheap.
pub const EMBEDDING_BATCH_DOCUMENTS: usize = 16;

/// Vectors of a list of documents, row `i` for document `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vectors {
    dimensions: usize,
    values: Vec<f32>,
}

impl Vectors {
    pub fn row(&self, index: usize) -> &[f32] {
        &self.values[index * self.dimensions..(index + 1) * self.dimensions]
    }
}

/// The text a document is embedded by: its title, then its text.
fn embedding_text(document: &Document) -> String {
    match (document.title.trim(), document.text.trim()) {
        ("", text) => text.to_owned(),
        (title, "") => title.to_owned(),
        (title, text) => format!("{title} {text}"),
    }
}

/// Embeds `documents` on `threads` threads; `progress` hears how many documents each finished batch held.
pub fn embed_documents(
    encoder: &Encoder,
    documents: &[Document],
    threads: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vectors, SearchError> {
    let dimensions = encoder.dimensions();
    let texts: Vec<String> = documents.iter().map(embedding_text).collect();
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
    let batches: Vec<&[usize]> = order.chunks(EMBEDDING_BATCH_DOCUMENTS).collect();
    let next_batch = AtomicUsize::new(0);
    let values = Mutex::new(vec![0.0f32; texts.len() * dimensions]);
    let failure = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, batches.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let batch = next_batch.fetch_add(1, Ordering::Relaxed);
                    let Some(members) = batches.get(batch) else { return };
                    let inputs: Vec<&str> = members.iter().map(|&i| texts[i].as_str()).collect();
                    match encoder.encode(&inputs) {
                        Ok(rows) => {
                            let mut values = values.lock().unwrap_or_else(|e| e.into_inner());
                            for (row, &document) in rows.chunks_exact(dimensions).zip(members.iter()) {
                                values[document * dimensions..(document + 1) * dimensions].copy_from_slice(row);
                            }
                        }
                        Err(error) => {
                            failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(error);
                            // Make the other threads stop after their current batch.
                            next_batch.store(batches.len(), Ordering::Relaxed);
                            return;
                        }
                    }
                    progress(members.len());
                }
            });
        }
    });
    if let Some(error) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(error.into());
    }
    Ok(Vectors { dimensions, values: values.into_inner().unwrap_or_else(|e| e.into_inner()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedding_text_joins_title_and_text() {
        let document = |title: &str, text: &str| Document {
            id: "d".into(),
            title: title.into(),
            text: text.into(),
            modality: None,
            tags: Vec::new(),
        };
        assert_eq!(embedding_text(&document("Title", "Body.")), "Title Body.");
        assert_eq!(embedding_text(&document(" ", "Body.")), "Body.");
        assert_eq!(embedding_text(&document("Title", "")), "Title");
    }
}
