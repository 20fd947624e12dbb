//! Client-side rate limiting of Kubernetes API requests, like client-go's
//! `QPS`/`Burst` (`--kube-api-qps`/`--kube-api-burst` of external-provisioner).
//!
//! kube-rs has no client-side limiter, so this is a tower layer on the
//! client's service stack: a token bucket holding `burst` tokens, refilled at
//! `qps` per second (golang.org/x/time/rate semantics). Every HTTP request
//! takes one token before it is sent. A watch is one request: it takes one
//! token to start, and the events it streams take none.
//!
//! Next to it, [`TimeoutLayer`] bounds every request but a watch: kube has no
//! read timeout, so a frozen API server would otherwise hang a request (and
//! the worker awaiting it) forever.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// How fast the host may talk to the API server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApiLimits {
    /// Sustained requests per second; 0 (or less) disables the limit.
    pub qps: f32,
    /// Requests allowed at once above the sustained rate (at least 1).
    pub burst: u32,
}

impl ApiLimits {
    /// What external-provisioner (and client-go) use by default.
    pub const DEFAULT: ApiLimits = ApiLimits {
        qps: 5.0,
        burst: 10,
    };

    pub fn unlimited() -> Self {
        ApiLimits { qps: 0.0, burst: 0 }
    }

    fn enabled(&self) -> bool {
        self.qps.is_finite() && self.qps > 0.0
    }
}

/// A kube client whose requests are limited to `limits`.
pub fn client(config: kube::Config, limits: ApiLimits) -> Result<kube::Client, kube::Error> {
    client_with_timeout(config, limits, None)
}

/// [`client`] whose requests, watches excepted, fail after `timeout`
/// (`None`: wait for ever). The timeout sits outside kube's own retries, so
/// it bounds them too, and inside the throttle, so waiting for a token does
/// not count.
pub fn client_with_timeout(
    config: kube::Config,
    limits: ApiLimits,
    timeout: Option<Duration>,
) -> Result<kube::Client, kube::Error> {
    let builder =
        kube::client::ClientBuilder::try_from(config)?.with_layer(&TimeoutLayer::new(timeout));
    Ok(if limits.enabled() {
        builder.with_layer(&ThrottleLayer::new(limits)).build()
    } else {
        builder.build()
    })
}

/// The token bucket, shared by every service the layer makes.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    per_second: f64,
    refilled: Instant,
}

impl Bucket {
    fn new(limits: ApiLimits) -> Self {
        let capacity = f64::from(limits.burst.max(1));
        Bucket {
            tokens: capacity,
            capacity,
            per_second: f64::from(limits.qps),
            refilled: Instant::now(),
        }
    }

    /// Takes a token if there is one; else says how long until there is.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.per_second;
            // Round up so the next look finds the token there.
            Err(Duration::from_secs_f64(wait) + Duration::from_micros(1))
        }
    }
}

/// Limits the wrapped service to `qps` requests per second with `burst`.
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl ThrottleLayer {
    pub fn new(limits: ApiLimits) -> Self {
        ThrottleLayer {
            bucket: Arc::new(Mutex::new(Bucket::new(limits))),
        }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            token: false,
        }
    }
}

/// The service of [`ThrottleLayer`]: ready once it holds a token and the
/// inner service is ready; each call spends the token.
pub struct Throttle<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
    sleep: Option<Pin<Box<Sleep>>>,
    token: bool,
}

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.token {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(Instant::now());
            match taken {
                Ok(()) => self.token = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        // tower's contract: `call` only after `poll_ready` said Ready.
        debug_assert!(self.token, "Throttle::call without poll_ready");
        self.token = false;
        self.inner.call(request)
    }
}

/// Fails each request that has not been answered, body included, within
/// its time limit; watches (which stay open for minutes by design) are let be.
#[derive(Debug, Clone, Copy)]
pub struct TimeoutLayer {
    limit: Option<Duration>,
}

