//! Event time from records' contents: [`TimestampSpec`], the `[source] timestamp` of
//! JSON-lines sources, and [`read_timestamp`].

use serde::Deserialize;

/// `[source] timestamp = { json_pointer = "/ts", format = "ms" }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimestampSpec {
    pub json_pointer: String,
    #[serde(default)]
    pub format: TimestampFormat,
}

/// How a JSON timestamp is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampFormat {
    /// A number of milliseconds since the Unix epoch.
    #[default]
    Ms,
    /// A number of seconds since the Unix epoch (fractions kept to the millisecond).
    S,
    /// An RFC 3339 string: `2026-12-01T23:00:00Z`, `2026-12-02T00:00:00.250+01:00`.
    Rfc3339,
}

/// `[source] on_bad_timestamp`: what a line without a usable timestamp does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampPolicy {
    /// Fails the job, naming the line.
    #[default]
    Fail,
    /// Drops the line, counted in the metrics.
    Skip,
}

/// Why a record has no usable event time.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TimestampError {
    #[error("no timestamp at {pointer:?}")]
    Missing { pointer: String },
    /// The value at the pointer is not of the configured format.
    #[error("the timestamp at {pointer:?} is {found}, not {}", .format.expected())]
    WrongFormat {
        pointer: String,
        found: serde_json::Value,
        format: TimestampFormat,
    },
}

/// The event time, in milliseconds since the Unix epoch, of the JSON value `value`, or why
/// it has none.
pub(crate) fn read_timestamp(
    spec: &TimestampSpec,
    value: &serde_json::Value,
) -> Result<i64, TimestampError> {
    let pointer = &spec.json_pointer;
    let found = value
        .pointer(pointer)
        .ok_or_else(|| TimestampError::Missing {
            pointer: pointer.clone(),
        })?;
    let read = match spec.format {
        TimestampFormat::Ms => found
            .as_i64()
            .or_else(|| found.as_f64().filter(|f| f.is_finite()).map(|f| f as i64)),
        TimestampFormat::S => found
            .as_f64()
            .filter(|f| f.is_finite() && f.abs() < 9.2e15)
            .map(|s| (s * 1000.0).round() as i64),
        TimestampFormat::Rfc3339 => found.as_str().and_then(rfc3339_ms),
    };
    read.ok_or_else(|| TimestampError::WrongFormat {
        pointer: pointer.clone(),
        found: found.clone(),
        format: spec.format,
    })
}

/// A century, in milliseconds: how far from now a first timestamp may lie.
const CENTURY_MS: i64 = 36_525 * 86_400_000;
/// 2000-01-01T00:00:00Z in seconds since the Unix epoch.
const YEAR_2000_S: i64 = 946_684_800;
/// 1971-01-01T00:00:00Z in milliseconds.
const YEAR_1971_MS: i64 = 365 * 86_400_000;

/// Why the first timestamp a source read, `ms` (milliseconds since the Unix epoch as `spec`
/// reads it), says that `spec`'s `format` does not fit the data, or `None` if it may. A
/// wrong unit is a setting, not one bad record: it would put every window 56,000 years
/// ahead (seconds that are milliseconds) or into January 1970 (the reverse).
pub(crate) fn implausible_unit(spec: &TimestampSpec, ms: i64, now_ms: i64) -> Option<String> {
    let found = |what: &str| {
        format!(
            "the first timestamp at {:?}, read with format = {:?}, is {}: {what}",
            spec.json_pointer,
            spec.format.name(),
            describe_ms(ms)
        )
    };
    match spec.format {
        TimestampFormat::S if ms > now_ms.saturating_add(CENTURY_MS) => Some(found(
            "more than a century from now; these look like milliseconds: set format = \"ms\"",
        )),
        TimestampFormat::Ms if ms > now_ms.saturating_add(CENTURY_MS) => Some(found(
            "more than a century from now; these look like microseconds or nanoseconds: \
             convert them to milliseconds",
        )),
        TimestampFormat::Ms if (0..YEAR_1971_MS).contains(&ms) && ms >= YEAR_2000_S => Some(found(
            "in January 1970; these look like seconds: set format = \"s\"",
        )),
        TimestampFormat::Ms | TimestampFormat::S if ms < 0 => Some(found(
            "before 1970; a timestamp counts from 1970-01-01 (the Unix epoch)",
        )),
        _ => None,
    }
}

