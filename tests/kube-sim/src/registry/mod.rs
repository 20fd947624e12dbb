//! Write semantics of kube-apiserver's generic registry for the served types:
//! decoding and field validation, defaults, admission (namespace lifecycle,
//! default StorageClass, in-use protection finalizers), validation and
//! immutability, optimistic concurrency, status subresources, finalizers and
//! `deletionTimestamp`.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

mod admission;
mod validation;

use crate::convert;
use crate::error::{ApiError, ApiResult, Target};
use crate::objects;
use crate::patch::{self, PatchType};
use crate::resources::{self, ResourceId, RESOURCES};
use crate::store::{Change, Key, Store};
use crate::util::{self, Rng};

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl Validation {
    pub fn parse(s: &str) -> ApiResult<Self> {
        match s {
            "" | "Warn" => Ok(Validation::Warn),
            "Ignore" => Ok(Validation::Ignore),
            "Strict" => Ok(Validation::Strict),
            other => Err(ApiError::BadRequest(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, got {other:?}"
            ))),
        }
    }
}

/// Options common to writes (query parameters).
#[derive(Debug, Clone)]
pub struct WriteOpts {
    pub manager: String,
    pub validation: Validation,
    pub dry_run: bool,
    pub force: bool,
}

impl Default for WriteOpts {
    fn default() -> Self {
        WriteOpts {
            manager: "kube-sim".into(),
            validation: Validation::Warn,
            dry_run: false,
            force: false,
        }
    }
}

/// Result of a successful write.
#[derive(Debug)]
pub struct Written {
    pub object: Arc<Value>,
    pub created: bool,
    pub warnings: Vec<String>,
}

/// `DeleteOptions` that matter here.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// Admission plugins that can be switched off with their controllers.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub protection_finalizers: bool,
    pub default_storage_class: bool,
}

pub struct Registry {
    pub store: Arc<Store>,
    rng: Mutex<Rng>,
    admission: Admission,
}

pub fn target(res: ResourceId, name: &str) -> Target {
    let def = &RESOURCES[res];
    Target::new(def.group, def.plural, name)
}

