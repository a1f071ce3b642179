//! Files packed at the end of a component: what the `bundle` import of `wit/operator.wit`
//! hands to the guest.
//!
//! `weir build` of a Python project compiles a *runner* component once (componentize-py, the
//! interpreter, the standard library and the SDK) and packs the project's own modules into
//! each build as files, so an edit of `operator.py` costs a copy of the runner and a few
//! kilobytes, not a new componentize-py run (`host/src/build/python.rs`).
//!
//! The files travel as one custom section, the last of the component file:
//!
//! ```text
//! 0x00  size (LEB128)  11 (LEB128)  "weir-bundle"  files  len(files) (u32 LE)  "wbnd"
//! ```
//!
//! A custom section is part of a valid component and changes no code: wasmtime ignores it.
//! The trailer (the length of `files`, then a magic) lets the host find the section from the
//! file's end without parsing the component, and compile (and cache) the component by the
//! bytes before it, so that every build of one runner shares one compiled artifact.
//! `files` is the `bundle.files` encoding: per file, its name's length (u32 LE), its name, its
//! contents' length (u32 LE), its contents.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The custom section's name.
const NAME: &str = "weir-bundle";
/// The last bytes of a component with a bundle.
const MAGIC: &[u8; 4] = b"wbnd";
/// The trailer after the files: their length and [`MAGIC`].
const TRAILER: usize = 8;

/// One packed file: its name (a path relative to the project folder) and its contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BundledFile {
    pub name: String,
    pub contents: Vec<u8>,
}

/// Why files cannot be packed.
#[derive(Debug, thiserror::Error)]
#[error("cannot pack {name} into the component: it is larger than 4 GiB")]
pub(crate) struct TooLarge {
    pub name: String,
}

/// `files` in the encoding `bundle.files` returns.
pub(crate) fn encode(files: &[BundledFile]) -> Result<Vec<u8>, TooLarge> {
    let mut out = Vec::new();
    for file in files {
        for part in [file.name.as_bytes(), &file.contents] {
            let len = u32::try_from(part.len()).map_err(|_| TooLarge {
                name: file.name.clone(),
            })?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    Ok(out)
}

/// `component` (without a bundle) with `files` packed at its end.
pub(crate) fn append(component: &[u8], files: &[BundledFile]) -> Result<Vec<u8>, TooLarge> {
    let encoded = encode(files)?;
    let len = u32::try_from(encoded.len()).map_err(|_| TooLarge {
        name: "the bundle".to_owned(),
    })?;
    let mut out = Vec::with_capacity(component.len() + encoded.len() + 32);
    out.extend_from_slice(component);
    out.extend_from_slice(&header(encoded.len()));
    out.extend_from_slice(&encoded);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(MAGIC);
    Ok(out)
}

/// A component's bytes split into its code (everything before the bundle's section) and its
/// bundle's files in the `bundle.files` encoding (empty without a bundle).
pub(crate) fn split(bytes: &[u8]) -> (&[u8], &[u8]) {
    match locate(bytes.len() as u64, |offset, buf| {
        let start = usize::try_from(offset).ok()?;
        buf.copy_from_slice(bytes.get(start..start + buf.len())?);
        Some(())
    }) {
        Some(found) => (
            &bytes[..found.section_start as usize],
            &bytes[found.files_start as usize..found.files_end as usize],
        ),
        None => (bytes, &[]),
    }
}

/// The bundle of the component file at `path`, read from its end only: empty without one.
pub(crate) fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut read_at = |offset: u64, buf: &mut [u8]| -> Option<()> {
        file.seek(SeekFrom::Start(offset)).ok()?;
        file.read_exact(buf).ok()
    };
    let Some(found) = locate(len, &mut read_at) else {
        return Ok(Vec::new());
    };
    let mut files = vec![0; (found.files_end - found.files_start) as usize];
    file.seek(SeekFrom::Start(found.files_start))?;
    file.read_exact(&mut files)?;
    Ok(files)
}

/// Decodes the `bundle.files` encoding (as the guest's runner does).
#[cfg(test)]
pub(crate) fn decode(mut bytes: &[u8]) -> Option<Vec<BundledFile>> {
    fn part<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let (part, rest) = (rest.get(..len)?, &rest[len..]);
        *bytes = rest;
        Some(part)
    }
    let mut files = Vec::new();
    while !bytes.is_empty() {
        let name = String::from_utf8(part(&mut bytes)?.to_vec()).ok()?;
        let contents = part(&mut bytes)?.to_vec();
        files.push(BundledFile { name, contents });
    }
    Some(files)
}

