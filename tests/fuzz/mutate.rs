//! The random source and the mutations the fuzz targets share: bytes (havoc), text (numbers,
//! TOML values) and JSON trees.

/// A small, fast, seedable generator (SplitMix64): every case of a run follows from the seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// Integers that break length fields and bounds checks.
pub const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    12,
    13,
    20,
    127,
    128,
    255,
    256,
    4095,
    4096,
    4097,
    65535,
    65536,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX - 1,
    u64::MAX,
];

/// Number texts for text formats: edges of the integer types, floats, not-numbers.
pub const NUMBER_TEXTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "128",
    "32768",
    "32769",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "1.5",
    "-0.0",
    "1e308",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "17592186044416",
    "17592186044417",
];

/// One random byte-level mutation of `data` (AFL's havoc, in small).
pub fn mutate_bytes(rng: &mut Rng, data: &mut Vec<u8>, other: Option<&[u8]>) {
    let len = data.len();
    match rng.below(12) {
        // Flip a bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Set a byte.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(&[0, 0xff, 0x7f, 0x80, 1, b'0', b'"', b'[', b'{', b'\n']);
        }
        // Random byte.
        2 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.next_u64() as u8;
        }
        // An interesting integer, little- or big-endian, 1, 2, 4 or 8 bytes wide.
        3 if len > 0 => {
            let width = *rng.pick(&[1usize, 2, 4, 8]);
            let value = *rng.pick(INTERESTING);
            let src = if rng.one_in(2) {
                value.to_le_bytes()[..width].to_vec()
            } else {
                value.to_be_bytes()[8 - width..].to_vec()
            };
            let at = rng.below(len);
            let n = width.min(len - at);
            data[at..at + n].copy_from_slice(&src[..n]);
        }
        // Add or subtract a little.
        4 if len > 0 => {
            let i = rng.below(len);
            let delta = 1 + rng.below(16) as u8;
            data[i] = if rng.one_in(2) {
                data[i].wrapping_add(delta)
            } else {
                data[i].wrapping_sub(delta)
            };
        }
        // Delete a range.
        5 if len > 1 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            data.drain(at..at + n);
        }
        // Insert random bytes.
        6 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(32);
            let bytes = rng.bytes(n);
            data.splice(at..at, bytes);
        }
        // Duplicate a block.
        7 if len > 0 => {
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(256));
            let block = data[from..from + n].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, block);
        }
        // Truncate.
        8 if len > 0 => {
            data.truncate(rng.below(len));
        }
        // Overwrite with a block from elsewhere.
        9 if len > 1 => {
            let from = rng.below(len);
            let to = rng.below(len);
            let n = 1 + rng.below((len - from.max(to)).min(64));
            let block = data[from..from + n].to_vec();
            data[to..to + n].copy_from_slice(&block);
        }
        // Splice with another input: a prefix of this one, a suffix of the other.
        10 if other.is_some() => {
            let other = other.unwrap_or_default();
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        // A number in text replaced.
        _ => mutate_number_text(rng, data),
    }
}

/// `n` stacked byte mutations.
pub fn havoc(rng: &mut Rng, data: &mut Vec<u8>, other: Option<&[u8]>) {
    let n = 1 + rng.below(8);
    for _ in 0..n {
        mutate_bytes(rng, data, other);
    }
}

/// Replaces a run of digits with a number text from [`NUMBER_TEXTS`].
pub fn mutate_number_text(rng: &mut Rng, data: &mut Vec<u8>) {
    let starts: Vec<usize> = (0..data.len())
        .filter(|&i| data[i].is_ascii_digit() && (i == 0 || !data[i - 1].is_ascii_digit()))
        .collect();
    let replacement = rng.pick(NUMBER_TEXTS).as_bytes().to_vec();
    if starts.is_empty() {
        let at = rng.below(data.len() + 1);
        data.splice(at..at, replacement);
        return;
    }
    let start = *rng.pick(&starts);
    let end = (start..data.len())
        .find(|&i| !data[i].is_ascii_digit())
        .unwrap_or(data.len());
    data.splice(start..end, replacement);
}

