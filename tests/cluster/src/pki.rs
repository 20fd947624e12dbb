//! Keys and certificates made fresh for each cluster: a CA and the API
//! server's serving certificate (for its address, 127.0.0.1, localhost and
//! the `kubernetes` Service that pods reach it by), and the key pair that
//! signs service-account tokens.

use std::io::Read;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

pub struct Keys {
    pub ca: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub service_account_private: PathBuf,
    pub service_account_public: PathBuf,
}

fn failed(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |e| Error::Keys {
        what: what.to_owned(),
        message: e.to_string(),
    }
}

pub fn generate(dir: &Path, api_host: std::net::Ipv4Addr) -> Result<Keys, Error> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).map_err(crate::io(format!("create {}", pki.display())))?;

    let ca_key = KeyPair::generate().map_err(failed("CA key"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed("CA"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "wasmprov test cluster CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(failed("CA"))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate().map_err(failed("serving key"))?;
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        // The first address of --service-cluster-ip-range, and its names.
        "10.96.0.1".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ];
    if !api_host.is_loopback() {
        names.push(api_host.to_string());
    }
    let mut params = CertificateParams::new(names).map_err(failed("serving certificate"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = params
        .signed_by(&serving_key, &issuer)
        .map_err(failed("serving certificate"))?;

    let sa_key = KeyPair::generate().map_err(failed("service-account key"))?;

    let keys = Keys {
        ca: pki.join("ca.crt"),
        serving_cert: pki.join("apiserver.crt"),
        serving_key: pki.join("apiserver.key"),
        service_account_private: pki.join("sa.key"),
        service_account_public: pki.join("sa.pub"),
    };
    crate::write(&keys.ca, &ca_cert.pem())?;
    crate::write(&keys.serving_cert, &serving_cert.pem())?;
    crate::write(&keys.serving_key, &serving_key.serialize_pem())?;
    crate::write(&keys.service_account_private, &sa_key.serialize_pem())?;
    crate::write(&keys.service_account_public, &sa_key.public_key_pem())?;
    Ok(keys)
}

/// 32 random hex digits from the kernel.
pub fn random_token() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(crate::io("read /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
