//! What `plugin new` writes for each language: the files of its project and
//! the values of their placeholders. A language's SDK comes from its
//! ecosystem's registry by the host's version, or from a checkout of wasmprov
//! (`--sdk-path`); a C project carries a copy of its SDK instead.

use std::path::Path;

use clap::ValueEnum;

use super::{File, SDK_VERSION};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Language {
    Rust,
    Python,
    /// JavaScript.
    Js,
    C,
    Go,
}

/// The componentize-py release Python projects build with: the one
/// plugins/build.sh uses (a test checks that they agree).
pub(super) const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// The componentize-js release JavaScript projects build with: the one
/// plugins/build.sh uses (a test checks that they agree).
pub(super) const COMPONENTIZE_JS_VERSION: &str = "0.23.0";
/// The esbuild release that bundles a JavaScript project with its SDK.
const ESBUILD_VERSION: &str = "0.28.2";

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

const JS: [File; 3] = [
    File {
        path: "app.js",
        template: include_str!("js/app.js"),
        executable: false,
    },
    File {
        path: "package.json",
        template: include_str!("js/package.json"),
        executable: false,
    },
    File {
        path: "build.sh",
        template: include_str!("js/build.sh"),
        executable: true,
    },
];

const C: [File; 2] = [
    File {
        path: "plugin.c",
        template: include_str!("c/plugin.c"),
        executable: false,
    },
    File {
        path: "build.sh",
        template: include_str!("c/build.sh"),
        executable: true,
    },
];

/// The Go module of the SDK (plugins/sdk-go/go.mod; a test checks it).
const GO_SDK_MODULE: &str = "example.invalid/wasmprov/plugins/sdk-go";

const GO: [File; 3] = [
    File {
        path: "main.go",
        template: include_str!("go/main.go"),
        executable: false,
    },
    File {
        path: "go.mod",
        template: include_str!("go/go.mod"),
        executable: false,
    },
    File {
        path: "build.sh",
        template: include_str!("go/build.sh"),
        executable: true,
    },
];

/// A file of an SDK that a project carries a copy of (C has no package
/// manager: a project vendors its libraries): its path in the SDK and in
/// the project's `wasmprov-sdk/`, and the copy this host was built with.
pub(super) struct Vendored {
    pub path: &'static str,
    pub content: &'static str,
}

/// Where a C project keeps its copy of the SDK.
pub(super) const VENDORED_DIR: &str = "wasmprov-sdk";

