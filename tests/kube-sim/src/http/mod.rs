//! The HTTP/1.1 front end: connection handling, routing and non-resource endpoints.

mod negotiate;
mod query;
mod resource;
pub mod route;
mod watch;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::discovery;
use crate::error::ApiError;
use crate::faults::Faults;
use crate::openapi;
use crate::registry::Registry;
use crate::requests::RequestLog;

pub type Body = BoxBody<Bytes, Infallible>;

/// Largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Everything a request handler needs.
pub struct ApiServer {
    pub registry: Arc<Registry>,
    pub faults: Faults,
    pub requests: Arc<RequestLog>,
    pub bookmark_interval: Duration,
    pub minor_version: u32,
}

/// Accept connections until the task is aborted (dropping the JoinSet closes them all).
pub async fn serve(listener: TcpListener, server: Arc<ApiServer>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let server = server.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| {
                        let server = server.clone();
                        async move { Ok::<_, Infallible>(handle(server, req).await) }
                    });
                    // Connection errors (client went away) are not ours to report.
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn json_response(code: u16, value: &Value) -> Response<Body> {
    bytes_response(
        code,
        serde_json::to_vec(value).unwrap_or_default(),
        "application/json",
    )
}

pub fn bytes_response(code: u16, body: impl Into<Bytes>, content_type: &str) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

pub fn error_response(err: &ApiError) -> Response<Body> {
    let mut resp = json_response(err.code(), &err.to_status());
    if matches!(err, ApiError::TooManyRequests(_)) {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    resp
}

async fn handle(server: Arc<ApiServer>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let route = route::parse(parts.uri.path());
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let q = query::Query::parse(parts.uri.query());

    let Some(route) = route else {
        return error_response(&ApiError::UnknownPath);
    };
    if let route::Route::Resource(r) = route {
        let body = match Limited::new(body, MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return error_response(&ApiError::RequestEntityTooLarge(MAX_BODY))
            }
            Err(e) => {
                return error_response(&ApiError::BadRequest(format!("reading request body: {e}")))
            }
        };
        let ctx = resource::RequestCtx {
            method: parts.method,
            accept,
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
            user: parts
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("")
                .to_string(),
            user_agent: parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
            query: q,
            body,
        };
        return resource::handle(&server, r, ctx).await;
    }
    if parts.method != Method::GET {
        return error_response(&ApiError::MethodNotAllowed);
    }
    if let Err(e) = server.faults.before_request("get", "").await {
        return error_response(&e);
    }
    use route::Route::*;
    match route {
        Version => json_response(200, &discovery::version(server.minor_version)),
        Healthz => bytes_response(200, "ok", "text/plain"),
        CoreVersions | Groups => match negotiate::discovery_format(accept.as_deref()) {
            Ok(negotiate::DiscoveryFormat::Plain) => json_response(
                200,
                &if route == CoreVersions {
                    discovery::core_versions()
                } else {
                    discovery::group_list()
                },
            ),
            Ok(negotiate::DiscoveryFormat::Aggregated(v)) => bytes_response(
                200,
                serde_json::to_vec(&discovery::aggregated(route == CoreVersions, v))
                    .unwrap_or_default(),
                &format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"),
            ),
            Err(e) => error_response(&e),
        },
        Group(g) => match discovery::group(&g) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::UnknownPath),
        },
        GroupVersion(g, v) => json_response(200, &discovery::resource_list(&g, &v)),
        OpenApiV3Root => json_response(200, &openapi::root()),
        OpenApiV3(path) => match openapi::group_version(&path) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::UnknownPath),
        },
        OpenApiV2 => bytes_response(
            200,
            openapi::v2_protobuf(),
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
        ),
        Resource(_) => error_response(&ApiError::UnknownPath),
    }
}
