//! Resource endpoints: get, list, create, update, patch, delete, deletecollection
//! (watch is in `watch.rs`).

use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Response};
use serde_json::{json, Value};

use super::negotiate::{self, Format};
use super::query::Query;
use super::route::ResourceRoute;
use super::{bytes_response, error_response, json_response, watch, ApiServer, Body};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::patch::PatchType;
use crate::protobuf;
use crate::registry::{DeleteOpts, Registry, Subresource, Validation, WriteOpts, Written};
use crate::resources::{self, ResourceId, RESOURCES};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Key;
use crate::table;

pub struct RequestCtx {
    pub method: Method,
    pub accept: Option<String>,
    pub content_type: String,
    /// The bearer token, if any (see [`crate::ApiRequest::user`]).
    pub user: String,
    pub user_agent: String,
    pub query: Query,
    pub body: Bytes,
}

/// Kubernetes verb of a request (what RBAC and our fault rules see).
fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

pub async fn handle(server: &Arc<ApiServer>, r: ResourceRoute, ctx: RequestCtx) -> Response<Body> {
    let def = &RESOURCES[r.res];
    let is_watch = ctx.query.flag("watch");
    let v = verb(&ctx.method, r.name.is_some(), is_watch);
    server.requests.record(crate::ApiRequest {
        user: ctx.user.clone(),
        verb: v.to_string(),
        api_group: def.group.to_string(),
        resource: def.plural.to_string(),
        subresource: r.subresource.clone().unwrap_or_default(),
        namespace: r.namespace.clone().unwrap_or_default(),
        name: r.name.clone().unwrap_or_default(),
    });
    if let Err(e) = server.faults.before_request(v, def.plural).await {
        return error_response(&e);
    }
    let result = match v {
        "watch" => return watch::handle(server.clone(), r, &ctx).await,
        "get" => get(server, &r, &ctx),
        "list" => list(server, &r, &ctx),
        "create" => create(server, &r, &ctx),
        "update" => update(server, &r, &ctx),
        "patch" => patch(server, &r, &ctx),
        "delete" => delete(server, &r, &ctx),
        "deletecollection" => delete_collection(server, &r, &ctx),
        _ => Err(ApiError::MethodNotAllowed),
    };
    result.unwrap_or_else(|e| error_response(&e))
}

fn subresource(r: &ResourceRoute) -> ApiResult<Subresource> {
    match r.subresource.as_deref() {
        None => Ok(Subresource::Main),
        Some("status") if RESOURCES[r.res].status_subresource => Ok(Subresource::Status),
        Some("finalize") if r.res == resources::NAMESPACE => Ok(Subresource::Main),
        Some(_) => Err(ApiError::UnknownPath),
    }
}

fn ns(r: &ResourceRoute) -> &str {
    r.namespace.as_deref().unwrap_or("")
}

fn name(r: &ResourceRoute) -> &str {
    r.name.as_deref().unwrap_or("")
}

fn write_opts(ctx: &RequestCtx, apply: bool) -> ApiResult<WriteOpts> {
    let q = &ctx.query;
    let manager = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        // Server-side apply insists on an explicit manager.
        _ if apply => String::new(),
        _ => ctx
            .user_agent
            .split('/')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    };
    Ok(WriteOpts {
        manager,
        validation: Validation::parse(q.str("fieldValidation"))?,
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        force: q.flag("force"),
    })
}

