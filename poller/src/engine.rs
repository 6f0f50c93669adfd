//! What the engines hand downstream, and how it gets there.
//!
//! Every polled item yields one [`Sample`]: a value in the item's type or an
//! [`ItemError`]. Samples are streamed as they are produced — an ICMP host's values as
//! soon as its probes are settled, an SNMP item's as soon as its response arrives — into
//! a bounded channel ([`channel`]) that carries them as batches of up to [`EMIT_BATCH`]
//! (whatever is left at the end of an iteration goes as a smaller one, see
//! [`Emitter::flush`]): handed over one by one, samples woke the consumer's thread for
//! nearly every host. The socket drivers call back synchronously from their receive
//! loops, which must never block (a blocked receive loop loses replies), so the
//! [`Emitter`] uses `try_send`; when the channel is full it parks the batch in a local
//! overflow, counts one backpressure event, and [`Emitter::drain`] awaits channel space
//! before the engine takes its next batch. The engine waits; nothing is dropped, and
//! order is kept.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use crate::keys::IcmpMetric;
use crate::plan::{ItemKind, Plan, PlanHost, PlanItem};
use crate::value::{ItemError, Value, ValueType};

/// One polled item's outcome.
#[derive(Debug, Clone)]
pub struct Sample {
    pub itemid: u64,
    /// Index of the item in [`crate::plan::Plan::items`] of the plan it was polled
    /// from (a reload may have replaced that plan since: check `itemid` there).
    pub item: u32,
    pub host: Arc<str>,
    pub ip: std::net::IpAddr,
    pub key: Arc<str>,
    pub value_type: ValueType,
    /// Unix seconds of the moment the value was obtained.
    pub clock: u32,
    /// Nanoseconds within `clock`.
    pub ns: u32,
    pub result: Result<Value, ItemError>,
    /// The item's preprocessing steps, run by the consumer ([`crate::preprocess`]).
    pub pre: Option<Arc<crate::preprocess::Steps>>,
}

impl Sample {
    /// The outcome of item `index` of `plan`, of `host`, obtained at `(clock, ns)` (see
    /// [`clock_now`]: read once per host for ICMP, so a host's items share one
    /// timestamp).
    pub fn new(
        plan: &Plan,
        host: &PlanHost,
        index: u32,
        (clock, ns): (u32, u32),
        result: Result<Value, ItemError>,
    ) -> Sample {
        let item = &plan.items[index as usize];
        Sample {
            itemid: item.itemid,
            item: index,
            host: host.name.clone(),
            ip: host.ip,
            key: item.key.clone(),
            value_type: item.value_type,
            clock,
            ns,
            result,
            pre: plan.steps(item).cloned(),
        }
    }
}

/// Current wall-clock time as (Unix seconds, nanoseconds).
pub fn clock_now() -> (u32, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as u32, d.subsec_nanos())
}

/// Counts shared between emitters and the metrics endpoint.
#[derive(Debug, Default)]
pub struct PipelineCounters {
    /// Times an engine found the channel full and had to wait.
    pub backpressure_waits: AtomicU64,
    /// Samples handed to the channel: sent, or parked while it was full (then sent
    /// when it has room).
    pub samples: AtomicU64,
    /// Values a preprocessing change step kept no value for (see [`crate::preprocess`]).
    pub preprocessing_discarded: AtomicU64,
    /// Values preprocessing turned into errors (text, or a result that does not fit).
    pub preprocessing_errors: AtomicU64,
}

/// Samples an [`Emitter`] collects before handing them to the channel together. One
/// hand-over wakes the consumer's thread once: at 256 a sweep of 2,048 hosts (6,144
/// values) woke it 24 times in ~100 ms, a wake-up every 4 ms that cost more CPU than
/// the values it brought at 4,096 hosts every 10 s. Values wait for their batch at most
/// until their iteration ends.
pub const EMIT_BATCH: usize = 1024;

/// Samples handed over together: what the channel carries (at most [`EMIT_BATCH`]).
pub type Samples = Vec<Sample>;

