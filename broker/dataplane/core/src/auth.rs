//! The front door's check of bearer tokens, before a request is read.
//!
//! With `--broker.auth-keys`, every RPC carries `authorization: Bearer <JWT>`
//! signed with HMAC (HS256 or HS384) under one of the broker's keys (see
//! `gazette.broker.protocol.auth`, and Gazette's `auth/auth.go`). The door
//! refuses a request whose token is missing, not a bearer token, malformed, or
//! signed by none of the keys: it answers UNAUTHENTICATED at once, without
//! reading the request's messages, so a caller without a key never makes the
//! broker hold or decode its bytes. A token that verifies goes on with its
//! request, and the server checks its claims (expiry, capability, selector) as
//! before. Refusals use the server's words, so a caller sees the same reason
//! whichever of the two refused it.

use base64::Engine;
use ring::hmac;

/// The broker's keys as they are now: the door and the native service read them
/// per request, and a key reload swaps them (None: auth is off).
pub type SharedGate = std::sync::Arc<std::sync::RwLock<Option<std::sync::Arc<Gate>>>>;

/// The gate in `shared` now.
pub fn current(shared: &SharedGate) -> Option<std::sync::Arc<Gate>> {
    shared.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The broker's keys, as the door checks tokens with them.
pub struct Gate {
    keys: Vec<Vec<u8>>,
    allow_missing: bool,
}

const BEARER: &str = "Bearer ";
const MAX_TOKEN: usize = 64 << 10;

impl Gate {
    /// Keys of `--broker.auth-keys`; with `allow_missing` (the `AA==` switch), a
    /// request without an `authorization` header goes through.
    pub fn new(keys: Vec<Vec<u8>>, allow_missing: bool) -> Self {
        Gate {
            keys,
            allow_missing,
        }
    }

    /// Ok if the request may go on; else the reason it is refused.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), String> {
        match self.bearer(authorization)? {
            None => Ok(()),
            Some(token) => self.verify(token).map(|_| ()).map_err(verifying),
        }
    }

    /// The claims of the request's token, checked against `now` (seconds since the
    /// epoch): None when it has no token and may go without one (the `AA==` switch),
    /// else the server's refusal.
    pub fn claims(
        &self,
        authorization: Option<&[u8]>,
        now: f64,
    ) -> Result<Option<crate::claims::Claims>, String> {
        let Some(token) = self.bearer(authorization)? else {
            return Ok(None);
        };
        let payload = self.verify(token).map_err(verifying)?;
        crate::claims::Claims::from_payload(&payload, now)
            .map(Some)
            .map_err(verifying)
    }

    /// A token of `capability` over the one journal named `journal`, issued at
    /// `now` (seconds since the epoch) for `lifetime` seconds and signed (HS256)
    /// with the first key, as the Python broker signs its calls to peers
    /// (`auth.KeyedAuth.sign` of `auth.journal_claims`). None without keys.
    pub fn sign_journal_token(
        &self,
        capability: u32,
        journal: &str,
        now: u64,
        lifetime: u64,
    ) -> Option<String> {
        let key = self.keys.first()?;
        let claims = serde_json::json!({
            "cap": capability,
            "sel": {
                "include": {"labels": [{"name": "name", "value": journal}]},
                "exclude": {"labels": null},
            },
            "exp": now + lifetime,
            "iat": now,
        });
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let payload = b64.encode(claims.to_string());
        let signed = format!("{header}.{payload}");
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), signed.as_bytes());
        Some(format!("{signed}.{}", b64.encode(tag.as_ref())))
    }

    /// The bearer token of an `authorization` header; None when there is none and
    /// requests may go without one.
    fn bearer<'v>(&self, authorization: Option<&'v [u8]>) -> Result<Option<&'v str>, String> {
        let Some(value) = authorization else {
            return if self.allow_missing {
                Ok(None)
            } else {
                Err("missing or empty Authorization token".into())
            };
        };
        let value = std::str::from_utf8(value).unwrap_or("");
        match value.strip_prefix(BEARER) {
            Some(token) => Ok(Some(token)),
            None => Err("invalid or unsupported Authorization header (expected 'Bearer')".into()),
        }
    }

    /// Checks `token`'s signature; returns its decoded payload.
    fn verify(&self, token: &str) -> Result<Vec<u8>, String> {
        if token.len() > MAX_TOKEN {
            return Err(format!("token is malformed: longer than {MAX_TOKEN} bytes"));
        }
        let parts: Vec<&str> = token.split('.').collect();
        let [header, payload, signature] = parts[..] else {
            return Err(if parts.len() < 3 {
                "token is malformed: Not enough segments".into()
            } else {
                "token is malformed: too many segments".into()
            });
        };
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64
            .decode(header.trim_end_matches('='))
            .map_err(|_| "token is malformed: Invalid header padding".to_string())?;
        let header: serde_json::Value = serde_json::from_slice(&header)
            .map_err(|e| format!("token is malformed: Invalid header string: {e}"))?;
        let algorithm = match header.get("alg").and_then(|a| a.as_str()) {
            Some("HS256") => hmac::HMAC_SHA256,
            Some("HS384") => hmac::HMAC_SHA384,
            other => {
                return Err(format!(
                    "token signature is invalid: the specified alg value is not allowed: {} \
                     (expected HS256 or HS384)",
                    other.unwrap_or("(none)")
                ))
            }
        };
        let signature = b64
            .decode(signature.trim_end_matches('='))
            .map_err(|_| "token is malformed: Invalid crypto padding".to_string())?;
        let signed = &token[..header_len(token, payload)];
        for key in &self.keys {
            if hmac::verify(
                &hmac::Key::new(algorithm, key),
                signed.as_bytes(),
                &signature,
            )
            .is_ok()
            {
                return b64
                    .decode(payload.trim_end_matches('='))
                    .map_err(|_| "token is malformed: Invalid payload padding".to_string());
            }
        }
        Err("token signature is invalid: signature is invalid".into())
    }
}

