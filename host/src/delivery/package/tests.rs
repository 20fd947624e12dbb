use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ConfigMap;

use super::super::encoding;
use super::read::label;
use super::*;

/// Incompressible bytes, so small part sizes give several parts.
fn component(len: usize) -> Vec<u8> {
    let mut out = b"\0asm\x0d\0\x01\0".to_vec();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn by_name(cms: &[ConfigMap]) -> HashMap<String, ConfigMap> {
    cms.iter()
        .map(|cm| (cm.metadata.name.clone().unwrap(), cm.clone()))
        .collect()
}

fn read_all(name: &str, cms: &HashMap<String, ConfigMap>) -> Content {
    read(name, &cms[&config_map_name(name)], |n| cms.get(n))
}

fn decoded(content: Content) -> Vec<u8> {
    match content {
        Content::Complete {
            encoding, bytes, ..
        } => encoding::decode(encoding, bytes).unwrap(),
        other => panic!("not complete: {other:?}"),
    }
}

#[test]
fn small_plugin_is_one_config_map() {
    let wasm = b"\0asm\x0d\0\x01\0".repeat(1000);
    let packed = pack(
        "hostpath",
        &wasm,
        Encoding::Zstd,
        Some("ns"),
        DEFAULT_PART_SIZE,
    )
    .unwrap();
    assert!(!packed.chunked);
    let [cm] = packed.config_maps.as_slice() else {
        panic!("{:?}", packed.config_maps)
    };
    assert_eq!(
        cm.metadata.name.as_deref(),
        Some("wasmprov-plugin-hostpath")
    );
    assert_eq!(cm.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(plugin_of(cm), Some("hostpath"));
    assert!(!is_part(cm));
    let keys: Vec<&String> = cm.binary_data.as_ref().unwrap().keys().collect();
    assert_eq!(keys, ["hostpath.wasm.zst"]);
    assert_eq!(decoded(read("hostpath", cm, |_| None)), wasm);
    assert_eq!(
        packed.digest,
        format!("sha256:{}", hex::encode(Sha256::digest(&wasm)))
    );
}

#[test]
fn split_and_assemble_round_trip() {
    let wasm = component(10_000);
    for encoding in [Encoding::Plain, Encoding::Gzip, Encoding::Zstd] {
        let packed = pack("big", &wasm, encoding, None, 2048).unwrap();
        assert!(packed.chunked, "{encoding:?}");
        let n = packed.config_maps.len();
        // Parts first, manifest last.
        assert!(n >= 6, "{n}");
        for (i, cm) in packed.config_maps[..n - 1].iter().enumerate() {
            assert_eq!(cm.metadata.name.clone().unwrap(), part_name("big", i));
            assert_eq!(label(cm, PART_LABEL), Some(i.to_string().as_str()));
            let bytes = &cm.binary_data.as_ref().unwrap()[PART_KEY].0;
            assert!(bytes.len() + PART_KEY.len() <= 2048);
        }
        let head = &packed.config_maps[n - 1];
        assert_eq!(head.metadata.name.clone().unwrap(), "wasmprov-plugin-big");
        assert!(!is_part(head));
        assert_eq!(referenced_parts(head).len(), n - 1);
        let cms = by_name(&packed.config_maps);
        assert_eq!(decoded(read_all("big", &cms)), wasm, "{encoding:?}");
    }
}

#[test]
fn parts_are_assembled_in_manifest_order() {
    let wasm = component(8000);
    let packed = pack("big", &wasm, Encoding::Plain, None, 2048).unwrap();
    let mut cms = by_name(&packed.config_maps);
    // Swap the contents of two parts (as if names were mixed up): the
    // manifest's order and digests catch it.
    let a = cms[&part_name("big", 0)].binary_data.clone();
    let b = cms[&part_name("big", 1)].binary_data.clone();
    cms.get_mut(&part_name("big", 0)).unwrap().binary_data = b;
    cms.get_mut(&part_name("big", 1)).unwrap().binary_data = a;
    assert!(matches!(read_all("big", &cms), Content::Invalid(m) if m.contains("part-000")),);
    // Restored, they assemble in the manifest's order.
    let cms = by_name(&packed.config_maps);
    assert_eq!(decoded(read_all("big", &cms)), wasm);
}

#[test]
fn waits_for_missing_parts_and_other_versions() {
    let v1 = pack("big", &component(6000), Encoding::Plain, None, 2048).unwrap();
    let v2 = pack("big", &component(7000), Encoding::Plain, None, 2048).unwrap();
    let mut cms = by_name(&v1.config_maps);
    cms.remove(&part_name("big", 2));
    assert!(
        matches!(read_all("big", &cms), Content::Waiting(m) if m.contains("part-002 of 3 is missing"))
    );
    // The new manifest first: the old parts are of another version.
    let mut cms = by_name(&v1.config_maps);
    let head = v2.config_maps.last().unwrap().clone();
    cms.insert(config_map_name("big"), head);
    assert!(matches!(read_all("big", &cms), Content::Waiting(m) if m.contains("another version")));
    // New parts first, under the old manifest: waiting too.
    let mut cms = by_name(&v1.config_maps);
    cms.insert(part_name("big", 0), v2.config_maps[0].clone());
    assert!(matches!(read_all("big", &cms), Content::Waiting(_)));
}

#[test]
fn leftover_parts_of_a_bigger_version_are_ignored() {
    let big = pack("p", &component(9000), Encoding::Plain, None, 2048).unwrap();
    let small = component(3000);
    let packed = pack("p", &small, Encoding::Plain, None, 2048).unwrap();
    let mut cms = by_name(&big.config_maps);
    cms.extend(by_name(&packed.config_maps));
    assert!(cms.len() > packed.config_maps.len());
    assert_eq!(decoded(read_all("p", &cms)), small);
}

#[test]
fn digest_mismatch_is_invalid() {
    let packed = pack("big", &component(6000), Encoding::Plain, None, 2048).unwrap();
    let mut cms = by_name(&packed.config_maps);
    let part = cms.get_mut(&part_name("big", 1)).unwrap();
    part.binary_data
        .as_mut()
        .unwrap()
        .get_mut(PART_KEY)
        .unwrap()
        .0[5] ^= 1;
    match read_all("big", &cms) {
        Content::Invalid(m) => assert!(m.contains("part-001 does not hold"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Without the version annotation, the digest alone decides.
    part_annotations_cleared(&mut cms, &part_name("big", 1));
    assert!(matches!(read_all("big", &cms), Content::Invalid(_)));
    // A manifest whose total disagrees with its parts.
    let mut cms = by_name(&packed.config_maps);
    let head = cms.get_mut(&config_map_name("big")).unwrap();
    let text = head.data.as_mut().unwrap().get_mut(MANIFEST_KEY).unwrap();
    let mut m: Manifest = serde_json::from_str(text).unwrap();
    m.size += 1;
    *text = serde_json::to_string(&m).unwrap();
    assert!(matches!(read_all("big", &cms), Content::Invalid(m) if m.contains("lists 3 parts")));
    // Part sizes that wrap around to the manifest's small total when
    // added: refused, never a panic or a pass.
    let mut cms = by_name(&packed.config_maps);
    let head = cms.get_mut(&config_map_name("big")).unwrap();
    let text = head.data.as_mut().unwrap().get_mut(MANIFEST_KEY).unwrap();
    let mut m: Manifest = serde_json::from_str(text).unwrap();
    m.parts[0].size = u64::MAX;
    m.parts[1].size = m.size - m.parts[2].size + 1;
    *text = serde_json::to_string(&m).unwrap();
    assert!(
        matches!(read_all("big", &cms), Content::Invalid(m) if m.contains("add up to more than any stream"))
    );
}

fn part_annotations_cleared(cms: &mut HashMap<String, ConfigMap>, name: &str) {
    cms.get_mut(name).unwrap().metadata.annotations = None;
}

#[test]
fn invalid_heads_say_what_to_fix() {
    let wasm = b"\0asm".to_vec();
    let mut cm = pack("a", &wasm, Encoding::Plain, None, DEFAULT_PART_SIZE)
        .unwrap()
        .config_maps
        .remove(0);
    assert!(
        matches!(read("b", &cm, |_| None), Content::Invalid(m) if m.contains("a.wasm but is labelled"))
    );
    cm.binary_data = None;
    assert!(matches!(read("a", &cm, |_| None), Content::Invalid(m) if m.contains("neither")));
    cm.data = Some(BTreeMap::from([(MANIFEST_KEY.into(), "{".into())]));
    assert!(
        matches!(read("a", &cm, |_| None), Content::Invalid(m) if m.contains("not a plugin manifest"))
    );
}

#[test]
fn names_and_sizes_are_checked() {
    for bad in ["", "Upper", "under_score", "-x", "x-", &"a".repeat(64)] {
        assert!(
            pack(bad, b"\0asm", Encoding::Plain, None, DEFAULT_PART_SIZE).is_err(),
            "{bad}"
        );
    }
    assert!(pack("ok", b"\0asm", Encoding::Plain, None, 100).is_err());
    assert!(pack("ok", b"\0asm", Encoding::Plain, None, MAX_CONFIG_MAP_BYTES).is_err());
}

#[test]
fn yaml_documents_parse_back() {
    let packed = pack("big", &component(5000), Encoding::Gzip, Some("ns"), 2048).unwrap();
    let yaml = to_yaml(&packed.config_maps).unwrap();
    let back: Vec<ConfigMap> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| ConfigMap::deserialize(d).unwrap())
        .collect();
    assert_eq!(back, packed.config_maps);
    assert!(yaml.contains("apiVersion: v1\nkind: ConfigMap\n"), "{yaml}");
}