impl TimeoutLayer {
    /// `None`: no limit.
    pub fn new(limit: Option<Duration>) -> Self {
        TimeoutLayer {
            limit: limit.filter(|d| !d.is_zero()),
        }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> RequestTimeout<S> {
        RequestTimeout {
            inner,
            limit: self.limit,
        }
    }
}

/// The service of [`TimeoutLayer`].
#[derive(Debug, Clone)]
pub struct RequestTimeout<S> {
    inner: S,
    limit: Option<Duration>,
}

/// A request that got no (complete) answer in time.
#[derive(Debug, thiserror::Error)]
#[error("the Kubernetes API server did not answer within {} (--kube-api-timeout)", humantime::format_duration(*.0))]
pub struct TimedOut(pub Duration);

/// kube marks its watch requests with a `"watch"` extension; a hand-made
/// one still says `watch=true` in its query.
fn is_watch<B>(request: &hyper::Request<B>) -> bool {
    let marked = request
        .extensions()
        .get::<&'static str>()
        .is_some_and(|op| op.starts_with("watch"));
    let asked = request.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|p| p.eq_ignore_ascii_case("watch=true") || p == "watch=1")
    });
    marked || asked
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<hyper::Request<B>> for RequestTimeout<S>
where
    S: Service<hyper::Request<B>, Response = hyper::Response<RB>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
{
    type Response = hyper::Response<DeadlineBody<RB>>;
    type Error = tower::BoxError;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let limit = self.limit.filter(|_| !is_watch(&request));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let Some(limit) = limit else {
                let response = answer.await.map_err(Into::into)?;
                return Ok(response.map(|body| DeadlineBody::new(body, None, Duration::ZERO)));
            };
            let deadline = Instant::now() + limit;
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(response) => {
                    let response = response.map_err(Into::into)?;
                    Ok(response.map(|body| DeadlineBody::new(body, Some(deadline), limit)))
                }
                Err(_) => Err(TimedOut(limit).into()),
            }
        })
    }
}

/// A response body that fails once its request's deadline has passed, so a
/// server that stops halfway through an answer cannot hang its reader.
pub struct DeadlineBody<B> {
    body: Pin<Box<B>>,
    deadline: Option<Pin<Box<Sleep>>>,
    limit: Duration,
}

impl<B> DeadlineBody<B> {
    fn new(body: B, deadline: Option<Instant>, limit: Duration) -> Self {
        DeadlineBody {
            body: Box::pin(body),
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            limit,
        }
    }
}

