//! Where each KEK lives: given, or from a rule's parameters, checked
//! against what the registry and the other rules say.

use std::collections::HashMap;

use super::*;
use crate::confluent::kek::{self, Kek, KekPlace};
use crate::confluent::rule::Rule;
use crate::error::Error;

impl ConfluentJson {
    /// Says where the KEK `name` lives (Confluent's `kmsType`, e.g.
    /// `aws-kms`, and `kmsKeyId`), for DEKs added with
    /// [`add_wrapped_dek`](ConfluentJson::add_wrapped_dek) or read under
    /// rules that do not say it (a rule that does, `encrypt.kms.type` and
    /// `encrypt.kms.key.id`, of a schema registered here, places its KEK
    /// too), when no registry does. A KEK nobody places is `local-kms`.
    pub fn add_kek(&self, name: &str, kms_type: &str, kms_key_id: &str) {
        let mut deks = self.lock();
        if deks.keks.len() >= MAX_CACHED {
            deks.keks.clear();
        }
        deks.keks.insert(
            name.to_owned(),
            (kms_type.to_owned(), kms_key_id.to_owned()),
        );
    }

    /// The KEK `name`: where it was placed ([`add_kek`](Self::add_kek)) or
    /// the registry holds it, else where `rule` (or a rule of a schema
    /// known here) says it lives, else `local-kms`. As Confluent's client,
    /// a KEK in the registry is checked against the rule: another KMS type
    /// or key id than the rule names is an error, and so is a shared KEK.
    pub(super) fn kek(&self, name: &str, rule: Option<&Rule>) -> Result<Kek<'_>, Error> {
        let ruled = rule.and_then(|r| r.kms.clone());
        let known = self.lock().keks.get(name).cloned();
        let known = match (known, &self.registry) {
            (Some(p), _) => Some(p),
            (None, Some(registry)) => {
                let found = registry.kek(name)?;
                if let Some(p) = &found {
                    self.add_kek(name, &p.0, &p.1);
                }
                found
            }
            (None, None) => None,
        };
        let place = match (known, ruled) {
            (Some(k), Some(r)) if !same_place(&k, &r) => {
                return Err(Error::confluent(format!(
                    "the KEK {:?} is in {} {:?}, and the rule names {} {:?} (Confluent's client refuses such a rule too)",
                    crate::error::printable(name),
                    k.0,
                    crate::error::printable(&k.1),
                    r.0,
                    crate::error::printable(&r.1),
                )))
            }
            (_, Some(r)) => r,
            (Some(k), None) => k,
            (None, None) => self
                .place_in_rules(name)
                .unwrap_or_else(|| ("local-kms".to_owned(), String::new())),
        };
        kek::resolve(
            name,
            &place,
            self.local.as_ref(),
            self.kms_clients.as_ref(),
            &self.vault_addresses,
        )
    }

    /// One KEK, one place: the rules of a schema (and of the schemas known
    /// here) that name a KEK's KMS name the same one; a rule that names
    /// none takes the place another rule names. Otherwise a DEK opened for
    /// one rule under one KMS would serve another rule that names another.
    ///
    /// # Errors
    /// [`Error::Confluent`] naming the KEK and the two places.
    pub(super) fn check_kek_places(
        &self,
        fields: &mut [(Rule, Reached)],
        payload: &mut Option<Rule>,
    ) -> Result<(), Error> {
        let mut rules: Vec<&mut Rule> = fields.iter_mut().map(|(r, _)| r).collect();
        rules.extend(payload.as_mut());
        let mut places: HashMap<String, KekPlace> = HashMap::new();
        for rule in &rules {
            let Some(place) = rule
                .kms
                .clone()
                .or_else(|| self.place_in_rules(&rule.kek_name))
            else {
                continue;
            };
            if let Some(other) = places.get(&rule.kek_name) {
                if !same_place(other, &place) {
                    return Err(Error::confluent(format!(
                        "the KEK {:?} is placed in {} {:?} and in {} {:?} by the rules: refusing the schema",
                        crate::error::printable(&rule.kek_name),
                        crate::error::printable(&other.0),
                        crate::error::printable(&other.1),
                        crate::error::printable(&place.0),
                        crate::error::printable(&place.1),
                    )));
                }
            }
            places.insert(rule.kek_name.clone(), place);
        }
        for rule in rules {
            if rule.kms.is_none() {
                rule.kms = places.get(&rule.kek_name).cloned();
            }
        }
        Ok(())
    }

    /// Where a rule of a schema known here says the KEK `name` lives.
    pub(super) fn place_in_rules(&self, name: &str) -> Option<KekPlace> {
        read(&self.schemas).values().find_map(|r| {
            r.fields
                .iter()
                .map(|(rule, _)| rule)
                .chain(r.payload.as_ref())
                .find(|rule| rule.kek_name == name)
                .and_then(|rule| rule.kms.clone())
        })
    }
}

/// Whether two places are one KEK's: the same KMS type and key id, as
/// Confluent's client compares a rule's with the registry's.
pub(super) fn same_place(a: &KekPlace, b: &KekPlace) -> bool {
    a == b
}
