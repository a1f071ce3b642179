//! Components that their project no longer matches: a job whose operator's component lies in
//! an operator project folder (`<project>/operator.wasm`, what `weir build` writes) and is
//! older than one of the project's sources runs code its author has since changed. `weir
//! run` and `weir submit` warn about it; a missing one is named with the `weir build` that
//! makes it.
//!
//! Only the project's own sources count, not the `weir` binary that [`Project::is_up_to_date`]
//! also weighs: a new `weir` does not make an operator's code differ from its sources.

use std::fmt;
use std::path::{Path, PathBuf};

use super::Project;

/// An operator whose component is older than a source of the project that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleComponent {
    pub operator: String,
    /// The component, as the job file resolved it.
    pub component: PathBuf,
    /// The project's folder, named like the component.
    pub project: PathBuf,
    /// The project's newest source, newer than the component.
    pub newest_source: PathBuf,
}

impl fmt::Display for StaleComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operator `{}`: {} is newer than its component {}; rebuild it with `weir build {}`",
            self.operator,
            self.newest_source.display(),
            self.component.display(),
            self.project.display()
        )
    }
}

/// The folder that holds `component`, as named (`.` for a bare file name), with the
/// operator project in it, if it is one.
fn project_of(component: &Path) -> Option<(PathBuf, Project)> {
    let folder = component
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let project = Project::detect(folder).ok()?;
    Some((folder.to_owned(), project))
}

/// The operators, given as (name, component as the job file resolved it), whose components
/// are older than their project's sources. A component outside a project, or whose times
/// cannot be read, is never reported.
pub fn stale_components<'a>(
    operators: impl IntoIterator<Item = (&'a str, &'a Path)>,
) -> Vec<StaleComponent> {
    operators
        .into_iter()
        .filter_map(|(operator, component)| {
            let (folder, project) = project_of(component)?;
            let built = std::fs::metadata(component)
                .and_then(|m| m.modified())
                .ok()?;
            let (newest, changed) = project.newest_source().ok()??;
            let inside = newest.strip_prefix(project.dir()).ok()?;
            (changed > built).then(|| StaleComponent {
                operator: operator.to_owned(),
                component: component.to_owned(),
                project: folder.clone(),
                newest_source: folder.join(inside),
            })
        })
        .collect()
}

/// What to do about a missing component, for the job file's error: build the project its
/// folder holds, or, outside a project, build the operator (the examples' script).
pub fn missing_component_hint(component: &Path) -> String {
    match project_of(component) {
        // Built already: the job file names it wrongly.
        Some((folder, project))
            if project.dir().join("operator.wasm").is_file()
                && component.file_name() != Some("operator.wasm".as_ref()) =>
        {
            format!(
                "; {} holds a {} operator project built into {}: did you mean that?",
                folder.display(),
                project.language(),
                folder.join("operator.wasm").display()
            )
        }
        Some((folder, project)) => format!(
            "; {} holds a {} operator project: build it with `weir build {}`",
            folder.display(),
            project.language(),
            folder.display()
        ),
        None => "; build the operator first (for the examples: scripts/build-guests)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn write_at(path: &Path, age: Duration) {
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("create dir");
        std::fs::write(path, "").expect("write");
        std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open")
            .set_modified(SystemTime::now() - age)
            .expect("set mtime");
    }

    /// Stale components among one operator `count` over `component`, resolved against `dir`.
    fn stale_in(dir: &Path, component: &str) -> Vec<StaleComponent> {
        stale_components([("count", dir.join(component).as_path())])
    }

    #[test]
    fn a_component_older_than_a_source_of_its_project_is_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let project = dir.path().join("counter");
        write_at(&project.join("operator.py"), Duration::from_secs(100));
        write_at(&project.join("lib/util.py"), Duration::from_secs(10));
        write_at(&project.join("operator.wasm"), Duration::from_secs(50));
        let stale = stale_in(dir.path(), "counter/operator.wasm");
        assert_eq!(
            stale,
            [StaleComponent {
                operator: "count".into(),
                component: project.join("operator.wasm"),
                project: project.clone(),
                newest_source: project.join("lib/util.py"),
            }]
        );
        let message = stale[0].to_string();
        assert!(
            message.contains(&format!("weir build {}", project.display())),
            "{message}"
        );

        // Built after the last change: nothing to say.
        write_at(&project.join("operator.wasm"), Duration::ZERO);
        assert_eq!(stale_in(dir.path(), "counter/operator.wasm"), []);
    }

    #[test]
    fn a_component_outside_a_project_is_never_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_at(&dir.path().join("guests/op.wasm"), Duration::from_secs(50));
        write_at(&dir.path().join("guests/notes.py"), Duration::ZERO);
        assert_eq!(stale_in(dir.path(), "guests/op.wasm"), []);
    }

    #[test]
    fn a_missing_component_in_a_project_names_its_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_at(&dir.path().join("counter/operator.c"), Duration::ZERO);
        let hint = missing_component_hint(&dir.path().join("counter/operator.wasm"));
        let folder = dir.path().join("counter");
        assert!(
            hint.contains(&format!("weir build {}", folder.display())),
            "{hint}"
        );
        assert!(hint.contains("C operator project"), "{hint}");
        let elsewhere = missing_component_hint(&dir.path().join("nowhere/op.wasm"));
        assert!(elsewhere.contains("scripts/build-guests"), "{elsewhere}");
    }

    #[test]
    fn a_mistyped_component_beside_a_built_project_names_the_built_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_at(&dir.path().join("counter/operator.py"), Duration::ZERO);
        write_at(&dir.path().join("counter/operator.wasm"), Duration::ZERO);
        let hint = missing_component_hint(&dir.path().join("counter/opertor.wasm"));
        let built = dir.path().join("counter/operator.wasm");
        assert!(
            hint.contains(&format!("built into {}", built.display()))
                && hint.contains("did you mean")
                && !hint.contains("weir build"),
            "{hint}"
        );
    }
}
