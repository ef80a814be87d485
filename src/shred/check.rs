//! [`SubjectKeys::check`]: the key store read whole, every record opened.

use super::{naming_ad, SubjectKeys, SubjectTag, DEK_ID, NAMING_ID};
use crate::error::Error;

/// What [`SubjectKeys::check`] found in the key store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStoreCheck {
    /// Subjects with a DEK.
    pub subjects: usize,
    /// DEK records (a subject's, each).
    pub deks: usize,
    /// Whether the naming key's record is there (made by
    /// [`SubjectKeys::create`]).
    pub naming_key: bool,
    /// Naming-key records (one; two or more when instances made theirs at
    /// once and a loser's was not withdrawn: a finding, though no instance
    /// names subjects with the loser's and a shred covers both).
    pub naming_keys: usize,
    /// Subjects with a record of a shred (whatever they hold now: a
    /// subject written again after its shred has a DEK too).
    pub shredded_subjects: usize,
    /// DEK ids covered by records of shreds: values under them read as
    /// deletes.
    pub shredded_deks: usize,
    /// Subjects with a shredded DEK id that no record of a shred the KEK
    /// opens names (forged or changed records, or ones sealed under a KEK
    /// key destroyed before a rewrap reached them), by tag: values under
    /// those DEKs are errors, not deletes.
    pub shreds_not_opening: Vec<SubjectTag>,
    /// Subjects with more than one DEK (none, unless a maker that lost a
    /// race for a subject's first DEK was stopped before it withdrew its
    /// own: that one was never used).
    pub several_deks: Vec<SubjectTag>,
    /// Records the KEK does not open (a record cut or changed, a key of
    /// the KEK destroyed before a rewrap reached the record, another
    /// KEK's store), by tag; the naming key's is `0xff` x 16. Values under
    /// them cannot be read.
    pub not_opening: Vec<SubjectTag>,
    /// Records that open but are not wrapped under the KEK's primary key
    /// (by the key id their ciphertext starts with): what
    /// [`SubjectKeys::rewrap`] would wrap again; none must be left before
    /// the KEK's older keys are destroyed.
    /// (With them: subjects whose records of shreds are not all sealed
    /// again under the primary, so that a shredded value would read as an
    /// error once the older keys are gone.)
    pub not_under_primary: usize,
}

impl KeyStoreCheck {
    /// Whether nothing is wrong: one naming key, every record opens and
    /// no subject has two DEKs (records not yet under the primary key are
    /// no fault).
    pub fn is_clean(&self) -> bool {
        self.naming_keys == 1
            && self.several_deks.is_empty()
            && self.not_opening.is_empty()
            && self.shreds_not_opening.is_empty()
    }
}

impl SubjectKeys {
    /// Reads every record of the key store and opens each under the KEK
    /// (without keeping what it opens): the key store's own audit.
    ///
    /// # Errors
    /// What the key store reports when it is read.
    pub fn check(&self) -> Result<KeyStoreCheck, Error> {
        let primary = self.kek.primary().0.to_be_bytes();
        let mut check = KeyStoreCheck::default();
        let mut per_subject: std::collections::HashMap<SubjectTag, usize> =
            std::collections::HashMap::new();
        for (tag, record) in self.store.records()? {
            let naming = tag == NAMING_ID;
            let wrapped = record.get(DEK_ID..);
            let opens = match (naming, record.split_first_chunk::<DEK_ID>()) {
                (true, Some((id, wrapped))) => self.kek.decrypt(wrapped, &naming_ad(id)).is_ok(),
                (false, Some(_)) => self.open_record(&tag, &record).is_ok(),
                (_, None) => false,
            };
            if naming {
                check.naming_key = true;
                check.naming_keys += 1;
            } else {
                check.deks += 1;
                *per_subject.entry(tag).or_default() += 1;
            }
            if !opens {
                check.not_opening.push(tag);
            } else if wrapped.and_then(|w| w.get(1..5)) != Some(&primary[..]) {
                check.not_under_primary += 1;
            }
        }
        for (tag, pieces) in self.store.shreds()? {
            check.shredded_subjects += 1;
            let Some(all) = self.opened_ids(&tag, &pieces) else {
                check.shreds_not_opening.push(tag);
                continue;
            };
            // A DEK id that only pieces the KEK does not open name: a value
            // under it is an error, not a delete.
            let unopened = pieces
                .iter()
                .filter_map(|p| super::store::covered_ids(p))
                .flatten()
                .any(|id| !all.contains(&id));
            if unopened {
                check.shreds_not_opening.push(tag);
            }
            check.shredded_deks += all.len();
            // What the pieces sealed under the primary cover: after the
            // older KEK keys are destroyed, only they open.
            let under_primary: Vec<Vec<u8>> = pieces
                .iter()
                .filter(|p| {
                    super::store::split_evidence(p)
                        .is_some_and(|(_, seal)| seal.get(1..5) == Some(&primary[..]))
                })
                .cloned()
                .collect();
            let kept = self.opened_ids(&tag, &under_primary).unwrap_or_default();
            if all.iter().any(|id| !kept.contains(id)) {
                check.not_under_primary += 1;
            }
        }
        check.shreds_not_opening.sort_unstable();
        check.subjects = per_subject.len();
        check.several_deks = per_subject
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(t, _)| t)
            .collect();
        check.several_deks.sort_unstable();
        check.not_opening.sort_unstable();
        Ok(check)
    }
}