/// The engines' channel to the consumer, for about `values` samples: it holds
/// `values / EMIT_BATCH` batches (at least one). Whole batches go through it, one
/// hand-over and at most one wake-up of the consumer per batch: sent one by one, the
/// first sample of a batch woke the consumer, which then had to wait for the rest.
pub fn channel(values: usize) -> (mpsc::Sender<Samples>, mpsc::Receiver<Samples>) {
    mpsc::channel((values / EMIT_BATCH).max(1))
}

/// Non-blocking producer side of the sample channel (see the module docs).
pub struct Emitter {
    tx: mpsc::Sender<Samples>,
    /// Not yet offered to the channel (fewer than [`EMIT_BATCH`]).
    pending: Samples,
    /// Batches offered to a full channel, oldest first.
    overflow: VecDeque<Samples>,
    counters: Arc<PipelineCounters>,
    blocked: bool,
}

impl Emitter {
    pub fn new(tx: mpsc::Sender<Samples>, counters: Arc<PipelineCounters>) -> Self {
        Emitter {
            tx,
            pending: Vec::with_capacity(EMIT_BATCH),
            overflow: VecDeque::new(),
            counters,
            blocked: false,
        }
    }

    /// Hand a sample on without blocking: collected, and offered to the channel with the
    /// rest of its batch. Order is kept: once a batch is parked, later batches are
    /// parked behind it.
    pub fn emit(&mut self, s: Sample) {
        self.pending.push(s);
        if self.pending.len() >= EMIT_BATCH {
            self.flush();
        }
    }

