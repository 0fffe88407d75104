//! A deadline on every request head of a connection, not only the first: the gap actix leaves.
//!
//! actix times a connection's first request head (`client_request_timeout`) and its idle time
//! between requests (`keep_alive`), but once a byte of a second request arrives on a kept-alive
//! connection neither timer runs, so a client trickling that head holds the connection for as
//! long as it likes. [`HeadDeadlineIo`] wraps the socket below actix and watches the bytes go by:
//! the first byte read after a response starts a clock, the blank line that ends the head stops
//! it, and if the clock passes the limit first the connection gets actix's own answer to a late
//! head (`408`, no body) and is closed.
//!
//! It reads no more of HTTP than the head's end (`\r\n\r\n`, or `\n\n` as httparse also
//! accepts): what follows is the body, which [`super::limits::read_body_in_time`] times.
//! A write starts a new head's wait, except an interim `1xx` answer (`100 Continue`), after which
//! the same request's body follows.
//!
//! It also sheds idle connections when connections run short. A connection is idle while it
//! waits for a request head with no request of its own being answered (a response still
//! streaming keeps it busy: [`track_answers`] counts them through the connection's data). When
//! the daemon holds [`ConnectionLoad::shed_above`] connections (three quarters of
//! `max_connections`), those idle for [`IDLE_CHECK`] are closed until half the cap is free, and
//! a head that starts meanwhile has [`PRESSED_HEAD_LIMIT`] to arrive: otherwise a client holding
//! a thousand idle connections would keep every new one, `/health` included, waiting in the
//! listen backlog until the idle ones time out.
//!
//! An idle connection costs nothing until connections run short: it waits on the load's
//! pressure signal (woken once when shedding starts), and only then runs its [`IDLE_CHECK`]
//! timer. (Waking it on a timer all along would also restart actix's keep-alive timer, which
//! actix re-arms on every wake-up of an idle connection.)
//!
//! Key types: [`HeadDeadlineIo`], [`ConnectionLoad`], [`ConnectionActivity`]. Cost: one pass
//! over the bytes of each head, one timer per connection while a head is arriving, and while
//! shedding one timer per idle connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::{sleep, Sleep};

/// How long a connection is idle before it may be shed, and how often an idle one checks.
pub const IDLE_CHECK: Duration = Duration::from_millis(500);
/// The time a request head gets when it starts while connections run short.
pub const PRESSED_HEAD_LIMIT: Duration = Duration::from_secs(1);

/// The connections of one server: how many are open, and from how many on idle ones are shed.
/// Shedding, once started, goes on until half the cap is free, so that a burst of new idle
/// connections does not take every freed place again at once.
#[derive(Debug)]
pub struct ConnectionLoad {
    open: AtomicUsize,
    shed_above: usize,
    shed_down_to: usize,
    shedding: AtomicBool,
    /// Wakes the idle connections when shedding starts.
    pressure: Arc<Notify>,
}

impl ConnectionLoad {
    /// The load of a server that takes `max_connections`; idle connections are shed from
    /// three quarters of that on.
    pub fn new(max_connections: usize) -> Self {
        ConnectionLoad {
            open: AtomicUsize::new(0),
            shed_above: (max_connections * 3 / 4).max(1),
            shed_down_to: max_connections / 2,
            shedding: AtomicBool::new(false),
            pressure: Arc::new(Notify::new()),
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn shed_above(&self) -> usize {
        self.shed_above
    }

    fn pressed(&self) -> bool {
        let open = self.open();
        if open >= self.shed_above {
            if !self.shedding.swap(true, Ordering::AcqRel) {
                self.pressure.notify_waiters();
            }
        } else if open <= self.shed_down_to {
            self.shedding.store(false, Ordering::Release);
        }
        self.shedding.load(Ordering::Acquire)
    }
}

/// How many requests of one connection are being answered (from request to the last byte of
/// the response); shared between the socket wrapper and the connection's requests.
#[derive(Debug, Default)]
pub struct ConnectionActivity {
    answering: AtomicUsize,
}

impl ConnectionActivity {
    fn answering(&self) -> bool {
        self.answering.load(Ordering::Acquire) > 0
    }
}

/// What actix answers a late first head with; the same for a later one.
const LATE_HEAD_ANSWER: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Where the connection is between one request head and the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A head is due: the next byte read starts its clock.
    Awaiting,
    /// Inside a head; `line_end` is how far into a blank line the last bytes went
    /// (0: inside a line, 1: just after `\n`, 2: after `\n\r`).
    InHead { line_end: u8 },
    /// The head ended: bytes read now are its body (or a pipelined request, not timed).
    Body,
    /// The deadline passed: the late answer was written as far as it went and reads fail.
    Expired,
}

/// A connection's byte stream with a deadline on each request head (see the module comment).
pub struct HeadDeadlineIo<IO> {
    io: IO,
    limit: Duration,
    phase: Phase,
    deadline: Option<Pin<Box<Sleep>>>,
    load: Arc<ConnectionLoad>,
    activity: Arc<ConnectionActivity>,
    /// Runs while the connection is idle and connections run short: when it fires, the
    /// connection is shed if they still do.
    idle: Option<Pin<Box<Sleep>>>,
    /// Waited on while the connection is idle and connections do not run short.
    pressure: Option<Pin<Box<OwnedNotified>>>,
}

impl<IO> HeadDeadlineIo<IO> {
    /// Wraps `io`, one of the connections `load` counts; each request head must arrive within
    /// `limit` of its first byte.
    pub fn new(io: IO, limit: Duration, load: Arc<ConnectionLoad>) -> Self {
        load.open.fetch_add(1, Ordering::AcqRel);
        // The connection that makes them run short wakes the idle ones.
        load.pressed();
        HeadDeadlineIo {
            io,
            limit,
            phase: Phase::Awaiting,
            deadline: None,
            load,
            activity: Arc::new(ConnectionActivity::default()),
            idle: None,
            pressure: None,
        }
    }

