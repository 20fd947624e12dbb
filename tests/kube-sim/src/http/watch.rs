//! Watch streams: newline-delimited JSON events over a chunked 200 response,
//! as kube-apiserver sends them (including the in-stream 410 for expired
//! revisions, bookmarks, and the `k8s.io/initial-events-end` bookmark of
//! streaming lists).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use super::negotiate::{self, Format};
use super::resource::{selectors, RequestCtx};
use super::route::ResourceRoute;
use super::{error_response, ApiServer, Body};
use crate::convert;
use crate::error::ApiError;
use crate::objects;
use crate::resources::{ResourceId, RESOURCES};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{self, Event, EventType, Subscription};
use crate::table;

/// Without `timeoutSeconds` the real server picks 30–60 min; we pick 30.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// Events coalesced into one HTTP chunk when a watcher has a backlog.
const MAX_BATCH: usize = 256;

struct Filter {
    /// Storage resource (events.k8s.io Events are stored as core Events).
    res: ResourceId,
    /// Resource as addressed by the client.
    api: ResourceId,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        if self.api != self.res {
            return self.matches_api(&convert::from_storage(self.api, obj));
        }
        self.matches_api(obj)
    }

    fn matches_api(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| objects::namespace(obj) == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// What this watcher sees of `e`: an object entering the selection is
    /// ADDED, one leaving it is DELETED (as the real watch cache does).
    fn view(&self, e: &Event) -> Option<EventType> {
        if e.resource != self.res {
            return None;
        }
        let now = self.matches(&e.object);
        let before = e.prev.as_deref().is_some_and(|p| self.matches(p));
        match (e.kind, before, now) {
            (EventType::Added, _, true) => Some(EventType::Added),
            (EventType::Modified, true, true) => Some(EventType::Modified),
            (EventType::Modified, false, true) => Some(EventType::Added),
            (EventType::Modified, true, false) => Some(EventType::Deleted),
            (EventType::Deleted, true, _) => Some(EventType::Deleted),
            _ => None,
        }
    }
}

struct Encoder {
    /// Resource as addressed by the client (objects are converted to it).
    res: ResourceId,
    format: Format,
    convert: bool,
}

impl Encoder {
    fn event(&self, kind: EventType, e: &Event, out: &mut Vec<u8>) {
        if self.format == Format::Object && kind == e.kind && !self.convert {
            out.extend_from_slice(e.line());
        } else {
            self.object(kind.as_str(), &e.object, out);
        }
    }

    fn object(&self, kind: &str, obj: &Value, out: &mut Vec<u8>) {
        let converted;
        let obj = if self.convert {
            converted = convert::from_storage(self.res, obj);
            &converted
        } else {
            obj
        };
        match self.format {
            Format::Object => out.extend_from_slice(&store::watch_line(kind, obj)),
            Format::Table => {
                let meta = json!({"resourceVersion": objects::resource_version(obj).unwrap_or("")});
                let t = table::table(self.res, &[obj], meta, None);
                out.extend_from_slice(&store::watch_line(kind, &t));
            }
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let def = &RESOURCES[self.res];
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta});
        store::watch_line("BOOKMARK", &obj)
    }
}

fn too_old(requested: u64, oldest: u64) -> Bytes {
    let status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("too old resource version: {requested} ({oldest})"),
        "reason": "Expired",
        "code": 410
    });
    store::watch_line("ERROR", &status)
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

