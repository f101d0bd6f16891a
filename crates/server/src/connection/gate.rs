//! Where a connection stands with the shared secret: the handshake's
//! steps (module docs of `farmem_wire::auth`), and after it the seal on
//! every frame (`farmem_wire::seal`).

use super::error_reply;
use crate::metrics::Refusal;
use crate::Shared;
use farmem_wire::seal::{Direction, SessionKey, TAG_LEN};
use farmem_wire::{auth, ErrorCode, Frame, Header, Request};
use std::cell::Cell;
use std::io;

/// Where a connection stands with the shared secret.
pub(crate) enum Gate {
    /// Requests are served: a Unix socket, a server without a secret, or a
    /// client that has proved it holds the secret.
    Open,
    /// The client's proof passed and AuthOk is on its way: every frame
    /// after it is sealed under `key` (the loop installs it once AuthOk has
    /// left, unsealed).
    Passed { key: SessionKey },
    /// A TCP connection to a server with a secret: only Auth is taken.
    Closed,
    /// The challenge is sent; only the client's proof is taken.
    Challenged {
        cn: [u8; auth::NONCE_LEN],
        sn: [u8; auth::NONCE_LEN],
    },
}

/// Take one step of the handshake (module docs of `farmem_wire::auth`).
/// Returns whether the connection stays open; every refusal also prints
/// one line here, so both sides say what went wrong.
pub(crate) fn authenticate(
    sh: &Shared,
    gate: &mut Gate,
    h: &Header,
    req: Request<'_>,
    out: &mut Vec<u8>,
    peer: &str,
) -> bool {
    let refuse = |out: &mut Vec<u8>, code: ErrorCode, to_client: &str, here: &str| {
        sh.metrics.refused(Refusal::Auth);
        sh.metrics.auth_failed();
        tracing::warn!("refused {peer}: {here}");
        error_reply(out, h.tag, code, to_client);
        false
    };
    let Some(secret) = sh.cfg.secret.as_deref() else {
        return refuse(
            out,
            ErrorCode::AuthFailed,
            "this server has no shared secret, so it cannot prove itself; start it with --secret-file, or give this client no secret",
            "it asked to authenticate, and this server has no secret (start it with --secret-file)",
        );
    };
    match (req, &*gate) {
        (Request::Auth { nonce: cn }, Gate::Closed) => {
            let mut sn = [0u8; auth::NONCE_LEN];
            if let Err(e) = farmem_sys::process::fill_random(&mut sn) {
                return refuse(
                    out,
                    ErrorCode::AuthFailed,
                    "the server could not draw a nonce",
                    &format!("the kernel gave no random nonce (getrandom: {e})"),
                );
            }
            let proof = secret.server_proof(&cn, &sn);
            out.extend_from_slice(
                &Frame::AuthChallenge {
                    nonce: &sn,
                    proof: &proof,
                }
                .encode(h.tag),
            );
            *gate = Gate::Challenged { cn, sn };
            true
        }
        (Request::AuthProof { proof }, Gate::Challenged { cn, sn }) => {
            if secret.verify_client(cn, sn, &proof) {
                out.extend_from_slice(&Frame::AuthOk.encode(h.tag));
                let key = secret.session_key(cn, sn);
                *gate = Gate::Passed { key };
                true
            } else {
                refuse(
                    out,
                    ErrorCode::AuthFailed,
                    "wrong secret: this client's secret file differs from the server's",
                    &format!(
                        "its proof does not match the secret in {} (a different secret file?)",
                        secret.path().display()
                    ),
                )
            }
        }
        _ => refuse(
            out,
            ErrorCode::AuthFailed,
            "authentication out of order (Auth, then AuthProof, once per connection)",
            "authentication out of order",
        ),
    }
}

/// The seal on an authenticated connection's frames: its key and how many
/// frames have gone each way (each tag binds its frame's place in the
/// stream). One connection thread owns it.
pub(crate) struct Seal {
    key: SessionKey,
    sent: Cell<u64>,
    received: Cell<u64>,
}

impl Seal {
    pub(crate) fn new(key: SessionKey) -> Seal {
        Seal {
            key,
            sent: Cell::new(0),
            received: Cell::new(0),
        }
    }

    fn next(c: &Cell<u64>) -> u64 {
        let n = c.get();
        c.set(n + 1);
        n
    }

    /// Seal the one reply frame in `out` (its tag goes in after the part it
    /// covers: the whole of every reply `out` carries).
    pub(crate) fn seal_reply(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let seq = Seal::next(&self.sent);
        self.key
            .seal_frame(Direction::ToClient, seq, out)
            .map_err(io::Error::other)
    }

    /// The tag of the next reply, whose covered part is `covered` (a
    /// ReadOk's header, sent with its pages straight from the store).
    pub(crate) fn reply_tag(&self, covered: &[u8]) -> [u8; TAG_LEN] {
        let seq = Seal::next(&self.sent);
        self.key.tag(Direction::ToClient, seq, covered)
    }

    /// Whether `tag` seals the next request, whose header and covered
    /// payload are `covered`.
    pub(crate) fn open(&self, covered: &[u8], tag: &[u8]) -> bool {
        let seq = Seal::next(&self.received);
        let mut m = self.key.frame_mac(Direction::ToServer, seq);
        m.update(covered);
        m.verify(tag)
    }
}
