//! Per-host results with Zabbix semantics.
//!
//! * `icmpping` → [`PingStats::is_alive`] (1 when at least one reply arrived),
//! * `icmppingloss` → [`PingStats::loss_pct`] = `100 * (sent - received) / sent`,
//! * `icmppingsec` → [`PingStats::rtt_seconds`]: min, avg or max RTT in seconds,
//!   0 when nothing was received, and never below [`MIN_RTT_SECONDS`] otherwise
//!   (Zabbix reports sub-0.1 ms round trips as 0.0001).

use std::time::Duration;

/// Smallest non-zero `icmppingsec` value Zabbix reports.
pub const MIN_RTT_SECONDS: f64 = 0.0001;

/// Which RTT `icmppingsec` reports; Zabbix default [`RttMode::Avg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RttMode {
    /// Smallest round trip.
    Min,
    /// Mean round trip over received replies (default).
    #[default]
    Avg,
    /// Largest round trip.
    Max,
}

impl std::str::FromStr for RttMode {
    type Err = String;
    /// Parses Zabbix's `min`, `avg`, `max`; empty means the default `avg`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "min" => Ok(RttMode::Min),
            "" | "avg" => Ok(RttMode::Avg),
            "max" => Ok(RttMode::Max),
            other => Err(format!(
                "invalid icmppingsec mode {other:?}: expected min, avg or max"
            )),
        }
    }
}

/// Counters of one host (one job) in one sweep. All zero by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PingStats {
    /// Probes handed to the socket (including those whose send failed); of a
    /// retrying job answered by a reply past its own try's timeout, the tries fping
    /// had sent by then, which may be more than were handed out (see
    /// [`crate::sweep`]).
    pub sent: u32,
    /// Matching replies that arrived within the timeout.
    pub received: u32,
    /// Smallest RTT (meaningful when `received > 0`).
    pub min: Duration,
    /// Largest RTT (meaningful when `received > 0`).
    pub max: Duration,
    /// Sum of RTTs of received replies.
    pub sum: Duration,
    /// The last ICMP error that came back for one of its probes instead of a reply
    /// (a router's "host unreachable", a firewall's "administratively prohibited":
    /// [`crate::Sweep::handle_error`]). It changes no count: the probe stays lost (or
    /// answered, if a reply comes all the same), as fping counts it.
    pub error: Option<crate::Unreachable>,
}

impl PingStats {
    /// Records one reply with round-trip time `rtt`.
    pub fn record(&mut self, rtt: Duration) {
        if self.received == 0 || rtt < self.min {
            self.min = rtt;
        }
        if rtt > self.max {
            self.max = rtt;
        }
        self.received += 1;
        self.sum += rtt;
    }

    /// Adds the counts of `later`, statistics of more requests to the same host (the
    /// rounds of `netpoller sweep --loop`): as if one sweep had sent them all; its ICMP
    /// error, if it has one, is the last.
    pub fn merge(&mut self, later: &PingStats) {
        if later.received > 0 {
            if self.received == 0 || later.min < self.min {
                self.min = later.min;
            }
            self.max = self.max.max(later.max);
            self.received += later.received;
            self.sum += later.sum;
        }
        self.sent += later.sent;
        self.error = later.error.or(self.error);
    }

    /// `icmpping`: whether at least one reply arrived.
    pub fn is_alive(&self) -> bool {
        self.received > 0
    }

    /// `icmppingloss`: `100 * (sent - received) / sent`; 0 when nothing was sent.
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        let lost = self.sent.saturating_sub(self.received);
        100.0 * f64::from(lost) / f64::from(self.sent)
    }

    /// Mean RTT of received replies, `None` when none arrived.
    pub fn avg(&self) -> Option<Duration> {
        (self.received > 0).then(|| self.sum / self.received)
    }

    /// `icmppingsec`: RTT in seconds by `mode`; 0 when nothing was received, else at
    /// least [`MIN_RTT_SECONDS`].
    pub fn rtt_seconds(&self, mode: RttMode) -> f64 {
        if self.received == 0 {
            return 0.0;
        }
        let d = match mode {
            RttMode::Min => self.min,
            RttMode::Avg => self.sum / self.received,
            RttMode::Max => self.max,
        };
        d.as_secs_f64().max(MIN_RTT_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn zabbix_semantics() {
        let mut s = PingStats {
            sent: 3,
            ..Default::default()
        };
        assert!(!s.is_alive());
        assert_eq!(s.loss_pct(), 100.0);
        assert_eq!(s.rtt_seconds(RttMode::Avg), 0.0);
        s.record(ms(30));
        s.record(ms(10));
        assert!(s.is_alive());
        assert!((s.loss_pct() - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.rtt_seconds(RttMode::Min), 0.010);
        assert_eq!(s.rtt_seconds(RttMode::Max), 0.030);
        assert_eq!(s.rtt_seconds(RttMode::Avg), 0.020);
        s.record(ms(20));
        assert_eq!(s.loss_pct(), 0.0);
    }

    /// Merged statistics are those of one sweep that sent every request of both.
    #[test]
    fn merged_stats_are_as_of_one_sweep() {
        let round = |rtts: &[u64], sent: u32| {
            let mut s = PingStats {
                sent,
                ..Default::default()
            };
            rtts.iter().for_each(|&r| s.record(ms(r)));
            s
        };
        let mut total = PingStats::default();
        for r in [
            round(&[20], 1),
            round(&[], 1),
            round(&[10, 40], 2),
            round(&[], 0),
        ] {
            total.merge(&r);
        }
        assert_eq!(total, round(&[20, 10, 40], 4));
        let error = crate::Unreachable::from_icmp(false, 3, 1, "192.0.2.1".parse().unwrap());
        total.merge(&PingStats {
            sent: 1,
            error,
            ..Default::default()
        });
        total.merge(&round(&[5], 1));
        assert_eq!(
            (total.sent, total.received, total.min, total.error),
            (6, 4, ms(5), error)
        );
    }

    #[test]
    fn tiny_rtt_is_clamped_and_zero_sent_is_zero_loss() {
        let mut s = PingStats {
            sent: 1,
            ..Default::default()
        };
        s.record(Duration::from_micros(12));
        assert_eq!(s.rtt_seconds(RttMode::Min), MIN_RTT_SECONDS);
        assert_eq!(s.rtt_seconds(RttMode::Avg), MIN_RTT_SECONDS);
        assert_eq!(PingStats::default().loss_pct(), 0.0);
    }

    #[test]
    fn mode_parsing() {
        assert_eq!("".parse::<RttMode>().unwrap(), RttMode::Avg);
        assert_eq!("min".parse::<RttMode>().unwrap(), RttMode::Min);
        assert_eq!("max".parse::<RttMode>().unwrap(), RttMode::Max);
        assert!("median".parse::<RttMode>().is_err());
    }
}
