//! Zabbix item value preprocessing for numeric items: "Simple change", "Change per
//! second" and "Custom multiplier", the steps Zabbix's network templates put on
//! interface counters (`ifHCInOctets` → bits per second). netpoller writes history
//! itself, past the Zabbix server that would otherwise run them, so it runs them too.
//!
//! Semantics (Zabbix's):
//! * Steps run in order on the value converted to the item's type; the result is
//!   stored in the item's type, a `uint` item keeping the integer part of a fractional
//!   result ("trimmed", as Zabbix stores it).
//! * A change step remembers the value that reached it and when it was obtained: the
//!   first value of an item (after a start, or after its steps changed) and a value
//!   smaller than the previous one (a counter that wrapped or was reset) yield no value;
//!   the next one does. Change per second divides by the time between the two polls.
//! * A step that cannot compute (a text value, a result that does not fit a `uint`)
//!   makes the item unsupported for that poll, with the reason.
//!
//! Invariants: at most one change step per item (the config refuses more, as Zabbix
//! does), so the memory is one previous value per item that has one.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::engine::Sample;
use crate::value::{ErrorReason, ItemError, Value, ValueType};

/// One preprocessing step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// `value - previous`.
    SimpleChange,
    /// `(value - previous) / (time - previous time)`, per second.
    ChangePerSecond,
    /// `value × factor`.
    Multiplier(f64),
}

impl Step {
    fn is_change(self) -> bool {
        matches!(self, Step::SimpleChange | Step::ChangePerSecond)
    }

    /// Parses Zabbix's export name (`CHANGE_PER_SECOND`, `SIMPLE_CHANGE`, `MULTIPLIER`,
    /// any case) and its parameters.
    pub fn parse(kind: &str, params: &[String]) -> Result<Step, String> {
        let no_params = |s: Step| {
            if params.is_empty() {
                Ok(s)
            } else {
                Err(format!("{kind} takes no parameters"))
            }
        };
        match kind.to_ascii_uppercase().as_str() {
            "SIMPLE_CHANGE" => no_params(Step::SimpleChange),
            "CHANGE_PER_SECOND" => no_params(Step::ChangePerSecond),
            "MULTIPLIER" => match params {
                [f] => match f.trim().parse::<f64>() {
                    Ok(x) if x.is_finite() => Ok(Step::Multiplier(x)),
                    _ => Err(format!("MULTIPLIER: {f:?} is not a number")),
                },
                _ => Err("MULTIPLIER takes one parameter, the factor (parameters = [\"8\"])".into()),
            },
            _ => Err(format!(
                "unknown preprocessing type {kind:?}: netpoller runs SIMPLE_CHANGE, CHANGE_PER_SECOND and MULTIPLIER"
            )),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::SimpleChange => f.write_str("SIMPLE_CHANGE"),
            Step::ChangePerSecond => f.write_str("CHANGE_PER_SECOND"),
            Step::Multiplier(x) => write!(f, "MULTIPLIER({x})"),
        }
    }
}

/// An item's steps, shared by every item with the same ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps(Box<[Step]>);

impl Steps {
    /// Checks Zabbix's rule: at most one change step (and at least one step).
    pub fn new(steps: Vec<Step>) -> Result<Steps, String> {
        if steps.is_empty() {
            return Err("no steps".into());
        }
        if steps.iter().filter(|s| s.is_change()).count() > 1 {
            return Err("at most one of SIMPLE_CHANGE and CHANGE_PER_SECOND per item".into());
        }
        Ok(Steps(steps.into_boxed_slice()))
    }

    pub fn as_slice(&self) -> &[Step] {
        &self.0
    }

    fn has_change(&self) -> bool {
        self.0.iter().any(|s| s.is_change())
    }
}

/// A number between steps: integers stay exact (Counter64 deltas) until a step makes
/// them fractional.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    U(u64),
    F(f64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::U(u) => u as f64,
            Num::F(f) => f,
        }
    }
}

/// What a change step saw last, and under which steps.
#[derive(Debug, Clone)]
struct Previous {
    value: Num,
    /// Nanoseconds since the epoch.
    at: u128,
    /// A value that went through other steps (a reload changed them) is not comparable.
    steps: Arc<Steps>,
}

