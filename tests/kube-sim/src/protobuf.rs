//! Decoding of Kubernetes protobuf request bodies for the two kinds kubectl's
//! generators write with protobuf: `kubectl create configmap … --from-file`
//! and `kubectl create namespace` (client-go typed clients send
//! `application/vnd.kubernetes.protobuf`). Responses stay JSON, which those
//! clients also accept.

use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};

/// Kubernetes protobuf envelope magic ("k8s\0").
const MAGIC: &[u8] = b"k8s\0";

fn bad(what: &str) -> ApiError {
    ApiError::BadRequest(format!("invalid protobuf body: {what}"))
}

/// One decoded field.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> ApiResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or_else(|| bad("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("varint too long"))
    }

    fn take(&mut self, n: usize) -> ApiResult<&'a [u8]> {
        if self.buf.len() < n {
            return Err(bad("truncated field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next(&mut self) -> ApiResult<Option<(u64, Wire<'a>)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let wire = match tag & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| bad("length"))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(bad("unsupported wire type")),
        };
        Ok(Some((tag >> 3, wire)))
    }
}

fn fields(buf: &[u8]) -> ApiResult<Vec<(u64, Wire<'_>)>> {
    let mut r = Reader { buf };
    let mut out = Vec::new();
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Ok(out)
}

fn text(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("string is not UTF-8"))
}

/// A `map<string, V>` entry: key = 1, value = 2.
fn map_entry(b: &[u8]) -> ApiResult<(String, &[u8])> {
    let mut key = String::new();
    let mut value: &[u8] = &[];
    for (n, w) in fields(b)? {
        match (n, w) {
            (1, Wire::Bytes(k)) => key = text(k)?,
            (2, Wire::Bytes(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

fn object_meta(b: &[u8]) -> ApiResult<Value> {
    let mut meta = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, w) in fields(b)? {
        let Wire::Bytes(v) = w else { continue };
        match n {
            1 => drop(meta.insert("name".into(), json!(text(v)?))),
            2 => drop(meta.insert("generateName".into(), json!(text(v)?))),
            3 => drop(meta.insert("namespace".into(), json!(text(v)?))),
            6 => drop(meta.insert("resourceVersion".into(), json!(text(v)?))),
            11 => {
                let (k, val) = map_entry(v)?;
                labels.insert(k, json!(text(val)?));
            }
            12 => {
                let (k, val) = map_entry(v)?;
                annotations.insert(k, json!(text(val)?));
            }
            14 => finalizers.push(json!(text(v)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(meta))
}

fn config_map(raw: &[u8]) -> ApiResult<Value> {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    let mut data = Map::new();
    let mut binary = Map::new();
    for (n, w) in fields(raw)? {
        match (n, w) {
            (1, Wire::Bytes(m)) => obj["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(e)) => {
                let (k, v) = map_entry(e)?;
                data.insert(k, json!(text(v)?));
            }
            (3, Wire::Bytes(e)) => {
                let (k, v) = map_entry(e)?;
                // ByteString serialises as base64, as the JSON API expects.
                let encoded = serde_json::to_value(k8s_openapi::ByteString(v.to_vec()))
                    .map_err(|e| ApiError::Internal(e.to_string()))?;
                binary.insert(k, encoded);
            }
            (4, Wire::Varint(b)) => obj["immutable"] = json!(b != 0),
            _ => {}
        }
    }
    if !data.is_empty() {
        obj["data"] = Value::Object(data);
    }
    if !binary.is_empty() {
        obj["binaryData"] = Value::Object(binary);
    }
    Ok(obj)
}

fn namespace(raw: &[u8]) -> ApiResult<Value> {
    let mut obj = json!({"apiVersion": "v1", "kind": "Namespace"});
    for (n, w) in fields(raw)? {
        match (n, w) {
            (1, Wire::Bytes(m)) => obj["metadata"] = object_meta(m)?,
            (2, Wire::Bytes(spec)) => {
                let mut fins = Vec::new();
                for (sn, sw) in fields(spec)? {
                    if let (1, Wire::Bytes(f)) = (sn, sw) {
                        fins.push(json!(text(f)?));
                    }
                }
                obj["spec"] = json!({"finalizers": fins});
            }
            _ => {}
        }
    }
    Ok(obj)
}

/// Decode a `application/vnd.kubernetes.protobuf` body into the JSON object.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s envelope"))?;
    let mut kind = String::new();
    let mut api_version = String::new();
    let mut raw: &[u8] = &[];
    for (n, w) in fields(envelope)? {
        match (n, w) {
            (1, Wire::Bytes(tm)) => {
                for (tn, tw) in fields(tm)? {
                    match (tn, tw) {
                        (1, Wire::Bytes(v)) => api_version = text(v)?,
                        (2, Wire::Bytes(k)) => kind = text(k)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(raw),
        ("v1", "Namespace") => namespace(raw),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "application/json, application/yaml (protobuf only for v1 ConfigMap and Namespace, got {api_version} {kind})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(out: &mut Vec<u8>, n: u8, b: &[u8]) {
        out.push(n << 3 | 2);
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    }

    #[test]
    fn config_map_from_protobuf() {
        let mut meta = Vec::new();
        field(&mut meta, 1, b"plug");
        let mut entry = Vec::new();
        field(&mut entry, 1, b"a.wasm");
        field(&mut entry, 2, &[0, 1, 2]);
        let mut cm = Vec::new();
        field(&mut cm, 1, &meta);
        field(&mut cm, 3, &entry);
        let mut tm = Vec::new();
        field(&mut tm, 1, b"v1");
        field(&mut tm, 2, b"ConfigMap");
        let mut body = MAGIC.to_vec();
        field(&mut body, 1, &tm);
        field(&mut body, 2, &cm);
        let v = decode(&body).unwrap();
        assert_eq!(v["metadata"]["name"], "plug");
        assert_eq!(v["binaryData"]["a.wasm"], "AAEC");
        assert!(decode(b"{}").is_err());
    }
}
