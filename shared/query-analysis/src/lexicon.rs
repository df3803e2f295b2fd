//! The small word lists every rule is built on, and the folding that makes lookups forgiving.
//!
//! Every entry is stored *folded* (see [`fold`]): lowercase, without diacritics, words separated by
//! one space. Lookups fold the query's tokens the same way, so "Zürich", "zurich" and "ZURICH" all
//! find `zurich`. The lists are deliberately modest: they cover what search queries usually name,
//! and everything they miss still falls through to a weaker, more general rule (a capitalised word
//! after "in" is a place, any other content word is a concept).

/// Lowercases `word`, drops combining marks and folds common Latin diacritics to their base letter.
///
/// Why: queries spell the same name with and without accents ("São Paulo", "Sao Paulo"), in
/// precomposed or decomposed form ("ã" or "a" + U+0303); folding both sides of a lookup lets one
/// lexicon entry match all of them without a Unicode normalisation dependency.
pub(crate) fn fold(word: &str) -> String {
    word.chars().flat_map(char::to_lowercase).filter(|c| !is_combining_mark(*c)).map(fold_latin_diacritic).collect()
}

/// True for the combining-mark blocks that decorate Latin, Greek and Cyrillic letters.
///
/// They are part of the word they follow (the tokenizer keeps them inside it) but carry no
/// meaning for a lookup (folding drops them).
pub(crate) fn is_combining_mark(c: char) -> bool {
    matches!(c,
        '\u{0300}'..='\u{036F}' // Combining Diacritical Marks
        | '\u{1AB0}'..='\u{1AFF}' // Combining Diacritical Marks Extended
        | '\u{1DC0}'..='\u{1DFF}' // Combining Diacritical Marks Supplement
        | '\u{20D0}'..='\u{20FF}' // Combining Diacritical Marks for Symbols
        | '\u{FE20}'..='\u{FE2F}' // Combining Half Marks
    )
}

/// Maps an accented lowercase Latin letter to its base letter; other characters pass unchanged.
fn fold_latin_diacritic(c: char) -> char {
    match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ā' | 'ă' | 'ą' => 'a',
        'ç' | 'ć' | 'č' => 'c',
        'è' | 'é' | 'ê' | 'ë' | 'ē' | 'ė' | 'ę' | 'ě' => 'e',
        'ì' | 'í' | 'î' | 'ï' | 'ī' | 'į' => 'i',
        'ñ' | 'ń' | 'ň' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'ō' | 'ő' => 'o',
        'ù' | 'ú' | 'û' | 'ü' | 'ū' | 'ů' | 'ű' => 'u',
        'ý' | 'ÿ' => 'y',
        'ś' | 'š' | 'ş' => 's',
        'ź' | 'ż' | 'ž' => 'z',
        'ł' => 'l',
        'ř' => 'r',
        other => other,
    }
}

/// Grammatical words that never name anything by themselves.
pub(crate) const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "across",
    "after",
    "again",
    "against",
    "all",
    "along",
    "also",
    "am",
    "among",
    "an",
    "and",
    "any",
    "anything",
    "are",
    "around",
    "as",
    "at",
    "be",
    "been",
    "before",
    "being",
    "below",
    "between",
    "beyond",
    "both",
    "but",
    "by",
    "can",
    "could",
    "despite",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "else",
    "every",
    "everything",
    "few",
    "for",
    "from",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "him",
    "his",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "just",
    "let",
    "like",
    "many",
    "more",
    "most",
    "much",
    "my",
    "near",
    "no",
    "not",
    "nothing",
    "of",
    "off",
    "on",
    "only",
    "or",
    "other",
    "our",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "since",
    "so",
    "some",
    "something",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "toward",
    "towards",
    "under",
    "until",
    "up",
    "upon",
    "us",
    "very",
    "via",
    "was",
    "we",
    "were",
    "while",
    "will",
    "with",
    "within",
    "without",
    "would",
    "you",
    "your",
];

/// Words that open a question; a query starting with one is a question even without "?".
pub(crate) const QUESTION_WORDS: &[&str] = &["how", "what", "when", "where", "which", "who", "whom", "whose", "why"];