fn parse_body(ctx: &RequestCtx) -> ApiResult<Value> {
    let ct = ctx.content_type.split(';').next().unwrap_or("").trim();
    match ct {
        "" | "application/json" | "*/*" => serde_json::from_slice(&ctx.body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding request body as JSON: {e}"))),
        "application/vnd.kubernetes.protobuf" => protobuf::decode(&ctx.body),
        "application/yaml" => serde_yaml::from_slice(&ctx.body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding request body as YAML: {e}"))),
        _ => Err(ApiError::UnsupportedMediaType(
            "application/json, application/yaml".into(),
        )),
    }
}

fn default_class(server: &ApiServer, res: ResourceId) -> Option<String> {
    (res == resources::STORAGE_CLASS)
        .then(|| server.registry.default_storage_class())
        .flatten()
}

/// One object, as JSON or as a one-row Table.
fn object_response(
    server: &ApiServer,
    res: ResourceId,
    code: u16,
    obj: &Value,
    format: Format,
) -> Response<Body> {
    match format {
        Format::Object => json_response(code, obj),
        Format::Table => {
            let meta = json!({"resourceVersion": objects::resource_version(obj).unwrap_or("")});
            json_response(
                code,
                &table::table(res, &[obj], meta, default_class(server, res).as_deref()),
            )
        }
    }
}

fn written_response(
    server: &ApiServer,
    res: ResourceId,
    w: Written,
    ctx: &RequestCtx,
) -> ApiResult<Response<Body>> {
    let format = negotiate::object_format(ctx.accept.as_deref())?;
    let mut resp = object_response(
        server,
        res,
        if w.created { 201 } else { 200 },
        &w.object,
        format,
    );
    for warning in w.warnings {
        let value = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(v) = header::HeaderValue::from_str(&value) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    Ok(resp)
}

fn get(server: &ApiServer, r: &ResourceRoute, ctx: &RequestCtx) -> ApiResult<Response<Body>> {
    subresource(r)?;
    let format = negotiate::object_format(ctx.accept.as_deref())?;
    let obj = server.registry.get(r.res, ns(r), name(r))?;
    Ok(object_response(server, r.res, 200, &obj, format))
}

/// Opaque continue token: revision + last key.
fn encode_continue(rv: u64, key: &Key) -> String {
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{rv}-{}-{}", hex(&key.0), hex(&key.1))
}

fn decode_continue(token: &str) -> ApiResult<(u64, Key)> {
    let bad = || ApiError::BadRequest(format!("invalid continue token {token:?}"));
    let unhex = |s: &str| -> ApiResult<String> {
        if !s.len().is_multiple_of(2) {
            return Err(bad());
        }
        let bytes = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| bad()))
            .collect::<ApiResult<Vec<u8>>>()?;
        String::from_utf8(bytes).map_err(|_| bad())
    };
    let mut parts = token.splitn(3, '-');
    let rv = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let ns = unhex(parts.next().ok_or_else(bad)?)?;
    let name = unhex(parts.next().ok_or_else(bad)?)?;
    Ok((rv, (ns, name)))
}

pub fn selectors(res: ResourceId, q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    Ok((
        LabelSelector::parse(q.str("labelSelector"))?,
        FieldSelector::parse(q.str("fieldSelector"), &RESOURCES[res])?,
    ))
}

fn list(server: &ApiServer, r: &ResourceRoute, ctx: &RequestCtx) -> ApiResult<Response<Body>> {
    if r.subresource.is_some() {
        return Err(ApiError::UnknownPath);
    }
    let def = &RESOURCES[r.res];
    let format = negotiate::object_format(ctx.accept.as_deref())?;
    let q = &ctx.query;
    let (labels, fields) = selectors(r.res, q)?;
    let limit = q.number("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let (snapshot, start) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, key) = decode_continue(token)?;
            (Some(rv), Some(key))
        }
        None => {
            let exact = q.str("resourceVersionMatch") == "Exact";
            let rv = q.number("resourceVersion")?;
            (if exact { rv } else { None }, None)
        }
    };
    let stored = convert::storage(r.res);
    let converted = stored != r.res;
    let filter = |o: &Value| {
        if converted {
            let o = convert::from_storage(r.res, o);
            labels.matches(&o) && fields.matches(&o)
        } else {
            labels.matches(o) && fields.matches(o)
        }
    };
    let mut page = server.registry.store.list(
        stored,
        r.namespace.as_deref(),
        snapshot,
        start.as_ref(),
        limit,
        &filter,
    )?;
    if converted {
        for item in &mut page.items {
            *item = Arc::new(convert::from_storage(r.res, item));
        }
    }

    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(next) = &page.next {
        meta["continue"] = json!(encode_continue(page.rv, next));
        meta["remainingItemCount"] = json!(page.remaining);
    }
    if format == Format::Table {
        let items: Vec<&Value> = page.items.iter().map(|a| a.as_ref()).collect();
        let t = table::table(r.res, &items, meta, default_class(server, r.res).as_deref());
        return Ok(json_response(200, &t));
    }
    // Assemble the list by hand: items are already JSON values, no need to clone them.
    let mut out = Vec::with_capacity(256 + page.items.len() * 512);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            def.list_kind,
            def.api_version(),
            meta
        )
        .as_bytes(),
    );
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, item.as_ref());
    }
    out.extend_from_slice(b"]}");
    Ok(bytes_response(200, out, "application/json"))
}

