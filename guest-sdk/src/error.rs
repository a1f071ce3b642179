//! The one error type of the SDK: a message that crosses the boundary as the WIT `failure`
//! (from `process` and `close`) or `err(string)` (from `open`).

use std::fmt;

/// An error returned by an operator or by the SDK on its behalf.
///
/// It is a message and nothing else, because that is what the host shows: an error from
/// [`Operator::open`](crate::Operator::open), [`Operator::process`](crate::Operator::process)
/// or [`Operator::close`](crate::Operator::close) fails the job with this message (from
/// `process`, together with the index of the record being processed). The chain of causes
/// is part of the message: [`Error::context`] puts the context in front, and
/// [`Error::with_sources`] writes a library error with its sources.
///
/// `?` converts strings, JSON and CBOR errors, and UTF-8 errors into it:
///
/// ```
/// use weir_guest::{Error, Result};
///
/// fn parse(value: &[u8]) -> Result<u64> {
///     let text = std::str::from_utf8(value)?;
///     let number: u64 = serde_json::from_str(text)?;
///     if number == 0 {
///         return Err("zero is not a valid count".into());
///     }
///     Ok(number)
/// }
/// # assert!(parse(b"0").is_err());
/// # let _: Error = Error::new("x");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Error(String);

/// The SDK's result type: [`Error`] unless said otherwise.
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// An error with the message of `error`, then the message of each of its sources, as in
    /// `"{error}: {source}: {source's source}"`: a library error's chain in one message.
    pub fn with_sources(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self(message)
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }

    /// Prefixes the message with `context`, as in `"{context}: {message}"`.
    #[must_use]
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self(format!("{context}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Error").field(&self.0).finish()
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

impl From<Error> for String {
    fn from(error: Error) -> Self {
        error.0
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Self(format!("JSON: {error}"))
    }
}

impl<E: fmt::Debug> From<ciborium::de::Error<E>> for Error {
    fn from(error: ciborium::de::Error<E>) -> Self {
        Self(format!("CBOR decoding: {error}"))
    }
}

impl<E: fmt::Debug> From<ciborium::ser::Error<E>> for Error {
    fn from(error: ciborium::ser::Error<E>) -> Self {
        Self(format!("CBOR encoding: {error}"))
    }
}

impl From<std::str::Utf8Error> for Error {
    fn from(error: std::str::Utf8Error) -> Self {
        Self(format!("invalid UTF-8: {error}"))
    }
}

impl From<std::string::FromUtf8Error> for Error {
    fn from(error: std::string::FromUtf8Error) -> Self {
        Self(format!("invalid UTF-8: {error}"))
    }
}

impl From<fmt::Error> for Error {
    fn from(_: fmt::Error) -> Self {
        Self("a formatting trait implementation returned an error".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_keep_the_message() {
        assert_eq!(Error::from("boom").message(), "boom");
        assert_eq!(Error::from(String::from("boom")).to_string(), "boom");
        assert_eq!(String::from(Error::new("boom")), "boom");
        assert_eq!(
            Error::new("boom").context("record 3").message(),
            "record 3: boom"
        );
        assert_eq!(format!("{:?}", Error::new("boom")), r#"Error("boom")"#);
    }

    #[test]
    fn with_sources_writes_the_whole_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("reading the table")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(
            Error::with_sources(&error).message(),
            "reading the table: disk on fire"
        );
    }

    #[test]
    fn question_mark_converts_library_errors() {
        fn json() -> Result<u32> {
            Ok(serde_json::from_str("nope")?)
        }
        fn utf8() -> Result<()> {
            let bytes = vec![b'a', 0xff];
            std::str::from_utf8(&bytes)?;
            Ok(())
        }
        assert!(
            json()
                .expect_err("not JSON")
                .message()
                .starts_with("JSON: ")
        );
        assert!(
            utf8()
                .expect_err("not UTF-8")
                .message()
                .starts_with("invalid UTF-8: ")
        );
    }
}