/// Words that phrase the request or name the medium rather than its subject ("show me videos of
/// ..."): the medium is captured as the query's modality, so it must not also count as a concept.
pub(crate) const REQUEST_WORDS: &[&str] = &[
    "audio",
    "clip",
    "clips",
    "define",
    "describe",
    "display",
    "explain",
    "fetch",
    "find",
    "footage",
    "get",
    "give",
    "hear",
    "image",
    "images",
    "list",
    "listen",
    "look",
    "looking",
    "me",
    "need",
    "photo",
    "photos",
    "picture",
    "pictures",
    "please",
    "podcast",
    "podcasts",
    "recording",
    "recordings",
    "search",
    "see",
    "show",
    "tell",
    "video",
    "videos",
    "want",
    "watch",
];

/// Full month names. Alone, only a capitalised one is a date ("march" and "may" are verbs).
pub(crate) const MONTH_NAMES: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Month abbreviations: dates only next to a day or a year ("Jan 5", "Sept 2001").
pub(crate) const MONTH_ABBREVIATIONS: &[&str] =
    &["jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"];

pub(crate) const WEEKDAYS: &[&str] = &["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

/// Single words that name a day relative to now.
pub(crate) const RELATIVE_DAYS: &[&str] = &["today", "tonight", "tomorrow", "yesterday"];

/// Words that make the next time unit (or weekday or month) relative: "last week", "next Friday".
pub(crate) const RELATIVE_MODIFIERS: &[&str] = &["coming", "last", "next", "past", "previous", "this"];

/// Units of time, for "last week" and "three years ago".
pub(crate) const TIME_UNITS: &[&str] = &[
    "century",
    "centuries",
    "day",
    "days",
    "decade",
    "decades",
    "month",
    "months",
    "night",
    "season",
    "week",
    "weekend",
    "weeks",
    "year",
    "years",
];

/// Follows a count and a time unit to make a date: "two years ago".
pub(crate) const AGO: &str = "ago";

/// Counts without a number that still make "few years ago" a date.
pub(crate) const VAGUE_COUNTS: &[&str] = &["couple", "few", "many", "several"];

/// Counts in words; consecutive ones form one number ("two hundred", "twenty-one").
pub(crate) const NUMBER_WORDS: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
    "hundred",
    "thousand",
    "million",
    "billion",
];

/// The word that turns a number into a percentage ("50 percent"); "%" is handled as a character.
pub(crate) const PERCENT_WORD: &str = "percent";

/// Titles that precede a person's name.
pub(crate) const HONORIFICS: &[&str] = &[
    "captain",
    "dame",
    "dr",
    "king",
    "lady",
    "lord",
    "miss",
    "mr",
    "mrs",
    "ms",
    "president",
    "prof",
    "professor",
    "queen",
    "sir",
];

/// Common given names; one followed by a capitalised word is a person. Names that are also
/// common places or words ("Jordan", "Georgia", "Will") are left out on purpose.
pub(crate) const FIRST_NAMES: &[&str] = &[
    "ahmed", "alice", "ana", "anna", "carlos", "david", "elena", "emily", "emma", "fatima", "george", "hans", "jane",
    "james", "john", "jose", "juan", "li", "lisa", "maria", "marie", "mary", "michael", "mohammed", "olivia", "peter",
    "priya", "robert", "sarah", "thomas", "wei", "yuki",
];

/// People well known by name, with or without a given name ("Einstein", "Albert Einstein").
pub(crate) const KNOWN_PEOPLE: &[&str] = &[
    "ada lovelace",
    "albert einstein",
    "barack obama",
    "beethoven",
    "charles darwin",
    "einstein",
    "frida kahlo",
    "isaac newton",
    "lionel messi",
    "marie curie",
    "martin luther king",
    "messi",
    "mozart",
    "nelson mandela",
    "neil armstrong",
    "picasso",
    "serena williams",
    "shakespeare",
    "usain bolt",
];

