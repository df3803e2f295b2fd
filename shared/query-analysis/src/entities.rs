//! Entity extraction by explainable rules.
//!
//! Every rule proposes candidate spans with a type and a confidence; overlaps are then resolved
//! in one place (see [`resolve`]): the longest span wins, then the type earlier in
//! PERSON > ORGANIZATION > LOCATION > DATE > NUMBER > CONCEPT (the order of [`EntityType`]'s
//! `Ord`), then the earlier span, then the more confident rule. Rules run in three passes:
//!
//! 1. Lexicon and pattern rules, which recognise a span on its own (a known place, a date).
//! 2. Context rules, which type capitalised words no pass-1 rule has typed: a name after
//!    "in/at/from/near" is a LOCATION; a name followed by a number ("Apollo 11", "Boeing 747")
//!    is one CONCEPT, because the number designates the thing rather than counting anything.
//! 3. Every other content word (not a stop, question or request word) is a CONCEPT, as written.
//!    Words are not merged into compounds ("moon landing" gives "moon" and "landing"): a merge
//!    rule without a part-of-speech model would glue unrelated neighbours as often as compounds.
//!    Activity words stay concepts ("playing" in "robots playing soccer"): the activity is what
//!    the user is searching for, and the protocol's CONCEPT covers "a thing or activity".

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use mesh_protocol::agents::{Entity, EntityExtraction, EntityType};

use crate::RULES_METHOD;
use crate::lexicon::{
    AGO, FIRST_NAMES, HONORIFICS, KNOWN_PEOPLE, LOCATION_PREPOSITIONS, MONTH_ABBREVIATIONS, MONTH_NAMES,
    NON_ORGANIZATION_ACRONYMS, NUMBER_WORDS, ORGANIZATION_CONNECTORS, ORGANIZATION_HEADS, PERCENT_WORD, PLACES,
    RELATIVE_DAYS, RELATIVE_MODIFIERS, TIME_UNITS, VAGUE_COUNTS, WEEKDAYS, is_function_word,
};
use crate::tokens::Words;

// How sure each rule is, from 0 to 1. Lexicon matches of whole phrases are surest; rules that
// guess from capitalisation or position alone are least sure; a bare content word is a coin flip
// between naming the subject and being filler.
const KNOWN_PERSON_CONFIDENCE: f64 = 0.95;
const TITLED_PERSON_CONFIDENCE: f64 = 0.9;
const FIRST_NAME_PERSON_CONFIDENCE: f64 = 0.8;
const ORGANIZATION_HEAD_CONFIDENCE: f64 = 0.85;
const ACRONYM_ORGANIZATION_CONFIDENCE: f64 = 0.65;
const CAPITALIZED_KNOWN_PLACE_CONFIDENCE: f64 = 0.9;
/// Lowercase place names are as often other words ("china" plates, "plaster of paris").
const LOWERCASE_KNOWN_PLACE_CONFIDENCE: f64 = 0.6;
const PLACE_AFTER_PREPOSITION_CONFIDENCE: f64 = 0.55;
const ISO_DATE_CONFIDENCE: f64 = 0.95;
const MONTH_WITH_DAY_OR_YEAR_CONFIDENCE: f64 = 0.9;
/// A capitalised month alone could be a name ("March of the Penguins").
const MONTH_ALONE_CONFIDENCE: f64 = 0.6;
const RELATIVE_DAY_CONFIDENCE: f64 = 0.9;
const RELATIVE_PHRASE_CONFIDENCE: f64 = 0.85;
const WEEKDAY_CONFIDENCE: f64 = 0.85;
const DECADE_CONFIDENCE: f64 = 0.85;
/// A four-digit number in the year range may be a count ("1500 steps").
const YEAR_CONFIDENCE: f64 = 0.7;
const NUMERAL_CONFIDENCE: f64 = 0.95;
/// "one" is often a pronoun ("the one with robots").
const NUMBER_WORD_CONFIDENCE: f64 = 0.8;
const DESIGNATION_CONFIDENCE: f64 = 0.6;
const CONCEPT_CONFIDENCE: f64 = 0.5;