    /// What this connection's requests report their answers to ([`track_answers`]).
    pub fn activity(&self) -> Arc<ConnectionActivity> {
        Arc::clone(&self.activity)
    }

    /// The head limit for a head starting now: shorter while connections run short.
    fn head_limit(&self) -> Duration {
        if self.load.pressed() {
            self.limit.min(PRESSED_HEAD_LIMIT)
        } else {
            self.limit
        }
    }

    /// Follows `bytes` just read through the head they belong to.
    fn observe_read(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let line_end = match self.phase {
                Phase::Awaiting => {
                    self.deadline = Some(Box::pin(sleep(self.head_limit())));
                    self.idle = None;
                    self.pressure = None;
                    0
                }
                Phase::InHead { line_end } => line_end,
                Phase::Body | Phase::Expired => return,
            };
            self.phase = match (line_end, byte) {
                (1 | 2, b'\n') => {
                    self.deadline = None;
                    Phase::Body
                }
                (_, b'\n') => Phase::InHead { line_end: 1 },
                (1, b'\r') => Phase::InHead { line_end: 2 },
                _ => Phase::InHead { line_end: 0 },
            };
        }
    }

    /// A response (not an interim `1xx` one) went out: the next bytes read are a new head.
    fn observe_write(&mut self, bytes: &[u8]) {
        let interim = bytes.len() > 9
            && (bytes.starts_with(b"HTTP/1.1 1") || bytes.starts_with(b"HTTP/1.0 1"));
        if !bytes.is_empty() && !interim && self.phase != Phase::Expired {
            self.phase = Phase::Awaiting;
            self.deadline = None;
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> HeadDeadlineIo<IO> {
    /// Whether the head being read is late; then the late answer is sent (best effort: the
    /// socket is not waited on for it) and the phase is `Expired`.
    fn head_is_late(&mut self, cx: &mut Context<'_>) -> bool {
        let late = self
            .deadline
            .as_mut()
            .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
        if late {
            self.deadline = None;
            self.phase = Phase::Expired;
            let _ = Pin::new(&mut self.io).poll_write(cx, LATE_HEAD_ANSWER);
            let _ = Pin::new(&mut self.io).poll_flush(cx);
        }
        late
    }

    /// Whether this connection is to be shed now: idle for [`IDLE_CHECK`] while connections
    /// run short. Otherwise an idle connection waits, with this task's waker registered, on
    /// the pressure signal (not short) or on its check (short).
    fn idle_is_shed(&mut self, cx: &mut Context<'_>) -> bool {
        if self.phase != Phase::Awaiting || self.activity.answering() {
            self.idle = None;
            self.pressure = None;
            return false;
        }
        // At most: notified, then the check fires, then short no more and waiting again.
        for _ in 0..3 {
            if self.idle.is_none() {
                // Created before looking, so a signal sent in between is not missed.
                let signal = self
                    .pressure
                    .get_or_insert_with(|| Box::pin(Arc::clone(&self.load.pressure).notified_owned()));
                if !self.load.pressed() {
                    if signal.as_mut().poll(cx).is_pending() {
                        return false;
                    }
                    self.pressure = None;
                    continue;
                }
                self.pressure = None;
                self.idle = Some(Box::pin(sleep(IDLE_CHECK)));
            }
            let Some(check) = self.idle.as_mut() else { continue };
            if check.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.idle = None;
            if self.load.pressed() {
                self.phase = Phase::Expired;
                return true;
            }
        }
        false
    }

    /// After a response went out the connection may be idle: actix reads again only when
    /// woken, so the idle watch registers this task now (and wakes it if the connection is
    /// already to go).
    fn watch_after_write(&mut self, cx: &mut Context<'_>) {
        if self.idle_is_shed(cx) {
            cx.waker().wake_by_ref();
        }
    }
}

impl<IO> Drop for HeadDeadlineIo<IO> {
    fn drop(&mut self) {
        self.load.open.fetch_sub(1, Ordering::AcqRel);
    }
}

fn shed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "an idle connection was closed to make room while connections run short",
    )
}

fn late_head_error(limit: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "a request head did not arrive within {} seconds",
            limit.as_secs_f64()
        ),
    )
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadDeadlineIo<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.phase == Phase::Expired {
            return Poll::Ready(Err(late_head_error(this.limit)));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.observe_read(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            // Polling the deadline here registers this task to be woken when it passes.
            Poll::Pending if this.head_is_late(cx) => Poll::Ready(Err(late_head_error(this.limit))),
            Poll::Pending if this.idle_is_shed(cx) => Poll::Ready(Err(shed_error())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for HeadDeadlineIo<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.observe_write(&buf[..n]);
            this.watch_after_write(cx);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let (Poll::Ready(Ok(n)), Some(first)) = (&written, bufs.iter().find(|b| !b.is_empty())) {
            if *n > 0 {
                this.observe_write(&first[..(*n).min(first.len())]);
                this.watch_after_write(cx);
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Middleware: counts each request as being answered on its connection until its response
/// body is sent or dropped, so the connection is not taken for idle meanwhile.
pub async fn track_answers(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<AnsweringBody>, actix_web::Error> {
    let guard = request
        .request()
        .conn_data::<Arc<ConnectionActivity>>()
        .map(|activity| AnsweringGuard::new(Arc::clone(activity)));
    let response = next.call(request).await?;
    Ok(response.map_body(|_, body| AnsweringBody { inner: BoxBody::new(body), _guard: guard }))
}

/// One request being answered; dropping it ends that.
struct AnsweringGuard(Arc<ConnectionActivity>);

impl AnsweringGuard {
    fn new(activity: Arc<ConnectionActivity>) -> Self {
        activity.answering.fetch_add(1, Ordering::AcqRel);
        AnsweringGuard(activity)
    }
}

impl Drop for AnsweringGuard {
    fn drop(&mut self) {
        self.0.answering.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection busy until it is dropped.
pub struct AnsweringBody {
    inner: BoxBody,
    _guard: Option<AnsweringGuard>,
}

impl MessageBody for AnsweringBody {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.inner.size()
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase_after(chunks: &[&[u8]]) -> Phase {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let mut io = HeadDeadlineIo::new((), Duration::from_secs(5), Arc::new(ConnectionLoad::new(1024)));
        for chunk in chunks {
            io.observe_read(chunk);
        }
        io.phase
    }

    #[test]
    fn a_head_ends_at_its_blank_line_even_split_across_reads() {
        assert_eq!(
            phase_after(&[b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"]),
            Phase::Body
        );
        assert_eq!(
            phase_after(&[b"GET / HTTP/1.1\r\n", b"\r", b"\n"]),
            Phase::Body
        );
        assert_eq!(phase_after(&[b"GET / HTTP/1.1\n\n"]), Phase::Body);
        assert_eq!(
            phase_after(&[b"GET / HTTP/1.1\r\nhost: x\r\n"]),
            Phase::InHead { line_end: 1 }
        );
        assert_eq!(
            phase_after(&[b"GET / HTTP/1.1\r\nhost: x\r\n\r"]),
            Phase::InHead { line_end: 2 }
        );
        assert_eq!(
            phase_after(&[b"GET / HTTP/1.1\r\nhost: x\r\nx\r\n"]),
            Phase::InHead { line_end: 1 }
        );
        assert_eq!(phase_after(&[]), Phase::Awaiting);
    }

    #[test]
    fn a_response_makes_a_new_head_due_but_100_continue_does_not() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let mut io = HeadDeadlineIo::new((), Duration::from_secs(5), Arc::new(ConnectionLoad::new(1024)));
        io.observe_read(b"POST / HTTP/1.1\r\nexpect: 100-continue\r\n\r\n");
        io.observe_write(b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(io.phase, Phase::Body);
        io.observe_read(b"{\"a\": 1}");
        assert_eq!(io.phase, Phase::Body);
        io.observe_write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}");
        assert_eq!(io.phase, Phase::Awaiting);
        assert!(io.deadline.is_none());
        io.observe_read(b"G");
        assert!(
            io.deadline.is_some(),
            "the first byte of the next head starts its clock"
        );
    }
}
