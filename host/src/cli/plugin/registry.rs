//! `wasmprov plugin push` and `pull`: a plugin component to and from an
//! OCI registry, as plugin authors publish releases ([`crate::oci`]).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::oci::signature::PublicKey;
use crate::oci::{self, Access, Limits};

/// How to reach the registry.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP to the registry (one on loopback, a lab): never
    /// a fallback from HTTPS.
    #[arg(long)]
    pub plain_http: bool,
    /// User name at the registry [default: anonymous].
    #[arg(long, env = "WASMPROV_REGISTRY_USERNAME")]
    pub username: Option<String>,
    /// Read the password (or token) from standard input, as `docker login
    /// --password-stdin` does; needs --username.
    #[arg(long, requires = "username")]
    pub password_stdin: bool,
    /// Trust the authority whose certificate (PEM) is in this file, beside
    /// the system's: a registry with a private CA.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

impl RegistryArgs {
    fn access(&self) -> anyhow::Result<Access> {
        let credentials = match &self.username {
            None => None,
            Some(user) => {
                anyhow::ensure!(
                    self.password_stdin,
                    "--username {user} needs --password-stdin (the password on standard input, \
                     never on the command line)"
                );
                let mut password = String::new();
                std::io::stdin()
                    .read_to_string(&mut password)
                    .context("reading the password from standard input")?;
                Some((
                    user.clone(),
                    password.trim_end_matches(['\n', '\r']).to_owned(),
                ))
            }
        };
        let ca_certificates = match &self.ca_file {
            None => None,
            Some(file) => Some(
                std::fs::read(file)
                    .with_context(|| format!("reading --ca-file {}", file.display()))?,
            ),
        };
        Ok(Access {
            plain_http: self.plain_http,
            credentials,
            ca_certificates,
            mirror: None,
        })
    }
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The plugin component (`.wasm`); with --image, one or more.
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Where to push it: REGISTRY/REPOSITORY:TAG.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The layer's file name [default: FILE's name].
    #[arg(long, conflicts_with = "image")]
    pub name: Option<String>,
    /// Push an image for a Kubernetes image volume instead: one tar layer
    /// with the files at its root, for a host's plugins directory
    /// (deploy/README.md, "Plugins as an OCI image volume").
    #[arg(long)]
    pub image: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// What to pull: REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Where to write the component [default: the repository's last part
    /// with `.wasm`, in the current directory].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write it only if it carries a cosign signature by this public key
    /// (`cosign.pub`); may be given more than once (any one will do).
    #[arg(long = "key", value_name = "FILE")]
    pub keys: Vec<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub async fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let access = args.registry.access()?;
    let mut files = Vec::new();
    for file in &args.files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        files.push((file, bytes));
    }
    let (digest, what) = if args.image {
        let mut named = Vec::new();
        for (file, bytes) in files {
            named.push((format!("{}.wasm", super::name_of_file(file)?), bytes));
        }
        let digest = oci::push_image(&args.reference, &named, &access).await?;
        let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        (digest, format!("an image holding {}", names.join(", ")))
    } else {
        let [(file, component)] = files.as_slice() else {
            anyhow::bail!(
                "{} files given: a plugin artifact is one component (push each to its own \
                 reference), or give --image for an image volume holding them all",
                files.len()
            );
        };
        let name = match &args.name {
            Some(name) => name.clone(),
            None => super::name_of_file(file)?,
        };
        let digest = oci::push(&args.reference, &name, component, &access).await?;
        (
            digest,
            format!("{} ({} bytes)", file.display(), component.len()),
        )
    };
    println!("pushed {what} to {}", args.reference);
    println!("digest: {digest}");
    Ok(ExitCode::SUCCESS)
}

pub async fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let access = args.registry.access()?;
    let keys = args
        .keys
        .iter()
        .map(|file| PublicKey::read(file).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pulled = oci::pull(&args.reference, &access, Limits::default()).await?;
    let signed = match keys.is_empty() {
        true => None,
        false => Some(
            oci::signature::verify(&args.reference, &pulled.manifest_digest, &access, &keys)
                .await?,
        ),
    };
    let output = match &args.output {
        Some(path) => path.clone(),
        None => PathBuf::from(format!("{}.wasm", repository_name(&args.reference))),
    };
    super::write_atomically(&output, &pulled.component)?;
    println!(
        "pulled {} ({} bytes, {}) to {}",
        args.reference,
        pulled.component.len(),
        pulled.layer_media_type,
        output.display()
    );
    println!("digest: {}", pulled.manifest_digest);
    if let Some(signed) = signed {
        println!(
            "signature: verified with {} ({})",
            signed.key, signed.format
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `hostpath` of `registry.example.com/plugins/hostpath:1.0`.
fn repository_name(reference: &str) -> &str {
    let path = reference.split(['@']).next().unwrap_or(reference);
    let last = path.rsplit('/').next().unwrap_or(path);
    last.split(':').next().unwrap_or(last)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pulled_file_is_named_after_its_repository() {
        for (reference, name) in [
            ("localhost:5000/plugins/hostpath:1.0", "hostpath"),
            ("registry.example.com/x/quota-dir@sha256:ab", "quota-dir"),
            ("localhost:5000/plain", "plain"),
        ] {
            assert_eq!(super::repository_name(reference), name);
        }
    }
}