fn verifying(why: String) -> String {
    format!("verifying Authorization: {why}")
}

/// Length of `header.payload`: what the signature covers.
fn header_len(token: &str, payload: &str) -> usize {
    token.find('.').map_or(0, |i| i + 1 + payload.len())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sign(alg: &str, key: &[u8], claims: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#));
        let payload = b64.encode(claims);
        let algorithm = if alg == "HS384" {
            hmac::HMAC_SHA384
        } else {
            hmac::HMAC_SHA256
        };
        let tag = hmac::sign(
            &hmac::Key::new(algorithm, key),
            format!("{header}.{payload}").as_bytes(),
        );
        format!("Bearer {header}.{payload}.{}", b64.encode(tag.as_ref()))
    }

    fn gate() -> Gate {
        Gate::new(vec![b"first".to_vec(), b"second".to_vec()], false)
    }

    #[test]
    fn tokens_of_any_key_and_either_algorithm_pass() {
        for key in [&b"first"[..], b"second"] {
            for alg in ["HS256", "HS384"] {
                let token = sign(alg, key, r#"{"cap":2,"exp":1}"#);
                assert_eq!(gate().check(Some(token.as_bytes())), Ok(()), "{alg}");
            }
        }
    }

    #[test]
    fn refusals_give_the_servers_reasons() {
        let cases: [(Option<String>, &str); 6] = [
            (None, "missing or empty Authorization token"),
            (
                Some("Basic dXNlcjpwYXNz".into()),
                "invalid or unsupported Authorization header (expected 'Bearer')",
            ),
            (
                Some(sign("HS256", b"another", "{}")),
                "verifying Authorization: token signature is invalid: signature is invalid",
            ),
            (
                Some("Bearer not-a-token".into()),
                "verifying Authorization: token is malformed: Not enough segments",
            ),
            (
                Some("Bearer ".into()),
                "verifying Authorization: token is malformed",
            ),
            (
                Some("Bearer eyJhbGciOiJub25lIn0.eyJjYXAiOjIsImV4cCI6OTk5OTk5OTk5OX0.".into()),
                "verifying Authorization: token signature is invalid",
            ),
        ];
        for (header, want) in cases {
            let got = gate()
                .check(header.as_deref().map(str::as_bytes))
                .unwrap_err();
            assert!(got.starts_with(want), "{header:?}: {got}");
        }
    }

    #[test]
    fn aa_lets_requests_without_a_token_in_but_checks_those_with_one() {
        let gate = Gate::new(vec![b"first".to_vec()], true);
        assert_eq!(gate.check(None), Ok(()));
        assert!(gate.check(Some(b"Bearer x.y.z")).is_err());
    }

    #[test]
    fn journal_tokens_verify_and_carry_narrow_claims() {
        let g = gate();
        let token = g.sign_journal_token(32, "a/journal", 1000, 3600).unwrap();
        let header = format!("Bearer {token}");
        let claims = g.claims(Some(header.as_bytes()), 1001.0).unwrap().unwrap();
        claims.check_capability(32).unwrap();
        assert!(claims.check_capability(16).is_err());
        let spec = |name: &str| crate::protocol::JournalSpec {
            name: name.into(),
            ..Default::default()
        };
        assert!(claims.allows(&spec("a/journal")));
        assert!(!claims.allows(&spec("a/other")));
        // Expired once its lifetime is over.
        assert!(g.claims(Some(header.as_bytes()), 4700.0).is_err());
        assert!(Gate::new(vec![], false)
            .sign_journal_token(32, "a/journal", 1000, 3600)
            .is_none());
    }

    #[test]
    fn a_tampered_payload_is_refused() {
        let token = sign("HS256", b"first", r#"{"cap":2}"#);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], b64.encode(r#"{"cap":255}"#), parts[2]);
        assert!(gate()
            .check(Some(forged.as_bytes()))
            .unwrap_err()
            .contains("signature is invalid"));
    }
}