/// Name words after an honorific ("Dr. Jane Ann Smith").
const MAX_NAME_WORDS_AFTER_HONORIFIC: usize = 3;
/// Surname words after a known first name ("Maria Garcia Lopez").
const MAX_NAME_WORDS_AFTER_FIRST_NAME: usize = 2;
/// Capitalised words before an organisation head ("Manchester United FC").
const MAX_NAME_WORDS_BEFORE_ORGANIZATION_HEAD: usize = 4;
/// Capitalised words after "of" in an organisation name ("University of Cape Town").
const MAX_NAME_WORDS_AFTER_ORGANIZATION_CONNECTOR: usize = 3;
/// Capitalised words of a place after a preposition ("in Santa Cruz de Tenerife" stops at "de").
const MAX_PLACE_WORDS_AFTER_PREPOSITION: usize = 3;
/// Lengths of an all-caps word read as an acronym: one letter is a pronoun or initial, longer
/// than six is shouting.
const ACRONYM_LEN_CHARS: RangeInclusive<usize> = 2..=6;
/// The years a standalone four-digit number is read as; later numbers are counts or models.
const YEAR_RANGE: RangeInclusive<u32> = 1000..=2099;
const YEAR_DIGITS: usize = 4;
const MONTH_RANGE: RangeInclusive<u32> = 1..=12;
const DAY_OF_MONTH_RANGE: RangeInclusive<u32> = 1..=31;
/// A day of the month has at most two digits ("3", "03", "31").
const MAX_DAY_DIGITS: usize = 2;
/// ISO 8601 calendar dates: four-digit year, two-digit month and day.
const ISO_DATE_PART_DIGITS: [usize; 3] = [YEAR_DIGITS, 2, 2];
/// A decade without its century: "90s".
const SHORT_DECADE_DIGITS: usize = 2;
const ORDINAL_SUFFIXES: &[&str] = &["st", "nd", "rd", "th"];
/// Punctuation allowed between a month and its day or year ("Jan. 5", "March 3, 2024").
const MONTH_GAP_PUNCTUATION: &[char] = &['.', ','];
/// Punctuation allowed between an honorific and the name ("Dr. Smith").
const HONORIFIC_GAP_PUNCTUATION: &[char] = &['.'];
/// Shorter words are initials or typos more often than concepts.
const MIN_CONCEPT_CHARS: usize = 2;
/// The most frequent types [`EntityExtraction::dominant_types`] lists.
const MAX_DOMINANT_TYPES: usize = 3;

/// A proposed entity, in character offsets, before overlaps are resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Candidate {
    entity_type: EntityType,
    start: usize,
    end: usize,
    confidence: f64,
}

impl Candidate {
    fn len(&self) -> usize {
        self.end - self.start
    }
}

/// A rule that recognises a span starting at token `i` on its own.
type Rule = fn(&Words, usize) -> Option<Candidate>;

/// A rule that types capitalised words no [`Rule`] has typed; `typed[i]` tells whether token `i`
/// is inside a candidate already.
type ContextRule = fn(&Words, usize, &[bool]) -> Option<Candidate>;

const RULES: &[Rule] = &[
    known_person,
    titled_person,
    first_name_person,
    headed_organization,
    acronym_organization,
    known_place,
    date,
    number,
];

const CONTEXT_RULES: &[ContextRule] = &[place_after_preposition, designation];

/// Finds the people, organisations, places, dates, numbers and concepts in a query, with
/// character offsets (`text.chars().skip(start).take(end - start)` is the entity's text) and a
/// confidence per rule. Never panics, whatever the input. See the module docs for the rules.
pub fn extract_entities(text: &str) -> EntityExtraction {
    extract(&Words::new(text))
}

pub(crate) fn extract(words: &Words) -> EntityExtraction {
    let mut candidates: Vec<Candidate> =
        (0..words.len()).flat_map(|i| RULES.iter().filter_map(move |rule| rule(words, i))).collect();
    let typed = typed_tokens(words, &candidates);
    let typed = typed.as_slice();
    candidates
        .extend((0..words.len()).flat_map(|i| CONTEXT_RULES.iter().filter_map(move |rule| rule(words, i, typed))));
    candidates.extend((0..words.len()).filter_map(|i| concept(words, i)));

    let entities: Vec<Entity> = resolve(candidates, words.chars.len())
        .into_iter()
        .map(|candidate| Entity {
            text: words.text(candidate.start, candidate.end),
            entity_type: candidate.entity_type,
            start: candidate.start,
            end: candidate.end,
            confidence: candidate.confidence,
        })
        .collect();
    summarize_entities(entities, RULES_METHOD)
}

/// Wraps entities found by `method` (`rules`, `llm`) into an extraction with its count and
/// dominant types, so every extractor reports them the same way.
pub fn summarize_entities(entities: Vec<Entity>, method: &str) -> EntityExtraction {
    EntityExtraction {
        entity_count: entities.len(),
        dominant_types: dominant_types(&entities),
        entities,
        method: method.to_owned(),
    }
}

