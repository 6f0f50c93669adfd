//! Items' state as Zabbix shows it ("normal" or "not supported" with an error text),
//! followed from the samples so that an operator learns which item fails and why: each
//! change is logged once (grouped per host and batch of samples, so a dead device is one
//! line, not one per item), and the items failing right now are a gauge by reason.
//!
//! A change is a value after an error, an error after a value, or an error of another
//! reason or, for timeouts and send errors, of another text: an SNMPv3 host whose
//! engine discovery went unanswered (down), then back and silent to its encrypted
//! requests (another privacy passphrase), or a host whose replies now come from
//! another address or with another community, fails for another cause, which the
//! operator must read. Those texts are the poller's words for what the network and the
//! agent did, the same while the cause lasts. Other errors compare by reason only:
//! their texts may quote the value (a value that does not fit the item's type, a
//! preprocessing step's), and a line per poll would drown the log.
//!
//! Invariants:
//! * Only items whose latest sample is an error are kept: memory follows the failures,
//!   not the size of the configuration, and a configuration where everything answers
//!   costs one branch per sample.
//! * An item is counted under the reason of its latest error; the gauges always sum to
//!   the number of items kept.
//! * Items a reload removed are forgotten at the next [`ItemStates::retain`].

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::Sample;
use crate::value::{ErrorReason, ItemError};

/// Items whose latest sample was an error, by reason: shared with the metrics endpoint.
#[derive(Debug, Default)]
pub struct FailingGauges([AtomicU64; ErrorReason::ALL.len()]);

impl FailingGauges {
    /// Items failing now with `reason`.
    pub fn get(&self, reason: ErrorReason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }
}

/// What changed for one host in one batch of samples.
#[derive(Debug, Default, PartialEq)]
struct HostChanges {
    failed: usize,
    /// The first newly failing item and its error (the one the log line shows).
    first: Option<(Arc<str>, ItemError)>,
    recovered: usize,
}

/// The state changes of one batch of samples, per host in order of first change, until
/// [`ItemStates::report`] logs them.
#[derive(Debug, Default)]
pub struct Changes(Vec<(Arc<str>, HostChanges)>);