fn create(server: &ApiServer, r: &ResourceRoute, ctx: &RequestCtx) -> ApiResult<Response<Body>> {
    if r.subresource.is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    let body = parse_body(ctx)?;
    let opts = write_opts(ctx, false)?;
    let w = server.registry.create(r.res, ns(r), body, &opts)?;
    written_response(server, r.res, w, ctx)
}

fn update(server: &ApiServer, r: &ResourceRoute, ctx: &RequestCtx) -> ApiResult<Response<Body>> {
    let sub = subresource(r)?;
    let body = parse_body(ctx)?;
    let opts = write_opts(ctx, false)?;
    let w = server
        .registry
        .update(r.res, ns(r), name(r), body, sub, &opts)?;
    written_response(server, r.res, w, ctx)
}

fn patch(server: &ApiServer, r: &ResourceRoute, ctx: &RequestCtx) -> ApiResult<Response<Body>> {
    let sub = subresource(r)?;
    let ptype = PatchType::from_content_type(&ctx.content_type)?;
    let opts = write_opts(ctx, ptype == PatchType::Apply)?;
    let w = server
        .registry
        .patch(r.res, ns(r), name(r), ptype, &ctx.body, sub, &opts)?;
    written_response(server, r.res, w, ctx)
}

fn delete_opts(ctx: &RequestCtx) -> ApiResult<DeleteOpts> {
    let mut opts = DeleteOpts {
        dry_run: ctx.query.get("dryRun").is_some_and(|d| d == "All"),
        ..DeleteOpts::default()
    };
    if !ctx.body.is_empty() {
        let body: Value = serde_json::from_slice(&ctx.body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding DeleteOptions: {e}")))?;
        let pre = body.get("preconditions");
        let s = |k: &str| {
            pre.and_then(|p| p.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        opts.uid = s("uid");
        opts.resource_version = s("resourceVersion");
        if body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|d| d == "All"))
        {
            opts.dry_run = true;
        }
    }
    Ok(opts)
}

fn delete(server: &ApiServer, r: &ResourceRoute, ctx: &RequestCtx) -> ApiResult<Response<Body>> {
    if r.subresource.is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    let opts = delete_opts(ctx)?;
    let (obj, _gone) = server.registry.delete(r.res, ns(r), name(r), &opts)?;
    let format = negotiate::object_format(ctx.accept.as_deref())?;
    Ok(object_response(server, r.res, 200, &obj, format))
}

fn delete_collection(
    server: &ApiServer,
    r: &ResourceRoute,
    ctx: &RequestCtx,
) -> ApiResult<Response<Body>> {
    if r.subresource.is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    let def = &RESOURCES[r.res];
    let (labels, fields) = selectors(r.res, &ctx.query)?;
    let opts = delete_opts(ctx)?;
    let registry: &Registry = &server.registry;
    let mut items = Vec::new();
    for obj in registry
        .store
        .all(convert::storage(r.res), r.namespace.as_deref())
    {
        let obj = convert::from_storage(r.res, &obj);
        if !(labels.matches(&obj) && fields.matches(&obj)) {
            continue;
        }
        match registry.delete(r.res, objects::namespace(&obj), objects::name(&obj), &opts) {
            Ok((o, _)) => items.push((*o).clone()),
            Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let list = json!({
        "kind": def.list_kind,
        "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": registry.store.current_rv().to_string()},
        "items": items,
    });
    Ok(json_response(200, &list))
}

#[cfg(test)]
mod tests {
    #[test]
    fn continue_token_round_trip() {
        let key = ("ns-1".to_string(), "a-b".to_string());
        let t = super::encode_continue(42, &key);
        assert_eq!(super::decode_continue(&t).unwrap(), (42, key));
        assert!(super::decode_continue("garbage").is_err());
    }
}
