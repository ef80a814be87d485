//! SCRAM (RFC 5802, with RFC 7677's SHA-256 and Kafka's SHA-512), the
//! client's side, without channel binding.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroizing;

use super::Scram;

/// 24 random bytes, base64.
pub(super) fn client_nonce() -> String {
    let mut bytes = [0u8; 24];
    crate::random::fill_from_os(&mut bytes);
    STANDARD.encode(bytes)
}

fn hmac(hash: Scram, key: &[u8], data: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(match hash {
        Scram::Sha256 => {
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Scram::Sha512 => {
            let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("any key length");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
    })
}

fn h(hash: Scram, data: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(match hash {
        Scram::Sha256 => Sha256::digest(data).to_vec(),
        Scram::Sha512 => Sha512::digest(data).to_vec(),
    })
}

/// Hi(): PBKDF2 with the hash's HMAC.
fn hi(hash: Scram, password: &[u8], salt: &[u8], i: u32) -> Zeroizing<Vec<u8>> {
    let mut first = salt.to_vec();
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac(hash, password, &first);
    let mut out = u.clone();
    for _ in 1..i {
        u = hmac(hash, password, &u);
        for (o, b) in out.iter_mut().zip(u.iter()) {
            *o ^= b;
        }
    }
    out
}

/// `user` as SCRAM writes a name (`=` and `,` escaped).
fn saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

pub(super) struct Client {
    hash: Scram,
    first_bare: String,
    nonce: String,
    server_signature: Option<Zeroizing<Vec<u8>>>,
}

impl Client {
    pub(super) fn new(hash: Scram, user: &str, nonce: &str) -> Client {
        Client {
            hash,
            first_bare: format!("n={},r={nonce}", saslname(user)),
            nonce: nonce.to_owned(),
            server_signature: None,
        }
    }

    /// The client's first message.
    pub(super) fn first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// The client's last message, answering the server's first.
    pub(super) fn last(
        &mut self,
        server_first: &[u8],
        password: &str,
    ) -> Result<Zeroizing<String>, String> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| "a server message not UTF-8")?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for part in server_first.split(',') {
            match part.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("m", _)) => return Err("a mandatory extension".into()),
                _ => {}
            }
        }
        let nonce = nonce.ok_or("no nonce")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() <= self.nonce.len() {
            return Err("the server's nonce does not extend the client's".into());
        }
        let salt = STANDARD
            .decode(salt.ok_or("no salt")?)
            .map_err(|_| "a salt not base64")?;
        let iterations: u32 = iterations
            .ok_or("no iteration count")?
            .parse()
            .map_err(|_| "an iteration count not a number")?;
        // Kafka's bounds: 4096 (its minimum) to 16384.
        if !(4096..=16384).contains(&iterations) {
            return Err(format!("an iteration count of {iterations}"));
        }
        let without_proof = format!("c=biws,r={nonce}");
        let auth = Zeroizing::new(format!(
            "{},{server_first},{without_proof}",
            self.first_bare
        ));
        let salted = hi(self.hash, password.as_bytes(), &salt, iterations);
        let client_key = hmac(self.hash, &salted, b"Client Key");
        let stored = h(self.hash, &client_key);
        let client_signature = hmac(self.hash, &stored, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(client_signature.iter())
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(self.hash, &salted, b"Server Key");
        self.server_signature = Some(hmac(self.hash, &server_key, auth.as_bytes()));
        Ok(Zeroizing::new(format!(
            "{without_proof},p={}",
            STANDARD.encode(proof)
        )))
    }

    /// Checks the server's final message (its signature).
    pub(super) fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final).map_err(|_| "a server message not UTF-8")?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(format!("the server refused: {e}"));
        }
        let v = text
            .split(',')
            .find_map(|p| p.strip_prefix("v="))
            .ok_or("no server signature")?;
        let v = STANDARD.decode(v).map_err(|_| "a signature not base64")?;
        let expected = self
            .server_signature
            .as_ref()
            .ok_or("no client proof was sent")?;
        if v.len() == expected.len()
            && v.iter()
                .zip(expected.iter())
                .fold(0u8, |a, (x, y)| a | (x ^ y))
                == 0
        {
            Ok(())
        } else {
            Err("the server's signature does not match".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677, section 3: SCRAM-SHA-256, user "user", password
    /// "pencil".
    #[test]
    fn rfc_7677s_exchange() {
        let mut c = Client::new(Scram::Sha256, "user", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(c.first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let last = c
            .last(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "pencil",
            )
            .unwrap();
        assert_eq!(
            last.as_str(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(c
            .verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G5=")
            .is_err());
        // A server that does not extend the client's nonce, or asks
        // for too few iterations, is refused.
        let mut c = Client::new(Scram::Sha256, "user", "abc");
        assert!(c.last(b"r=xyz,s=AAAA,i=4096", "p").is_err());
        assert!(c.last(b"r=abcd,s=AAAA,i=1", "p").is_err());
    }
}
