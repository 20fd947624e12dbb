//! Client-side rate limiting of Kubernetes API requests, like client-go's
//! `QPS`/`Burst` (`--kube-api-qps`/`--kube-api-burst` of external-provisioner).
//!
//! kube-rs has no client-side limiter, so this is a tower layer on the
//! client's service stack: a token bucket holding `burst` tokens, refilled at
//! `qps` per second (golang.org/x/time/rate semantics). Every HTTP request
//! takes one token before it is sent. A watch is one request: it takes one
//! token to start, and the events it streams take none.

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
    let builder = kube::client::ClientBuilder::try_from(config)?;
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
}