impl Changes {
    /// `host`'s changes, added at the end if new. Samples of one host arrive together,
    /// so the search from the end nearly always stops at once.
    fn of(&mut self, host: &Arc<str>) -> &mut HostChanges {
        let i = match self.0.iter().rposition(|(h, _)| h == host) {
            Some(i) => i,
            None => {
                self.0.push((host.clone(), HostChanges::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }
}

/// Drops the entries of `map` whose id is not in `current` (the items of a new plan),
/// calling `dropped` for each: the one pruning of per-item memory after a reload.
pub fn retain_ids<V>(
    map: &mut HashMap<u64, V>,
    current: impl IntoIterator<Item = u64>,
    mut dropped: impl FnMut(&V),
) {
    if map.is_empty() {
        return;
    }
    let keep: HashSet<u64> = current
        .into_iter()
        .filter(|id| map.contains_key(id))
        .collect();
    map.retain(|id, v| {
        let k = keep.contains(id);
        if !k {
            dropped(v);
        }
        k
    });
}

/// How an item fails: its error's reason and, for a timeout or a send error, its
/// text's fingerprint (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failing {
    reason: ErrorReason,
    text: Option<u64>,
}

/// The failing items (see the module docs).
#[derive(Debug, Default)]
pub struct ItemStates {
    failing: HashMap<u64, Failing>,
    gauges: Arc<FailingGauges>,
}

impl ItemStates {
    pub fn new(gauges: Arc<FailingGauges>) -> Self {
        ItemStates {
            failing: HashMap::new(),
            gauges,
        }
    }

    #[cfg(test)]
    /// (Tests) Items failing now.
    fn failing(&self) -> usize {
        self.failing.len()
    }

    #[cfg(test)]
    /// (Tests) Follows `samples` (in the order they were obtained) and logs what changed.
    fn observe<'a>(&mut self, samples: impl IntoIterator<Item = &'a Sample>) {
        let mut changes = Changes::default();
        for s in samples {
            self.record(s, &mut changes);
        }
        Self::report(changes);
    }

    /// Follows one sample; what changed goes to `changes`.
    pub fn record(&mut self, s: &Sample, changes: &mut Changes) {
        match &s.result {
            Ok(_) => self.answered(s, changes),
            Err(e) => {
                let worded = matches!(e.reason, ErrorReason::Timeout | ErrorReason::Send);
                let text = worded.then(|| {
                    let mut h = DefaultHasher::new();
                    e.text.hash(&mut h);
                    h.finish()
                });
                let now = Failing {
                    reason: e.reason,
                    text,
                };
                let before = self.failing.insert(s.itemid, now);
                if before == Some(now) {
                    return;
                }
                if let Some(b) = before {
                    self.gauges.0[b.reason as usize].fetch_sub(1, Ordering::Relaxed);
                }
                self.gauges.0[e.reason as usize].fetch_add(1, Ordering::Relaxed);
                let c = changes.of(&s.host);
                c.failed += 1;
                c.first.get_or_insert_with(|| (s.key.clone(), e.clone()));
            }
        }
    }

    /// `s`'s item is fine, with or without a value (preprocessing kept none, or a
    /// "Custom on fail" handler discarded its failure, which Zabbix does not count as
    /// one either).
    pub fn answered(&mut self, s: &Sample, changes: &mut Changes) {
        if self.failing.is_empty() {
            return;
        }
        if let Some(b) = self.failing.remove(&s.itemid) {
            self.gauges.0[b.reason as usize].fetch_sub(1, Ordering::Relaxed);
            changes.of(&s.host).recovered += 1;
        }
    }

    /// Logs `changes`: `warn` for items that began to fail (or fail for another
    /// reason, or with a timeout or send error of another text), `info` for items that
    /// have a value again, one line per host each.
    pub fn report(changes: Changes) {
        for (host, c) in changes.0 {
            if let Some((key, e)) = &c.first {
                tracing::warn!(
                    host = %host,
                    items = c.failed,
                    key = %key,
                    reason = e.reason.as_str(),
                    error = %e.text,
                    "items not supported (first shown)"
                );
            }
            if c.recovered > 0 {
                tracing::info!(host = %host, items = c.recovered, "items supported again");
            }
        }
    }

    /// Forgets failing items that are not in `current` (removed by a reload).
    pub fn retain(&mut self, current: impl IntoIterator<Item = u64>) {
        let gauges = &self.gauges;
        retain_ids(&mut self.failing, current, |b| {
            gauges.0[b.reason as usize].fetch_sub(1, Ordering::Relaxed);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Value, ValueType};

    fn sample(host: &str, itemid: u64, result: Result<Value, ItemError>) -> Sample {
        Sample {
            itemid,
            item: 0,
            host: host.into(),
            ip: "127.0.0.1".parse().unwrap(),
            key: format!("k{itemid}").into(),
            value_type: ValueType::Uint,
            clock: 0,
            ns: 0,
            result,
            pre: None,
        }
    }

    fn err(r: ErrorReason) -> Result<Value, ItemError> {
        Err(ItemError::new(r, "boom"))
    }

    #[test]
    fn follows_failures_recoveries_and_reasons() {
        let g = Arc::new(FailingGauges::default());
        let mut st = ItemStates::new(g.clone());
        st.observe(&[
            sample("a", 1, err(ErrorReason::Timeout)),
            sample("a", 2, err(ErrorReason::Timeout)),
            sample("b", 3, err(ErrorReason::Unsupported)),
            sample("b", 4, Ok(Value::Uint(1))),
        ]);
        assert_eq!(st.failing(), 3);
        assert_eq!(g.get(ErrorReason::Timeout), 2);
        assert_eq!(g.get(ErrorReason::Unsupported), 1);
        // The same error again changes nothing; another reason moves the item.
        st.observe(&[
            sample("a", 1, err(ErrorReason::Timeout)),
            sample("a", 2, err(ErrorReason::Decode)),
        ]);
        assert_eq!(
            (g.get(ErrorReason::Timeout), g.get(ErrorReason::Decode)),
            (1, 1)
        );
        // Values bring items back.
        st.observe(&[
            sample("a", 1, Ok(Value::Uint(1))),
            sample("a", 2, Ok(Value::Uint(1))),
        ]);
        assert_eq!(st.failing(), 1);
        assert_eq!(ErrorReason::ALL.iter().map(|r| g.get(*r)).sum::<u64>(), 1);
        // A failure that preprocessing discarded (Custom on fail) is no failure.
        let mut changes = Changes::default();
        st.answered(&sample("b", 3, err(ErrorReason::Unsupported)), &mut changes);
        assert_eq!((st.failing(), g.get(ErrorReason::Unsupported)), (0, 0));
        st.observe(&[sample("b", 3, err(ErrorReason::Unsupported))]);
        // A reload that removed item 3 forgets it.
        st.retain([1, 2, 4]);
        assert_eq!((st.failing(), g.get(ErrorReason::Unsupported)), (0, 0));
    }

    #[test]
    fn a_timeout_of_another_text_is_a_change_a_values_error_is_not() {
        // A host down ("no response"), then back with another community (a reload
        // while it was down): both timeouts, but another cause, which the log must
        // show. The same text again is no change.
        let g = Arc::new(FailingGauges::default());
        let mut st = ItemStates::new(g.clone());
        let timeout = |text: &str| Err(ItemError::new(ErrorReason::Timeout, text));
        let changes_of = |st: &mut ItemStates, s: &Sample| {
            let mut c = Changes::default();
            st.record(s, &mut c);
            c.0
        };
        let silent = sample("sw", 1, timeout("No SNMP response after 2 attempt(s)"));
        let other = sample(
            "sw",
            1,
            timeout("replies carried another community, not taken"),
        );
        assert_eq!(changes_of(&mut st, &silent).len(), 1);
        assert_eq!(changes_of(&mut st, &silent), vec![]);
        let changed = changes_of(&mut st, &other);
        let first = changed[0].1.first.as_ref().unwrap();
        assert_eq!(first.1.text, "replies carried another community, not taken");
        assert_eq!((st.failing(), g.get(ErrorReason::Timeout)), (1, 1));
        // A value's error (preprocessing's, a type that does not fit) may quote the
        // value: another value's is no change.
        let pre = |v: u32| {
            let text = format!("preprocessing: IN_RANGE: {v} is not within 0..10");
            sample("sw", 2, Err(ItemError::new(ErrorReason::Unsupported, text)))
        };
        assert_eq!(changes_of(&mut st, &pre(11)).len(), 1);
        assert_eq!(changes_of(&mut st, &pre(12)), vec![]);
        assert_eq!((st.failing(), g.get(ErrorReason::Unsupported)), (2, 1));
    }

    #[test]
    fn changes_are_grouped_per_host() {
        // A dead host's 3 items are one change showing the first; a value that was
        // never failing is no change; a recovery is counted on its own host.
        let mut st = ItemStates::new(Arc::default());
        st.observe(&[sample("back", 7, err(ErrorReason::Timeout))]);
        let batch: Vec<Sample> = (0..3)
            .map(|i| sample("dead", i, err(ErrorReason::Timeout)))
            .chain([
                sample("fine", 9, Ok(Value::Uint(1))),
                sample("back", 7, Ok(Value::Uint(1))),
            ])
            .collect();
        let mut got = Changes::default();
        for s in &batch {
            st.record(s, &mut got);
        }
        let got = got.0;
        let dead = HostChanges {
            failed: 3,
            first: Some(("k0".into(), ItemError::new(ErrorReason::Timeout, "boom"))),
            recovered: 0,
        };
        let back = HostChanges {
            recovered: 1,
            ..HostChanges::default()
        };
        assert_eq!(got, vec![("dead".into(), dead), ("back".into(), back)]);
    }
}