impl<B> hyper::body::Body for DeadlineBody<B>
where
    B: hyper::body::Body,
    B::Error: Into<tower::BoxError>,
{
    type Data = B::Data;
    type Error = tower::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some(deadline) = this.deadline.as_mut() {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(TimedOut(this.limit).into())));
            }
        }
        this.body
            .as_mut()
            .poll_frame(cx)
            .map(|frame| frame.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_starts_full_then_refills_at_the_rate() {
        let mut b = Bucket::new(ApiLimits {
            qps: 10.0,
            burst: 3,
        });
        let t0 = b.refilled;
        for _ in 0..3 {
            assert!(b.take(t0).is_ok());
        }
        let wait = b.take(t0).unwrap_err();
        assert!(wait >= Duration::from_millis(100) && wait < Duration::from_millis(101));
        // 250 ms later: 2.5 tokens.
        let t1 = t0 + Duration::from_millis(250);
        assert!(b.take(t1).is_ok());
        assert!(b.take(t1).is_ok());
        assert!(b.take(t1).is_err());
        // Never more than the burst, however long it was idle.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(b.take(t2).is_ok());
        }
        assert!(b.take(t2).is_err());
    }

    #[test]
    fn a_burst_of_zero_still_lets_requests_through() {
        let mut b = Bucket::new(ApiLimits { qps: 1.0, burst: 0 });
        assert!(b.take(b.refilled).is_ok());
    }

    #[test]
    fn zero_qps_means_no_limit() {
        assert!(!ApiLimits::unlimited().enabled());
        assert!(ApiLimits::DEFAULT.enabled());
    }

    struct Nothing;
    impl Service<()> for Nothing {
        type Response = ();
        type Error = ();
        type Future = std::future::Ready<Result<(), ()>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: ()) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }

    /// N requests through the layer take at least as long as the bucket
    /// says (a lower bound only: a busy machine may take longer).
    #[tokio::test]
    async fn requests_wait_for_tokens() {
        let layer = ThrottleLayer::new(ApiLimits {
            qps: 100.0,
            burst: 10,
        });
        let mut svc = layer.layer(Nothing);
        let start = Instant::now();
        for _ in 0..40 {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            svc.call(()).await.unwrap();
        }
        // 10 at once, then 30 at 100/s.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
    }

    /// An API server that takes `delay` to send its headers (None: never),
    /// then a body that never ends.
    #[derive(Clone)]
    struct Stalled {
        delay: Option<Duration>,
        calls: Arc<Mutex<u32>>,
    }
    type Endless = http_body_util::StreamBody<
        futures::stream::Pending<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>,
    >;
    impl Service<hyper::Request<()>> for Stalled {
        type Response = hyper::Response<Endless>;
        type Error = std::io::Error;
        type Future = BoxFuture<Result<Self::Response, Self::Error>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: hyper::Request<()>) -> Self::Future {
            *self.calls.lock().unwrap() += 1;
            let delay = self.delay;
            Box::pin(async move {
                match delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
                Ok(hyper::Response::new(http_body_util::StreamBody::new(
                    futures::stream::pending(),
                )))
            })
        }
    }

    async fn send(
        svc: &mut RequestTimeout<Stalled>,
        request: hyper::Request<()>,
    ) -> Result<hyper::Response<DeadlineBody<Endless>>, tower::BoxError> {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
        svc.call(request).await
    }

    fn get(uri: &str, op: &'static str) -> hyper::Request<()> {
        let mut r = hyper::Request::get(uri).body(()).unwrap();
        r.extensions_mut().insert(op);
        r
    }

    const LIMIT: Duration = Duration::from_millis(200);
    /// Room for a loaded machine's late timers; far below "never".
    const LATE: Duration = Duration::from_secs(3);

    /// `f`, failing the test rather than hanging if it never completes.
    async fn bounded<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(LIMIT + LATE, f)
            .await
            .expect("no answer, and no timeout either")
    }

    #[tokio::test]
    async fn a_request_that_never_answers_times_out() {
        let mut svc = TimeoutLayer::new(Some(LIMIT)).layer(Stalled {
            delay: None,
            calls: Default::default(),
        });
        let start = Instant::now();
        let err = bounded(send(&mut svc, get("/api/v1/namespaces/d/pods/p", "get")))
            .await
            .err()
            .expect("no answer is an error");
        let took = start.elapsed();
        assert!(err.is::<TimedOut>(), "{err}");
        assert!(took >= LIMIT && took < LIMIT + LATE, "{took:?}");
        assert!(err.to_string().contains("within 200ms"), "{err}");

        // Headers in time, then a body that stops: reading it fails at the
        // same deadline, counted from the request.
        let mut svc = TimeoutLayer::new(Some(LIMIT)).layer(Stalled {
            delay: Some(LIMIT / 2),
            calls: Default::default(),
        });
        let start = Instant::now();
        let response = send(&mut svc, get("/api/v1/namespaces/d/pods/p", "get"))
            .await
            .expect("headers came in time");
        let err = bounded(http_body_util::BodyExt::collect(response.into_body()))
            .await
            .expect_err("a body that never ends is an error");
        let took = start.elapsed();
        assert!(err.is::<TimedOut>(), "{err}");
        assert!(took >= LIMIT && took < LIMIT + LATE, "{took:?}");
    }

    #[tokio::test]
    async fn a_watch_is_never_timed_out() {
        let stalled = Stalled {
            delay: Some(LIMIT * 3),
            calls: Default::default(),
        };
        let mut svc = TimeoutLayer::new(Some(LIMIT)).layer(stalled.clone());
        let by_kube = get("/api/v1/pods?resourceVersion=1", "watch");
        let by_hand = get("/api/v1/pods?watch=true&resourceVersion=1", "HTTP");
        for request in [by_kube, by_hand] {
            let start = Instant::now();
            let response = send(&mut svc, request).await.expect("a slow watch starts");
            assert!(start.elapsed() >= LIMIT * 3);
            // Its stream stays open past the limit (events come when they come).
            let more = tokio::time::timeout(
                LIMIT * 2,
                http_body_util::BodyExt::frame(&mut response.into_body()),
            )
            .await;
            assert!(more.is_err(), "the watch stream was cut: {more:?}");
        }
        assert_eq!(*stalled.calls.lock().unwrap(), 2);
        // No limit at all: "0s".
        let mut svc = TimeoutLayer::new(Some(Duration::ZERO)).layer(stalled);
        send(&mut svc, get("/api/v1/namespaces/d/pods/p", "get"))
            .await
            .expect("no limit");
    }
}