/// Keeps the best non-overlapping candidates (see the module docs for the order), sorted by start.
fn resolve(mut candidates: Vec<Candidate>, char_count: usize) -> Vec<Candidate> {
    candidates.sort_by(|a, b| {
        b.len()
            .cmp(&a.len())
            .then(a.entity_type.cmp(&b.entity_type))
            .then(a.start.cmp(&b.start))
            .then(b.confidence.total_cmp(&a.confidence))
    });
    let mut occupied = vec![false; char_count];
    let mut kept = Vec::new();
    for candidate in candidates {
        let span = &mut occupied[candidate.start..candidate.end];
        if span.iter().all(|taken| !taken) {
            span.fill(true);
            kept.push(candidate);
        }
    }
    kept.sort_by_key(|candidate| candidate.start);
    kept
}

/// The most frequent types, most frequent first, ties in [`EntityType`] order, at most
/// [`MAX_DOMINANT_TYPES`] so the list stays a summary.
fn dominant_types(entities: &[Entity]) -> Vec<EntityType> {
    let mut counts: BTreeMap<EntityType, usize> = BTreeMap::new();
    for entity in entities {
        *counts.entry(entity.entity_type).or_default() += 1;
    }
    let mut by_count: Vec<(EntityType, usize)> = counts.into_iter().collect();
    // Stable, and the map iterates in type order: ties stay in type order.
    by_count.sort_by_key(|(_, count)| Reverse(*count));
    by_count.into_iter().take(MAX_DOMINANT_TYPES).map(|(entity_type, _)| entity_type).collect()
}

/// Which tokens lie inside some candidate. Candidates span whole tokens, so a token is inside one
/// when its first character is.
fn typed_tokens(words: &Words, candidates: &[Candidate]) -> Vec<bool> {
    let mut covered = vec![false; words.chars.len()];
    for candidate in candidates {
        covered[candidate.start..candidate.end].fill(true);
    }
    words.tokens.iter().map(|token| covered[token.start]).collect()
}

/// The candidate covering tokens `first .. first + len`.
fn span(words: &Words, first: usize, len: usize, entity_type: EntityType, confidence: f64) -> Candidate {
    Candidate { entity_type, start: words.tokens[first].start, end: words.tokens[first + len - 1].end, confidence }
}

/// How many tokens from `from` on (at most `max`) are name words accepted by `accept`, each
/// separated from the previous by whitespace.
fn name_run(words: &Words, from: usize, max: usize, accept: impl Fn(usize) -> bool) -> usize {
    (0..max)
        .take_while(|&k| {
            let i = from + k;
            i < words.len() && (k == 0 || words.spaced(i - 1)) && words.is_name_word(i) && accept(i)
        })
        .count()
}

// --- PERSON ---

/// A well-known person: "Neil Armstrong", "Einstein".
fn known_person(words: &Words, i: usize) -> Option<Candidate> {
    let len = words.phrase_at(i, KNOWN_PEOPLE)?;
    Some(span(words, i, len, EntityType::Person, KNOWN_PERSON_CONFIDENCE))
}

/// An honorific and the capitalised name after it: "Dr. Jane Smith", "President Obama".
fn titled_person(words: &Words, i: usize) -> Option<Candidate> {
    if !HONORIFICS.contains(&words.folded[i].as_str()) || !words.gap_allows(i, HONORIFIC_GAP_PUNCTUATION) {
        return None;
    }
    let names = name_run(words, i + 1, MAX_NAME_WORDS_AFTER_HONORIFIC, |_| true);
    (names > 0).then(|| span(words, i, 1 + names, EntityType::Person, TITLED_PERSON_CONFIDENCE))
}

/// A capitalised known first name and the capitalised surname after it: "Jane Smith".
fn first_name_person(words: &Words, i: usize) -> Option<Candidate> {
    if !words.is_capitalized(i) || !FIRST_NAMES.contains(&words.folded[i].as_str()) || !words.spaced(i) {
        return None;
    }
    let names = name_run(words, i + 1, MAX_NAME_WORDS_AFTER_FIRST_NAME, |_| true);
    (names > 0).then(|| span(words, i, 1 + names, EntityType::Person, FIRST_NAME_PERSON_CONFIDENCE))
}

// --- ORGANIZATION ---