/// Values a TOML key may be given: every type, edges of numbers, paths and policies.
pub const TOML_VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "17592186044416",
    "17592186044417",
    "1e400",
    "nan",
    "inf",
    "-0.0",
    "0.5",
    "true",
    "false",
    "\"\"",
    "\" \"",
    "\"key\"",
    "\"/\"",
    "\"/a/0\"",
    "\"~1\"",
    "\"..\"",
    "\"../..\"",
    "\"/dev/null\"",
    "\"/tmp\"",
    "\"in.txt\"",
    "\"out.txt\"",
    "\"no/such/dir/out.txt\"",
    "\"file:///tmp/weir-fuzz-store\"",
    "\"s3://bucket/prefix\"",
    "\"not a url\"",
    "\"memory:///\"",
    "\"\\u0000\"",
    "\"é\"",
    "\"fail\"",
    "\"skip\"",
    "\"restart\"",
    "\"text-lines\"",
    "\"json-lines\"",
    "\"generator\"",
    "\"kafka\"",
    "\"file\"",
    "\"stdout\"",
    "\"discard\"",
    "\"exactly-once\"",
    "\"at-least-once\"",
    "\"earliest\"",
    "\"latest\"",
    "\"json\"",
    "\"raw\"",
    "\"ms\"",
    "\"s\"",
    "\"rfc3339\"",
    "\"drop\"",
    "[]",
    "[1, 2]",
    "[[]]",
    "{}",
    "{ dead_letter = \"dead.jsonl\" }",
    "{ dead_letter = \"\" }",
    "{ dead_letter = \"out.txt\" }",
    "{ dead_letter_topic = \"dead\" }",
    "{ dead_letter_topic = \"\" }",
    "{ json_pointer = \"/user\" }",
    "{ json_pointer = \"user\" }",
    "{ json_pointer = \"/ts\", format = \"ms\" }",
    "{ max_out_of_order_ms = 18446744073709551615, idle_ms = 0 }",
    "{ events_per_second = 0 }",
    "{ events_per_second = 1, disorder = nan }",
    "{ memory_mb = 17592186044416 }",
    "{ memory_mb = 17592186044417, state_mb = 17592186044416 }",
    "{ a = { b = { c = [1, { d = 2 }] } } }",
    "1979-05-27T07:32:00Z",
    "07:32:00",
];

/// Keys of every section of a job file, known or not.
pub const TOML_KEYS: &[&str] = &[
    "name",
    "max_parallelism",
    "batch_size",
    "kind",
    "path",
    "key_pointer",
    "on_bad_record",
    "timestamp",
    "on_bad_timestamp",
    "watermark",
    "records",
    "keys",
    "clock",
    "component",
    "parallelism",
    "key_by",
    "config",
    "limits",
    "on_error",
    "store",
    "interval_ms",
    "timeout_ms",
    "retain",
    "max_chain",
    "rewrite_budget",
    "full_snapshot_every",
    "restart_attempts",
    "on_limit",
    "brokers",
    "topic",
    "group_id",
    "start",
    "format",
    "properties",
    "guarantee",
    "transactions",
    "connect_timeout_ms",
    "unknown_field",
];

pub const TOML_HEADERS: &[&str] = &[
    "[job]",
    "[source]",
    "[[operators]]",
    "[sink]",
    "[checkpoints]",
    "[source.properties]",
    "[source.clock]",
    "[operators.limits]",
    "[operators.config]",
    "[sink.properties]",
    "[[job]]",
    "[other]",
];

