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
//! Key type: [`HeadDeadlineIo`]. Cost: one pass over the bytes of each head, one timer per
//! connection while a head is arriving.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

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
}

impl<IO> HeadDeadlineIo<IO> {
    /// Wraps `io`; each request head must arrive within `limit` of its first byte.
    pub fn new(io: IO, limit: Duration) -> Self {
        HeadDeadlineIo {
            io,
            limit,
            phase: Phase::Awaiting,
            deadline: None,
        }
    }

    /// Follows `bytes` just read through the head they belong to.
    fn observe_read(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let line_end = match self.phase {
                Phase::Awaiting => {
                    self.deadline = Some(Box::pin(sleep(self.limit)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn phase_after(chunks: &[&[u8]]) -> Phase {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let mut io = HeadDeadlineIo::new((), Duration::from_secs(5));
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
        let mut io = HeadDeadlineIo::new((), Duration::from_secs(5));
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