/// A capitalised organisation head word with the name around it: capitalised words before it
/// ("Stanford University", "Acme Inc") and/or "of"/"for" and capitalised words after it
/// ("University of Tokyo"). The head alone ("Club") names nothing in particular.
fn headed_organization(words: &Words, i: usize) -> Option<Candidate> {
    if !words.is_capitalized(i) || !ORGANIZATION_HEADS.contains(&words.folded[i].as_str()) {
        return None;
    }
    let before = (1..=MAX_NAME_WORDS_BEFORE_ORGANIZATION_HEAD.min(i))
        .take_while(|&k| words.spaced(i - k) && words.is_name_word(i - k))
        .count();
    let connected =
        words.spaced(i) && ORGANIZATION_CONNECTORS.contains(&words.folded[i + 1].as_str()) && words.spaced(i + 1);
    let after =
        if connected { name_run(words, i + 2, MAX_NAME_WORDS_AFTER_ORGANIZATION_CONNECTOR, |_| true) } else { 0 };
    // The connector counts only with a name after it.
    let after_len = if after > 0 { after + 1 } else { 0 };
    (before + after_len > 0).then(|| {
        span(words, i - before, before + 1 + after_len, EntityType::Organization, ORGANIZATION_HEAD_CONFIDENCE)
    })
}

/// An all-caps word of 2-6 letters: "NASA", "MIT", "BBC". Not a function word ("IT", "US"), a
/// place ("USA", "UK"), a common non-organisation acronym ("AI", "TV"), nor part of a query
/// written entirely in capitals.
fn acronym_organization(words: &Words, i: usize) -> Option<Candidate> {
    let text = &words.tokens[i].text;
    let folded = words.folded[i].as_str();
    let is_acronym = words.has_lowercase
        && ACRONYM_LEN_CHARS.contains(&text.chars().count())
        && text.chars().all(|c| c.is_alphabetic() && c.is_uppercase())
        && !is_function_word(folded)
        && !NON_ORGANIZATION_ACRONYMS.contains(&folded)
        && words.phrase_at(i, PLACES).is_none();
    is_acronym.then(|| span(words, i, 1, EntityType::Organization, ACRONYM_ORGANIZATION_CONFIDENCE))
}

// --- LOCATION ---

/// A gazetteer entry: a country, major city or natural feature, in any case and with or without
/// its accents ("São Paulo", "Sao Paulo").
fn known_place(words: &Words, i: usize) -> Option<Candidate> {
    let len = words.phrase_at(i, PLACES)?;
    let confidence =
        if words.is_capitalized(i) { CAPITALIZED_KNOWN_PLACE_CONFIDENCE } else { LOWERCASE_KNOWN_PLACE_CONFIDENCE };
    Some(span(words, i, len, EntityType::Location, confidence))
}

/// Capitalised words after "in/at/from/near" that no other rule typed: "from Springfield".
fn place_after_preposition(words: &Words, i: usize, typed: &[bool]) -> Option<Candidate> {
    if !LOCATION_PREPOSITIONS.contains(&words.folded[i].as_str()) || !words.spaced(i) {
        return None;
    }
    let names = name_run(words, i + 1, MAX_PLACE_WORDS_AFTER_PREPOSITION, |k| !typed[k]);
    (names > 0).then(|| span(words, i + 1, names, EntityType::Location, PLACE_AFTER_PREPOSITION_CONFIDENCE))
}

// --- DATE ---

/// Dates: "3 years ago", "last week", "3 March 2024", "July 1969", "2024-03-15", "1990s", "1969",
/// "Monday", "yesterday". The longer patterns are tried first.
fn date(words: &Words, i: usize) -> Option<Candidate> {
    time_ago(words, i).or_else(|| relative_phrase(words, i)).or_else(|| month_date(words, i)).or_else(|| {
        let folded = words.folded[i].as_str();
        let confidence = if is_iso_date(folded) {
            ISO_DATE_CONFIDENCE
        } else if is_decade(folded) {
            DECADE_CONFIDENCE
        } else if is_year(folded) {
            YEAR_CONFIDENCE
        } else if WEEKDAYS.contains(&folded) {
            WEEKDAY_CONFIDENCE
        } else if RELATIVE_DAYS.contains(&folded) {
            RELATIVE_DAY_CONFIDENCE
        } else {
            return None;
        };
        Some(span(words, i, 1, EntityType::Date, confidence))
    })
}

/// A count, a time unit and "ago": "3 days ago", "two years ago", "few weeks ago".
fn time_ago(words: &Words, i: usize) -> Option<Candidate> {
    let count = words.folded[i].as_str();
    let is_count = ascii_number(count).is_some() || is_number_words(count) || VAGUE_COUNTS.contains(&count);
    let matches = is_count
        && words.spaced(i)
        && words.spaced(i + 1)
        && TIME_UNITS.contains(&words.folded[i + 1].as_str())
        && words.folded[i + 2] == AGO;
    matches.then(|| span(words, i, 3, EntityType::Date, RELATIVE_PHRASE_CONFIDENCE))
}

