//! Documents to search, read from JSON Lines in the BEIR layout (`{"_id","title","text",...}`)
//! plus the optional fields of the bundled catalogue (`modality`, `tags`).

use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::error::SearchError;

/// The catalogue `up` serves on a fresh machine: a few hundred media items written for this project.
pub const BUNDLED_SAMPLE_JSONL: &str = include_str!("../corpus/sample.jsonl");

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modality: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// Reads one document per non-blank line; the first bad line fails the whole read, naming it.
pub fn read_jsonl(reader: impl BufRead) -> Result<Vec<Document>, SearchError> {
    let mut documents = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line_number = index + 1;
        let line = line.map_err(|e| SearchError::Corpus { line: line_number, reason: e.to_string() })?;
        if line.trim().is_empty() {
            continue;
        }
        let document: Document = serde_json::from_str(&line)
            .map_err(|e| SearchError::Corpus { line: line_number, reason: e.to_string() })?;
        if document.id.is_empty() {
            return Err(SearchError::Corpus { line: line_number, reason: "empty _id".into() });
        }
        documents.push(document);
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_beir_lines_and_our_extra_fields() {
        let jsonl = "{\"_id\":\"1\",\"title\":\"T\",\"text\":\"body\",\"metadata\":{}}\n\n{\"_id\":\"2\",\"text\":\"x\",\"modality\":\"video\",\"tags\":[\"a\"]}\n";
        let docs = read_jsonl(jsonl.as_bytes()).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!((docs[1].modality.as_deref(), docs[1].tags.as_slice()), (Some("video"), &["a".to_string()][..]));
    }

    #[test]
    fn a_bad_line_is_named() {
        let err = read_jsonl("{\"_id\":\"1\"}\nnot json\n".as_bytes()).unwrap_err();
        assert!(matches!(err, SearchError::Corpus { line: 2, .. }), "{err}");
        let err = read_jsonl("{\"_id\":\"\"}\n".as_bytes()).unwrap_err();
        assert!(err.to_string().contains("empty _id"));
    }

    #[test]
    fn the_bundled_sample_parses_with_unique_ids() {
        let docs = read_jsonl(BUNDLED_SAMPLE_JSONL.as_bytes()).unwrap();
        assert!(docs.len() >= 200, "{} documents", docs.len());
        let mut ids: Vec<_> = docs.iter().map(|d| d.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), docs.len());
    }
}
