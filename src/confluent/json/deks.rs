//! The DEKs a codec reads and writes with: given wrapped, opened once,
//! made and wrapped by a writer, and rotated when a rule's expiry passes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::confluent::rule::Rule;
use crate::confluent::{Dek, DekAlgorithm};
use crate::error::Error;

impl ConfluentJson {
    /// Adds a DEK as the DEK registry holds it: wrapped under the KEK
    /// (`encryptedKeyMaterial`, base64-decoded). It is unwrapped here.
    ///
    /// # Errors
    /// [`Error::Confluent`] if it does not unwrap under this KEK,
    /// [`Error::Kms`] if the KEK's KMS refuses or fails.
    pub fn add_wrapped_dek(
        &self,
        kek_name: &str,
        subject: &str,
        algorithm: DekAlgorithm,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(), Error> {
        let dek = self
            .kek(kek_name, None)?
            .unwrap(algorithm, version, wrapped)?;
        let id = (kek_name.to_owned(), subject.to_owned(), algorithm, version);
        let mut deks = self.lock();
        deks.wrapped.insert(id.clone(), wrapped.to_vec());
        deks.open.insert(id, (Arc::new(dek), SystemTime::now()));
        Ok(())
    }

    /// The wrapped DEKs known here (made here or added), as the DEK
    /// registry would hold them: KEK name, subject, algorithm, version and
    /// `encryptedKeyMaterial` (before base64). No key is in the clear.
    pub fn wrapped_deks(&self) -> Vec<(String, String, DekAlgorithm, u32, Vec<u8>)> {
        let deks = self.lock();
        let mut out: Vec<_> = deks
            .wrapped
            .iter()
            .map(|((k, s, a, v), w)| (k.clone(), s.clone(), *a, *v, w.clone()))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1, a.3).cmp(&(&b.0, &b.1, b.3)));
        out
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Deks> {
        self.deks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The DEK `version` of `rule` for `subject`, to read with.
    pub(super) fn dek_to_read(
        &self,
        rule: &Rule,
        subject: &str,
        version: u32,
    ) -> Result<Arc<Dek>, Error> {
        let id = (
            rule.kek_name.clone(),
            subject.to_owned(),
            rule.algorithm,
            version,
        );
        if let Some((d, _)) = self.lock().open.get(&id) {
            return Ok(Arc::clone(d));
        }
        if let Some(registry) = &self.registry {
            if let Some((v, wrapped, ts)) =
                registry.dek_to_read(&rule.kek_name, subject, rule.algorithm, version)?
            {
                return self.keep(rule, subject, v, &wrapped, ts);
            }
        }
        Err(Error::confluent(format!(
            "no DEK version {version} of KEK {:?} for subject {:?} ({})",
            crate::error::printable(&rule.kek_name),
            crate::error::printable(subject),
            rule.algorithm.name()
        )))
    }

    /// The DEKs of `rule` for `subject` by version, for one record's
    /// fields: the last one is kept for the next (a record's fields are
    /// mostly under one version), so a record looks its DEK up once.
    pub(super) fn dek_reader<'a>(
        &'a self,
        rule: &'a Rule,
        subject: &'a str,
    ) -> impl FnMut(u32) -> Result<Arc<Dek>, Error> + 'a {
        let mut last: Option<(u32, Arc<Dek>)> = None;
        move |version| match &last {
            Some((v, d)) if *v == version => Ok(Arc::clone(d)),
            _ => {
                let d = self.dek_to_read(rule, subject, version)?;
                last = Some((version, Arc::clone(&d)));
                Ok(d)
            }
        }
    }

    /// Unwraps and keeps a DEK fetched from the registry (`ts`: when it was
    /// made, in milliseconds since the epoch).
    pub(super) fn keep(
        &self,
        rule: &Rule,
        subject: &str,
        version: u32,
        wrapped: &[u8],
        ts: u64,
    ) -> Result<Arc<Dek>, Error> {
        let dek = Arc::new(self.kek(&rule.kek_name, Some(rule))?.unwrap(
            rule.algorithm,
            version,
            wrapped,
        )?);
        let made = SystemTime::UNIX_EPOCH + Duration::from_millis(ts);
        let id = (
            rule.kek_name.clone(),
            subject.to_owned(),
            rule.algorithm,
            version,
        );
        let mut deks = self.lock();
        if deks.open.len() >= MAX_CACHED {
            // Bounded: one DEK goes (it is fetched again if needed).
            if let Some(old) = deks.open.keys().next().cloned() {
                deks.open.remove(&old);
                deks.wrapped.remove(&old);
            }
        }
        deks.wrapped.insert(id.clone(), wrapped.to_vec());
        deks.open.insert(id, (Arc::clone(&dek), made));
        Ok(dek)
    }

    /// The newest DEK of `rule` for `subject` known here: version, DEK,
    /// when it was made.
    pub(super) fn newest(&self, rule: &Rule, subject: &str) -> Option<(u32, Arc<Dek>, SystemTime)> {
        self.lock()
            .open
            .iter()
            .filter(|((k, s, a, _), _)| k == &rule.kek_name && s == subject && *a == rule.algorithm)
            .max_by_key(|((_, _, _, v), _)| *v)
            .map(|((_, _, _, v), (d, made))| (*v, Arc::clone(d), *made))
    }

    /// The DEK to write with: the newest version, known here or in the
    /// registry, or a new one (made here, wrapped, and created in the
    /// registry) when there is none or the newest has expired.
    pub(super) fn dek_to_write(&self, rule: &Rule, subject: &str) -> Result<Arc<Dek>, Error> {
        let expired = |made: SystemTime| {
            rule.rotates()
                && made.elapsed().unwrap_or_default()
                    > Duration::from_secs(u64::from(rule.expiry_days) * 86_400)
        };
        // A rule that does not rotate writes with version 1 (values carry
        // no version, and a reader takes 1), whatever versions an earlier
        // rotating rule of the subject made: as Confluent's client does.
        let mut newest = if rule.rotates() {
            self.newest(rule, subject)
        } else {
            self.lock()
                .open
                .get(&(rule.kek_name.clone(), subject.to_owned(), rule.algorithm, 1))
                .map(|(d, made)| (1, Arc::clone(d), *made))
        };
        if let Some(registry) = &self.registry {
            if newest.as_ref().is_none_or(|(_, _, made)| expired(*made)) {
                let wanted = if rule.rotates() { None } else { Some(1) };
                if let Some((v, wrapped, ts)) =
                    registry.dek(&rule.kek_name, subject, rule.algorithm, wanted)?
                {
                    let dek = self.keep(rule, subject, v, &wrapped, ts)?;
                    newest = Some((v, dek, SystemTime::UNIX_EPOCH + Duration::from_millis(ts)));
                }
            }
        }
        let version = match newest {
            Some((_, dek, made)) if !expired(made) => return Ok(dek),
            Some((v, _, _)) => v + 1,
            None => 1,
        };
        let dek = Arc::new(Dek::generate(rule.algorithm, version));
        let wrapped = self.kek(&rule.kek_name, Some(rule))?.wrap(&dek)?;
        if let Some(registry) = &self.registry {
            let (kms_type, kms_key_id) = rule.kms.clone().unwrap_or_else(|| {
                (
                    "local-kms".to_owned(),
                    format!("local-kms://{}", rule.kek_name),
                )
            });
            registry.create_kek(&rule.kek_name, &kms_type, &kms_key_id)?;
            if !registry.create_dek(&rule.kek_name, subject, rule.algorithm, version, &wrapped)? {
                // Another writer made this version first: use theirs, if
                // it is not deleted (a soft-deleted DEK is read, never
                // written under: as Confluent's client, which then fails).
                return match registry.dek(&rule.kek_name, subject, rule.algorithm, Some(version))? {
                    Some((v, wrapped, ts)) => self.keep(rule, subject, v, &wrapped, ts),
                    None => Err(Error::confluent(format!(
                        "DEK version {version} of subject {:?} is deleted in the registry: no DEK to write under",
                        crate::error::printable(subject)
                    ))),
                };
            }
        }
        let id = (
            rule.kek_name.clone(),
            subject.to_owned(),
            rule.algorithm,
            version,
        );
        let mut deks = self.lock();
        // Another thread of this codec made this version first: use
        // theirs (one DEK per version, or the records under the other
        // could never be read).
        if let Some((theirs, _)) = deks.open.get(&id) {
            return Ok(Arc::clone(theirs));
        }
        deks.wrapped.insert(id.clone(), wrapped);
        deks.open.insert(id, (Arc::clone(&dek), SystemTime::now()));
        Ok(dek)
    }
}
