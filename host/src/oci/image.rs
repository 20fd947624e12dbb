//! Plugins as a container *image* rather than an artifact: what Kubernetes
//! image volumes mount. containerd mounts an image volume by unpacking the
//! image's tar layers (it does not unpack an `application/wasm` layer), so
//! `wasmprov plugin push --image` writes one gzip tar layer holding the
//! components at its root, and an OCI image config listing that layer.
//! The layer is reproducible (sorted names, time 0, owner 0:0, read-only),
//! so the same files give the same digest.

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::IMAGE_LAYER_GZIP_MEDIA_TYPE;

use super::{digest, parse, refused, Access, OciError};

/// Pushes an image whose root holds `files` (name, component), for image
/// volumes; returns the manifest's digest.
pub async fn push_image(
    reference: &str,
    files: &[(String, Vec<u8>)],
    access: &Access,
) -> Result<String, OciError> {
    let image = parse(reference)?;
    for (name, component) in files {
        if crate::runtime::binary_kind(component) != crate::runtime::BinaryKind::Component {
            return Err(refused(
                reference,
                format!(
                    "{name} is not a WebAssembly component (a core module or another file); \
                     build it as a component, or make one with `wasmprov plugin componentize`"
                ),
            ));
        }
    }
    let tar = tar_of(files).map_err(|e| refused(reference, format!("packing the layer: {e}")))?;
    let diff_id = digest(&tar);
    let layer = gzip(&tar).map_err(|e| refused(reference, format!("compressing: {e}")))?;
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    // The platform is the image config's required field; these files run
    // on any, and containerd does not match a lone manifest's platform.
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "config": {"Labels": {"io.wasmprov.plugins": names.join(",")}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "wasmprov plugin push --image", "created": "1970-01-01T00:00:00Z"}],
    });
    let layer = ImageLayer::new(layer, IMAGE_LAYER_GZIP_MEDIA_TYPE.to_owned(), None);
    let config = Config::oci_v1(
        serde_json::to_vec(&config).expect("a JSON value serializes"),
        None,
    );
    super::push_one_layer(reference, &image, layer, config, access).await
}

/// A tar of `files` at its root: sorted, time 0, owner 0:0, mode 0444.
fn tar_of(files: &[(String, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let mut sorted: Vec<&(String, Vec<u8>)> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in sorted {
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o444);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, name, bytes.as_slice())?;
    }
    builder.into_inner()
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    // No name and time 0 in the gzip header: the same tar, the same blob.
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_layer_is_the_same_for_the_same_files() {
        let files = [
            ("b.wasm".to_owned(), b"bbb".to_vec()),
            ("a.wasm".to_owned(), b"aa".to_vec()),
        ];
        let mut reversed = files.clone();
        reversed.reverse();
        let one = super::gzip(&super::tar_of(&files).unwrap()).unwrap();
        let two = super::gzip(&super::tar_of(&reversed).unwrap()).unwrap();
        assert_eq!(one, two);
        let tar = super::tar_of(&files).unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let names: Vec<(String, u32)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().mode().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [("a.wasm".to_owned(), 0o444), ("b.wasm".to_owned(), 0o444)]
        );
    }
}
