//! `wasmprov plugin new` as a plugin author runs it: from an empty directory
//! outside the workspace, with only the commands the project's README gives,
//! to a built component that passes `wasmprov plugin test`.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::*;

fn wasmprov(dir: &Path, args: &[&str]) -> Output {
    wasmprov_command()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run wasmprov")
}

fn report(what: &str, o: &Output) -> String {
    format!(
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The row of `check` in a `plugin test` table: its verdict and details.
fn row<'a>(table: &'a str, check: &str) -> Option<(&'a str, &'a str)> {
    table.lines().find_map(|line| {
        let (verdict, rest) = line.split_once(' ')?;
        let details = rest.trim_start().strip_prefix(check)?;
        details.starts_with("  ").then(|| (verdict, details.trim()))
    })
}

/// An author's path in `lang`: `plugin new` in an empty directory outside
/// the workspace, the one build command (with `build_env`), then the
/// README's `plugin test`, which must pass every check a minimal backend
/// can, and leave no volume behind. Returns the project's directory.
fn author_path(
    home: &Path,
    lang: &str,
    name: &str,
    build_env: &[(&str, &Path)],
) -> std::path::PathBuf {
    let root = workspace_root();
    let new = wasmprov(
        home,
        &[
            "plugin",
            "new",
            name,
            "--lang",
            lang,
            "--sdk-path",
            root.to_str().unwrap(),
        ],
    );
    assert!(new.status.success(), "{}", report("plugin new", &new));
    let project = home.join(name);
    let said = String::from_utf8_lossy(&new.stdout);
    assert!(said.contains("./build.sh"), "{said}");

    let mut build = Command::new("./build.sh");
    build.current_dir(&project);
    for (key, value) in build_env {
        build.env(key, value);
    }
    let build = build.output().unwrap();
    assert!(build.status.success(), "{}", report("./build.sh", &build));
    assert!(project.join(format!("{name}.wasm")).is_file());

    // The README's test commands, as they are.
    let volumes = Path::new("/tmp").join(format!("{name}-volumes"));
    std::fs::create_dir_all(&volumes).unwrap();
    let wasm = format!("{name}.wasm");
    let test = wasmprov(
        &project,
        &[
            "plugin",
            "test",
            &wasm,
            "--class",
            "class.yaml",
            "--policy",
            "policy.yaml",
        ],
    );
    let table = String::from_utf8_lossy(&test.stdout).into_owned();
    assert!(test.status.success(), "{}", report("plugin test", &test));
    for check in [
        "provision",
        "provision is idempotent",
        "claims get separate volumes",
        "delete",
        "delete removes the storage",
        "delete is idempotent",
        "delete of an unknown volume",
        "zero-size claim",
        "unknown parameter",
        "without parameter \"hostRoot\"",
        "output within policy",
    ] {
        assert_eq!(
            row(&table, check).map(|(verdict, _)| verdict),
            Some("PASS"),
            "{check}:\n{table}"
        );
    }
    // It deleted what it made.
    assert_eq!(std::fs::read_dir(&volumes).unwrap().count(), 0, "{table}");

    // A claim of the author's own (README: `plugin invoke`): the volume's
    // directory, with the README.txt that names its claim.
    std::fs::write(
        project.join("pvc.yaml"),
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: apps}\n\
         spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
    )
    .unwrap();
    let invoke = wasmprov(
        &project,
        &[
            "plugin",
            "invoke",
            &wasm,
            "--class",
            "class.yaml",
            "--pvc",
            "pvc.yaml",
            "--policy",
            "policy.yaml",
        ],
    );
    assert!(
        invoke.status.success(),
        "{}",
        report("plugin invoke", &invoke)
    );
    let made: Vec<_> = std::fs::read_dir(&volumes)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let readme = std::fs::read_to_string(made[0].join("README.txt")).unwrap();
    assert!(
        readme.contains("of the claim apps/data, made by the"),
        "{readme}"
    );
    std::fs::remove_dir_all(&made[0]).unwrap();
    project
}

