//! The on-disk cache of precompiled components: the first load compiles and stores, the next
//! loads the artifact, and a damaged artifact is discarded and rebuilt, never trusted.

use crate::support;

use weir_host::engine::{ComponentCache, Engine, EngineOptions};

fn cached_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_component_is_compiled_once_then_loaded_from_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(dir.path())),
    })
    .expect("engine");
    let counter = support::component("weir-example-counter");
    assert!(cached_files(dir.path()).is_empty());
    engine.load(&counter).expect("first load compiles");
    let files = cached_files(dir.path());
    assert_eq!(files.len(), 1, "one artifact per component");
    let key = ComponentCache::key(engine.wasmtime(), &std::fs::read(&counter).expect("read"));
    assert!(
        files[0].ends_with(format!("{key}.cwasm")),
        "named by content and engine hash"
    );
    let modified = std::fs::metadata(&files[0])
        .expect("meta")
        .modified()
        .expect("mtime");
    engine.load(&counter).expect("second load");
    assert_eq!(
        std::fs::metadata(&files[0])
            .expect("meta")
            .modified()
            .expect("mtime"),
        modified,
        "the second load reused the artifact"
    );
    // Another component gets its own entry.
    engine
        .load(&support::component("weir-example-tokenizer"))
        .expect("load");
    assert_eq!(cached_files(dir.path()).len(), 2);
}

#[test]
fn a_damaged_artifact_is_discarded_and_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(dir.path())),
    })
    .expect("engine");
    let counter = support::component("weir-example-counter");
    engine.load(&counter).expect("load");
    let artifact = cached_files(dir.path()).remove(0);
    std::fs::write(&artifact, b"not an artifact").expect("damage");
    engine
        .load(&counter)
        .expect("a damaged cache entry is not an error");
    assert!(
        std::fs::read(&artifact).expect("read").len() > 1000,
        "the artifact was rebuilt"
    );
}

#[test]
fn a_component_file_written_since_its_last_load_is_read_again_never_taken_for_the_old_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let engine = Engine::new(EngineOptions {
        cache: Some(ComponentCache::new(&cache)),
    })
    .expect("engine");
    let file = dir.path().join("operator.wasm");
    std::fs::copy(support::component("weir-example-counter"), &file).expect("copy");
    engine.load(&file).expect("first load");
    engine.load(&file).expect("a load by the remembered key");
    assert_eq!(cached_files(&cache).len(), 1);

    // Another component written over the same file: hashed, compiled, cached on its own.
    let tokenizer = std::fs::read(support::component("weir-example-tokenizer")).expect("read");
    std::fs::write(&file, &tokenizer).expect("overwrite");
    engine.load(&file).expect("load of the new contents");
    assert_eq!(
        cached_files(&cache).len(),
        2,
        "the new contents were compiled"
    );

    // Something that is not a component at all: refused, whatever was remembered.
    std::fs::write(&file, b"not a component").expect("overwrite");
    let err = engine.load(&file).expect_err("not a component");
    assert!(err.to_string().contains("WebAssembly magic bytes"), "{err}");
}
