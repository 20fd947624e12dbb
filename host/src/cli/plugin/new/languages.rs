//! What `plugin new` writes for each language: the files of its project and
//! the values of their placeholders. A language's SDK comes from its
//! ecosystem's registry by the host's version, or from a checkout of wasmprov
//! (`--sdk-path`).

use std::path::Path;

use clap::ValueEnum;

use super::{File, SDK_VERSION};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Language {
    Rust,
    Python,
}

/// The componentize-py release Python projects build with: the one
/// plugins/build.sh uses (a test checks that they agree).
pub(super) const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

const RUST: [File; 3] = [
    File {
        path: "Cargo.toml",
        template: include_str!("rust/Cargo.toml"),
        executable: false,
    },
    File {
        path: "src/lib.rs",
        template: include_str!("rust/src/lib.rs"),
        executable: false,
    },
    File {
        path: "build.sh",
        template: include_str!("rust/build.sh"),
        executable: true,
    },
];

const PYTHON: [File; 3] = [
    File {
        path: "app.py",
        template: include_str!("python/app.py"),
        executable: false,
    },
    File {
        path: "requirements.txt",
        template: include_str!("python/requirements.txt"),
        executable: false,
    },
    File {
        path: "build.sh",
        template: include_str!("python/build.sh"),
        executable: true,
    },
];

impl Language {
    pub fn all() -> &'static [Language] {
        Language::value_variants()
    }

    /// Its name in messages and the README.
    pub fn title(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
        }
    }

    /// The files of a project in this language (besides the common ones).
    pub(super) fn files(self) -> &'static [File] {
        match self {
            Language::Rust => &RUST,
            Language::Python => &PYTHON,
        }
    }

    /// Where this language's SDK lives in a checkout of wasmprov, and the
    /// file that shows it is there.
    pub fn sdk_in_checkout(self) -> (&'static str, &'static str) {
        match self {
            Language::Rust => ("plugins/sdk", "Cargo.toml"),
            Language::Python => ("plugins/sdk-python", "pyproject.toml"),
        }
    }

    /// How a project names its SDK dependency, in its ecosystem's words.
    pub fn published_sdk(self) -> String {
        match self {
            Language::Rust => format!("the crate wasmprov-plugin {SDK_VERSION} from crates.io"),
            Language::Python => format!("the package wasmprov-plugin {SDK_VERSION} from PyPI"),
        }
    }

    /// The placeholders of this language's files (`sdk`: the SDK's
    /// directory in a checkout, when the project depends on it by path).
    pub(super) fn values(self, name: &str, sdk: Option<&Path>) -> Vec<(&'static str, String)> {
        match self {
            Language::Rust => vec![
                (
                    "rust_sdk",
                    match sdk {
                        Some(dir) => format!(
                            "wasmprov-plugin = {{ path = {:?} }}",
                            dir.display().to_string()
                        ),
                        None => format!("wasmprov-plugin = \"{SDK_VERSION}\""),
                    },
                ),
                ("crate_file", name.replace('-', "_")),
                ("type_name", type_name(name)),
                ("source_file", "`src/lib.rs`".to_owned()),
                ("ignore", "/target/".to_owned()),
                (
                    "prerequisites",
                    "Rust with the `wasm32-wasip2` target (`rustup target add wasm32-wasip2`)."
                        .to_owned(),
                ),
            ],
            Language::Python => vec![
                (
                    "python_sdk",
                    match sdk {
                        Some(dir) => format!("wasmprov-plugin @ file://{}", dir.display()),
                        None => format!("wasmprov-plugin=={SDK_VERSION}"),
                    },
                ),
                (
                    "componentize_py_version",
                    COMPONENTIZE_PY_VERSION.to_owned(),
                ),
                ("source_file", "`app.py`".to_owned()),
                ("ignore", "/.venv/\n__pycache__/".to_owned()),
                (
                    "prerequisites",
                    "Python 3.10 or later with venv (e.g. `apt-get install python3 \
                     python3-venv`). The first build installs componentize-py and the wasmprov \
                     SDK (`requirements.txt`) into `.venv`; later builds reuse them."
                        .to_owned(),
                ),
            ],
        }
    }
}

/// `my-plugin` → `MyPlugin`.
fn type_name(name: &str) -> String {
    name.split('-')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_camel_case() {
        assert_eq!(type_name("my-volumes"), "MyVolumes");
        assert_eq!(type_name("disk2"), "Disk2");
    }

    #[test]
    fn python_projects_build_with_the_repositorys_componentize_py() {
        let build = include_str!("../../../../../plugins/build.sh");
        assert!(
            build.contains(&format!(
                "COMPONENTIZE_PY_VERSION={COMPONENTIZE_PY_VERSION}\n"
            )),
            "plugins/build.sh and `plugin new --lang python` must use the same componentize-py"
        );
    }
}