#[test]
fn a_new_rust_plugin_builds_with_one_command_and_passes_plugin_test() {
    let home = tempfile::tempdir().unwrap();
    // Its dependencies are built once per machine (a target directory under
    // the workspace's), not once per run.
    let target = workspace_root().join("target/plugin-new");
    let project = author_path(
        home.path(),
        "rust",
        "demo-volumes",
        &[("CARGO_TARGET_DIR", &target)],
    );
    // What the author starts from is already formatted as rustfmt wants.
    let fmt = Command::new("cargo")
        .args(["fmt", "--check"])
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(
        fmt.status.success(),
        "{}",
        report("cargo fmt --check", &fmt)
    );
}

#[test]
fn a_new_python_plugin_builds_with_one_command_and_passes_plugin_test() {
    let home = tempfile::tempdir().unwrap();
    let project = author_path(home.path(), "python", "demo-py-volumes", &[]);
    // The SDK came from the checkout, installed as a package, WIT and all.
    let sdk = project.join(".venv/requirements.installed");
    let installed = std::fs::read_to_string(sdk).unwrap();
    assert!(installed.contains("plugins/sdk-python"), "{installed}");
    // Installing it built the wheel without writing into the checkout.
    let sdk = workspace_root().join("plugins/sdk-python");
    for litter in ["build", "wasmprov_plugin.egg-info"] {
        assert!(
            !sdk.join(litter).exists(),
            "pip left {litter} in {}",
            sdk.display()
        );
    }
}

#[test]
fn a_new_javascript_plugin_builds_with_one_command_and_passes_plugin_test() {
    let home = tempfile::tempdir().unwrap();
    let project = author_path(home.path(), "js", "demo-js-volumes", &[]);
    // The SDK came from the checkout, as an npm dependency.
    let sdk = project.join("node_modules/wasmprov-plugin/package.json");
    assert!(sdk.is_file(), "{}", sdk.display());
}

#[test]
fn a_new_c_plugin_builds_with_one_command_and_passes_plugin_test() {
    let home = tempfile::tempdir().unwrap();
    // build.sh makes the component with `wasmprov plugin componentize`.
    let wasmprov = Path::new(env!("CARGO_BIN_EXE_wasmprov"));
    let project = author_path(
        home.path(),
        "c",
        "demo-c-volumes",
        &[("WASMPROV", wasmprov)],
    );
    // The project carries its own copy of the SDK, the checkout's.
    let header = std::fs::read_to_string(project.join("wasmprov-sdk/wasmprov_plugin.h")).unwrap();
    let checkout = workspace_root().join("plugins/sdk-c/wasmprov_plugin.h");
    assert_eq!(header, std::fs::read_to_string(checkout).unwrap());
}

#[test]
fn a_new_go_plugin_builds_with_one_command_and_passes_plugin_test() {
    let home = tempfile::tempdir().unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_wasmprov"));
    let project = author_path(
        home.path(),
        "go",
        "demo-go-volumes",
        &[("WASMPROV", binary)],
    );
    // What the author starts from is already formatted as gofmt wants.
    let fmt = Command::new(go())
        .args(["fmt", "./..."])
        .current_dir(&project)
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(fmt.status.success(), "{}", report("go fmt", &fmt));
    assert!(
        fmt.stdout.is_empty(),
        "go fmt changed {}",
        String::from_utf8_lossy(&fmt.stdout)
    );

    // An author who drops the registration is told what to do, once.
    let main = std::fs::read_to_string(project.join("main.go")).unwrap();
    let unregistered = main.replace("plugin.Register(volumes{})", "");
    assert_ne!(main, unregistered);
    std::fs::write(project.join("main.go"), unregistered).unwrap();
    let build = Command::new("./build.sh")
        .current_dir(&project)
        .env("WASMPROV", binary)
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", report("./build.sh", &build));
    let test = wasmprov(
        &project,
        &[
            "plugin",
            "test",
            "demo-go-volumes.wasm",
            "--class",
            "class.yaml",
            "--policy",
            "policy.yaml",
        ],
    );
    assert!(!test.status.success());
    let table = String::from_utf8_lossy(&test.stdout);
    let (verdict, details) = row(&table, "load").expect("a load row");
    assert_eq!(verdict, "FAIL", "{table}");
    assert_eq!(
        details
            .matches("call plugin.Register in an init function of package main")
            .count(),
        1,
        "{details}"
    );
}

