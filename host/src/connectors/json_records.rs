//! [`JsonDecoder`]: how a source makes a record of one JSON value (a JSON-lines line, a Kafka
//! message): its key from a JSON pointer, its event time from another, or why it cannot.

use super::timestamps::{TimestampPolicy, TimestampSpec, implausible_unit, read_timestamp};

/// What a source takes from each JSON value besides the value itself.
#[derive(Clone, Debug, Default)]
pub(crate) struct JsonDecoder {
    /// Where the record key is; `None`: the source's own key, if any.
    pub key_pointer: Option<String>,
    /// Where the event time is; `None`: the source's own timestamp, if any.
    pub timestamp: Option<TimestampSpec>,
    /// What a value without a usable timestamp does.
    pub on_bad_timestamp: TimestampPolicy,
    /// The last key read, reused.
    key: Vec<u8>,
    /// The first timestamp was read and its unit found plausible.
    unit_checked: bool,
}

/// One JSON value, decoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// A record: its key if the decoder takes keys, its timestamp if it takes timestamps.
    Record {
        key: Option<&'a [u8]>,
        timestamp: Option<i64>,
    },
    /// No usable timestamp, and `on_bad_timestamp = "skip"`: drop the value, counted.
    SkippedForTimestamp,
    /// Not a record, and why.
    Bad(String),
    /// The first timestamp shows that the `timestamp` setting does not fit the data (its
    /// unit): the job fails, whatever the policies for bad records say.
    Misconfigured(String),
}

impl JsonDecoder {
    pub(crate) fn new(
        key_pointer: Option<String>,
        timestamp: Option<TimestampSpec>,
        on_bad_timestamp: TimestampPolicy,
    ) -> Self {
        Self {
            key_pointer,
            timestamp,
            on_bad_timestamp,
            key: Vec::new(),
            unit_checked: false,
        }
    }

    /// Decodes `raw`, one JSON value.
    pub(crate) fn decode(&mut self, raw: &[u8]) -> Decoded<'_> {
        let value = match serde_json::from_slice::<serde_json::Value>(raw) {
            Ok(value) => value,
            Err(e) => return Decoded::Bad(format!("not valid JSON: {e}")),
        };
        let timestamp = match &self.timestamp {
            None => None,
            Some(spec) => match read_timestamp(spec, &value) {
                Ok(t) if !self.unit_checked => {
                    let now = crate::clock::now_ms();
                    if let Some(problem) = implausible_unit(spec, t, now) {
                        return Decoded::Misconfigured(format!("[source] timestamp: {problem}"));
                    }
                    self.unit_checked = true;
                    Some(t)
                }
                Ok(t) => Some(t),
                Err(message) => {
                    return match self.on_bad_timestamp {
                        TimestampPolicy::Skip => Decoded::SkippedForTimestamp,
                        TimestampPolicy::Fail => Decoded::Bad(format!(
                            "{message} (on_bad_timestamp = \"skip\" drops such records)"
                        )),
                    };
                }
            },
        };
        let key = match &self.key_pointer {
            None => None,
            Some(pointer) => match value.pointer(pointer) {
                Some(key) => {
                    json_key(key, &mut self.key);
                    Some(self.key.as_slice())
                }
                None => return Decoded::Bad(format!("no value at key_pointer {pointer:?}")),
            },
        };
        Decoded::Record { key, timestamp }
    }
}

/// Writes the key form of a JSON value: a string's text, or any other value's JSON text.
pub(crate) fn json_key(value: &serde_json::Value, out: &mut Vec<u8>) {
    out.clear();
    match value {
        serde_json::Value::String(s) => out.extend_from_slice(s.as_bytes()),
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}