/// Last words of organisation names ("Acme Inc", "Stanford University", "Chelsea FC"), or first
/// words when followed by "of" ("University of Tokyo").
pub(crate) const ORGANIZATION_HEADS: &[&str] = &[
    "agency",
    "association",
    "club",
    "co",
    "college",
    "company",
    "corp",
    "corporation",
    "fc",
    "foundation",
    "inc",
    "institute",
    "llc",
    "ltd",
    "society",
    "university",
];

/// All-caps words that name a thing, not an organisation: "AI robots" is about a concept.
pub(crate) const NON_ORGANIZATION_ACRONYMS: &[&str] =
    &["ai", "ar", "ceo", "diy", "dna", "faq", "gps", "hd", "pdf", "tv", "ufo", "usb", "vr"];

/// Words that continue an organisation name after its head word: "Institute of Technology".
pub(crate) const ORGANIZATION_CONNECTORS: &[&str] = &["for", "of"];

/// Countries, major cities and natural features. Ambiguous names ("Turkey", "Nice", "Chad") are
/// left out: a capitalised one after "in" is still found as a place by the prepositional rule.
pub(crate) const PLACES: &[&str] = &[
    // Countries and unions.
    "argentina",
    "australia",
    "brazil",
    "canada",
    "china",
    "egypt",
    "england",
    "ethiopia",
    "europe",
    "france",
    "germany",
    "india",
    "indonesia",
    "ireland",
    "italy",
    "japan",
    "kenya",
    "mexico",
    "morocco",
    "netherlands",
    "new zealand",
    "nigeria",
    "norway",
    "portugal",
    "russia",
    "scotland",
    "south africa",
    "south korea",
    "spain",
    "sweden",
    "switzerland",
    "u.k.",
    "u.s.",
    "uk",
    "united kingdom",
    "united states",
    "usa",
    "vietnam",
    // Cities.
    "amsterdam",
    "athens",
    "bangkok",
    "barcelona",
    "beijing",
    "berlin",
    "buenos aires",
    "cairo",
    "chicago",
    "delhi",
    "dubai",
    "hong kong",
    "istanbul",
    "lagos",
    "lisbon",
    "london",
    "los angeles",
    "madrid",
    "mexico city",
    "montreal",
    "moscow",
    "mumbai",
    "nairobi",
    "new york",
    "paris",
    "rio de janeiro",
    "rome",
    "san francisco",
    "sao paulo",
    "seoul",
    "shanghai",
    "singapore",
    "sydney",
    "tokyo",
    "toronto",
    "vienna",
    "zurich",
    // Natural features.
    "alps",
    "amazon river",
    "andes",
    "antarctica",
    "atlantic ocean",
    "grand canyon",
    "great barrier reef",
    "himalayas",
    "lake victoria",
    "mount everest",
    "mount kilimanjaro",
    "niagara falls",
    "nile",
    "pacific ocean",
    "rocky mountains",
    "sahara",
];

/// Prepositions after which an unrecognised capitalised name is taken to be a place.
pub(crate) const LOCATION_PREPOSITIONS: &[&str] = &["at", "from", "in", "near"];

/// Words and phrases that ask for something to look at. "time-lapse" is here, not among the
/// temporal keywords: it names a filming technique, not a point in time.
pub(crate) const VISUAL_KEYWORDS: &[&str] = &[
    "clip",
    "clips",
    "film",
    "footage",
    "image",
    "images",
    "movie",
    "photo",
    "photograph",
    "photos",
    "picture",
    "pictures",
    "scene",
    "scenes",
    "see",
    "show me",
    "time-lapse",
    "timelapse",
    "video",
    "videos",
    "watch",
];

/// Visual keywords that ask for moving pictures specifically. The visual keywords in neither this
/// list nor [`IMAGE_KEYWORDS`] ("show me", "see", "scene") are generic.
pub(crate) const VIDEO_KEYWORDS: &[&str] =
    &["clip", "clips", "film", "footage", "movie", "time-lapse", "timelapse", "video", "videos", "watch"];

/// Visual keywords that ask for still pictures specifically.
pub(crate) const IMAGE_KEYWORDS: &[&str] = &["image", "images", "photo", "photograph", "photos", "picture", "pictures"];

