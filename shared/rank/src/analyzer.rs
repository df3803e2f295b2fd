//! The English analyzer: what a text becomes before it is indexed or matched.

pub use tantivy::tokenizer::TextAnalyzer;
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
};

/// Tokens longer than this are dropped (URLs, hashes): they never match a query word.
pub const TOKEN_CHARS_MAX: usize = 40;

/// Lower-cased, ASCII-folded words without English stop words, stemmed (Snowball).
pub fn english_analyzer() -> TextAnalyzer {
    let builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(TOKEN_CHARS_MAX))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter);
    match StopWordFilter::new(Language::English) {
        Some(stop_words) => builder.filter(stop_words).filter(Stemmer::new(Language::English)).build(),
        None => builder.filter(Stemmer::new(Language::English)).build(),
    }
}

/// The analysed terms of `text`, in order, with identifiers split into their words first
/// (`currency_convert`, `currency-convert` and `CurrencyConvert` give `currenc`, `convert`), since
/// agent and skill names are written as identifiers and asked for in words.
pub fn terms(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let words = split_identifiers(text);
    let mut stream = analyzer.token_stream(&words);
    let mut terms = Vec::new();
    stream.process(&mut |token| terms.push(token.text.clone()));
    terms
}

/// `text` with `_` and `-` as spaces and a space at each lower-to-upper case change.
fn split_identifiers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut previous_lower = false;
    for c in text.chars() {
        match c {
            '_' | '-' => {
                out.push(' ');
                previous_lower = false;
            }
            c if c.is_uppercase() && previous_lower => {
                out.push(' ');
                out.push(c);
                previous_lower = false;
            }
            c => {
                out.push(c);
                previous_lower = c.is_lowercase() || c.is_ascii_digit();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn analysed(text: &str) -> Vec<String> {
        terms(&mut english_analyzer(), text)
    }

    #[test]
    fn identifiers_in_any_style_give_the_words_a_sentence_gives() {
        let words = analysed("convert currencies");
        assert_eq!(words, ["convert", "currenc"]);
        for identifier in ["convert_currencies", "convert-currencies", "ConvertCurrencies", "convertCurrencies"] {
            assert_eq!(analysed(identifier), words, "{identifier}");
        }
    }

    #[test]
    fn stop_words_go_long_tokens_go_and_accents_fold() {
        assert_eq!(analysed("The café is on a road"), ["cafe", "road"]);
        let long = "x".repeat(TOKEN_CHARS_MAX + 1);
        assert_eq!(analysed(&format!("keep {long}")), ["keep"]);
    }

    #[test]
    fn acronyms_stay_one_word() {
        assert_eq!(analysed("HTTP API"), ["http", "api"]);
    }
}