const C_SDK: [Vendored; 6] = [
    Vendored {
        path: "README.md",
        content: include_str!("../../../../../plugins/sdk-c/README.md"),
    },
    Vendored {
        path: "wasmprov_plugin.h",
        content: include_str!("../../../../../plugins/sdk-c/wasmprov_plugin.h"),
    },
    Vendored {
        path: "wasmprov_plugin.c",
        content: include_str!("../../../../../plugins/sdk-c/wasmprov_plugin.c"),
    },
    Vendored {
        path: "bindings/provisioner.h",
        content: include_str!("../../../../../plugins/sdk-c/bindings/provisioner.h"),
    },
    Vendored {
        path: "bindings/provisioner.c",
        content: include_str!("../../../../../plugins/sdk-c/bindings/provisioner.c"),
    },
    Vendored {
        path: "wit/provisioner.wit",
        content: include_str!("../../../../../plugins/sdk-c/wit/provisioner.wit"),
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
            Language::Js => "JavaScript",
            Language::C => "C",
            Language::Go => "Go",
        }
    }

    /// The files of a project in this language (besides the common ones).
    pub(super) fn files(self) -> &'static [File] {
        match self {
            Language::Rust => &RUST,
            Language::Python => &PYTHON,
            Language::Js => &JS,
            Language::C => &C,
            Language::Go => &GO,
        }
    }

    /// The SDK files a project in this language carries a copy of.
    pub(super) fn vendored(self) -> &'static [Vendored] {
        match self {
            Language::C => &C_SDK,
            Language::Rust | Language::Python | Language::Js | Language::Go => &[],
        }
    }

    /// Where this language's SDK lives in a checkout of wasmprov, and the
    /// file that shows it is there.
    pub fn sdk_in_checkout(self) -> (&'static str, &'static str) {
        match self {
            Language::Rust => ("plugins/sdk", "Cargo.toml"),
            Language::Python => ("plugins/sdk-python", "pyproject.toml"),
            Language::Js => ("plugins/sdk-js", "package.json"),
            Language::C => ("plugins/sdk-c", "wasmprov_plugin.h"),
            Language::Go => ("plugins/sdk-go", "go.mod"),
        }
    }

    /// The published SDK a project depends on, in its ecosystem's words
    /// (`None`: the project carries its own copy).
    pub fn published_sdk(self) -> Option<String> {
        match self {
            Language::Rust => Some(format!(
                "the crate wasmprov-plugin {SDK_VERSION} from crates.io"
            )),
            Language::Python => Some(format!(
                "the package wasmprov-plugin {SDK_VERSION} from PyPI"
            )),
            Language::Js => Some(format!(
                "the package wasmprov-plugin {SDK_VERSION} from npm"
            )),
            Language::Go => Some(format!("the Go module {GO_SDK_MODULE} v{SDK_VERSION}")),
            Language::C => None,
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
            Language::Js => vec![
                (
                    "js_sdk",
                    match sdk {
                        Some(dir) => format!("file:{}", dir.display()),
                        None => SDK_VERSION.to_owned(),
                    },
                ),
                (
                    "componentize_js_version",
                    COMPONENTIZE_JS_VERSION.to_owned(),
                ),
                ("esbuild_version", ESBUILD_VERSION.to_owned()),
                ("source_file", "`app.js`".to_owned()),
                ("ignore", "/node_modules/\n/build/".to_owned()),
                (
                    "prerequisites",
                    "Node.js 18 or later with npm. The first build installs the wasmprov SDK, \
                     esbuild and componentize-js (`package.json`) into `node_modules`; later \
                     builds reuse them."
                        .to_owned(),
                ),
            ],
            Language::Go => vec![
                ("go_sdk_module", GO_SDK_MODULE.to_owned()),
                ("sdk_version", SDK_VERSION.to_owned()),
                (
                    "go_sdk_replace",
                    match sdk {
                        Some(dir) => format!("\nreplace {GO_SDK_MODULE} => {}", dir.display()),
                        None => String::new(),
                    },
                ),
                ("source_file", "`main.go`".to_owned()),
                ("ignore", "/build/".to_owned()),
                (
                    "prerequisites",
                    "Go 1.25 or later, and `wasmprov` on PATH (`wasmprov plugin componentize` \
                     makes the component). The SDK is the Go module in `go.mod`."
                        .to_owned(),
                ),
            ],
            Language::C => vec![
                ("source_file", "`plugin.c`".to_owned()),
                ("ignore", "/build/".to_owned()),
                (
                    "prerequisites",
                    "clang with lld and wasi-libc (e.g. `apt-get install clang lld wasi-libc \
                     libclang-rt-dev-wasm32`), and `wasmprov` on PATH (`wasmprov plugin \
                     componentize` makes the component). The SDK is a copy in `wasmprov-sdk/`: \
                     helpers (`wasmprov_plugin.h`) and the generated bindings."
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
    fn projects_build_with_the_repositorys_toolchains() {
        let build = include_str!("../../../../../plugins/build.sh");
        for (tool, version) in [
            ("COMPONENTIZE_PY_VERSION", COMPONENTIZE_PY_VERSION),
            ("COMPONENTIZE_JS_VERSION", COMPONENTIZE_JS_VERSION),
        ] {
            assert!(
                build.contains(&format!("{tool}={version}\n")),
                "plugins/build.sh and `plugin new` must use the same {tool}"
            );
        }
    }

    #[test]
    fn go_projects_require_the_sdks_module() {
        let go_mod = include_str!("../../../../../plugins/sdk-go/go.mod");
        assert!(go_mod.starts_with(&format!("module {GO_SDK_MODULE}\n")));
    }

    #[test]
    fn the_sdks_carry_contract_0_2() {
        // Copies, not links: npm leaves links out of the package it
        // publishes, a Python sdist may keep them as links, and a C project
        // carries its own copy. They stay on 0.2.0 (the host runs it): 0.3.0
        // only adds the optional `capacity` export, which these SDKs do not
        // offer yet. Moving one means copying wit/provisioner.wit instead.
        let contract = include_str!("../../../../../wit/v0.2/provisioner.wit");
        assert!(
            include_str!("../../../../../plugins/sdk-js/wit/deps/provisioner/provisioner.wit")
                == contract,
            "copy wit/v0.2/provisioner.wit to plugins/sdk-js/wit/deps/provisioner/"
        );
        assert!(
            include_str!("../../../../../plugins/sdk-python/wasmprov_plugin/wit/provisioner.wit")
                == contract,
            "copy wit/v0.2/provisioner.wit to plugins/sdk-python/wasmprov_plugin/wit/"
        );
        assert!(
            include_str!("../../../../../plugins/sdk-go/wit/provisioner.wit") == contract,
            "copy wit/v0.2/provisioner.wit to plugins/sdk-go/wit/ and run plugins/sdk-go/generate.sh"
        );
        assert!(
            include_str!("../../../../../plugins/sdk-c/wit/provisioner.wit") == contract,
            "copy wit/v0.2/provisioner.wit to plugins/sdk-c/wit/ and regenerate plugins/sdk-c/bindings \
             (see plugins/sdk-c/README.md)"
        );
    }
}
