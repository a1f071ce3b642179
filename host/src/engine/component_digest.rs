//! A component file's digest, `sha256:<hex>` of its bytes, which each checkpoint records per
//! operator (DESIGN.md §8.1) so that what wrote a state can be told after an upgrade. It is
//! remembered per file identity for the life of the process: a Kafka job builds a pipeline
//! per partition, and a restart builds one again, from the same files.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::cache::FileIdentity;

/// Digests by the identity of the file they were read from (a write changes the identity).
static KNOWN: Mutex<Option<HashMap<FileIdentity, String>>> = Mutex::new(None);

/// The digest of the component file at `path`.
pub(crate) fn component_digest(path: &Path) -> std::io::Result<String> {
    let identity = FileIdentity::of(path);
    if let Some(identity) = &identity
        && let Some(known) = KNOWN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|known| known.get(identity))
    {
        return Ok(known.clone());
    }
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let digest = format!("sha256:{hex}");
    if let Some(identity) = identity {
        KNOWN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(identity, digest.clone());
    }
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_the_files_sha256_and_follows_a_rewrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("op.wasm");
        std::fs::write(&path, b"abc").expect("write");
        assert_eq!(
            component_digest(&path).expect("digest"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::write(&path, b"abcd").expect("write");
        assert_eq!(
            component_digest(&path).expect("digest"),
            "sha256:88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589"
        );
    }
}
