//! Items' state as Zabbix shows it ("normal" or "not supported" with an error text),
//! followed from the samples so that an operator learns which item fails and why: each
//! change is logged once (grouped per host and batch of samples, so a dead device is one
//! line, not one per item), and the items failing right now are a gauge by reason.
//!
//! Invariants:
//! * Only items whose latest sample is an error are kept: memory follows the failures,
//!   not the size of the configuration, and a configuration where everything answers
//!   costs one branch per sample.
//! * An item is counted under the reason of its latest error; the gauges always sum to
//!   the number of items kept.
//! * Items a reload removed are forgotten at the next [`ItemStates::retain`].

use std::collections::{HashMap, HashSet};
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

/// The failing items (see the module docs).
#[derive(Debug, Default)]
pub struct ItemStates {
    failing: HashMap<u64, ErrorReason>,
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
                let before = self.failing.insert(s.itemid, e.reason);
                if before == Some(e.reason) {
                    return;
                }
                if let Some(r) = before {
                    self.gauges.0[r as usize].fetch_sub(1, Ordering::Relaxed);
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
        if let Some(r) = self.failing.remove(&s.itemid) {
            self.gauges.0[r as usize].fetch_sub(1, Ordering::Relaxed);
            changes.of(&s.host).recovered += 1;
        }
    }

    /// Logs `changes`: `warn` for items that began to fail (or fail for another
    /// reason), `info` for items that have a value again, one line per host each.
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
        retain_ids(&mut self.failing, current, |r| {
            gauges.0[*r as usize].fetch_sub(1, Ordering::Relaxed);
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