/// "last/next/this/past" and a time unit, weekday or month: "last week", "next Friday".
fn relative_phrase(words: &Words, i: usize) -> Option<Candidate> {
    if !RELATIVE_MODIFIERS.contains(&words.folded[i].as_str()) || !words.spaced(i) {
        return None;
    }
    let next = words.folded[i + 1].as_str();
    let is_time = [TIME_UNITS, WEEKDAYS, MONTH_NAMES].iter().any(|list| list.contains(&next));
    is_time.then(|| span(words, i, 2, EntityType::Date, RELATIVE_PHRASE_CONFIDENCE))
}

/// A month with an optional day before or after it and an optional year after it: "3 March 2024",
/// "March 3, 2024", "July 1969", "Jan. 5". A month alone is a date only as a capitalised full name.
fn month_date(words: &Words, i: usize) -> Option<Candidate> {
    let month = words.folded[i].as_str();
    let is_full_name = MONTH_NAMES.contains(&month);
    if !is_full_name && !MONTH_ABBREVIATIONS.contains(&month) {
        return None;
    }
    let day_before = i > 0 && words.spaced(i - 1) && is_day(&words.folded[i - 1]);
    let first = if day_before { i - 1 } else { i };
    let mut last = i;
    if !day_before && words.gap_allows(i, MONTH_GAP_PUNCTUATION) && is_day(&words.folded[i + 1]) {
        last += 1;
    }
    if words.gap_allows(last, MONTH_GAP_PUNCTUATION) && is_year(&words.folded[last + 1]) {
        last += 1;
    }
    let confidence = if first < last {
        MONTH_WITH_DAY_OR_YEAR_CONFIDENCE
    } else if is_full_name && words.is_capitalized(i) {
        MONTH_ALONE_CONFIDENCE
    } else {
        return None;
    };
    Some(span(words, first, last - first + 1, EntityType::Date, confidence))
}

/// The value of a run of ASCII digits short enough to fit (years, days, small counts).
fn ascii_number(word: &str) -> Option<u32> {
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

fn is_year(word: &str) -> bool {
    word.len() == YEAR_DIGITS && ascii_number(word).is_some_and(|year| YEAR_RANGE.contains(&year))
}

/// "1990s" or "90s": a year or two digits ending in 0, then "s".
fn is_decade(word: &str) -> bool {
    let Some(digits) = word.strip_suffix('s') else { return false };
    let ends_in_zero = digits.ends_with('0');
    ends_in_zero && (is_year(digits) || (digits.len() == SHORT_DECADE_DIGITS && ascii_number(digits).is_some()))
}

/// "2024-03-15" with a valid month and day.
fn is_iso_date(word: &str) -> bool {
    let parts: Vec<&str> = word.split('-').collect();
    let [year, month, day] = parts.as_slice() else { return false };
    let widths_match = [year, month, day].iter().zip(ISO_DATE_PART_DIGITS).all(|(part, digits)| part.len() == digits);
    widths_match
        && is_year(year)
        && ascii_number(month).is_some_and(|m| MONTH_RANGE.contains(&m))
        && ascii_number(day).is_some_and(|d| DAY_OF_MONTH_RANGE.contains(&d))
}

/// The digits of an ordinal ("3rd" gives "3").
fn ordinal_digits(word: &str) -> Option<&str> {
    let digits = ORDINAL_SUFFIXES.iter().find_map(|suffix| word.strip_suffix(suffix))?;
    ascii_number(digits).map(|_| digits)
}

/// A day of the month, plain or ordinal: "3", "03", "3rd", "31st".
fn is_day(word: &str) -> bool {
    let digits = ordinal_digits(word).unwrap_or(word);
    digits.len() <= MAX_DAY_DIGITS && ascii_number(digits).is_some_and(|day| DAY_OF_MONTH_RANGE.contains(&day))
}

// --- NUMBER ---

/// A numeral ("42", "3.5", "10,000", "3rd") or number words ("twenty-one", "two hundred"),
/// optionally followed by number words ("5 million") and a percent sign or word ("50%",
/// "fifty percent").
fn number(words: &Words, i: usize) -> Option<Candidate> {
    let first = words.folded[i].as_str();
    let confidence = if is_numeral(first) || ordinal_digits(first).is_some() {
        NUMERAL_CONFIDENCE
    } else if is_number_words(first) {
        NUMBER_WORD_CONFIDENCE
    } else {
        return None;
    };
    let mut last = i;
    while words.spaced(last) && is_number_words(&words.folded[last + 1]) {
        last += 1;
    }
    let mut candidate = span(words, i, last - i + 1, EntityType::Number, confidence);
    if words.chars.get(candidate.end) == Some(&'%') {
        candidate.end += 1;
    } else if words.spaced(last) && words.folded[last + 1] == PERCENT_WORD {
        candidate.end = words.tokens[last + 1].end;
    }
    Some(candidate)
}

/// Digits with at most one decimal point and any thousands separators the tokenizer joined.
fn is_numeral(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_digit())
        && word.ends_with(|c: char| c.is_ascii_digit())
        && word.chars().all(|c| c.is_ascii_digit() || c == '.' || c == ',')
        && word.matches('.').count() <= 1
}

