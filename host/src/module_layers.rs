//! The top-level modules form layers: a module's code imports (`crate::name`) only modules
//! below it, so a newcomer can read the crate from the bottom up. The one knot allowed is
//! `engine` and `guest` (see [`ALLOWED_CYCLES`]). Comments and test code are not counted: a
//! test may drive a module through one above it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Groups of modules that import each other, each for a reason its modules' docs give:
/// the engine links the guest's host functions into every component and makes stores of the
/// guest's state, and a guest instantiates its component through the engine. One concept in
/// two modules: `build` and the CLI use the engine (compile, cache, check) without instances.
const ALLOWED_CYCLES: &[&[&str]] = &[&["engine", "guest"]];

/// Module → the modules its non-test code names, from the source files under `src`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.to_owned()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read src") {
                files.push(entry.expect("entry").path());
            }
            continue;
        }
        let relative = path.strip_prefix(src).expect("under src");
        let name = relative.to_string_lossy();
        let is_test_file = name.ends_with("tests.rs");
        let Some(top) = relative.components().next().map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        }) else {
            continue;
        };
        if is_test_file || !name.ends_with(".rs") || ["lib", "main", "bin"].contains(&&*top) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        let edges = graph.entry(top.clone()).or_default();
        for line in text.lines() {
            if line.starts_with("#[cfg(test)]") {
                break;
            }
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let module: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !module.is_empty() && module != top {
                    edges.insert(module);
                }
            }
        }
    }
    graph
}

/// The strongly connected groups of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            for next in self.graph.get(node).into_iter().flatten() {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    group.insert(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn top_level_modules_import_only_downwards_but_for_the_cycles_allowed() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = imports(&src);
    assert!(graph.len() > 10, "the modules were not found: {graph:?}");
    let allowed: Vec<BTreeSet<String>> = ALLOWED_CYCLES
        .iter()
        .map(|group| group.iter().map(|m| (*m).to_owned()).collect())
        .collect();
    for group in cycles(&graph) {
        let edges: Vec<String> = group
            .iter()
            .flat_map(|from| {
                graph[from]
                    .iter()
                    .filter(|to| group.contains(*to))
                    .map(move |to| format!("{from} -> {to}"))
            })
            .collect();
        assert!(
            allowed.contains(&group),
            "these modules import each other: {edges:?}; move what one needs of the other \
             below both, or add the group to ALLOWED_CYCLES with the reason"
        );
    }
}

#[test]
fn a_cycle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    let found = cycles(&graph);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0],
        ["a", "b", "c"].into_iter().map(str::to_owned).collect()
    );
}