/// A structure-aware mutation of TOML text: a value, a line, a section changed.
pub fn mutate_toml(rng: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = 1 + rng.below(3);
    for _ in 0..n {
        let assignments: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains('=') && !lines[i].trim_start().starts_with('#'))
            .collect();
        match rng.below(8) {
            // Another value for a key.
            0..=2 if !assignments.is_empty() => {
                let i = *rng.pick(&assignments);
                if let Some((key, _)) = lines[i].split_once('=') {
                    lines[i] = format!("{key}= {}", rng.pick(TOML_VALUES));
                }
            }
            // A new key, known or not, with any value.
            3 => {
                let at = rng.below(lines.len() + 1);
                let line = format!("{} = {}", rng.pick(TOML_KEYS), rng.pick(TOML_VALUES));
                lines.insert(at, line);
            }
            // A line repeated (a key twice, a section twice).
            4 if !lines.is_empty() => {
                let from = rng.below(lines.len());
                let at = rng.below(lines.len() + 1);
                let line = lines[from].clone();
                lines.insert(at, line);
            }
            // A line removed.
            5 if !lines.is_empty() => {
                let at = rng.below(lines.len());
                lines.remove(at);
            }
            // A section header.
            6 => {
                let at = rng.below(lines.len() + 1);
                lines.insert(at, (*rng.pick(TOML_HEADERS)).to_owned());
            }
            // Deep nesting or a long value.
            _ => {
                let depth = *rng.pick(&[10usize, 100, 1000, 5000]);
                let value = match rng.below(3) {
                    0 => format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
                    1 => format!("{}1{}", "{ a = ".repeat(depth), " }".repeat(depth)),
                    _ => format!("\"{}\"", "x".repeat(depth * 20)),
                };
                let key = rng.pick(TOML_KEYS);
                let at = rng.below(lines.len() + 1);
                lines.insert(at, format!("{key} = {value}"));
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// JSON values that break numbers, types and paths.
pub fn interesting_json(rng: &mut Rng) -> serde_json::Value {
    use serde_json::{Value, json};
    match rng.below(24) {
        0 => json!(0),
        1 => json!(1),
        2 => json!(-1),
        3 => json!(u32::MAX),
        4 => json!(u64::from(u32::MAX) + 1),
        5 => json!(u64::MAX),
        6 => json!(i64::MIN),
        7 => json!(i64::MAX),
        8 => json!(1.5),
        9 => json!(1e300),
        10 => json!(""),
        11 => json!("../../x"),
        12 => json!("x".repeat(5000)),
        13 => Value::Null,
        14 => json!(true),
        15 => json!([]),
        16 => json!({}),
        17 => json!(253_402_300_800_000u64),
        18 => json!(32768),
        19 => json!(32769),
        20 => json!([0, 0]),
        21 => json!([5, 2]),
        22 => json!({"offset": u64::MAX, "line": 0}),
        _ => json!("é\u{0}\u{202e}"),
    }
}

/// One structural mutation of a JSON tree: a value replaced, a field removed, an element
/// duplicated or moved.
pub fn mutate_json(rng: &mut Rng, value: &mut serde_json::Value) {
    use serde_json::Value;
    // Collect the paths to every node, then change one.
    fn paths(value: &Value, at: &mut Vec<String>, out: &mut Vec<String>) {
        out.push(at.join("/"));
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    at.push(i.to_string());
                    paths(item, at, out);
                    at.pop();
                }
            }
            Value::Object(fields) => {
                for (k, v) in fields {
                    at.push(k.replace('~', "~0").replace('/', "~1"));
                    paths(v, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }
    let mut all = Vec::new();
    paths(value, &mut Vec::new(), &mut all);
    let path = rng.pick(&all).clone();
    let pointer = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    let choice = rng.below(8);
    let Some(node) = value.pointer_mut(&pointer) else {
        return;
    };
    match (choice, node) {
        (0, Value::Object(fields)) if !fields.is_empty() => {
            let keys: Vec<String> = fields.keys().cloned().collect();
            fields.remove(rng.pick(&keys));
        }
        (1, Value::Array(items)) if !items.is_empty() => {
            let i = rng.below(items.len());
            let copy = items[i].clone();
            items.insert(rng.below(items.len() + 1), copy);
        }
        (2, Value::Array(items)) if items.len() > 1 => {
            let (i, j) = (rng.below(items.len()), rng.below(items.len()));
            items.swap(i, j);
        }
        (3, Value::Array(items)) if !items.is_empty() => {
            items.remove(rng.below(items.len()));
        }
        (4, Value::Object(fields)) => {
            fields.insert("unknown".into(), interesting_json(rng));
        }
        (5, node) => {
            // Deep nesting.
            let depth = *rng.pick(&[10usize, 127, 129, 200]);
            let mut nested = node.take();
            for _ in 0..depth {
                nested = Value::Array(vec![nested]);
            }
            *node = nested;
        }
        (_, node) => *node = interesting_json(rng),
    }
}