impl Registry {
    pub fn new(store: Arc<Store>, seed: u64, admission: Admission) -> Self {
        Registry {
            store,
            rng: Mutex::new(Rng::new(seed)),
            admission,
        }
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, Rng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn key(res: ResourceId, ns: &str, name: &str) -> Key {
        let ns = if RESOURCES[res].namespaced { ns } else { "" };
        (ns.to_string(), name.to_string())
    }

    pub fn get(&self, api: ResourceId, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
        let res = convert::storage(api);
        let obj = self
            .store
            .get(res, &Self::key(res, ns, name))
            .ok_or_else(|| ApiError::NotFound(target(api, name)))?;
        Ok(present(api, obj))
    }

    /// Decode like the real server: check apiVersion/kind, round-trip through
    /// the k8s-openapi type, and handle unknown fields per `fieldValidation`.
    fn decode(
        &self,
        res: ResourceId,
        mut body: Value,
        validation: Validation,
    ) -> ApiResult<(Value, Vec<String>)> {
        let def = &RESOURCES[res];
        let api_version = def.api_version();
        let Some(map) = body.as_object_mut() else {
            return Err(ApiError::BadRequest(format!(
                "the body of the request is not a {} object",
                def.kind
            )));
        };
        match map.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("apiVersion".into(), json!(api_version));
            }
            Some(v) if v == api_version => {}
            Some(v) => {
                return Err(ApiError::BadRequest(format!(
                    "the API version in the data ({v}) does not match the expected API version ({api_version})"
                )))
            }
        }
        match map.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("kind".into(), json!(def.kind));
            }
            Some(k) if k == def.kind => {}
            Some(k) => {
                return Err(ApiError::BadRequest(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    def.kind
                )))
            }
        }
        let cannot_decode = |e: &dyn std::fmt::Display| {
            ApiError::BadRequest(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: {e}",
                kind = def.kind,
                v = def.version
            ))
        };
        let decoded = (def.roundtrip)(body.clone()).map_err(|e| cannot_decode(&e))?;
        if let Some(e) = validation::bad_quantity(res, &decoded) {
            return Err(cannot_decode(&e));
        }
        let unknown = if validation == Validation::Ignore {
            Vec::new()
        } else {
            resources::unknown_fields(&body, &decoded)
        };
        if validation == Validation::Strict && !unknown.is_empty() {
            let msgs: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            return Err(ApiError::BadRequest(format!(
                "strict decoding error: {}",
                msgs.join(", ")
            )));
        }
        Ok((
            decoded,
            unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect(),
        ))
    }

    // ---- create ------------------------------------------------------------

    pub fn create(
        &self,
        res: ResourceId,
        path_ns: &str,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let (obj, warnings) = self.decode(res, body, opts.validation)?;
        let stored = convert::to_storage(res, obj);
        if res == resources::EVENT_V1 {
            let mut event = stored.clone();
            if objects::namespace(&event).is_empty() {
                objects::meta_mut(&mut event).insert("namespace".into(), json!(path_ns));
            }
            validation::validate_event_v1(&event)?;
        }
        self.create_decoded(convert::storage(res), path_ns, stored, opts, warnings, true)
            .map(|w| present_written(res, w))
    }

    fn create_decoded(
        &self,
        res: ResourceId,
        path_ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
        warnings: Vec<String>,
        track_fields: bool,
    ) -> ApiResult<Written> {
        let def = &RESOURCES[res];
        {
            let body_ns = objects::namespace(&obj).to_string();
            let m = objects::meta_mut(&mut obj);
            if def.namespaced {
                if !body_ns.is_empty() && !path_ns.is_empty() && body_ns != path_ns {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                let ns = if path_ns.is_empty() {
                    body_ns
                } else {
                    path_ns.to_string()
                };
                if ns.is_empty() {
                    return Err(ApiError::BadRequest(
                        "the server could not find the requested resource".into(),
                    ));
                }
                m.insert("namespace".into(), json!(ns));
            } else {
                m.remove("namespace");
            }
        }
        self.prepare_create(res, &mut obj)?;
        validation::validate(res, &obj, None)?;
        self.admit_create(res, &mut obj)?;
        let now = util::now();
        if track_fields {
            patch::apply::record_update(None, &mut obj, &opts.manager, "", &now);
        }
        let name = objects::name(&obj).to_string();
        let key = Self::key(res, objects::namespace(&obj), &name);
        if opts.dry_run {
            if self.store.get(res, &key).is_some() {
                return Err(ApiError::AlreadyExists(target(res, &name)));
            }
            return Ok(Written {
                object: Arc::new(obj),
                created: true,
                warnings,
            });
        }
        let stored = self.store.transact(res, &key, |cur| match cur {
            Some(_) => Err(ApiError::AlreadyExists(target(res, &name))),
            None => Ok(Change::Put(obj)),
        })?;
        let object = stored.ok_or_else(|| ApiError::Internal("create stored nothing".into()))?;
        Ok(Written {
            object,
            created: true,
            warnings,
        })
    }

    fn prepare_create(&self, res: ResourceId, obj: &mut Value) -> ApiResult<()> {
        let name = objects::name(obj).to_string();
        let generate = objects::meta_str(obj, "generateName").map(str::to_string);
        let (uid, suffix) = {
            let mut rng = self.rng();
            (rng.uuid(), rng.name_suffix())
        };
        let now = util::now();
        let m = objects::meta_mut(obj);
        if name.is_empty() {
            match generate {
                Some(prefix) => {
                    m.insert("name".into(), json!(format!("{prefix}{suffix}")));
                }
                None => {
                    return Err(validation::invalid(
                        res,
                        "",
                        vec![
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        ],
                    ))
                }
            }
        }
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now));
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
        ] {
            m.remove(k);
        }
        // Status is server-owned on create for these kinds.
        if matches!(
            res,
            resources::PVC | resources::PV | resources::POD | resources::NAMESPACE
        ) {
            if let Some(map) = obj.as_object_mut() {
                map.remove("status");
            }
        }
        self.apply_defaults(res, obj);
        Ok(())
    }

    // ---- update / patch ----------------------------------------------------

    /// PUT.
    pub fn update(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        body: Value,
        sub: Subresource,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let (obj, warnings) = self.decode(res, body, opts.validation)?;
        let body_name = objects::name(&obj);
        if body_name != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = objects::namespace(&obj);
        if RESOURCES[res].namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        self.write_existing(
            convert::storage(res),
            ns,
            name,
            sub,
            opts,
            warnings,
            true,
            move |_| Ok(convert::to_storage(res, obj)),
        )
        .map(|w| present_written(res, w))
    }

    /// PATCH (server-side apply creates a missing object).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        ptype: PatchType,
        body: &[u8],
        sub: Subresource,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let doc: Value = match ptype {
            PatchType::Apply => serde_yaml::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?,
            _ => serde_json::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?,
        };
        if ptype == PatchType::Apply {
            return self.server_side_apply(res, ns, name, doc, sub, opts);
        }
        if ptype != PatchType::Json && !doc.is_object() {
            return Err(ApiError::BadRequest(
                "patch body must be a JSON object".into(),
            ));
        }
        let validation = opts.validation;
        self.write_existing(
            convert::storage(res),
            ns,
            name,
            sub,
            opts,
            Vec::new(),
            true,
            |cur| {
                let mut out = convert::from_storage(res, cur);
                match ptype {
                    PatchType::Merge => patch::merge::apply(&mut out, &doc),
                    PatchType::Strategic => patch::strategic::apply(&mut out, &doc)?,
                    PatchType::Json => patch::json_patch::apply(&mut out, &doc)?,
                    PatchType::Apply => {}
                }
                let (decoded, _) = self.decode(res, out, validation)?;
                Ok(convert::to_storage(res, decoded))
            },
        )
        .map(|w| present_written(res, w))
    }

    fn server_side_apply(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        applied: Value,
        sub: Subresource,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let (applied, warnings) = self.decode(res, applied, opts.validation)?;
        if objects::name(&applied) != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                objects::name(&applied)
            )));
        }
        if opts.manager.is_empty() || opts.manager == "kube-sim-default" {
            return Err(ApiError::BadRequest(
                "PATCH, application/apply-patch+yaml requires fieldManager to be set".into(),
            ));
        }
        let now = util::now();
        let (api, res) = (res, convert::storage(res));
        let applied = convert::to_storage(api, applied);
        // Two attempts: the object may appear between our look and our create.
        for _ in 0..2 {
            if self.store.get(res, &Self::key(res, ns, name)).is_none() {
                let obj = patch::apply::apply(None, &applied, &opts.manager, opts.force, &now)?;
                match self.create_decoded(res, ns, obj, opts, warnings.clone(), false) {
                    Err(ApiError::AlreadyExists(_)) => continue,
                    other => return other.map(|w| present_written(api, w)),
                }
            }
            let r = self.write_existing(res, ns, name, sub, opts, warnings.clone(), false, |cur| {
                patch::apply::apply(Some(cur), &applied, &opts.manager, opts.force, &now)
            });
            match r {
                Err(ApiError::NotFound(_)) => continue,
                other => return other.map(|w| present_written(api, w)),
            }
        }
        Err(ApiError::conflict_modified(target(api, name)))
    }

    /// Read-modify-write of an existing object, atomically under the store lock.
    #[allow(clippy::too_many_arguments)]
    fn write_existing<F>(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        sub: Subresource,
        opts: &WriteOpts,
        warnings: Vec<String>,
        track_fields: bool,
        mutate: F,
    ) -> ApiResult<Written>
    where
        F: FnOnce(&Arc<Value>) -> ApiResult<Value>,
    {
        let key = Self::key(res, ns, name);
        let dry: RefCell<Option<Value>> = RefCell::new(None);
        let now = util::now();
        let stored = self.store.transact(res, &key, |cur| {
            let cur = cur.ok_or_else(|| ApiError::NotFound(target(res, name)))?;
            let mut new = mutate(cur)?;
            // A resourceVersion in the body (or left there by a patch) is a precondition.
            if let Some(rv) = objects::resource_version(&new) {
                if Some(rv) != objects::resource_version(cur) {
                    return Err(ApiError::conflict_modified(target(res, name)));
                }
            }
            self.prepare_update(res, cur, &mut new, sub);
            validation::validate(res, &new, Some(cur))?;
            if track_fields {
                let sub_name = if sub == Subresource::Status {
                    "status"
                } else {
                    ""
                };
                patch::apply::record_update(Some(cur), &mut new, &opts.manager, sub_name, &now);
            }
            if objects::same_content(cur, &new) {
                return Ok(Change::Nothing);
            }
            if opts.dry_run {
                *dry.borrow_mut() = Some(new);
                return Ok(Change::Nothing);
            }
            if objects::is_deleting(&new)
                && objects::finalizers(&new).is_empty()
                && res != resources::NAMESPACE
            {
                return Ok(Change::DeleteEmptied(new));
            }
            Ok(Change::Put(new))
        })?;
        let object = match dry.into_inner() {
            Some(v) => Arc::new(v),
            None => stored.ok_or_else(|| ApiError::NotFound(target(res, name)))?,
        };
        Ok(Written {
            object,
            created: false,
            warnings,
        })
    }

    /// Carry over what clients cannot change, split spec from status.
    fn prepare_update(&self, res: ResourceId, old: &Value, new: &mut Value, sub: Subresource) {
        let def = &RESOURCES[res];
        if sub == Subresource::Status {
            if res == resources::PVC || res == resources::PV {
                // Their status strategies only reset the spec (no
                // ResetObjectMetaForStatus): a status write may also change
                // labels and annotations, as external-resizer's does.
                Self::carry_over_meta(old, new);
                if let Some(map) = new.as_object_mut() {
                    match old.get("spec") {
                        Some(s) => map.insert("spec".into(), s.clone()),
                        None => map.remove("spec"),
                    };
                }
            } else {
                // Status writes change status only (ResetObjectMetaForStatus + spec reset).
                let status = new.get("status").cloned();
                let managed = objects::meta(new)
                    .and_then(|m| m.get("managedFields"))
                    .cloned();
                *new = old.clone();
                if let Some(map) = new.as_object_mut() {
                    match status {
                        Some(s) => map.insert("status".into(), s),
                        None => map.remove("status"),
                    };
                }
                if let Some(mf) = managed {
                    objects::meta_mut(new).insert("managedFields".into(), mf);
                }
            }
            // The PV strategy stamps every phase change (GA since 1.31).
            if res == resources::PV
                && objects::path_str(old, "status.phase") != objects::path_str(new, "status.phase")
            {
                objects::set_path(new, "status.lastPhaseTransitionTime", json!(util::now()));
            }
            return;
        }
        Self::carry_over_meta(old, new);
        if def.status_subresource {
            if let Some(map) = new.as_object_mut() {
                match old.get("status") {
                    Some(s) => map.insert("status".into(), s.clone()),
                    None => map.remove("status"),
                };
            }
        }
        self.apply_defaults(res, new);
    }

    /// The metadata a write cannot change, from the stored object.
    fn carry_over_meta(old: &Value, new: &mut Value) {
        let old_meta = objects::meta(old);
        let m = objects::meta_mut(new);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
            "generateName",
        ] {
            match old_meta.and_then(|om| om.get(k)) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
        m.remove("resourceVersion");
        if !m.contains_key("managedFields") {
            if let Some(mf) = old_meta.and_then(|om| om.get("managedFields")) {
                m.insert("managedFields".into(), mf.clone());
            }
        }
    }

    // ---- delete ------------------------------------------------------------

    /// DELETE. Returns the object and whether it is gone (false: finalizers pending).
    pub fn delete(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<(Arc<Value>, bool)> {
        let (api, res) = (res, convert::storage(res));
        let key = Self::key(res, ns, name);
        let gone = RefCell::new(false);
        let dry: RefCell<Option<Arc<Value>>> = RefCell::new(None);
        let stored = self.store.transact(res, &key, |cur| {
            let cur = cur.ok_or_else(|| ApiError::NotFound(target(res, name)))?;
            let precondition = |what: &str, want: &str, have: &str, why: &str| {
                ApiError::PreconditionFailed {
                    target: target(res, name),
                    kind: RESOURCES[api].kind,
                    message: format!(
                        "the {what} in the precondition ({want}) does not match the {what} in record ({have}). The object might have been {why}"
                    ),
                }
            };
            if let Some(uid) = &opts.uid {
                if uid != objects::uid(cur) {
                    return Err(precondition(
                        "UID",
                        uid,
                        objects::uid(cur),
                        "deleted and then recreated",
                    ));
                }
            }
            if let Some(rv) = &opts.resource_version {
                let have = objects::resource_version(cur).unwrap_or("");
                if rv != have {
                    return Err(precondition("ResourceVersion", rv, have, "modified"));
                }
            }
            if opts.dry_run {
                *dry.borrow_mut() = Some(cur.clone());
                return Ok(Change::Nothing);
            }
            let pending = !objects::finalizers(cur).is_empty() || res == resources::NAMESPACE;
            if !pending {
                *gone.borrow_mut() = true;
                return Ok(Change::Delete);
            }
            if objects::is_deleting(cur) {
                return Ok(Change::Nothing);
            }
            let mut next = (**cur).clone();
            let m = objects::meta_mut(&mut next);
            m.insert("deletionTimestamp".into(), json!(util::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if res == resources::NAMESPACE {
                objects::set_path(&mut next, "status.phase", json!("Terminating"));
            }
            Ok(Change::Put(next))
        })?;
        if let Some(obj) = dry.into_inner() {
            return Ok((present(api, obj), false));
        }
        let obj = stored.ok_or_else(|| ApiError::NotFound(target(res, name)))?;
        Ok((present(api, obj), gone.into_inner()))
    }

    /// Remove a namespace whose content is gone (the namespace controller's last step).
    pub fn finalize_namespace(&self, name: &str) -> ApiResult<()> {
        let key = (String::new(), name.to_string());
        self.store
            .transact(resources::NAMESPACE, &key, |cur| match cur {
                Some(ns) if objects::is_deleting(ns) => Ok(Change::Delete),
                _ => Ok(Change::Nothing),
            })?;
        Ok(())
    }

    /// Read-modify-write of the current object (what the built-in controllers
    /// and the scheduler helper use); no resourceVersion precondition.
    pub fn modify<F>(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        sub: Subresource,
        manager: &str,
        f: F,
    ) -> ApiResult<Arc<Value>>
    where
        F: FnOnce(&mut Value),
    {
        let opts = WriteOpts {
            manager: manager.to_string(),
            ..WriteOpts::default()
        };
        self.write_existing(res, ns, name, sub, &opts, Vec::new(), true, |cur| {
            let mut v = (**cur).clone();
            f(&mut v);
            Ok(v)
        })
        .map(|w| w.object)
    }
}

/// Storage form → the form of the API resource that was addressed.
fn present(api: ResourceId, obj: Arc<Value>) -> Arc<Value> {
    if convert::storage(api) == api {
        obj
    } else {
        Arc::new(convert::from_storage(api, &obj))
    }
}

fn present_written(api: ResourceId, mut w: Written) -> Written {
    w.object = present(api, w.object);
    w
}
