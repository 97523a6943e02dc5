//! `fedsql serve`'s PostgreSQL wire as a client on the network sends it:
//! the bytes of a whole connection (start-up or SSL request, password or
//! SCRAM messages, simple and extended queries), written to a real
//! listener over loopback, then the write side closed. Two servers serve
//! the demo catalog for every input: one without passwords (its queries
//! reachable at once) and one with a SCRAM user `fuzz` (its handshake).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::common::runtime;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::frontend::demo::register_demo;
use crate::frontend::pgwire::auth::{Users, Verifier};
use crate::frontend::pgwire::{Server, ServerOptions, start};

/// Longest a server may take to answer a whole input and close.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);
/// Most bytes read back (a reply past it is cut, not a failure).
const MOST_REPLY: u64 = 16 << 20;

/// The two servers: without passwords, and with the SCRAM user `fuzz`.
fn servers() -> &'static [SocketAddr; 2] {
    static SERVERS: OnceLock<([SocketAddr; 2], Vec<Server>)> = OnceLock::new();
    let (addrs, _) = SERVERS.get_or_init(|| {
        runtime().block_on(async {
            let serve = |users: Option<Arc<Users>>| async move {
                let ctx = FedContext::new();
                register_demo(&ctx).expect("the demo catalog");
                let options = ServerOptions {
                    listen: "127.0.0.1:0".into(),
                    users,
                    tls: None,
                    allow_ddl: false,
                };
                start(ctx, options).await.expect("a pgwire server")
            };
            let mut users = Users::default();
            users.set("fuzz", Verifier::new("fuzz").expect("a verifier"));
            let open = serve(None).await;
            let scram = serve(Some(Arc::new(users))).await;
            ([open.addr(), scram.addr()], vec![open, scram])
        })
    });
    addrs
}

/// One connection: the first byte picks the server (even: no password,
/// odd: SCRAM), the rest is what the client writes.
pub fn pg_wire(data: &[u8]) -> Result<()> {
    let Some((&pick, written)) = data.split_first() else {
        return Err(FedError::InvalidArgument("an empty input".into()));
    };
    let addr = servers()[usize::from(pick % 2)];
    let mut socket = TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(ANSWER_WITHIN))?;
    socket.set_write_timeout(Some(ANSWER_WITHIN))?;
    // A server that stops reading (it refused, and closed) ends the write.
    match socket.write_all(written) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
            panic!("the server stopped reading for {ANSWER_WITHIN:?} without closing")
        }
        Err(e) => return Err(e.into()),
    }
    let _ = socket.shutdown(Shutdown::Write);
    let mut reply = Vec::new();
    match (&mut socket).take(MOST_REPLY).read_to_end(&mut reply) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
            panic!("the server neither answered nor closed within {ANSWER_WITHIN:?}")
        }
        Err(e) => return Err(e.into()),
    }
    verdict(&reply)
}

/// `Ok` when the server answered without an ErrorResponse; otherwise its
/// first error's message (or that it closed without a word).
fn verdict(reply: &[u8]) -> Result<()> {
    if reply.is_empty() {
        return Err(FedError::InvalidArgument(
            "the server closed the connection without an answer".into(),
        ));
    }
    let mut at = 0;
    while at < reply.len() {
        let tag = reply[at];
        let length = reply
            .get(at + 1..at + 5)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
        match length {
            Some(length) if length >= 4 && at + 1 + length <= reply.len() => {
                if tag == b'E' {
                    return Err(FedError::InvalidArgument(error_message(
                        &reply[at + 5..at + 1 + length],
                    )));
                }
                at += 1 + length;
            }
            // The one-byte answer to an SSL or GSS request.
            _ if matches!(tag, b'N' | b'S' | b'G') => at += 1,
            _ => break,
        }
    }
    Ok(())
}

/// An ErrorResponse's fields, as `SQLSTATE: message`.
fn error_message(fields: &[u8]) -> String {
    let mut code = String::new();
    let mut message = String::new();
    for field in fields.split(|&b| b == 0) {
        match field.split_first() {
            Some((b'C', text)) => code = String::from_utf8_lossy(text).into_owned(),
            Some((b'M', text)) => message = String::from_utf8_lossy(text).into_owned(),
            _ => {}
        }
    }
    assert!(
        !message.trim().is_empty(),
        "the server sent an ErrorResponse without a message (SQLSTATE {code})"
    );
    format!("{code}: {message}")
}