/// What [`Preprocessor::apply`] did.
#[derive(Debug)]
pub enum Outcome {
    /// The sample as it is to be stored (a value, or the error that replaced it).
    Keep(Sample),
    /// No value this time (an item's first, or after a counter reset).
    Discarded,
}

/// The previous values of the change steps (see the module docs).
#[derive(Debug, Default)]
pub struct Preprocessor {
    previous: HashMap<u64, Previous>,
}

fn unsupported(text: String) -> ItemError {
    ItemError::new(ErrorReason::Unsupported, format!("preprocessing: {text}"))
}

impl Preprocessor {
    /// (Tests) Items whose change step holds a previous value.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.previous.len()
    }

    /// Runs `sample`'s steps (none: unchanged). An error sample passes unchanged. The
    /// sample comes back without its steps: they have run.
    pub fn apply(&mut self, mut sample: Sample) -> Outcome {
        // Taken, not cloned: the stored sample needs its steps no more.
        let Some(steps) = sample.pre.take() else {
            return Outcome::Keep(sample);
        };
        let Ok(value) = &sample.result else {
            return Outcome::Keep(sample);
        };
        let mut n = match *value {
            Value::Uint(u) => Num::U(u),
            Value::Float(f) => Num::F(f),
            Value::Str(_) => {
                sample.result = Err(unsupported(format!(
                    "{} needs a number, got text",
                    steps.as_slice()[0]
                )));
                return Outcome::Keep(sample);
            }
        };
        let at = u128::from(sample.clock) * 1_000_000_000 + u128::from(sample.ns);
        for step in steps.as_slice() {
            n = match *step {
                Step::Multiplier(x) => match n {
                    Num::U(u)
                        if x.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&x) =>
                    {
                        match u.checked_mul(x as u64) {
                            Some(v) => Num::U(v),
                            None => Num::F(u as f64 * x),
                        }
                    }
                    _ => Num::F(n.f() * x),
                },
                Step::SimpleChange | Step::ChangePerSecond => {
                    let now = Previous {
                        value: n,
                        at,
                        steps: steps.clone(),
                    };
                    let prev = self.previous.insert(sample.itemid, now);
                    let Some(prev) =
                        prev.filter(|p| Arc::ptr_eq(&p.steps, &steps) || *p.steps == *steps)
                    else {
                        return Outcome::Discarded;
                    };
                    let delta = match (n, prev.value) {
                        (Num::U(a), Num::U(b)) if a >= b => Num::U(a - b),
                        (Num::U(_), Num::U(_)) => return Outcome::Discarded,
                        (a, b) if a.f() >= b.f() => Num::F(a.f() - b.f()),
                        _ => return Outcome::Discarded,
                    };
                    if *step == Step::SimpleChange {
                        delta
                    } else {
                        let secs = at.saturating_sub(prev.at) as f64 / 1e9;
                        if secs <= 0.0 {
                            // Two values with one timestamp: no rate to compute.
                            return Outcome::Discarded;
                        }
                        match delta {
                            // Zabbix keeps an integer rate of integer values (its
                            // uint64 delta), so a MULTIPLIER after it scales the
                            // truncated rate: trunc(rate) × 8 for interface bits.
                            Num::U(d) => Num::U((d as f64 / secs) as u64),
                            Num::F(d) => Num::F(d / secs),
                        }
                    }
                }
            };
        }
        sample.result = match (sample.value_type, n) {
            (ValueType::Float, n) => Ok(Value::Float(n.f())),
            (ValueType::Uint, Num::U(u)) => Ok(Value::Uint(u)),
            (ValueType::Uint, Num::F(f)) if (0.0..18_446_744_073_709_551_616.0).contains(&f) => {
                Ok(Value::Uint(f.trunc() as u64))
            }
            (ValueType::Uint, Num::F(f)) => Err(unsupported(format!(
                "result {f} does not fit an unsigned item"
            ))),
            (ValueType::Str, n) => Ok(Value::Str(match n {
                Num::U(u) => u.to_string(),
                Num::F(f) => f.to_string(),
            })),
        };
        Outcome::Keep(sample)
    }

    /// Forgets items that are not in `current` or whose steps no longer include a
    /// change (a reload): Zabbix, too, restarts a change step whose item changed.
    pub fn retain<'a>(&mut self, current: impl IntoIterator<Item = (u64, Option<&'a Arc<Steps>>)>) {
        let changing = current
            .into_iter()
            .filter(|(_, s)| s.is_some_and(|s| s.has_change()))
            .map(|(id, _)| id);
        crate::states::retain_ids(&mut self.previous, changing, |_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(itemid: u64, vt: ValueType, clock: u32, v: Value, steps: &[Step]) -> Sample {
        Sample {
            itemid,
            item: 0,
            host: "h".into(),
            ip: "127.0.0.1".parse().unwrap(),
            key: "k".into(),
            value_type: vt,
            clock,
            ns: 0,
            result: Ok(v),
            pre: Some(Arc::new(Steps::new(steps.to_vec()).unwrap())),
        }
    }

    fn value(o: Outcome) -> Option<Result<Value, ItemError>> {
        match o {
            Outcome::Keep(s) => Some(s.result),
            Outcome::Discarded => None,
        }
    }

    #[test]
    fn interface_counter_to_bits_per_second_as_zabbix_templates_do() {
        // ifHCInOctets, uint, CHANGE_PER_SECOND then MULTIPLIER 8: 1,000 octets in 10 s
        // are 800 bps; the first poll yields nothing; a wrap yields nothing and restarts.
        // As Zabbix's uint64 delta, the rate is an integer before the multiplier: 1,009
        // octets in 10 s are trunc(100.9) × 8 = 800, not trunc(807.2).
        let steps = [Step::ChangePerSecond, Step::Multiplier(8.0)];
        let mut p = Preprocessor::default();
        let mut at =
            |clock, v| value(p.apply(sample(1, ValueType::Uint, clock, Value::Uint(v), &steps)));
        assert_eq!(at(100, 5_000), None);
        assert_eq!(at(110, 6_000), Some(Ok(Value::Uint(800))));
        assert_eq!(at(120, 7_009), Some(Ok(Value::Uint(800))));
        assert_eq!(at(130, 10), None, "counter reset");
        assert_eq!(at(140, 1_010), Some(Ok(Value::Uint(800))));
        // A multiplier alone keeps fractions until the item's type trims them.
        let half = [Step::Multiplier(0.5)];
        let one = p.apply(sample(9, ValueType::Uint, 0, Value::Uint(7), &half));
        assert_eq!(value(one), Some(Ok(Value::Uint(3))));
    }

    #[test]
    fn new_steps_after_a_reload_start_the_change_afresh() {
        // [CHANGE_PER_SECOND] becomes [MULTIPLIER 8, CHANGE_PER_SECOND]: the remembered
        // value is unscaled, so the first value under the new steps has nothing to
        // compare with (else one spike of 7x the traffic).
        let mut p = Preprocessor::default();
        let before = [Step::ChangePerSecond];
        let after = [Step::Multiplier(8.0), Step::ChangePerSecond];
        let s = |clock, v, st: &[Step]| sample(1, ValueType::Uint, clock, Value::Uint(v), st);
        assert_eq!(value(p.apply(s(0, 1_000, &before))), None);
        assert_eq!(
            value(p.apply(s(10, 2_000, &before))),
            Some(Ok(Value::Uint(100)))
        );
        assert_eq!(value(p.apply(s(20, 3_000, &after))), None);
        assert_eq!(
            value(p.apply(s(30, 4_000, &after))),
            Some(Ok(Value::Uint(800)))
        );
        // Equal steps from another config load (another Arc) are the same steps.
        assert_eq!(
            value(p.apply(s(40, 5_000, &after))),
            Some(Ok(Value::Uint(800)))
        );
    }

    #[test]
    fn simple_change_is_exact_on_counter64_and_float_items_keep_fractions() {
        let mut p = Preprocessor::default();
        let big = u64::MAX - 10;
        let s = |clock, v| {
            sample(
                2,
                ValueType::Uint,
                clock,
                Value::Uint(v),
                &[Step::SimpleChange],
            )
        };
        assert_eq!(value(p.apply(s(1, big - 7))), None);
        assert_eq!(value(p.apply(s(2, big))), Some(Ok(Value::Uint(7))));
        let f = |clock, v| {
            sample(
                3,
                ValueType::Float,
                clock,
                Value::Float(v),
                &[Step::ChangePerSecond],
            )
        };
        assert_eq!(value(p.apply(f(10, 1.0))), None);
        assert_eq!(value(p.apply(f(14, 3.0))), Some(Ok(Value::Float(0.5))));
        assert_eq!(p.remembered(), 2);
    }

    #[test]
    fn multiplier_and_errors() {
        let mut p = Preprocessor::default();
        let m = |vt, v, x| sample(4, vt, 0, v, &[Step::Multiplier(x)]);
        assert_eq!(
            value(p.apply(m(ValueType::Uint, Value::Uint(3), 8.0))),
            Some(Ok(Value::Uint(24)))
        );
        assert_eq!(
            value(p.apply(m(ValueType::Float, Value::Float(0.25), 1000.0))),
            Some(Ok(Value::Float(250.0)))
        );
        assert_eq!(
            value(p.apply(m(ValueType::Uint, Value::Uint(7), 0.5))),
            Some(Ok(Value::Uint(3)))
        );
        for bad in [
            m(ValueType::Uint, Value::Uint(u64::MAX), 2.0),
            m(ValueType::Uint, Value::Uint(1), -1.0),
            m(ValueType::Uint, Value::Str("x".into()), 2.0),
        ] {
            let e = value(p.apply(bad)).unwrap().unwrap_err();
            assert_eq!(e.reason, ErrorReason::Unsupported);
            assert!(e.text.starts_with("preprocessing: "), "{e}");
        }
        // No steps, or an error: untouched.
        let mut plain = m(ValueType::Uint, Value::Uint(5), 2.0);
        plain.pre = None;
        assert_eq!(value(p.apply(plain)), Some(Ok(Value::Uint(5))));
        let mut failed = m(ValueType::Uint, Value::Uint(5), 2.0);
        failed.result = Err(ItemError::new(ErrorReason::Timeout, "t"));
        assert_eq!(
            value(p.apply(failed)).unwrap().unwrap_err().reason,
            ErrorReason::Timeout
        );
    }

    #[test]
    fn parse_and_rules() {
        let p = |k: &str, ps: &[&str]| {
            Step::parse(k, &ps.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(p("CHANGE_PER_SECOND", &[]), Ok(Step::ChangePerSecond));
        assert_eq!(p("simple_change", &[]), Ok(Step::SimpleChange));
        assert_eq!(p("MULTIPLIER", &["8"]), Ok(Step::Multiplier(8.0)));
        assert_eq!(p("MULTIPLIER", &["0.001"]), Ok(Step::Multiplier(0.001)));
        assert!(p("MULTIPLIER", &[]).unwrap_err().contains("one parameter"));
        assert!(p("MULTIPLIER", &["{$X}"])
            .unwrap_err()
            .contains("not a number"));
        assert!(p("SIMPLE_CHANGE", &["1"])
            .unwrap_err()
            .contains("no parameters"));
        assert!(p("JAVASCRIPT", &[])
            .unwrap_err()
            .contains("unknown preprocessing type"));
        assert!(Steps::new(vec![Step::SimpleChange, Step::ChangePerSecond]).is_err());
        assert!(Steps::new(Vec::new()).is_err());
    }

    #[test]
    fn a_reload_forgets_removed_items_and_dropped_change_steps() {
        let mut p = Preprocessor::default();
        let steps = [Step::SimpleChange];
        for id in [1, 2, 3] {
            p.apply(sample(id, ValueType::Uint, 0, Value::Uint(1), &steps));
        }
        let change = Arc::new(Steps::new(vec![Step::SimpleChange]).unwrap());
        let mult = Arc::new(Steps::new(vec![Step::Multiplier(2.0)]).unwrap());
        p.retain([(1, Some(&change)), (2, Some(&mult)), (4, Some(&change))]);
        assert_eq!(p.remembered(), 1);
    }
}