pub(crate) const AUDIO_KEYWORDS: &[&str] = &[
    "audio",
    "hear",
    "listen",
    "music",
    "podcast",
    "podcasts",
    "recording",
    "recordings",
    "song",
    "songs",
    "sound",
    "sounds",
    "speech",
    "voice",
];

/// Words that place the query in time; the query's DATE entities count as temporal too.
pub(crate) const TEMPORAL_KEYWORDS: &[&str] = &[
    "after",
    "ago",
    "before",
    "century",
    "decade",
    "during",
    "era",
    "historical",
    "history",
    "latest",
    "recent",
    "since",
    "timeline",
    "until",
    "when",
    "year",
    "years",
];

/// Words and phrases that ask for reading matter or an explanation.
pub(crate) const TEXT_KEYWORDS: &[&str] = &[
    "article",
    "articles",
    "blog",
    "definition",
    "document",
    "documents",
    "essay",
    "explain",
    "explanation",
    "how",
    "paper",
    "papers",
    "text",
    "what are",
    "what is",
    "why",
    "wiki",
];

/// Words that rule out the keyword right after them ("not videos", "without music"): the query
/// says it does not want that, so the keyword is no cue of what it wants.
pub(crate) const NEGATIONS: &[&str] = &["never", "no", "non", "not", "without"];

/// Words that open a second clause, making the query complex.
pub(crate) const CLAUSE_MARKERS: &[&str] =
    &["although", "because", "but", "that", "though", "unless", "whereas", "which", "while"];

/// True when `folded` phrases the request rather than naming a thing (see the three lists).
pub(crate) fn is_function_word(folded: &str) -> bool {
    [STOP_WORDS, QUESTION_WORDS, REQUEST_WORDS].iter().any(|list| list.contains(&folded))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_LISTS: &[&[&str]] = &[
        NEGATIONS,
        STOP_WORDS,
        QUESTION_WORDS,
        REQUEST_WORDS,
        MONTH_NAMES,
        MONTH_ABBREVIATIONS,
        WEEKDAYS,
        RELATIVE_DAYS,
        RELATIVE_MODIFIERS,
        TIME_UNITS,
        &[AGO, PERCENT_WORD],
        VAGUE_COUNTS,
        NON_ORGANIZATION_ACRONYMS,
        NUMBER_WORDS,
        HONORIFICS,
        FIRST_NAMES,
        KNOWN_PEOPLE,
        ORGANIZATION_HEADS,
        ORGANIZATION_CONNECTORS,
        PLACES,
        LOCATION_PREPOSITIONS,
        VISUAL_KEYWORDS,
        VIDEO_KEYWORDS,
        IMAGE_KEYWORDS,
        AUDIO_KEYWORDS,
        TEMPORAL_KEYWORDS,
        TEXT_KEYWORDS,
        CLAUSE_MARKERS,
    ];

    #[test]
    fn every_entry_is_stored_folded_with_single_spaces() {
        for entry in ALL_LISTS.iter().flat_map(|list| list.iter()) {
            assert_eq!(&fold(entry), entry, "lexicon entry {entry:?} is not folded");
            assert!(!entry.contains("  ") && entry.trim() == *entry, "bad spacing in {entry:?}");
        }
    }

    #[test]
    fn video_and_image_keywords_are_visual_keywords() {
        for word in VIDEO_KEYWORDS.iter().chain(IMAGE_KEYWORDS) {
            assert!(VISUAL_KEYWORDS.contains(word), "{word} missing from VISUAL_KEYWORDS");
        }
    }

    #[test]
    fn fold_lowercases_and_strips_diacritics_in_both_unicode_forms() {
        assert_eq!(fold("São"), "sao");
        assert_eq!(fold("Sa\u{0303}o"), "sao");
        assert_eq!(fold("ZÜRICH"), "zurich");
        assert_eq!(fold("東京"), "東京");
        assert_eq!(fold(""), "");
    }

    #[test]
    fn function_words_cover_stop_question_and_request_words() {
        assert!(is_function_word("the"));
        assert!(is_function_word("why"));
        assert!(is_function_word("show"));
        assert!(!is_function_word("robots"));
    }
}