/// A number word, or several joined by hyphens ("twenty-one").
fn is_number_words(word: &str) -> bool {
    word.split('-').all(|part| NUMBER_WORDS.contains(&part))
}

// --- CONCEPT ---

/// An untyped capitalised name followed by an integer that is not a year: "Apollo 11",
/// "Boeing 747". One concept, because the number designates the thing rather than counting.
fn designation(words: &Words, i: usize, typed: &[bool]) -> Option<Candidate> {
    let is_designation = !typed[i]
        && words.is_name_word(i)
        && words.spaced(i)
        && words.folded[i + 1].len() < YEAR_DIGITS
        && ascii_number(&words.folded[i + 1]).is_some();
    is_designation.then(|| span(words, i, 2, EntityType::Concept, DESIGNATION_CONFIDENCE))
}

/// Any content word: not a stop, question or request word, at least two characters, with a letter.
fn concept(words: &Words, i: usize) -> Option<Candidate> {
    let folded = words.folded[i].as_str();
    let is_content = !is_function_word(folded)
        && folded.chars().count() >= MIN_CONCEPT_CHARS
        && folded.chars().any(char::is_alphabetic);
    is_content.then(|| span(words, i, 1, EntityType::Concept, CONCEPT_CONFIDENCE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use EntityType::{Concept, Date, Location, Number, Organization, Person};
    use proptest::prelude::*;

    fn found(text: &str) -> Vec<(String, EntityType)> {
        extract_entities(text).entities.into_iter().map(|entity| (entity.text, entity.entity_type)).collect()
    }

    fn pairs(expected: &[(&str, EntityType)]) -> Vec<(String, EntityType)> {
        expected.iter().map(|(text, entity_type)| ((*text).to_owned(), *entity_type)).collect()
    }

    #[track_caller]
    fn assert_found(text: &str, expected: &[(&str, EntityType)]) {
        assert_eq!(found(text), pairs(expected), "entities of {text:?}");
    }

    #[track_caller]
    fn assert_contains(text: &str, expected: (&str, EntityType)) {
        let all = found(text);
        assert!(all.contains(&(expected.0.to_owned(), expected.1)), "{expected:?} not among {all:?} for {text:?}");
    }

    #[test]
    fn seed_example_gives_concepts_and_skips_request_words() {
        assert_found(
            "show me robots playing soccer",
            &[("robots", Concept), ("playing", Concept), ("soccer", Concept)],
        );
    }

    #[test]
    fn apollo_11_is_one_designation_concept_and_the_month_year_a_date() {
        assert_found(
            "Apollo 11 moon landing in July 1969",
            &[("Apollo 11", Concept), ("moon", Concept), ("landing", Concept), ("July 1969", Date)],
        );
    }

    #[test]
    fn marathon_in_tokyo_on_a_full_date() {
        assert_found(
            "Marathon in Tokyo on 3 March 2024",
            &[("Marathon", Concept), ("Tokyo", Location), ("3 March 2024", Date)],
        );
    }

    #[test]
    fn titled_person_from_an_acronym_organization() {
        assert_found("Dr. Jane Smith from MIT", &[("Dr. Jane Smith", Person), ("MIT", Organization)]);
    }

    #[test]
    fn dates_by_pattern() {
        for (text, date) in [
            ("news from 2024-03-15", "2024-03-15"),
            ("march of robots on March 3, 2024", "March 3, 2024"),
            ("launch on Jan. 5 2021", "Jan. 5 2021"),
            ("the 3rd of May", "May"),
            ("music of the 1990s", "1990s"),
            ("90s fashion", "90s"),
            ("landing in 1969", "1969"),
            ("what happened on Monday", "Monday"),
            ("goals scored yesterday", "yesterday"),
            ("storms last week", "last week"),
            ("match next Friday", "next Friday"),
            ("built two years ago", "two years ago"),
            ("seen 3 days ago", "3 days ago"),
            ("a few weeks ago", "few weeks ago"),
        ] {
            assert_contains(text, (date, Date));
        }
    }

    #[test]
    fn non_dates_are_not_dates() {
        // Lowercase month names alone are verbs; invalid ISO dates and years out of range are not dates.
        for text in ["robots march forward", "you may see", "2024-13-45 error", "population 3000", "jan"] {
            assert!(!found(text).iter().any(|(_, t)| *t == Date), "{text:?} gave {:?}", found(text));
        }
    }

    #[test]
    fn numbers_by_pattern() {
        for (text, number) in [
            ("42 robots", "42"),
            ("pi is 3.14", "3.14"),
            ("10,000 steps", "10,000"),
            ("finished 3rd", "3rd"),
            ("twenty-one guns", "twenty-one"),
            ("two hundred dancers", "two hundred"),
            ("5 million views", "5 million"),
            ("a 50% drop", "50%"),
            ("fifty percent off", "fifty percent"),
        ] {
            assert_contains(text, (number, Number));
        }
    }

    #[test]
    fn people_by_lexicon_title_and_first_name() {
        assert_contains("Neil Armstrong on the moon", ("Neil Armstrong", Person));
        assert_contains("marie curie lab notes", ("marie curie", Person));
        assert_contains("Einstein's theory", ("Einstein", Person));
        assert_contains("speech by President Obama", ("President Obama", Person));
        assert_contains("interview with Sarah Connor", ("Sarah Connor", Person));
        // A first name needs a capitalised surname; a lowercase one is just a word.
        assert_found("jane smith", &[("jane", Concept), ("smith", Concept)]);
    }

    #[test]
    fn organizations_by_head_word_and_acronym() {
        assert_contains("research at Stanford University", ("Stanford University", Organization));
        assert_contains("lectures University of Tokyo", ("University of Tokyo", Organization));
        assert_contains(
            "Massachusetts Institute of Technology labs",
            ("Massachusetts Institute of Technology", Organization),
        );
        assert_contains("Manchester United FC highlights", ("Manchester United FC", Organization));
        assert_contains("Acme Inc. earnings", ("Acme Inc", Organization));
        for acronym in ["NASA", "FIFA", "BBC"] {
            assert_contains(&format!("{acronym} footage"), (acronym, Organization));
        }
        // A head word alone names nothing in particular.
        assert_found("join a Club", &[("join", Concept), ("Club", Concept)]);
    }

    #[test]
    fn acronym_rule_skips_stop_words_places_common_acronyms_and_shouting() {
        assert_found("IT is US", &[]);
        assert_found("robots in the USA", &[("robots", Concept), ("USA", Location)]);
        assert_found("AI robots", &[("AI", Concept), ("robots", Concept)]);
        assert_found("ROBOTS PLAYING SOCCER", &[("ROBOTS", Concept), ("PLAYING", Concept), ("SOCCER", Concept)]);
    }

    #[test]
    fn places_from_the_gazetteer_in_any_case_and_accent_form() {
        for place in [
            "Tokyo",
            "Nairobi",
            "Lisbon",
            "Montreal",
            "São Paulo",
            "Sao Paulo",
            "Zürich",
            "Paris",
            "London",
            "New York",
        ] {
            assert_found(&format!("streets of {place}"), &[("streets", Concept), (place, Location)]);
        }
        assert_contains("climbing Mount Everest", ("Mount Everest", Location));
        assert_contains("Sa\u{0303}o Paulo traffic", ("Sa\u{0303}o Paulo", Location));
        let lowercase = extract_entities("paris at night");
        assert_eq!(lowercase.entities[0].confidence, LOWERCASE_KNOWN_PLACE_CONFIDENCE);
    }

    #[test]
    fn capitalized_words_after_place_prepositions_are_places_unless_typed() {
        assert_contains("parade in Springfield", ("Springfield", Location));
        assert_contains("flights from Santa Cruz", ("Santa Cruz", Location));
        // Already typed by another rule: the other rule's type stands.
        assert_found("launch in July", &[("launch", Concept), ("July", Date)]);
        assert_found("robots from MIT", &[("robots", Concept), ("MIT", Organization)]);
        // Not capitalised: a concept.
        assert_found("near springfield", &[("springfield", Concept)]);
    }

    #[test]
    fn designations_exclude_years_and_typed_names() {
        assert_contains("Boeing 747 takeoff", ("Boeing 747", Concept));
        assert_found("Tokyo 2020 opening", &[("Tokyo", Location), ("2020", Date), ("opening", Concept)]);
    }

    #[test]
    fn concepts_skip_function_words_and_single_letters() {
        assert_found("what is a x ray?", &[("ray", Concept)]);
        assert_found("find videos of 東京 at night", &[("東京", Concept), ("night", Concept)]);
    }

    #[test]
    fn overlaps_go_to_the_longest_span_then_the_type_priority() {
        // "Marie Curie" is both a known person and a first name with surname: one entity.
        assert_found("Marie Curie", &[("Marie Curie", Person)]);
        let resolved = resolve(
            vec![
                Candidate { entity_type: Concept, start: 0, end: 5, confidence: 0.5 },
                Candidate { entity_type: Location, start: 0, end: 5, confidence: 0.1 },
                Candidate { entity_type: Number, start: 3, end: 9, confidence: 0.9 },
                Candidate { entity_type: Person, start: 8, end: 10, confidence: 0.9 },
            ],
            10,
        );
        assert_eq!(resolved.iter().map(|c| (c.entity_type, c.start)).collect::<Vec<_>>(), [(Number, 3)]);
        assert_eq!(
            resolve(
                vec![
                    Candidate { entity_type: Concept, start: 0, end: 5, confidence: 0.5 },
                    Candidate { entity_type: Location, start: 0, end: 5, confidence: 0.1 },
                ],
                5
            )[0]
            .entity_type,
            Location
        );
    }

    #[test]
    fn dominant_types_by_frequency_then_type_order_at_most_three() {
        let extraction = extract_entities("Dr. Jane Smith from MIT filmed robots in Paris on Monday with 3 drones");
        assert_eq!(extraction.entity_count, extraction.entities.len());
        assert_eq!(extraction.dominant_types, [Concept, Person, Organization]);
        assert_eq!(extraction.method, "rules");
        assert_eq!(extract_entities("").dominant_types, []);
    }

    #[test]
    fn confidences_reflect_rule_strength() {
        let extraction = extract_entities("Neil Armstrong in 1969 with robots");
        let confidence = |text: &str| extraction.entities.iter().find(|e| e.text == text).map(|e| e.confidence);
        assert_eq!(confidence("Neil Armstrong"), Some(KNOWN_PERSON_CONFIDENCE));
        assert_eq!(confidence("1969"), Some(YEAR_CONFIDENCE));
        assert_eq!(confidence("robots"), Some(CONCEPT_CONFIDENCE));
    }

    #[test]
    fn odd_inputs_never_panic() {
        for text in [
            "",
            "   ",
            "?!.,;",
            "🚀🎉 👩‍👩‍👧",
            "e\u{0301}\u{0301}",
            "東京タワー",
            "São Paulo",
            "in",
            "3",
            "March",
            "Dr.",
            "last",
        ] {
            let extraction = extract_entities(text);
            assert_eq!(extraction.entity_count, extraction.entities.len(), "{text:?}");
        }
    }

    /// Pieces the rules look for, so the property test reaches them rather than only noise.
    const QUERY_PIECES: &[&str] = &[
        "Dr.",
        "Jane",
        "Smith",
        "MIT",
        "in",
        "São",
        "Paulo",
        "Sa\u{0303}o",
        "March",
        "3",
        "2024",
        "1990s",
        "University",
        "of",
        "last",
        "week",
        "two",
        "years",
        "ago",
        "50%",
        "Apollo",
        "11",
        "Tokyo's",
        "🚀",
        "東京",
        ",",
        ".",
        "-",
        "'s",
    ];
    const GAPS: &[&str] = &[" ", "", ", "];

    /// Text made mostly of [`QUERY_PIECES`], with some arbitrary characters mixed in.
    fn query_like() -> impl Strategy<Value = String> {
        let piece = prop_oneof![prop::sample::select(QUERY_PIECES).prop_map(str::to_owned), "\\PC{0,4}"];
        prop::collection::vec((piece, prop::sample::select(GAPS)), 0..12)
            .prop_map(|parts| parts.into_iter().map(|(piece, gap)| format!("{piece}{gap}")).collect())
    }

    fn check_invariants(text: &str) -> Result<(), TestCaseError> {
        let chars: Vec<char> = text.chars().collect();
        let extraction = extract_entities(text);
        prop_assert_eq!(extraction.entity_count, extraction.entities.len());
        let mut previous_end = 0;
        for entity in &extraction.entities {
            prop_assert!(previous_end <= entity.start, "overlap or disorder at {:?}", entity);
            prop_assert!(entity.start < entity.end && entity.end <= chars.len(), "out of bounds: {:?}", entity);
            let expected: String = text.chars().skip(entity.start).take(entity.end - entity.start).collect();
            prop_assert_eq!(&entity.text, &expected);
            prop_assert!((0.0..=1.0).contains(&entity.confidence));
            previous_end = entity.end;
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn offsets_hold_for_arbitrary_strings(text in any::<String>()) {
            check_invariants(&text)?;
        }

        #[test]
        fn offsets_hold_for_query_like_strings(text in query_like()) {
            check_invariants(&text)?;
        }
    }
}