/// Where a bundle lies in a component file.
struct Found {
    section_start: u64,
    files_start: u64,
    files_end: u64,
}

/// Finds the bundle of a component of `len` bytes, reading through `read_at(offset, buf)`:
/// the trailer, then the section header it implies, which must be exactly what [`append`]
/// writes (a component that merely ends in the magic is not taken for one with a bundle).
fn locate(len: u64, mut read_at: impl FnMut(u64, &mut [u8]) -> Option<()>) -> Option<Found> {
    let mut trailer = [0; TRAILER];
    read_at(len.checked_sub(TRAILER as u64)?, &mut trailer)?;
    if &trailer[4..] != MAGIC {
        return None;
    }
    let files_len = u64::from(u32::from_le_bytes(trailer[..4].try_into().ok()?));
    let files_end = len - TRAILER as u64;
    let files_start = files_end.checked_sub(files_len)?;
    let expected = header(files_len as usize);
    let section_start = files_start.checked_sub(expected.len() as u64)?;
    let mut found = vec![0; expected.len()];
    read_at(section_start, &mut found)?;
    (found == expected).then_some(Found {
        section_start,
        files_start,
        files_end,
    })
}

/// The custom section's id, size and name, for `files_len` bytes of files.
fn header(files_len: usize) -> Vec<u8> {
    let mut name = Vec::new();
    leb128(&mut name, NAME.len() as u64);
    name.extend_from_slice(NAME.as_bytes());
    let mut out = vec![0];
    leb128(&mut out, (name.len() + files_len + TRAILER) as u64);
    out.extend_from_slice(&name);
    out
}

fn leb128(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component: its preamble, no sections.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn files() -> Vec<BundledFile> {
        vec![
            BundledFile {
                name: "operator.py".into(),
                contents: b"import weir_sdk\n".to_vec(),
            },
            BundledFile {
                name: "shapes/__init__.py".into(),
                contents: vec![b'#'; 300],
            },
        ]
    }

    #[test]
    fn a_packed_component_is_still_valid_and_splits_back_into_code_and_files() {
        let packed = append(EMPTY_COMPONENT, &files()).expect("append");
        let engine = wasmtime::Engine::default();
        wasmtime::component::Component::new(&engine, &packed)
            .expect("a custom section at the end is part of a valid component");
        let (code, bundle) = split(&packed);
        assert_eq!(code, EMPTY_COMPONENT);
        assert_eq!(decode(bundle), Some(files()));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.wasm");
        std::fs::write(&path, &packed).expect("write");
        assert_eq!(read(&path).expect("read"), bundle);
    }

    #[test]
    fn a_component_without_a_bundle_has_none_even_if_it_ends_in_the_magic() {
        assert_eq!(split(EMPTY_COMPONENT), (EMPTY_COMPONENT, &[][..]));
        let mut fake = EMPTY_COMPONENT.to_vec();
        fake.extend_from_slice(&3u32.to_le_bytes());
        fake.extend_from_slice(MAGIC);
        assert_eq!(split(&fake), (&fake[..], &[][..]));
        assert_eq!(split(b"wbnd"), (&b"wbnd"[..], &[][..]));
    }

    #[test]
    fn a_truncated_bundle_does_not_decode() {
        let encoded = encode(&files()).expect("encode");
        assert_eq!(decode(&encoded[..encoded.len() - 1]), None);
        assert_eq!(decode(&[]), Some(Vec::new()));
    }
}