    /// Offer the collected samples to the channel now, as one batch, without blocking
    /// (parked when the channel is full). Engines call it when an iteration ends.
    /// Returns whether every sample emitted so far is in the channel (nothing parked):
    /// only then may the hosts they are of be polled again, or the next poll's samples
    /// could overtake them.
    pub fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return self.overflow.is_empty();
        }
        let batch = std::mem::replace(&mut self.pending, Vec::with_capacity(EMIT_BATCH));
        self.counters
            .samples
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let batch = if self.overflow.is_empty() {
            match self.tx.try_send(batch) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Full(b))
                | Err(mpsc::error::TrySendError::Closed(b)) => b,
            }
        } else {
            batch
        };
        self.overflow.push_back(batch);
        if !self.blocked {
            self.blocked = true;
            self.counters
                .backpressure_waits
                .fetch_add(1, Ordering::Relaxed);
        }
        false
    }

    /// Wait until everything parked is in the channel. Returns `false` when the receiver
    /// is gone: the consumer has stopped, and what is still parked is dropped with the
    /// emitter (only at a stop, after the consumer's own end: nothing reads it).
    pub async fn drain(&mut self) -> bool {
        self.flush();
        self.blocked = false;
        while let Some(batch) = self.overflow.pop_front() {
            if self.tx.send(batch).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Samples parked right now (offered to a full channel; see [`Self::flush`]).
    pub fn parked(&self) -> usize {
        self.overflow.iter().map(Vec::len).sum()
    }
}

/// The value an ICMP item reports for a host's probe results (Zabbix semantics, see
/// `icmp::PingStats`).
pub fn icmp_value(item: &PlanItem, stats: &icmp::PingStats) -> Value {
    match item.kind {
        ItemKind::Icmp {
            metric: IcmpMetric::Ping,
            ..
        } => Value::Uint(u64::from(stats.is_alive())),
        ItemKind::Icmp {
            metric: IcmpMetric::Loss,
            ..
        } => Value::Float(stats.loss_pct()),
        ItemKind::Icmp {
            metric: IcmpMetric::Sec(mode),
            ..
        } => Value::Float(stats.rtt_seconds(mode)),
        ItemKind::Snmp { .. } => {
            unreachable!("an SNMP item in an ICMP task: the plan groups by engine")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{IcmpDefaults, IcmpKey, ItemKey};
    use std::time::Duration;

    fn sample(i: u64) -> Sample {
        Sample {
            itemid: i,
            item: 0,
            host: "h".into(),
            ip: "127.0.0.1".parse().unwrap(),
            key: "k".into(),
            value_type: ValueType::Uint,
            clock: 0,
            ns: 0,
            result: Ok(Value::Uint(i)),
            pre: None,
        }
    }

    #[tokio::test]
    async fn emitter_parks_when_full_and_keeps_order() {
        let (tx, mut rx) = mpsc::channel(1); // room for one batch
        let counters = Arc::new(PipelineCounters::default());
        let mut em = Emitter::new(tx, counters.clone());
        for i in 0..2 {
            em.emit(sample(i));
        }
        // Collected, not yet offered: nothing is parked and the channel is empty.
        assert_eq!(em.parked(), 0);
        assert!(rx.try_recv().is_err());
        em.flush(); // fills the channel
        for i in 2..5 {
            em.emit(sample(i));
        }
        em.flush();
        assert_eq!(em.parked(), 3);
        assert_eq!(counters.backpressure_waits.load(Ordering::Relaxed), 1);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(batch) = rx.recv().await {
                got.push(batch.iter().map(|s| s.itemid).collect::<Vec<_>>());
            }
            got
        });
        assert!(em.drain().await);
        assert_eq!(em.parked(), 0);
        drop(em);
        assert_eq!(reader.await.unwrap(), vec![vec![0, 1], vec![2, 3, 4]]);
    }

    #[tokio::test]
    async fn emitter_hands_over_full_batches_without_a_flush() {
        let (tx, mut rx) = channel(4 * EMIT_BATCH);
        let counters = Arc::new(PipelineCounters::default());
        let mut em = Emitter::new(tx, counters.clone());
        for i in 0..(EMIT_BATCH + 3) as u64 {
            em.emit(sample(i));
        }
        let first = rx.try_recv().expect("one whole batch");
        assert_eq!(first.len(), EMIT_BATCH);
        assert!(rx.try_recv().is_err(), "the rest still collected");
        em.flush();
        let rest = rx.try_recv().expect("the rest, on flush");
        assert_eq!(
            rest.iter().map(|s| s.itemid).collect::<Vec<_>>(),
            (0..3).map(|i| EMIT_BATCH as u64 + i).collect::<Vec<_>>()
        );
        assert_eq!(
            counters.samples.load(Ordering::Relaxed),
            EMIT_BATCH as u64 + 3
        );
    }

    #[test]
    fn the_channel_holds_values_in_whole_batches() {
        assert_eq!(channel(65_536).0.max_capacity(), 65_536 / EMIT_BATCH);
        assert_eq!(channel(100).0.max_capacity(), 1, "at least one batch");
    }

    #[test]
    fn icmp_values_follow_zabbix() {
        let item = |key: &str| {
            let k =
                IcmpKey::parse(&ItemKey::parse(key).unwrap(), &IcmpDefaults::default()).unwrap();
            PlanItem {
                itemid: 1,
                key: key.into(),
                value_type: ValueType::Float,
                kind: ItemKind::Icmp {
                    metric: k.metric,
                    probe: k.probe,
                },
                pre: 0,
            }
        };
        let mut st = icmp::PingStats {
            sent: 3,
            ..Default::default()
        };
        st.record(Duration::from_micros(20));
        st.record(Duration::from_millis(4));
        assert_eq!(icmp_value(&item("icmpping"), &st), Value::Uint(1));
        let Value::Float(loss) = icmp_value(&item("icmppingloss"), &st) else {
            panic!()
        };
        assert!((loss - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            icmp_value(&item("icmppingsec[,,,,,min]"), &st),
            Value::Float(0.0001)
        );
        assert_eq!(
            icmp_value(&item("icmppingsec[,,,,,max]"), &st),
            Value::Float(0.004)
        );
        let dead = icmp::PingStats {
            sent: 3,
            ..Default::default()
        };
        assert_eq!(icmp_value(&item("icmpping"), &dead), Value::Uint(0));
        assert_eq!(
            icmp_value(&item("icmppingloss"), &dead),
            Value::Float(100.0)
        );
        assert_eq!(icmp_value(&item("icmppingsec"), &dead), Value::Float(0.0));
    }
}