/// `go` on PATH, else where the Go installer puts it.
fn go() -> std::path::PathBuf {
    let installed = Path::new("/usr/local/go/bin/go");
    let on_path = Command::new("go").arg("version").output().is_ok();
    if on_path || !installed.exists() {
        "go".into()
    } else {
        installed.into()
    }
}

#[test]
fn the_go_sdk_helpers_pass_their_unit_tests() {
    let out = Command::new(go())
        .args(["test", "./"])
        .current_dir(workspace_root().join("plugins/sdk-go"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("go");
    assert!(out.status.success(), "{}", report("go test", &out));
}

#[test]
fn the_go_sdk_bindings_are_generated_from_its_wit() {
    // plugins/build.sh installs the generator for the Go plugins.
    let _ = plugin_path("hostpath-go");
    let root = workspace_root();
    let out = tempfile::tempdir().unwrap();
    let fresh = out.path().join("bindings");
    let generated = Command::new("bash")
        .arg(root.join("plugins/sdk-go/generate.sh"))
        .arg(&fresh)
        .env("PATH", path_with_go())
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        report("generate.sh", &generated)
    );
    let checked_in = root.join("plugins/sdk-go/bindings");
    assert_eq!(
        tree(&fresh),
        tree(&checked_in),
        "plugins/sdk-go/bindings is stale: run plugins/sdk-go/generate.sh"
    );
}

/// PATH with Go's directory, for scripts that run gofmt.
fn path_with_go() -> String {
    format!(
        "{}:/usr/local/go/bin",
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Every file under `dir`, by relative path, with its content.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                let name = path.strip_prefix(base).unwrap().display().to_string();
                out.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn the_c_sdk_bindings_are_generated_from_its_wit() {
    // wit-bindgen-cli as plugins/build.sh installs it for the C plugins.
    let _ = plugin_path("quota-dir");
    let root = workspace_root();
    let wit_bindgen = root.join("target/plugin-toolchains/cargo/bin/wit-bindgen");
    assert!(
        wit_bindgen.is_file(),
        "{} is missing: run `bash plugins/build.sh` (it installs wit-bindgen-cli)",
        wit_bindgen.display()
    );
    let out = tempfile::tempdir().unwrap();
    let generated = Command::new(&wit_bindgen)
        .args([
            "c",
            "plugins/sdk-c/wit",
            "--world",
            "provisioner",
            "--no-object-file",
        ])
        .arg("--out-dir")
        .arg(out.path())
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        report("wit-bindgen c", &generated)
    );
    for file in ["provisioner.h", "provisioner.c"] {
        assert!(
            std::fs::read(out.path().join(file)).unwrap()
                == std::fs::read(root.join("plugins/sdk-c/bindings").join(file)).unwrap(),
            "plugins/sdk-c/bindings/{file} is stale: regenerate it (plugins/sdk-c/README.md)"
        );
    }
}

#[test]
fn plugin_new_refuses_what_it_cannot_make_and_says_what_the_project_needs() {
    let home = tempfile::tempdir().unwrap();
    let out = wasmprov(
        home.path(),
        &["plugin", "new", "My_Plugin", "--lang", "rust"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"My_Plugin\" cannot be a plugin name") && err.contains("e.g. my-volumes"),
        "{err}"
    );

    std::fs::create_dir(home.path().join("taken")).unwrap();
    std::fs::write(home.path().join("taken/notes.txt"), "mine").unwrap();
    let out = wasmprov(home.path(), &["plugin", "new", "taken", "--lang", "rust"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("taken exists and is not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(home.path().join("taken/notes.txt")).unwrap(),
        "mine",
        "nothing of the author's is touched"
    );

    // Without --sdk-path: the published SDK, and a word on its not being
    // published yet rather than a first build that fails on it.
    let out = wasmprov(home.path(), &["plugin", "new", "plain", "--lang", "rust"]);
    assert!(out.status.success(), "{}", report("plugin new", &out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("until that release is published"), "{err}");
    let manifest = std::fs::read_to_string(home.path().join("plain/Cargo.toml")).unwrap();
    let dependency = format!("wasmprov-plugin = \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(manifest.contains(&dependency), "{manifest}");

    let out = wasmprov(home.path(), &["plugin", "new", "x", "--lang", "cobol"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("possible values: rust, python, js, c"),
        "{err}"
    );

    let out = wasmprov(
        home.path(),
        &[
            "plugin",
            "new",
            "x",
            "--lang",
            "rust",
            "--sdk-path",
            "/nowhere",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sdk-path /nowhere"), "{err}");
    assert!(!home.path().join("x").exists(), "nothing made on an error");
}

#[test]
fn the_javascript_sdk_helpers_pass_their_unit_tests() {
    let out = Command::new("node")
        .args(["--test", "plugins/sdk-js/test/"])
        .current_dir(workspace_root())
        .output()
        .expect("node");
    assert!(out.status.success(), "{}", report("node --test", &out));
}

#[test]
fn the_python_sdk_helpers_pass_their_unit_tests() {
    let out = Command::new("python3")
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "plugins/sdk-python/tests",
        ])
        .current_dir(workspace_root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", report("unittest", &out));
}

#[test]
fn plugin_componentize_says_what_is_wrong_with_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let run = |file: &str, bytes: Vec<u8>, extra: &[&str]| {
        std::fs::write(dir.path().join(file), bytes).unwrap();
        let mut args = vec!["plugin", "componentize", file, "-o", "out.wasm"];
        args.extend(extra);
        let out = wasmprov(dir.path(), &args);
        assert!(!out.status.success(), "{}", report("componentize", &out));
        assert!(!dir.path().join("out.wasm").exists(), "nothing written");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("c.wasm", wat::parse_str("(component)").unwrap(), &[]);
    assert!(err.contains("it is a component already"), "{err}");
    let err = run("m.wasm", wat::parse_str("(module)").unwrap(), &[]);
    assert!(
        err.contains("pass --wit DIR with the world it implements"),
        "{err}"
    );
    let wit = workspace_root().join("wit");
    let err = run(
        "m.wasm",
        wat::parse_str("(module)").unwrap(),
        &["--wit", wit.to_str().unwrap(), "--world", "nope"],
    );
    assert!(err.contains("no world \"nope\""), "{err}");
}

/// The files a published SDK package would hold (nothing is published
/// from here yet, and the tests above use the SDKs by path, which does not
/// show what a package leaves out, such as a link).
#[test]
fn the_sdk_packages_carry_the_contract() {
    let root = workspace_root();
    let npm = Command::new("npm")
        .args(["pack", "--dry-run", "--json"])
        .current_dir(root.join("plugins/sdk-js"))
        .output()
        .expect("npm");
    assert!(npm.status.success(), "{}", report("npm pack", &npm));
    let listed = String::from_utf8_lossy(&npm.stdout);
    for file in [
        "index.js",
        "lib/files.js",
        "wit/world.wit",
        "wit/deps/provisioner/provisioner.wit",
        "wit/deps/filesystem/filesystem.wit",
    ] {
        assert!(
            listed.contains(&format!("\"path\": \"{file}\"")),
            "npm pack leaves out {file}:\n{listed}"
        );
    }
    let cargo = Command::new("cargo")
        .args([
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "-p",
            "wasmprov-plugin",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo");
    assert!(
        cargo.status.success(),
        "{}",
        report("cargo package", &cargo)
    );
    let listed = String::from_utf8_lossy(&cargo.stdout);
    assert!(
        listed.lines().any(|line| line == "wit/provisioner.wit"),
        "the crate leaves out its WIT:\n{listed}"
    );
    // Both Rust crates build from their packages as crates.io would get
    // them (the second depends on the first by version).
    let verify = Command::new("cargo")
        .args([
            "package",
            "--allow-dirty",
            "--offline",
            "-p",
            "wasmprov-plugin-resizable",
            "-p",
            "wasmprov-plugin",
        ])
        .arg("--target-dir")
        .arg(root.join("target/package-check"))
        .current_dir(&root)
        .output()
        .expect("cargo");
    assert!(
        verify.status.success(),
        "{}",
        report("cargo package", &verify)
    );
}
