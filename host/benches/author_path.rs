//! The plugin author's path, timed: for each language, from an empty
//! directory outside the workspace, `wasmprov plugin new`, the project's
//! first `./build.sh`, then `wasmprov plugin test`, as the project's README
//! says (plugins/README.md, "Start a plugin of your own", keeps the table).
//!
//! Run: `cargo bench -p wasmprov --bench author_path [-- LANG...]`.
//!
//! Each project is new, so its build directory is empty (Rust compiles the
//! SDK and wit-bindgen, Python makes its venv, JavaScript its node_modules,
//! Go gets a fresh build cache, so it compiles its standard library for
//! wasip1); the machine's download caches (cargo registry, pip and npm
//! caches) are as they are, so a first project on a fresh machine also pays
//! for the downloads. The projects depend on this
//! checkout's SDKs (`--sdk-path`), as nothing is published yet.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const LANGUAGES: [&str; 5] = ["rust", "python", "js", "c", "go"];

fn main() {
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let wasmprov = Path::new(env!("CARGO_BIN_EXE_wasmprov"));
    println!("| language | plugin new | first ./build.sh | plugin test | component |");
    println!("|---|---|---|---|---|");
    for lang in LANGUAGES {
        if !chosen.is_empty() && !chosen.iter().any(|c| c == lang) {
            continue;
        }
        let home = tempfile::tempdir().unwrap();
        let name = format!("bench-{lang}-volumes");
        let (new, took_new) = timed(
            Command::new(wasmprov)
                .args(["plugin", "new", &name, "--lang", lang, "--sdk-path"])
                .arg(root)
                .current_dir(home.path()),
        );
        check(lang, "plugin new", &new);
        let project = home.path().join(&name);
        let (build, took_build) = timed(
            Command::new("./build.sh")
                .current_dir(&project)
                .env("WASMPROV", wasmprov)
                .env("PATH", format!("{}:/usr/local/go/bin", env_path()))
                // Go compiles its standard library for wasip1 once per
                // machine: a fresh build cache shows that first time.
                .env("GOCACHE", home.path().join("go-build")),
        );
        check(lang, "./build.sh", &build);
        let volumes = Path::new("/tmp").join(format!("{name}-volumes"));
        std::fs::create_dir_all(&volumes).unwrap();
        let wasm = format!("{name}.wasm");
        let (test, took_test) = timed(
            Command::new(wasmprov)
                .args([
                    "plugin",
                    "test",
                    &wasm,
                    "--class",
                    "class.yaml",
                    "--policy",
                    "policy.yaml",
                ])
                .current_dir(&project)
                // No compile cache: an author's first test compiles the
                // component, as this does.
                .env("WASMPROV_CACHE_DIR", home.path().join("compile-cache"))
                .env("WASMPROV_LOG", "warn"),
        );
        check(lang, "plugin test", &test);
        let size = std::fs::metadata(project.join(&wasm)).unwrap().len();
        println!(
            "| {lang} | {} | {} | {} | {:.1} MiB |",
            shown(took_new),
            shown(took_build),
            shown(took_test),
            size as f64 / (1 << 20) as f64
        );
        let _ = std::fs::remove_dir_all(&volumes);
    }
}

fn env_path() -> String {
    std::env::var("PATH").unwrap_or_default()
}

fn timed(command: &mut Command) -> (Output, Duration) {
    let start = Instant::now();
    let out = command.output().expect("run");
    (out, start.elapsed())
}

fn check(lang: &str, step: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{lang}: {step} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn shown(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}
