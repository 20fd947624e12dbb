//! `wasmprov plugin new NAME --lang LANG`: a plugin project of its own, in a
//! new directory outside any checkout of wasmprov, that builds with one
//! command (`./build.sh`) into `NAME.wasm` and passes `wasmprov plugin test`
//! with the class and policy it comes with. It is a small working backend
//! (a directory per volume in the plugin's preopen), not a stub: authors
//! change it rather than start from nothing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

mod languages;

pub use languages::Language;

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name: lowercase letters, digits and '-', starting with a
    /// letter (it names the plugin's ConfigMaps, policy entry and file).
    pub name: String,
    /// The language of the plugin.
    #[arg(long, value_enum)]
    pub lang: Language,
    /// The directory to create [default: ./NAME]; it must not exist, or be
    /// empty.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// A checkout of wasmprov whose SDK the project depends on by path,
    /// instead of the published package (to build against unreleased
    /// changes, or where the package is not published yet).
    #[arg(long, value_name = "DIR")]
    pub sdk_path: Option<PathBuf>,
}

/// The version of the SDKs a new project depends on: this host's.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A file of a new project: where it goes, its template, whether it runs.
pub(super) struct File {
    path: &'static str,
    template: &'static str,
    executable: bool,
}

const COMMON: [File; 4] = [
    File {
        path: "README.md",
        template: include_str!("common/README.md"),
        executable: false,
    },
    File {
        path: "class.yaml",
        template: include_str!("common/class.yaml"),
        executable: false,
    },
    File {
        path: "policy.yaml",
        template: include_str!("common/policy.yaml"),
        executable: false,
    },
    File {
        path: ".gitignore",
        template: include_str!("common/gitignore"),
        executable: false,
    },
];

pub fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    check_name(&args.name)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    ensure_empty(&dir)?;
    let sdk = match &args.sdk_path {
        Some(path) => Some(sdk_in_checkout(path, args.lang)?),
        None => None,
    };
    let values = values(&args, sdk.as_deref());
    // Everything is read and rendered before anything is written: a bad
    // --sdk-path leaves no half project behind.
    let mut files: Vec<(PathBuf, String, bool)> = COMMON
        .iter()
        .chain(args.lang.files())
        .map(|file| {
            (
                dir.join(file.path),
                render(file.template, &values),
                file.executable,
            )
        })
        .collect();
    for file in args.lang.vendored() {
        let content = match &sdk {
            Some(sdk) => {
                let path = sdk.join(file.path);
                std::fs::read_to_string(&path)
                    .with_context(|| format!("--sdk-path: cannot read {}", path.display()))?
            }
            None => file.content.to_owned(),
        };
        let path = dir.join(languages::VENDORED_DIR).join(file.path);
        files.push((path, content, false));
    }
    for (path, content, executable) in files {
        write_file(&path, &content, executable)?;
    }
    let shown = dir.display();
    println!(
        "created the {} plugin {} in {shown}",
        args.lang.title(),
        args.name
    );
    println!();
    println!("  cd {shown}");
    println!("  ./build.sh");
    println!("  mkdir -p /tmp/{}-volumes", args.name);
    println!(
        "  wasmprov plugin test {}.wasm --class class.yaml --policy policy.yaml",
        args.name
    );
    println!();
    println!("README.md says how to try it in a cluster and ship it.");
    if let (None, Some(published)) = (&sdk, args.lang.published_sdk()) {
        // Say so now rather than let the first build fail on it.
        eprintln!(
            "note: the project depends on {published}; until that release is published, run \
             `wasmprov plugin new` with --sdk-path pointing at a checkout of wasmprov"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What the templates' `{{…}}` placeholders become.
struct Values {
    pairs: Vec<(&'static str, String)>,
}

fn values(args: &NewArgs, sdk: Option<&Path>) -> Values {
    let mut pairs = vec![
        ("name", args.name.clone()),
        ("language", args.lang.title().to_owned()),
    ];
    pairs.extend(args.lang.values(&args.name, sdk));
    Values { pairs }
}

fn render(template: &str, values: &Values) -> String {
    values
        .pairs
        .iter()
        .fold(template.to_owned(), |text, (key, value)| {
            text.replace(&format!("{{{{{key}}}}}"), value)
        })
}

fn write_file(path: &Path, content: &str, executable: bool) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("cannot write {}", path.display()))?;
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

/// A DNS label that starts with a letter: a valid plugin name, crate and
/// package name in every language.
fn check_name(name: &str) -> anyhow::Result<()> {
    let fine = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !fine {
        anyhow::bail!(
            "{name:?} cannot be a plugin name: use lowercase letters, digits and '-', starting \
             with a letter and not ending with '-', at most 63 characters (e.g. my-volumes)"
        );
    }
    Ok(())
}

fn ensure_empty(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                anyhow::bail!(
                    "{} exists and is not empty: choose another --dir, or remove it",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot look at {}", dir.display())),
    }
}

/// The directory of `lang`'s SDK in the checkout `path`, absolute.
fn sdk_in_checkout(path: &Path, lang: Language) -> anyhow::Result<PathBuf> {
    let checkout = std::fs::canonicalize(path)
        .with_context(|| format!("--sdk-path {}: no such directory", path.display()))?;
    let (sdk, marker) = lang.sdk_in_checkout();
    let sdk = checkout.join(sdk);
    if !sdk.join(marker).is_file() {
        anyhow::bail!(
            "--sdk-path {}: not a checkout of wasmprov ({} is missing)",
            path.display(),
            sdk.join(marker).display()
        );
    }
    Ok(sdk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels_that_start_with_a_letter() {
        for good in ["a", "my-volumes", "disk2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "My", "2disk", "a_b", "a-", "a.b", &"a".repeat(64)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("cannot be a plugin name"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_placeholder_of_every_language_is_filled() {
        for &lang in Language::all() {
            for sdk in [None, Some(Path::new("/src/wasmprov/plugins/sdk"))] {
                let args = NewArgs {
                    name: "my-volumes".into(),
                    lang,
                    dir: None,
                    sdk_path: None,
                };
                let values = values(&args, sdk);
                for file in COMMON.iter().chain(lang.files()) {
                    let text = render(file.template, &values);
                    assert!(!text.contains("{{"), "{lang:?} {}: {text}", file.path);
                }
            }
        }
    }
}