pub async fn handle(server: Arc<ApiServer>, r: ResourceRoute, ctx: &RequestCtx) -> Response<Body> {
    match start(server, r, ctx) {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

fn start(
    server: Arc<ApiServer>,
    r: ResourceRoute,
    ctx: &RequestCtx,
) -> Result<Response<Body>, ApiError> {
    if r.subresource.is_some() {
        return Err(ApiError::UnknownPath);
    }
    let q = &ctx.query;
    let format = negotiate::object_format(ctx.accept.as_deref())?;
    let (labels, fields) = selectors(r.res, q)?;
    let bookmarks = q.flag("allowWatchBookmarks");
    let send_initial = q.get("sendInitialEvents").map(|v| v == "true");
    let timeout = q
        .number("timeoutSeconds")?
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);
    let rv = q.str("resourceVersion");

    if send_initial.is_some() {
        let mut errs = Vec::new();
        if q.str("resourceVersionMatch") != "NotOlderThan" {
            errs.push("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan");
        }
        if send_initial == Some(true) && !bookmarks {
            errs.push("allowWatchBookmarks: Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is true");
        }
        if !errs.is_empty() {
            return Err(ApiError::Invalid {
                target: crate::registry::target(r.res, ""),
                kind: "ListOptions",
                causes: errs
                    .iter()
                    .map(|e| crate::error::Cause::from_field_error(e))
                    .collect(),
            });
        }
    }

    let stored = convert::storage(r.res);
    let filter = Filter {
        res: stored,
        api: r.res,
        namespace: r.namespace.clone(),
        labels,
        fields,
    };
    let encoder = Encoder {
        res: r.res,
        format,
        convert: stored != r.res,
    };
    let store = &server.registry.store;
    let (tx, rx) = mpsc::channel::<Bytes>(64);

    // Initial phase: synthetic ADDED events for the current state when asked for
    // a streaming list, or when watching from "now" ("" or "0").
    let from_now = send_initial == Some(true) || rv.is_empty() || rv == "0";
    let (initial, sub, initial_end) = if from_now {
        let (snapshot, sub) = store.watch_now(stored, r.namespace.as_deref());
        (snapshot, sub, send_initial == Some(true))
    } else {
        let rv: u64 = rv
            .parse()
            .map_err(|_| ApiError::BadRequest(format!("invalid resource version {rv:?}")))?;
        match store.watch_from(stored, rv) {
            Ok(sub) => (Vec::new(), sub, false),
            Err(old) => {
                // The real server answers 200 and sends the 410 inside the stream.
                let line = too_old(old.requested, old.oldest);
                tokio::spawn(async move {
                    let _ = tx.send(line).await;
                });
                return Ok(stream_response(rx));
            }
        }
    };

    let mut head = Vec::new();
    for obj in initial.iter().filter(|o| filter.matches(o)) {
        encoder.object("ADDED", obj, &mut head);
    }
    let (ordinal, close_early) = server.faults.watch_started();
    // Subscribe now, before the response goes out: a drop_watches() right after
    // the client sees the response must reach this stream.
    let dropped = server.faults.drop_signal();
    tokio::spawn(run(
        server,
        tx,
        Stream {
            filter,
            encoder,
            sub,
            head,
            initial_end,
            bookmarks,
            timeout,
            close_early,
            ordinal,
            dropped,
        },
    ));
    Ok(stream_response(rx))
}

struct Stream {
    filter: Filter,
    encoder: Encoder,
    sub: Subscription,
    head: Vec<u8>,
    initial_end: bool,
    bookmarks: bool,
    timeout: Duration,
    close_early: bool,
    ordinal: u64,
    dropped: tokio::sync::watch::Receiver<u64>,
}

async fn run(server: Arc<ApiServer>, tx: mpsc::Sender<Bytes>, s: Stream) {
    let Stream {
        filter,
        encoder,
        sub,
        mut head,
        initial_end,
        bookmarks,
        timeout,
        close_early,
        ordinal,
        mut dropped,
    } = s;
    let Subscription {
        backlog,
        mut live,
        start_rv,
    } = sub;
    // Highest revision this watcher has fully processed (what bookmarks report).
    let mut seen = start_rv;
    for e in &backlog {
        if let Some(kind) = filter.view(e) {
            encoder.event(kind, e, &mut head);
        }
        seen = seen.max(e.rv);
    }
    if initial_end {
        head.extend_from_slice(&encoder.bookmark(start_rv, true));
    }
    let faults = server.faults.clone();
    faults.wait_unpaused().await;
    if !head.is_empty() && tx.send(Bytes::from(head)).await.is_err() {
        return;
    }
    if close_early {
        return;
    }

    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let nth = faults.nth_closes(ordinal);
    tokio::pin!(nth);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + server.bookmark_interval,
        server.bookmark_interval,
    );
    loop {
        let first = tokio::select! {
            _ = &mut deadline => {
                // Like the watch cache: a last bookmark lets the client resume from the freshest revision.
                if bookmarks {
                    let _ = tx.send(encoder.bookmark(seen, false)).await;
                }
                return;
            }
            _ = tx.closed() => return,
            _ = dropped.changed() => {
                faults.note_dropped_watch();
                return;
            }
            _ = &mut nth => {
                faults.note_dropped_watch();
                return;
            }
            _ = ticker.tick(), if bookmarks => {
                faults.wait_unpaused().await;
                if tx.send(encoder.bookmark(seen, false)).await.is_err() {
                    return;
                }
                continue;
            }
            e = live.recv() => e,
        };
        let mut chunk = Vec::new();
        let mut next = Some(first);
        let mut n = 0;
        while let Some(item) = next.take() {
            match item {
                Ok(e) => {
                    if e.rv > seen {
                        if let Some(kind) = filter.view(&e) {
                            encoder.event(kind, &e, &mut chunk);
                        }
                        seen = e.rv;
                    }
                }
                // Fell too far behind (or shutting down): end the stream; the client
                // re-watches from its last revision, as after a real watch-cache overflow.
                Err(broadcast::error::RecvError::Lagged(_))
                | Err(broadcast::error::RecvError::Closed) => {
                    if !chunk.is_empty() {
                        let _ = tx.send(Bytes::from(chunk)).await;
                    }
                    return;
                }
            }
            n += 1;
            if n < MAX_BATCH {
                next = match live.try_recv() {
                    Ok(e) => Some(Ok(e)),
                    Err(broadcast::error::TryRecvError::Lagged(k)) => {
                        Some(Err(broadcast::error::RecvError::Lagged(k)))
                    }
                    Err(_) => None,
                };
            }
        }
        if chunk.is_empty() {
            continue;
        }
        faults.wait_unpaused().await;
        if tx.send(Bytes::from(chunk)).await.is_err() {
            return;
        }
    }
}
