//! The operations endpoints a Deployment's probes and Prometheus scrape:
//! `/metrics`, `/healthz` (the process serves), `/readyz` (plugins loaded and
//! the lifecycle started).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Why the host is not ready although it started (e.g. a plugin loader
/// stopped), if it is not.
pub type Unready = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// What an operator should look at although the host is ready, one line
/// each (e.g. a granted directory refusing new volumes).
pub type Notes = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// Shared state behind the endpoints.
#[derive(Default)]
pub struct Ops {
    pub metrics: Arc<Metrics>,
    ready: AtomicBool,
    unready: std::sync::OnceLock<Unready>,
    notes: std::sync::OnceLock<Notes>,
}

impl Ops {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Asked at each `/readyz`: a reason makes the host unready.
    pub fn check_readiness(&self, unready: Unready) {
        let _ = self.unready.set(unready);
    }

    /// Asked at each ready `/readyz`: each note is a line after `ok`.
    pub fn add_notes(&self, notes: Notes) {
        let _ = self.notes.set(notes);
    }

    fn ready_body(&self) -> String {
        let notes = self.notes.get().map(|f| f()).unwrap_or_default();
        let mut body = "ok\n".to_owned();
        for note in notes {
            body.push_str(&format!("note: {note}\n"));
        }
        body
    }

    fn unready_reason(&self) -> Option<String> {
        self.unready.get().and_then(|f| f())
    }

    pub(crate) fn respond(&self, path: &str) -> Response<Full<Bytes>> {
        let (status, content_type, body) = match path {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.encode(),
            ),
            "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            "/readyz" if let Some(why) = self.unready_reason() => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {why}\n"),
            ),
            "/readyz" if self.ready.load(Ordering::Relaxed) => {
                (StatusCode::OK, "text/plain", self.ready_body())
            }
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "not ready: loading plugins or waiting for the API server\n".to_owned(),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found; try /metrics, /healthz or /readyz\n".to_owned(),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, v);
        }
        response
    }
}

/// Binds the endpoints' address (so a taken port fails at start).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context;
    TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on {addr} for /metrics; pick another --metrics-address")
    })
}

/// Serves the endpoints until the task is dropped.
pub async fn serve(listener: TcpListener, ops: Arc<Ops>) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    loop {
        let (stream, _) = listener.accept().await?;
        let ops = ops.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = ops.respond(req.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "ops connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_host_and_metrics_are_openmetrics() {
        let ops = Ops::default();
        assert_eq!(ops.respond("/healthz").status(), StatusCode::OK);
        assert_eq!(
            ops.respond("/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        ops.set_ready(true);
        assert_eq!(ops.respond("/readyz").status(), StatusCode::OK);
        // Notes keep the host ready and say what to look at.
        ops.add_notes(Box::new(|| {
            vec!["plugin p makes no new volume in /v".into()]
        }));
        let ready = ops.respond("/readyz");
        assert_eq!(ready.status(), StatusCode::OK);
        let body = futures::executor::block_on(http_body_util::BodyExt::collect(ready.into_body()))
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"ok\nnote: plugin p makes no new volume in /v\n");
        let metrics = ops.respond("/metrics");
        assert_eq!(metrics.status(), StatusCode::OK);
        assert!(metrics.headers()[hyper::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"));
        assert_eq!(ops.respond("/nope").status(), StatusCode::NOT_FOUND);
    }
}