/// `1764633609660000 ms (the year 57889)`.
fn describe_ms(ms: i64) -> String {
    const YEAR_MS: f64 = 365.2425 * 86_400_000.0;
    let year = 1970.0 + ms as f64 / YEAR_MS;
    format!("{ms} ms (the year {})", year.floor() as i64)
}

impl TimestampFormat {
    /// As the job file writes it.
    /// What a value of this format is, for errors.
    fn expected(self) -> &'static str {
        match self {
            Self::Ms => "a number of milliseconds",
            Self::S => "a number of seconds",
            Self::Rfc3339 => "an RFC 3339 date and time",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TimestampFormat::Ms => "ms",
            TimestampFormat::S => "s",
            TimestampFormat::Rfc3339 => "rfc3339",
        }
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 date and time, with `Z` or an offset.
fn rfc3339_ms(text: &str) -> Option<i64> {
    // humantime reads UTC (`Z`) only: an offset is taken off first and applied after.
    let (local, offset_ms) = match text.len().checked_sub(6).map(|at| text.split_at(at)) {
        Some((local, offset))
            if (offset.starts_with('+') || offset.starts_with('-'))
                && offset.as_bytes()[3] == b':' =>
        {
            let hours: i64 = offset[1..3].parse().ok()?;
            let minutes: i64 = offset[4..6].parse().ok()?;
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            (
                local.to_owned() + "Z",
                sign * (hours * 60 + minutes) * 60_000,
            )
        }
        _ => (text.to_owned(), 0),
    };
    let time = humantime::parse_rfc3339_weak(&local).ok()?;
    let ms = match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).ok()?,
        Err(before) => -i64::try_from(before.duration().as_millis()).ok()?,
    };
    Some(ms - offset_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(format: TimestampFormat, value: serde_json::Value) -> Result<i64, TimestampError> {
        let spec = TimestampSpec {
            json_pointer: "/ts".into(),
            format,
        };
        read_timestamp(&spec, &serde_json::json!({ "ts": value }))
    }

    #[test]
    fn each_format_reads_to_milliseconds() {
        use serde_json::json;
        assert_eq!(
            read(TimestampFormat::Ms, json!(1_700_000_000_123i64)),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            read(TimestampFormat::S, json!(1_700_000_000.25)),
            Ok(1_700_000_000_250)
        );
        assert_eq!(
            read(TimestampFormat::Rfc3339, json!("2023-11-14T22:13:20.5Z")),
            Ok(1_700_000_000_500)
        );
        assert_eq!(
            read(TimestampFormat::Rfc3339, json!("2023-11-14T23:13:20+01:00")),
            Ok(1_700_000_000_000)
        );
        let soon = read(TimestampFormat::Ms, json!("soon")).expect_err("a string is no number");
        assert_eq!(
            soon.to_string(),
            "the timestamp at \"/ts\" is \"soon\", not a number of milliseconds"
        );
        assert!(read(TimestampFormat::Rfc3339, json!("yesterday")).is_err());
        let none = read_timestamp(
            &TimestampSpec {
                json_pointer: "/at".into(),
                format: TimestampFormat::Ms,
            },
            &json!({}),
        );
        assert_eq!(
            none,
            Err(TimestampError::Missing {
                pointer: "/at".into()
            })
        );
    }

    #[test]
    fn a_first_timestamp_in_another_unit_than_the_format_says_is_named() {
        let now = 1_764_633_609_660;
        let spec = |format| TimestampSpec {
            json_pointer: "/ts".into(),
            format,
        };
        // Milliseconds read as seconds: the year 57890.
        let seconds = spec(TimestampFormat::S);
        let message = implausible_unit(&seconds, now * 1000, now).expect("implausible");
        assert!(
            message.contains("format = \"s\"")
                && message.contains("(the year 5788")
                && message.contains("set format = \"ms\""),
            "{message}"
        );
        // Seconds read as milliseconds: January 1970.
        let millis = spec(TimestampFormat::Ms);
        let message = implausible_unit(&millis, now / 1000, now).expect("implausible");
        assert!(message.contains("set format = \"s\""), "{message}");
        assert!(implausible_unit(&millis, -5, now).is_some(), "before 1970");
        // Plausible: now, a century ahead, and small numbers (toy clocks start at 0).
        assert_eq!(implausible_unit(&millis, now, now), None);
        assert_eq!(implausible_unit(&seconds, now, now), None);
        assert_eq!(implausible_unit(&millis, 0, now), None);
        assert_eq!(implausible_unit(&millis, 120_000, now), None);
        assert_eq!(
            implausible_unit(&spec(TimestampFormat::Rfc3339), now * 1000, now),
            None
        );
    }
}
