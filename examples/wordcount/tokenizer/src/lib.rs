//! Word count, step 1: splits lines of text into words.
//!
//! For every input record (a line of text), emits one record per word, with the word as both
//! key and value. A word is a maximal run of letters and digits after lowercasing: the line is
//! lowercased with `str::to_lowercase` and split on every character for which
//! `char::is_alphanumeric` is false; empty pieces are dropped.

use weir_guest::{Emitter, OpenContext, Operator, Record, Result, export_operator};

struct Tokenizer {
    /// The lowercased line, reused across records.
    lower: String,
}

impl Operator for Tokenizer {
    fn open(_: &mut OpenContext) -> Result<Self> {
        Ok(Self {
            lower: String::new(),
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        let line = record.value_str()?;
        lowercase_into(line, &mut self.lower);
        for word in words(&self.lower) {
            out.emit(Some(word.as_bytes()), word.as_bytes());
        }
        Ok(())
    }
}

/// Writes `line.to_lowercase()` into `lower`, without allocating for ASCII lines.
fn lowercase_into(line: &str, lower: &mut String) {
    lower.clear();
    if line.is_ascii() {
        lower.push_str(line);
        lower.make_ascii_lowercase();
    } else {
        // `str::to_lowercase` knows context rules (a final sigma) that per-char lowercasing
        // does not; use it so that words match what any other `to_lowercase` produces.
        lower.push_str(&line.to_lowercase());
    }
}

/// The words of an already lowercased line.
fn words(lower: &str) -> impl Iterator<Item = &str> {
    lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
}

export_operator!(Tokenizer);

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenize(line: &str) -> Vec<String> {
        let mut lower = String::new();
        lowercase_into(line, &mut lower);
        words(&lower).map(str::to_owned).collect()
    }

    #[test]
    fn splits_on_everything_but_letters_and_digits() {
        assert_eq!(
            tokenize("The quick, brown fox -- it's 42!"),
            ["the", "quick", "brown", "fox", "it", "s", "42"]
        );
        assert_eq!(tokenize("  \t"), Vec::<String>::new());
        assert_eq!(tokenize("snake_case/x.y"), ["snake", "case", "x", "y"]);
    }

    #[test]
    fn lowercases_unicode_like_str_to_lowercase() {
        assert_eq!(tokenize("Ünïcödé ÖL"), ["ünïcödé", "öl"]);
        assert_eq!(tokenize("ΟΔΟΣ"), ["οδος"]);
        assert_eq!(tokenize("日本語 テキスト"), ["日本語", "テキスト"]);
    }
}
