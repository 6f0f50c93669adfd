//! Hourly trends: per numeric item and hour, the minimum, maximum, average and count of
//! the values stored in history (Zabbix's `trends` and `trends_uint`, Glaber's
//! `trends_dbl` and `trends_uint`).
//!
//! Zabbix's server computes trends from the values it receives; the values this daemon
//! writes into history never pass through it, so the daemon computes them, in the
//! consumer, from the values after preprocessing (what history stores).
//!
//! Invariants:
//! * One 32-byte accumulator per item of the plan, in a dense vector indexed like
//!   [`Plan::items`] ([`Sample::item`] says where): no hashing per value, and memory is
//!   fixed by the plan, not by the values.
//! * A trend row holds values of one item whose `clock` falls in one UTC hour
//!   (`clock / 3600`); the row's `clock` is that hour's start. `count` is the number of
//!   values folded in. Only finite values count: a NaN or an infinity is stored in history
//!   and left out of the trend (it would make min, max and average meaningless), as
//!   Zabbix refuses them as values at all.
//! * Float averages are `sum / count` in `f64`, the sum kept scaled by
//!   `FLOAT_SUM_SCALE` (2^-16, exact) so that it cannot overflow: two values of
//!   1e308 averaged `inf`, and hours merged at a start (`+inf` and `-inf`) `NaN`;
//!   then held within the minimum and the maximum, which rounding could pass.
//!   Unsigned averages are the exact 80-bit sum divided by the count, truncated, as
//!   Zabbix's 128-bit sum does.
//! * An hour is written when the item's first value of a later hour arrives, by the
//!   sweep [`SWEEP_DELAY`] after the hour ends (items polled less often than hourly, or
//!   no longer), when a reload removes the item or changes its value type (once the
//!   iterations before it have ended; an item the next reload brings back by then
//!   goes on in its hour), and at stop
//!   unless the caller keeps the open hours for the next process instead
//!   ([`Trends::save_open`], [`Trends::restore_open`]: a start within the hour continues
//!   it; a start after it, or without the item, writes it at once). So one hour may have
//!   several rows for an item: after 65,535 values in one hour (a 55 ms interval), for a
//!   value that comes later than the sweep or after a value of a later hour (a row of
//!   its own: the open hour stays open), or after a stop whose open hours were not
//!   kept. A crash loses the values after the last checkpoint of the open hours
//!   ([`SavedBy::Checkpoint`]: a start continues only hours it knows were not written).
//!   Readers therefore aggregate per hour:
//!   `min(value_min)`, `max(value_max)`, `sum(toFloat64(value_avg) * count) /
//!   sum(count)` (an Int64 average times the count wraps past 2^63), `sum(count)`.

use crate::engine::Sample;
use crate::plan::{fnv1a, Plan, FNV_OFFSET};
use crate::value::{Value, ValueType};
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

/// Seconds after an hour's end before the sweep writes the hours that no later value
/// closed: values of that hour can still be on their way (an iteration started before
/// the hour's end delivers up to its timeout later).
pub const SWEEP_DELAY: u32 = 60;

/// Largest count of one row; one more value starts a new row for the same hour.
const MAX_COUNT: u16 = u16::MAX;

/// What a float accumulator's sum holds of each value: `v × 2^-16`. At most
/// [`MAX_COUNT`] (< 2^16) finite values, so the sum stays below `f64::MAX`; a power of
/// two, so the scaling is exact and the average is what an unscaled sum gives (for
/// values of magnitude above 2^-1006; smaller ones lose bits, as subnormals).
const FLOAT_SUM_SCALE: f64 = 1.0 / 65_536.0;
const _: () = assert!(MAX_COUNT as f64 * FLOAT_SUM_SCALE <= 1.0);

/// One trend row, before the sink's encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendRow {
    pub itemid: u64,
    /// Start of the hour (Unix seconds, a multiple of 3600).
    pub clock: u32,
    pub host: Arc<str>,
    pub key: Arc<str>,
    pub stats: TrendStats,
}

/// The aggregate of one row, in the item's value type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrendStats {
    Float(Stats<f64>),
    Uint(Stats<u64>),
}

/// Minimum, maximum, average and count of one item's values in one hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats<T> {
    pub min: T,
    pub max: T,
    pub avg: T,
    pub count: u32,
}

impl<T> Stats<T> {
    /// The same count, `f` applied to the three values.
    pub fn map<U>(self, f: impl Fn(T) -> U) -> Stats<U> {
        Stats {
            min: f(self.min),
            max: f(self.max),
            avg: f(self.avg),
            count: self.count,
        }
    }
}

/// One item's running aggregate for one hour; `count == 0` is empty. The three value
/// words are `f64` bits for float items; for unsigned items `sum` and `sum_hi` are the
/// low 64 and high 16 bits of the sum (at most 65,535 values below 2^64 each: < 2^80).
#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    hour: u32,
    count: u16,
    sum_hi: u16,
    min: u64,
    max: u64,
    sum: u64,
}

impl Acc {
    /// No value yet of `hour`, for values like `v`: every word holds its operation's
    /// identity (a float sum starts at -0.0, so that -0.0 alone stays -0.0).
    fn empty(hour: u32, v: &Value) -> Acc {
        let (min, max, sum) = match v {
            Value::Float(_) => (
                f64::INFINITY.to_bits(),
                f64::NEG_INFINITY.to_bits(),
                (-0.0f64).to_bits(),
            ),
            _ => (u64::MAX, 0, 0),
        };
        Acc {
            hour,
            count: 0,
            sum_hi: 0,
            min,
            max,
            sum,
        }
    }

    fn add(&mut self, v: &Value) {
        match *v {
            Value::Float(f) => {
                let (min, max) = (f64::from_bits(self.min), f64::from_bits(self.max));
                self.min = min.min(f).to_bits();
                self.max = max.max(f).to_bits();
                self.sum = (f64::from_bits(self.sum) + f * FLOAT_SUM_SCALE).to_bits();
            }
            Value::Uint(u) => {
                self.min = self.min.min(u);
                self.max = self.max.max(u);
                let (sum, carry) = self.sum.overflowing_add(u);
                self.sum = sum;
                self.sum_hi += u16::from(carry);
            }
            Value::Str(_) => return,
        }
        self.count += 1;
    }

    /// Folds `other`, of the same hour and value type `vt`, into this one; false (and
    /// nothing changed) when their counts together pass [`MAX_COUNT`] (the count's
    /// largest value).
    fn merge(&mut self, other: &Acc, vt: ValueType) -> bool {
        const _: () = assert!(MAX_COUNT == u16::MAX);
        let Some(count) = self.count.checked_add(other.count) else {
            return false;
        };
        match vt {
            ValueType::Float => {
                let f = f64::from_bits;
                self.min = f(self.min).min(f(other.min)).to_bits();
                self.max = f(self.max).max(f(other.max)).to_bits();
                self.sum = (f(self.sum) + f(other.sum)).to_bits();
            }
            ValueType::Uint => {
                self.min = self.min.min(other.min);
                self.max = self.max.max(other.max);
                let (sum, carry) = self.sum.overflowing_add(other.sum);
                self.sum = sum;
                // Each below its count: together below the sum of counts (≤ MAX_COUNT).
                self.sum_hi += other.sum_hi + u16::from(carry);
            }
            ValueType::Str => return false,
        }
        self.count = count;
        true
    }

    fn stats(&self, vt: ValueType) -> Option<TrendStats> {
        let count = u32::from(self.count);
        let words = |avg| Stats {
            min: self.min,
            max: self.max,
            avg,
            count,
        };
        match vt {
            ValueType::Float => {
                let avg = f64::from_bits(self.sum) / f64::from(count) / FLOAT_SUM_SCALE;
                // The sum's rounding can put the quotient an ulp or more past the values
                // (0.1 a whole hour averaged 0.10000000000000067); the true average is
                // within them, and a constant keeps itself, as Zabbix's running average
                // does. `max`/`min`, not `clamp`: no panic on what a damaged save holds.
                let (min, max) = (f64::from_bits(self.min), f64::from_bits(self.max));
                let avg = avg.max(min).min(max);
                Some(TrendStats::Float(words(avg.to_bits()).map(f64::from_bits)))
            }
            ValueType::Uint => {
                let sum = u128::from(self.sum_hi) << 64 | u128::from(self.sum);
                // ≤ max, so it fits.
                Some(TrendStats::Uint(words((sum / u128::from(count)) as u64)))
            }
            ValueType::Str => None,
        }
    }
}

/// The value of `s` if it belongs in a trend: numeric, finite, of the item's type.
fn trend_value(s: &Sample) -> Option<&Value> {
    match s.result.as_ref().ok()? {
        v @ Value::Float(f) if f.is_finite() && s.value_type == ValueType::Float => Some(v),
        v @ Value::Uint(_) if s.value_type == ValueType::Uint => Some(v),
        _ => None,
    }
}

/// The open hour of an item the plan no longer has (a reload removed it or changed
/// its value type), kept while samples of iterations that started before the reload
/// can still arrive.
struct Gone {
    acc: Acc,
    value_type: ValueType,
    host: Arc<str>,
    key: Arc<str>,
}

impl Gone {
    /// The accumulator of `s`'s item in `map` (made if new), if of `s`'s value type.
    fn of<'m>(map: &'m mut HashMap<u64, Gone>, s: &Sample) -> Option<&'m mut Acc> {
        let g = map.entry(s.itemid).or_insert_with(|| Gone {
            acc: Acc::default(),
            value_type: s.value_type,
            host: s.host.clone(),
            key: s.key.clone(),
        });
        (g.value_type == s.value_type).then_some(&mut g.acc)
    }

    fn row(&self, itemid: u64) -> Option<TrendRow> {
        row(&self.acc, itemid, self.value_type, &self.host, &self.key)
    }
}

/// The trend accumulators of every item of one plan.
pub struct Trends {
    plan: Arc<Plan>,
    accs: Vec<Acc>,
    /// itemid → index in `plan`, kept after a reload for samples of iterations that
    /// started on the old plan (their [`Sample::item`] points into that one); dropped
    /// by [`Trends::forget_lookup`] once those have ended.
    lookup: Option<HashMap<u64, u32>>,
    /// While `lookup` is kept: the open hours of items the reload removed or retyped,
    /// which late samples still fold into; written by [`Trends::forget_lookup`].
    gone: HashMap<u64, Gone>,
    /// Values of an hour before their item's open one (a wall clock stepped back; one
    /// item's batches reordered while the sink held them back), by item: an hour of
    /// their own, written by the sweep after it (or when another earlier hour comes),
    /// so the open hour stays open. Closing it would split it in two rows, and after a
    /// crash a checkpoint that held it would be continued beside the row written, its
    /// values counted twice. Empty but for such values.
    late: HashMap<u64, Gone>,
}

/// Folds `v` of `hour` into `acc`; a row this closes goes to `emit` first.
fn fold(acc: &mut Acc, hour: u32, v: &Value, emit: impl FnOnce(&Acc)) {
    if acc.count == 0 || acc.hour != hour || acc.count == MAX_COUNT {
        if acc.count > 0 {
            emit(acc);
        }
        *acc = Acc::empty(hour, v);
    }
    acc.add(v);
}

impl Trends {
    pub fn new(plan: Arc<Plan>) -> Trends {
        Trends {
            accs: vec![Acc::default(); plan.items.len()],
            plan,
            lookup: None,
            gone: HashMap::new(),
            late: HashMap::new(),
        }
    }

    /// Index of `s`'s item in the current plan, if it has one.
    fn slot(&self, s: &Sample) -> Option<usize> {
        let i = s.item as usize;
        if self
            .plan
            .items
            .get(i)
            .is_some_and(|it| it.itemid == s.itemid)
        {
            return Some(i);
        }
        self.lookup.as_ref()?.get(&s.itemid).map(|&i| i as usize)
    }

    /// Folds the value of `s` (if it has a numeric one) into its item's hour; a row
    /// that this closes is pushed to `out`.
    pub fn record(&mut self, s: &Sample, out: &mut Vec<TrendRow>) {
        let Some(v) = trend_value(s) else { return };
        let hour = s.clock / 3600;
        let emit = |acc: &Acc| out.extend(row(acc, s.itemid, s.value_type, &s.host, &s.key));
        let acc = match self.slot(s) {
            Some(i) if self.plan.items[i].value_type == s.value_type => Some(&mut self.accs[i]),
            // Not (or not so) in the plan: a sample of an iteration that started before
            // the last reload, while those can still arrive.
            _ if self.lookup.is_some() => Gone::of(&mut self.gone, s),
            _ => None,
        };
        let Some(acc) = acc else { return };
        if acc.count > 0 && hour < acc.hour {
            if let Some(late) = Gone::of(&mut self.late, s) {
                fold(late, hour, v, emit);
            }
            return;
        }
        fold(acc, hour, v, emit);
    }

    /// Writes every hour before `hour` (Unix seconds / 3600) that is still open.
    pub fn close_before(&mut self, hour: u32, out: &mut Vec<TrendRow>) {
        open_hours(&self.plan, &mut self.accs, |acc, item, host| {
            if acc.hour < hour {
                out.extend(row(acc, item.itemid, item.value_type, host, &item.key));
                acc.count = 0;
            }
        });
        for (id, g) in self.gone.iter_mut() {
            if g.acc.hour < hour {
                out.extend(g.row(*id));
                g.acc.count = 0;
            }
        }
        self.late.retain(|id, g| {
            if g.acc.hour < hour {
                out.extend(g.row(*id));
            }
            g.acc.hour >= hour
        });
    }

    /// Writes every open hour (at stop).
    pub fn drain(&mut self, out: &mut Vec<TrendRow>) {
        self.close_before(u32::MAX, out);
    }

    /// Moves to a reloaded plan: items it keeps (same itemid and value type) keep their
    /// open hour; the others' open hours wait, with the samples of iterations that
    /// started before the reload, until [`Trends::forget_lookup`] writes them.
    pub fn rebase(&mut self, plan: Arc<Plan>, out: &mut Vec<TrendRow>) {
        let lookup: HashMap<u64, u32> = plan
            .items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.itemid, i as u32))
            .collect();
        let mut accs = vec![Acc::default(); plan.items.len()];
        let gone = &mut self.gone;
        open_hours(&self.plan, &mut self.accs, |acc, item, host| {
            let same = lookup
                .get(&item.itemid)
                .filter(|&&j| plan.items[j as usize].value_type == item.value_type);
            if let Some(&j) = same {
                accs[j as usize] = *acc;
                return;
            }
            let g = Gone {
                acc: *acc,
                value_type: item.value_type,
                host: host.clone(),
                key: item.key.clone(),
            };
            // An item gone twice (two reloads in a row) keeps both hours.
            if let Some(old) = gone.insert(item.itemid, g) {
                out.extend(old.row(item.itemid));
            }
        });
        // Items a reload removed and this one brings back (a reload undone by the next,
        // within the minute their hours wait) go on in their open hour: written as it
        // was when the lookup was forgotten, it made two rows of the hour.
        gone.retain(|id, g| match lookup.get(id) {
            Some(&j)
                if plan.items[j as usize].value_type == g.value_type
                    && accs[j as usize].count == 0 =>
            {
                accs[j as usize] = g.acc;
                false
            }
            _ => true,
        });
        self.plan = plan;
        self.accs = accs;
        self.lookup = Some(lookup);
    }

    /// Drops the itemid lookup of the last reload and writes the open hours of the items
    /// it removed: samples of the plan before it have all arrived.
    pub fn forget_lookup(&mut self, out: &mut Vec<TrendRow>) {
        self.lookup = None;
        out.extend(self.gone.drain().filter_map(|(id, g)| g.row(id)));
    }
}

/// First bytes of [`Trends::save_open`]'s form (its version is the digit).
const OPEN_MAGIC: &[u8; 8] = b"NPTREND2";
/// The form before float sums were scaled (`FLOAT_SUM_SCALE`); read, for the
/// hours a stop of the version before saved.
const OPEN_MAGIC_V1: &[u8; 8] = b"NPTREND1";

/// A writer that hashes what it passes on (FNV-1a), so that the open hours are checked
/// as a whole when they are read back.
struct Hashing<W> {
    inner: W,
    h: u64,
}

impl<W: std::io::Write> std::io::Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.h = fnv1a(self.h, &buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Who saved the open hours [`Trends::restore_open`] takes back, which decides what
/// becomes of those that cannot continue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedBy {
    /// A stop, which wrote none of them: each is written at the start if it does not
    /// continue.
    Stop,
    /// A checkpoint of a process that then went on (and died without its stop): after
    /// it, that process may have written any of them (the hour ended, a reload removed
    /// the item), so only hours that provably were not written continue (the current
    /// hour of an item of the plan then) and the rest is dropped: a lost row rather
    /// than a second one of the same values.
    Checkpoint,
}

/// What [`Trends::restore_open`] did with each saved hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Continued: the next values of the hour go on in the same row.
    pub continued: u64,
    /// Written to the caller's rows now ([`SavedBy::Stop`]).
    pub written: u64,
    /// Left out ([`SavedBy::Checkpoint`]).
    pub dropped: u64,
}

/// Why saved open hours were not taken back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestoreError {
    #[error("not a file of open trends hours (or of another version)")]
    NotOurs,
    #[error("truncated or damaged (its checksum does not match)")]
    Damaged,
}

impl Trends {
    /// Writes the open hours (of the plan's items, and of items a reload removed that
    /// are still kept) to `w`, for [`Trends::restore_open`] in the next process: then a
    /// stop and a start within an hour make one row of it, not two. They stay open here
    /// (the caller writes them as rows if it cannot keep what was written). Returns how
    /// many hours were written.
    ///
    /// Form (little-endian): `NPTREND2`; per hour: itemid u64, value type u8 (0
    /// float, 1 unsigned), index in the plan u32, hour u32, count u16, sum_hi u16, min,
    /// max and sum u64 (a float sum scaled by `FLOAT_SUM_SCALE`; `NPTREND1`, also
    /// read, has it unscaled), host and key (u16 length, UTF-8); then the number of
    /// hours u64 and the FNV-1a hash of everything before it u64.
    pub fn save_open(&self, w: impl std::io::Write) -> std::io::Result<u64> {
        let mut w = Hashing {
            inner: w,
            h: FNV_OFFSET,
        };
        w.write_all(OPEN_MAGIC)?;
        let mut n = 0u64;
        let mut put = |w: &mut Hashing<_>,
                       id: u64,
                       vt: ValueType,
                       index: u32,
                       acc: &Acc,
                       host: &str,
                       key: &str|
         -> std::io::Result<()> {
            let vt = match vt {
                ValueType::Float => 0u8,
                ValueType::Uint => 1,
                ValueType::Str => return Ok(()),
            };
            w.write_all(&id.to_le_bytes())?;
            w.write_all(&[vt])?;
            w.write_all(&index.to_le_bytes())?;
            w.write_all(&acc.hour.to_le_bytes())?;
            w.write_all(&acc.count.to_le_bytes())?;
            w.write_all(&acc.sum_hi.to_le_bytes())?;
            for word in [acc.min, acc.max, acc.sum] {
                w.write_all(&word.to_le_bytes())?;
            }
            for text in [host, key] {
                // The loader keeps keys far shorter; a name past 65,535 bytes (a row's
                // key, which the loader does not measure) is cut on a character boundary,
                // so that the rest still reads back.
                let mut end = text.len().min(usize::from(u16::MAX));
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                w.write_all(&(end as u16).to_le_bytes())?;
                w.write_all(&text.as_bytes()[..end])?;
            }
            n += 1;
            Ok(())
        };
        for task in &self.plan.tasks {
            let host = &self.plan.hosts[task.host as usize].name;
            for i in task.items.clone() {
                let acc = &self.accs[i as usize];
                if acc.count > 0 {
                    let it = &self.plan.items[i as usize];
                    put(&mut w, it.itemid, it.value_type, i, acc, host, &it.key)?;
                }
            }
        }
        // Late hours are saved as removed items' are: a stop's start writes them (an
        // hour before the current one), a checkpoint's drops them.
        for (id, g) in self.gone.iter().chain(&self.late) {
            if g.acc.count > 0 {
                put(&mut w, *id, g.value_type, u32::MAX, &g.acc, &g.host, &g.key)?;
            }
        }
        w.write_all(&n.to_le_bytes())?;
        let h = w.h;
        w.inner.write_all(&h.to_le_bytes())?;
        w.flush()?;
        Ok(n)
    }

    /// Takes back the open hours [`Trends::save_open`] wrote, `hour` being the current
    /// one (Unix seconds / 3600). An item of this plan with the same value type whose
    /// saved hour is the current one continues it; every other saved hour (an hour that
    /// has ended meanwhile, an item removed or retyped) is written to `out` now, or,
    /// saved by a checkpoint, dropped ([`SavedBy`]; so is an hour a reload had removed
    /// the item of). Call it before the first value; an item saved twice by a stop (a
    /// reload removed it and the next brought it back) is one hour again, or two rows
    /// if together they pass a row's count. Nothing is taken from bytes that are not a
    /// whole save.
    pub fn restore_open(
        &mut self,
        bytes: &[u8],
        hour: u32,
        by: SavedBy,
        out: &mut Vec<TrendRow>,
    ) -> Result<Restored, RestoreError> {
        let v1 = bytes.starts_with(OPEN_MAGIC_V1);
        if !bytes.starts_with(OPEN_MAGIC) && !v1 {
            return Err(RestoreError::NotOurs);
        }
        // The magic, the records, the count and the checksum.
        let Some(records_len) = bytes.len().checked_sub(OPEN_MAGIC.len() + 16) else {
            return Err(RestoreError::Damaged);
        };
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if fnv1a(FNV_OFFSET, body).to_le_bytes() != sum {
            return Err(RestoreError::Damaged);
        }
        let (records, count) = body[OPEN_MAGIC.len()..].split_at(records_len);
        let count = u64::from_le_bytes(count.try_into().map_err(|_| RestoreError::Damaged)?);
        // Parsed in full before any is applied: a file that checks out but does not
        // parse (a bug, not damage) changes nothing.
        let mut saved = Vec::new();
        let mut r = Reader(records);
        while !r.0.is_empty() {
            let mut record = r.record().ok_or(RestoreError::Damaged)?;
            if v1 && record.1 == ValueType::Float {
                let acc = &mut record.3;
                let (min, max) = (f64::from_bits(acc.min), f64::from_bits(acc.max));
                let sum = match f64::from_bits(acc.sum) {
                    s if s.is_finite() => s * FLOAT_SUM_SCALE,
                    // Overflowed in the old form: the middle of min and max stands for
                    // the average (the values are lost), not an infinite one.
                    _ => (min / 2.0 + max / 2.0) * FLOAT_SUM_SCALE * f64::from(acc.count),
                };
                acc.sum = sum.to_bits();
            }
            saved.push(record);
        }
        if saved.len() as u64 != count {
            return Err(RestoreError::Damaged);
        }
        let mut by_id: Option<HashMap<u64, u32>> = None;
        let mut done = Restored::default();
        for (id, vt, index, acc, host, key) in saved {
            // A removed item's hour (kept for late samples) is written once the reload's
            // old iterations end, a late hour by the sweep: a checkpoint cannot tell
            // whether that happened.
            if by == SavedBy::Checkpoint && index == u32::MAX {
                done.dropped += 1;
                continue;
            }
            let plan = &self.plan;
            let at = match plan.items.get(index as usize) {
                Some(it) if it.itemid == id => Some(index),
                _ => by_id
                    .get_or_insert_with(|| {
                        plan.items
                            .iter()
                            .enumerate()
                            .map(|(i, it)| (it.itemid, i as u32))
                            .collect()
                    })
                    .get(&id)
                    .copied(),
            }
            .filter(|&i| plan.items[i as usize].value_type == vt);
            // An item can be saved twice: a reload removed it (its hour kept for late
            // samples) and the next one brought it back before the stop.
            let slot = at
                .filter(|_| acc.hour == hour)
                .map(|i| &mut self.accs[i as usize]);
            let taken = match slot {
                Some(slot) if slot.count == 0 => {
                    *slot = acc;
                    true
                }
                Some(slot) => slot.hour == hour && slot.merge(&acc, vt),
                None => false,
            };
            match (taken, by) {
                (true, _) => done.continued += 1,
                (false, SavedBy::Checkpoint) => done.dropped += 1,
                (false, SavedBy::Stop) => {
                    out.extend(row(&acc, id, vt, &host.into(), &key.into()));
                    done.written += 1;
                }
            }
        }
        Ok(done)
    }
}

/// Reads [`Trends::save_open`]'s records.
struct Reader<'a>(&'a [u8]);

/// A saved open hour: itemid, value type, index in the plan, the hour, host, key.
type Saved<'a> = (u64, ValueType, u32, Acc, &'a str, &'a str);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = usize::from(u16::from_le_bytes(self.take()?));
        let (t, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        std::str::from_utf8(t).ok()
    }

    fn record(&mut self) -> Option<Saved<'a>> {
        let id = u64::from_le_bytes(self.take()?);
        let vt = match self.take::<1>()?[0] {
            0 => ValueType::Float,
            1 => ValueType::Uint,
            _ => return None,
        };
        let index = u32::from_le_bytes(self.take()?);
        let acc = Acc {
            hour: u32::from_le_bytes(self.take()?),
            count: u16::from_le_bytes(self.take()?),
            sum_hi: u16::from_le_bytes(self.take()?),
            min: u64::from_le_bytes(self.take()?),
            max: u64::from_le_bytes(self.take()?),
            sum: u64::from_le_bytes(self.take()?),
        };
        // What an accumulator can hold: values, an hour whose start is a u32 clock, and
        // an unsigned sum below count × 2^64 (a float's high word is unused).
        let sum_hi_ok = match vt {
            ValueType::Uint => acc.sum_hi < acc.count,
            _ => acc.sum_hi == 0,
        };
        if acc.count == 0 || acc.hour > u32::MAX / 3600 || !sum_hi_ok {
            return None;
        }
        Some((id, vt, index, acc, self.text()?, self.text()?))
    }
}

/// Seconds until the next sweep after `now` (Unix seconds): [`SWEEP_DELAY`] after the
/// next hour's start, or after this hour's if that is still ahead.
pub fn secs_to_sweep(now: u32) -> u32 {
    let this = now / 3600 * 3600 + SWEEP_DELAY;
    if now < this {
        this - now
    } else {
        this + 3600 - now
    }
}

/// Calls `f` with every open accumulator of `plan`, its item and the item's host name
/// (an item's host is its task's).
fn open_hours(
    plan: &Plan,
    accs: &mut [Acc],
    mut f: impl FnMut(&mut Acc, &crate::plan::PlanItem, &Arc<str>),
) {
    for task in &plan.tasks {
        let host = &plan.hosts[task.host as usize].name;
        for i in task.items.clone() {
            let acc = &mut accs[i as usize];
            if acc.count > 0 {
                f(acc, &plan.items[i as usize], host);
            }
        }
    }
}

/// The row of `acc`; none for an empty one (or a text item's).
fn row(acc: &Acc, itemid: u64, vt: ValueType, host: &Arc<str>, key: &Arc<str>) -> Option<TrendRow> {
    if acc.count == 0 {
        return None;
    }
    Some(TrendRow {
        itemid,
        clock: acc.hour * 3600,
        host: host.clone(),
        key: key.clone(),
        stats: acc.stats(vt)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{derive_itemid, HostSpec, ItemKind, ItemSpec};

    const H: u32 = 1_800_000_000 / 3600; // an hour of 2027

    fn float(min: f64, max: f64, avg: f64, count: u32) -> TrendStats {
        TrendStats::Float(Stats {
            min,
            max,
            avg,
            count,
        })
    }

    fn uint(min: u64, max: u64, avg: u64, count: u32) -> TrendStats {
        TrendStats::Uint(Stats {
            min,
            max,
            avg,
            count,
        })
    }

    fn spec(host: &str, key: &str, vt: ValueType) -> ItemSpec {
        ItemSpec {
            itemid: derive_itemid(host, key),
            key: key.into(),
            value_type: vt,
            interval_ms: 10_000,
            kind: ItemKind::Snmp {
                oid: snmp::Oid::from_arcs(&[1, 3, 6, 1, 2, 1, 1, 3, 0]).unwrap(),
            },
            pre: None,
        }
    }

    /// Hosts of `(name, [(key, type)])`.
    fn plan(hosts: &[(&str, &[(&str, ValueType)])]) -> Arc<Plan> {
        Arc::new(Plan::build(
            hosts
                .iter()
                .map(|(name, items)| HostSpec {
                    name: (*name).into(),
                    ip: "127.0.0.1".parse().unwrap(),
                    snmp: None,
                    items: items.iter().map(|(k, vt)| spec(name, k, *vt)).collect(),
                })
                .collect(),
        ))
    }

    /// A sample of `key` of `host` as the engines make it (index from `plan`).
    fn sample(plan: &Plan, host: &str, key: &str, clock: u32, v: Value) -> Sample {
        let itemid = derive_itemid(host, key);
        let item = plan.items.iter().position(|i| i.itemid == itemid).unwrap();
        Sample {
            itemid,
            item: item as u32,
            host: host.into(),
            ip: "127.0.0.1".parse().unwrap(),
            key: key.into(),
            value_type: plan.items[item].value_type,
            clock,
            ns: 0,
            result: Ok(v),
            pre: None,
        }
    }

    fn stats(rows: &[TrendRow], key: &str) -> Vec<(u32, TrendStats)> {
        rows.iter()
            .filter(|r| &*r.key == key)
            .map(|r| (r.clock, r.stats))
            .collect()
    }

    /// A float item that keeps one value all hour (a gauge at rest, a constant speed)
    /// has that value for its average, as Zabbix's running average keeps it: a sum of
    /// 0.1 three times is 0.30000000000000004, a third of which is above the maximum.
    #[test]
    fn a_constant_float_averages_to_itself_and_averages_stay_within_min_and_max() {
        let p = plan(&[("h", &[("f", ValueType::Float), ("g", ValueType::Float)])]);
        let mut t = Trends::new(p.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        for n in 0..360 {
            t.record(&sample(&p, "h", "f", t0 + n, Value::Float(0.1)), &mut out);
        }
        for v in [0.1, 0.1, 0.2, 0.1, 0.1] {
            t.record(&sample(&p, "h", "g", t0, Value::Float(v)), &mut out);
        }
        t.drain(&mut out);
        assert_eq!(stats(&out, "f"), [(t0, float(0.1, 0.1, 0.1, 360))]);
        let [(_, TrendStats::Float(g))] = stats(&out, "g")[..] else {
            panic!("{out:?}")
        };
        assert!(g.min <= g.avg && g.avg <= g.max, "{g:?}");
    }

    /// Trends of `p` whose item `g` of host `h` has the values 1e308 and 1.5e308 in
    /// hour `H` (their sum past `f64::MAX`, unscaled).
    fn huge_g(p: &Arc<Plan>) -> Trends {
        let mut t = Trends::new(p.clone());
        for v in [1e308, 1.5e308] {
            let s = sample(p, "h", "g", H * 3600, Value::Float(v));
            t.record(&s, &mut Vec::new());
        }
        t
    }

    /// Where the float sum of the first saved hour is: magic 8, itemid 8, type 1,
    /// index 4, hour 4, count 2, sum_hi 2, min 8, max 8.
    const V1_SUM_AT: usize = 8 + 8 + 1 + 4 + 4 + 2 + 2 + 8 + 8;

    /// `v2`, a save of one float hour, as the version before wrote it (NPTREND1, the
    /// sum unscaled): its sum `sum`.
    fn as_v1(v2: &[u8], sum: f64) -> Vec<u8> {
        let mut v1 = v2[..v2.len() - 8].to_vec();
        v1[..8].copy_from_slice(OPEN_MAGIC_V1);
        v1[V1_SUM_AT..V1_SUM_AT + 8].copy_from_slice(&sum.to_bits().to_le_bytes());
        v1.extend_from_slice(&fnv1a(FNV_OFFSET, &v1).to_le_bytes());
        v1
    }

    #[test]
    fn an_accumulator_is_32_bytes() {
        // The memory budget per item (200 B at 1M items) counts on it.
        assert_eq!(std::mem::size_of::<Acc>(), 32);
    }

    /// Float sums cannot overflow: values near f64::MAX average to themselves, hours
    /// of opposite signs merged at a start average finitely (an unscaled sum gave
    /// `inf` and then `NaN`), and a stop's save of the version before (sums unscaled)
    /// is taken back with the same average.
    #[test]
    fn float_averages_of_huge_values_stay_finite() {
        let p = plan(&[("h", &[("f", ValueType::Float), ("g", ValueType::Float)])]);
        let only_g = plan(&[("h", &[("g", ValueType::Float)])]);
        let t0 = H * 3600;
        let mut t = huge_g(&p);
        let mut out = Vec::new();
        t.drain(&mut out);
        assert_eq!(stats(&out, "g"), [(t0, float(1e308, 1.5e308, 1.25e308, 2))]);
        // f removed and back before the stop: two saved hours, merged at the start.
        let mut t = Trends::new(p.clone());
        out.clear();
        for _ in 0..2 {
            t.record(&sample(&p, "h", "f", t0, Value::Float(1e308)), &mut out);
        }
        t.rebase(only_g, &mut out);
        t.rebase(p.clone(), &mut out);
        for v in [-1e308, -1e308, 4e307] {
            t.record(&sample(&p, "h", "f", t0 + 1, Value::Float(v)), &mut out);
        }
        let mut saved = Vec::new();
        t.save_open(&mut saved).unwrap();
        let mut t = Trends::new(p.clone());
        t.restore_open(&saved, H, SavedBy::Stop, &mut out).unwrap();
        t.drain(&mut out);
        let [(clock, TrendStats::Float(f))] = stats(&out, "f")[..] else {
            panic!("{out:?}")
        };
        assert_eq!((clock, f.min, f.max, f.count), (t0, -1e308, 1e308, 5));
        assert!((f.avg / 8e306 - 1.0).abs() < 1e-12, "{f:?}");
        // The version before: the same hours, NPTREND1 with the sum unscaled.
        let mut t = Trends::new(p.clone());
        out.clear();
        for v in [0.25, 1.0, 7.5] {
            t.record(&sample(&p, "h", "g", t0, Value::Float(v)), &mut out);
        }
        let mut v2 = Vec::new();
        t.save_open(&mut v2).unwrap();
        assert_eq!(
            v2[V1_SUM_AT..V1_SUM_AT + 8],
            (8.75 * FLOAT_SUM_SCALE).to_bits().to_le_bytes()
        );
        let v1 = as_v1(&v2, 8.75);
        let mut t = Trends::new(p);
        t.restore_open(&v1, H, SavedBy::Stop, &mut out).unwrap();
        t.drain(&mut out);
        assert_eq!(stats(&out, "g"), [(t0, float(0.25, 7.5, 8.75 / 3.0, 3))]);
    }

    /// Values of an hour before the open one make an hour of their own, written by the
    /// sweep (or at stop, or saved by it): the open hour is neither split nor, after a
    /// crash, continued from a checkpoint beside a row the crashed process wrote (its
    /// values counted twice). A clock stepped back gives one row per hour, not per value.
    #[test]
    fn late_values_of_an_earlier_hour_leave_the_open_hour_open() {
        let p = plan(&[("h", &[("x", ValueType::Uint)])]);
        let t0 = H * 3600;
        let mut t = Trends::new(p.clone());
        let mut written = Vec::new();
        t.record(&sample(&p, "h", "x", t0 + 5, Value::Uint(10)), &mut written);
        let mut checkpoint = Vec::new();
        t.save_open(&mut checkpoint).unwrap();
        // The clock stepped back ten minutes: 60 values of the hour before.
        for k in 0..60u32 {
            let v = Value::Uint(1 + u64::from(k % 2));
            t.record(&sample(&p, "h", "x", t0 - 600 + k * 10, v), &mut written);
        }
        t.record(
            &sample(&p, "h", "x", t0 + 15, Value::Uint(20)),
            &mut written,
        );
        assert_eq!(written, [], "nothing closed");
        // A stop saves both; the next start writes the hour before and goes on with H.
        let mut saved = Vec::new();
        assert_eq!(t.save_open(&mut saved).unwrap(), 2);
        let mut stopped = Vec::new();
        let mut again = Trends::new(p.clone());
        again
            .restore_open(&saved, H, SavedBy::Stop, &mut stopped)
            .unwrap();
        assert_eq!(stats(&stopped, "x"), [(t0 - 3600, uint(1, 2, 1, 60))]);
        again.drain(&mut stopped);
        assert_eq!(
            stats(&stopped[1..], "x"),
            [(t0, uint(10, 20, 15, 2))],
            "one row"
        );
        // The sweep after H - 1 writes it; H stays open.
        t.close_before(H, &mut written);
        assert_eq!(stats(&written, "x"), [(t0 - 3600, uint(1, 2, 1, 60))]);
        // A crash instead (20 and the late values lost with it), and a start from
        // the checkpoint: H once, not beside a row of it.
        drop(t);
        let mut written = Vec::new();
        let mut t = Trends::new(p.clone());
        t.restore_open(&checkpoint, H, SavedBy::Checkpoint, &mut written)
            .unwrap();
        t.record(
            &sample(&p, "h", "x", t0 + 25, Value::Uint(30)),
            &mut written,
        );
        t.drain(&mut written);
        assert_eq!(stats(&written, "x"), [(t0, uint(10, 30, 20, 2))]);
    }

    #[test]
    fn hours_close_when_the_next_hour_starts_with_exact_aggregates() {
        let p = plan(&[("r1", &[("f", ValueType::Float), ("u", ValueType::Uint)])]);
        let mut t = Trends::new(p.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        for (dt, f, u) in [(0, 1.5, 7), (1200, -2.0, 8), (3599, 0.5, 10)] {
            t.record(&sample(&p, "r1", "f", t0 + dt, Value::Float(f)), &mut out);
            t.record(&sample(&p, "r1", "u", t0 + dt, Value::Uint(u)), &mut out);
        }
        assert!(out.is_empty(), "nothing closes inside the hour");
        t.record(
            &sample(&p, "r1", "f", t0 + 3600, Value::Float(9.0)),
            &mut out,
        );
        let f = float(-2.0, 1.5, 0.0, 3);
        assert_eq!(stats(&out, "f"), [(t0, f)]);
        assert_eq!(&*out[0].host, "r1");
        assert_eq!(out[0].itemid, derive_itemid("r1", "f"));
        // The unsigned item's hour is still open until the sweep; its average truncates
        // (25 / 3 = 8.33).
        out.clear();
        t.close_before(H + 1, &mut out);
        let u = uint(7, 10, 8, 3);
        assert_eq!(stats(&out, "u"), [(t0, u)]);
        assert_eq!(out.len(), 1, "the float item's new hour stays open");
        out.clear();
        t.drain(&mut out);
        let nine = float(9.0, 9.0, 9.0, 1);
        assert_eq!(stats(&out, "f"), [(t0 + 3600, nine)]);
        out.clear();
        t.drain(&mut out);
        assert!(out.is_empty(), "a written hour is not written again");
    }

    #[test]
    fn unsigned_sums_are_exact_past_64_bits_and_text_errors_nan_do_not_count() {
        let p = plan(&[(
            "r1",
            &[
                ("u", ValueType::Uint),
                ("f", ValueType::Float),
                ("s", ValueType::Str),
            ],
        )]);
        let mut t = Trends::new(p.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        // Three Counter64 readings near 2^64: the sum needs 66 bits.
        let big = [u64::MAX, u64::MAX - 2, u64::MAX - 4];
        for (i, v) in big.into_iter().enumerate() {
            t.record(
                &sample(&p, "r1", "u", t0 + i as u32, Value::Uint(v)),
                &mut out,
            );
        }
        for v in [f64::NAN, f64::INFINITY, 4.0] {
            t.record(&sample(&p, "r1", "f", t0, Value::Float(v)), &mut out);
        }
        t.record(&sample(&p, "r1", "s", t0, Value::Str("x".into())), &mut out);
        let mut failed = sample(&p, "r1", "f", t0, Value::Float(100.0));
        failed.result = Err(crate::value::ItemError::new(
            crate::value::ErrorReason::Timeout,
            "timeout",
        ));
        t.record(&failed, &mut out);
        t.drain(&mut out);
        let u = uint(u64::MAX - 4, u64::MAX, u64::MAX - 2, 3);
        let f = float(4.0, 4.0, 4.0, 1);
        assert_eq!(stats(&out, "u"), [(t0, u)]);
        assert_eq!(stats(&out, "f"), [(t0, f)]);
        assert_eq!(out.len(), 2, "no row for the text item");
    }

    #[test]
    fn a_full_row_starts_another_for_the_same_hour() {
        let p = plan(&[("r1", &[("u", ValueType::Uint)])]);
        let mut t = Trends::new(p.clone());
        let mut out = Vec::new();
        for _ in 0..=u32::from(MAX_COUNT) {
            t.record(&sample(&p, "r1", "u", H * 3600, Value::Uint(2)), &mut out);
        }
        t.drain(&mut out);
        let counts: Vec<u32> = out
            .iter()
            .map(|r| match r.stats {
                TrendStats::Uint(Stats { count, avg, .. }) => {
                    assert_eq!(avg, 2);
                    count
                }
                TrendStats::Float(_) => unreachable!(),
            })
            .collect();
        assert_eq!(counts, [65_535, 1]);
    }

    #[test]
    fn a_reload_keeps_open_hours_and_late_samples_of_old_iterations() {
        let old = plan(&[
            (
                "a",
                &[("keep", ValueType::Float), ("gone", ValueType::Float)],
            ),
            ("b", &[("retyped", ValueType::Float)]),
        ]);
        let mut t = Trends::new(old.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        for (h, k) in [("a", "keep"), ("a", "gone"), ("b", "retyped")] {
            t.record(&sample(&old, h, k, t0, Value::Float(1.0)), &mut out);
        }
        // The new plan puts another host first (indices move), drops a:gone and makes
        // b:retyped unsigned.
        let new = plan(&[
            ("0-new", &[("x", ValueType::Uint)]),
            ("a", &[("keep", ValueType::Float)]),
            ("b", &[("retyped", ValueType::Uint)]),
        ]);
        let stale = sample(&old, "a", "keep", t0, Value::Float(0.0)).item;
        assert_ne!(stale, sample(&new, "a", "keep", t0, Value::Float(0.0)).item);
        t.rebase(new.clone(), &mut out);
        assert!(
            out.is_empty(),
            "iterations of the old plan may still deliver"
        );
        let late = |k: &str, dt: u32, v: f64| {
            sample(
                &old,
                if k == "retyped" { "b" } else { "a" },
                k,
                t0 + dt,
                Value::Float(v),
            )
        };
        // a:keep goes on in its hour, from a sample indexed in the new plan and from one
        // of an iteration that started on the old plan (its index is stale); so do the
        // removed item and the retyped item's float hour, with their late samples.
        t.record(
            &sample(&new, "a", "keep", t0 + 5, Value::Float(3.0)),
            &mut out,
        );
        t.record(&late("keep", 6, 5.0), &mut out);
        t.record(&late("gone", 6, 3.0), &mut out);
        t.record(&late("retyped", 7, 2.0), &mut out);
        t.record(
            &sample(&new, "b", "retyped", t0 + 8, Value::Uint(4)),
            &mut out,
        );
        assert!(out.is_empty());
        // Once the old plan's iterations have ended, the removed items' hours are written.
        t.forget_lookup(&mut out);
        let mut written: Vec<(&str, &str, TrendStats)> =
            out.iter().map(|r| (&*r.key, &*r.host, r.stats)).collect();
        written.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(
            written,
            [
                ("gone", "a", float(1.0, 3.0, 2.0, 2)),
                ("retyped", "b", float(1.0, 2.0, 1.5, 2)),
            ]
        );
        out.clear();
        // After that, stale samples are left out rather than misplaced.
        t.record(&late("keep", 8, 5.0), &mut out);
        t.record(&late("gone", 8, 5.0), &mut out);
        t.drain(&mut out);
        assert_eq!(stats(&out, "keep"), [(t0, float(1.0, 5.0, 3.0, 3))]);
        assert_eq!(stats(&out, "retyped"), [(t0, uint(4, 4, 4, 1))]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn open_hours_saved_at_a_stop_continue_after_a_start_within_the_hour() {
        let old = plan(&[
            (
                "a",
                &[
                    ("f", ValueType::Float),
                    ("u", ValueType::Uint),
                    ("s", ValueType::Str),
                ],
            ),
            (
                "b",
                &[("gone", ValueType::Float), ("retyped", ValueType::Float)],
            ),
        ]);
        let mut t = Trends::new(old.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        for (h, k, v) in [
            ("a", "f", Value::Float(1.0)),
            ("a", "f", Value::Float(3.0)),
            ("a", "u", Value::Uint(u64::MAX)),
            ("a", "u", Value::Uint(u64::MAX)),
            ("a", "s", Value::Str("x".into())),
            ("b", "gone", Value::Float(2.0)),
            ("b", "retyped", Value::Float(2.0)),
        ] {
            t.record(&sample(&old, h, k, t0 + 10, v), &mut out);
        }
        // A reload removed b:gone just before the stop: its hour is kept for late
        // samples, and saved too.
        let mid = plan(&[
            (
                "a",
                &[
                    ("f", ValueType::Float),
                    ("u", ValueType::Uint),
                    ("s", ValueType::Str),
                ],
            ),
            ("b", &[("retyped", ValueType::Float)]),
        ]);
        t.rebase(mid, &mut out);
        let mut saved = Vec::new();
        assert_eq!(
            t.save_open(&mut saved).unwrap(),
            4,
            "text items have no trend"
        );
        assert!(out.is_empty());

        // The next process: another host first (indices move), b:gone removed,
        // b:retyped unsigned now.
        let new = plan(&[
            ("0-new", &[("x", ValueType::Uint)]),
            ("a", &[("f", ValueType::Float), ("u", ValueType::Uint)]),
            ("b", &[("retyped", ValueType::Uint)]),
        ]);
        let mut t = Trends::new(new.clone());
        assert_eq!(
            t.restore_open(&saved, H, SavedBy::Stop, &mut out),
            Ok(stopped(2, 2))
        );
        // What cannot continue is written at once, as it was.
        let mut written: Vec<(&str, &str, TrendStats)> =
            out.iter().map(|r| (&*r.key, &*r.host, r.stats)).collect();
        written.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(
            written,
            [
                ("gone", "b", float(2.0, 2.0, 2.0, 1)),
                ("retyped", "b", float(2.0, 2.0, 2.0, 1)),
            ]
        );
        out.clear();
        // The rest continues: one row for the hour, as if there had been no restart (the
        // unsigned sum past 64 bits included).
        t.record(
            &sample(&new, "a", "f", t0 + 20, Value::Float(5.0)),
            &mut out,
        );
        t.record(
            &sample(&new, "a", "u", t0 + 20, Value::Uint(u64::MAX - 2)),
            &mut out,
        );
        t.drain(&mut out);
        assert_eq!(stats(&out, "f"), [(t0, float(1.0, 5.0, 3.0, 3))]);
        assert_eq!(
            stats(&out, "u"),
            [(t0, uint(u64::MAX - 2, u64::MAX, u64::MAX - 1, 3))]
        );
        assert_eq!(out.len(), 2);

        // A start in a later hour writes every saved hour, none continues.
        let mut t = Trends::new(new.clone());
        out.clear();
        assert_eq!(
            t.restore_open(&saved, H + 1, SavedBy::Stop, &mut out),
            Ok(stopped(0, 4))
        );
        assert_eq!(stats(&out, "f"), [(t0, float(1.0, 3.0, 2.0, 2))]);
        out.clear();
        t.drain(&mut out);
        assert!(out.is_empty());

        // Bytes that are not a whole save change nothing.
        for bad in [
            &saved[..saved.len() - 1],
            &saved[..8],
            &saved[..3],
            &b"NPTREND9 and more than sixteen bytes"[..],
        ] {
            let mut t = Trends::new(new.clone());
            assert!(t.restore_open(bad, H, SavedBy::Stop, &mut out).is_err());
            t.drain(&mut out);
            assert!(out.is_empty());
        }
        let mut flipped = saved.clone();
        flipped[20] ^= 1;
        assert_eq!(
            Trends::new(new.clone()).restore_open(&flipped, H, SavedBy::Stop, &mut out),
            Err(RestoreError::Damaged)
        );
        // Nothing open saves as nothing.
        let mut empty = Vec::new();
        assert_eq!(Trends::new(new.clone()).save_open(&mut empty).unwrap(), 0);
        assert_eq!(
            Trends::new(new).restore_open(&empty, H, SavedBy::Stop, &mut out),
            Ok(stopped(0, 0))
        );
        assert!(out.is_empty());
    }

    /// What a stop's save that is taken back did.
    fn stopped(continued: u64, written: u64) -> Restored {
        Restored {
            continued,
            written,
            dropped: 0,
        }
    }

    #[test]
    fn a_checkpoint_continues_only_what_was_not_written_and_writes_nothing() {
        // Taken while a reload's removed item was still kept, with an item whose hour
        // ended (y: no value of the new hour yet), then the process died.
        let p = plan(&[(
            "h",
            &[
                ("x", ValueType::Uint),
                ("y", ValueType::Float),
                ("gone", ValueType::Float),
            ],
        )]);
        let without = plan(&[("h", &[("x", ValueType::Uint), ("y", ValueType::Float)])]);
        let mut t = Trends::new(p.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        t.record(&sample(&p, "h", "y", t0 - 10, Value::Float(1.0)), &mut out);
        for v in [1, 2] {
            t.record(&sample(&p, "h", "x", t0 + 5, Value::Uint(v)), &mut out);
        }
        t.record(
            &sample(&p, "h", "gone", t0 + 5, Value::Float(9.0)),
            &mut out,
        );
        t.rebase(without.clone(), &mut out);
        assert!(out.is_empty());
        let mut saved = Vec::new();
        assert_eq!(t.save_open(&mut saved).unwrap(), 3);

        // A start within the hour: x goes on; y's ended hour and gone's hour may have
        // been written after the checkpoint (the sweep, the reload's minute), so they
        // are dropped, never written a second time.
        let mut t = Trends::new(p.clone());
        let done = t.restore_open(&saved, H, SavedBy::Checkpoint, &mut out);
        assert_eq!(
            done,
            Ok(Restored {
                continued: 1,
                written: 0,
                dropped: 2
            })
        );
        assert!(out.is_empty());
        t.record(&sample(&p, "h", "x", t0 + 60, Value::Uint(6)), &mut out);
        t.drain(&mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(stats(&out, "x"), [(t0, uint(1, 6, 3, 3))]);

        // A start in a later hour: the checkpoint's hours have all ended, none is
        // written.
        out.clear();
        let mut t = Trends::new(p);
        let done = t.restore_open(&saved, H + 1, SavedBy::Checkpoint, &mut out);
        assert_eq!(
            done,
            Ok(Restored {
                continued: 0,
                written: 0,
                dropped: 3
            })
        );
        t.drain(&mut out);
        assert!(out.is_empty(), "{out:?}");
        // The same bytes saved by a stop: every hour that does not continue is written.
        let mut t = Trends::new(without);
        assert_eq!(
            t.restore_open(&saved, H, SavedBy::Stop, &mut out),
            Ok(stopped(1, 2))
        );
        assert_eq!(out.len(), 2);
    }

    /// A reload removes x, the next (within the minute the removed hours wait for late
    /// samples) brings it back: its hour goes on, one row, not the hour before the
    /// removal and the hour after it as two.
    #[test]
    fn an_item_removed_and_back_within_the_minute_keeps_one_row_of_its_hour() {
        let both = plan(&[("h", &[("x", ValueType::Uint), ("y", ValueType::Float)])]);
        let only_y = plan(&[("h", &[("y", ValueType::Float)])]);
        let mut t = Trends::new(both.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        t.record(&sample(&both, "h", "x", t0, Value::Uint(1)), &mut out);
        t.rebase(only_y, &mut out);
        // A late sample of an iteration of the first plan, then the item is back.
        t.record(&sample(&both, "h", "x", t0 + 1, Value::Uint(2)), &mut out);
        t.rebase(both.clone(), &mut out);
        t.record(&sample(&both, "h", "x", t0 + 2, Value::Uint(6)), &mut out);
        t.forget_lookup(&mut out);
        t.drain(&mut out);
        assert_eq!(stats(&out, "x"), [(t0, uint(1, 6, 3, 3))]);
        // Back as another type: the hours stay apart (each in its own table).
        let retyped = plan(&[("h", &[("x", ValueType::Float), ("y", ValueType::Float)])]);
        let mut t = Trends::new(both.clone());
        out.clear();
        t.record(&sample(&both, "h", "x", t0, Value::Uint(1)), &mut out);
        t.rebase(plan(&[("h", &[("y", ValueType::Float)])]), &mut out);
        t.rebase(retyped.clone(), &mut out);
        t.record(
            &sample(&retyped, "h", "x", t0 + 2, Value::Float(0.5)),
            &mut out,
        );
        t.forget_lookup(&mut out);
        t.drain(&mut out);
        let mut x = stats(&out, "x");
        x.sort_by_key(|(_, s)| matches!(s, TrendStats::Float(_)));
        assert_eq!(x, [(t0, uint(1, 1, 1, 1)), (t0, float(0.5, 0.5, 0.5, 1))]);
    }

    #[test]
    fn an_item_removed_and_back_before_the_stop_is_one_hour_after_the_start() {
        // A reload removes x (its hour kept for late samples), the next brings it back
        // (its hour goes on): saved once, and taken back.
        let both = plan(&[("h", &[("x", ValueType::Uint), ("y", ValueType::Float)])]);
        let only_y = plan(&[("h", &[("y", ValueType::Float)])]);
        let mut t = Trends::new(both.clone());
        let mut out = Vec::new();
        let t0 = H * 3600;
        t.record(&sample(&both, "h", "x", t0, Value::Uint(1)), &mut out);
        t.rebase(only_y, &mut out);
        t.rebase(both.clone(), &mut out);
        for v in [2, u64::MAX] {
            t.record(&sample(&both, "h", "x", t0 + 1, Value::Uint(v)), &mut out);
        }
        let mut saved = Vec::new();
        assert_eq!(t.save_open(&mut saved).unwrap(), 1);
        let mut t = Trends::new(both.clone());
        assert_eq!(
            t.restore_open(&saved, H, SavedBy::Stop, &mut out),
            Ok(stopped(1, 0))
        );
        t.drain(&mut out);
        // (1 + 2 + 2^64 - 1) / 3, exact past 64 bits.
        let avg = ((1u128 + 2 + u128::from(u64::MAX)) / 3) as u64;
        assert_eq!(stats(&out, "x"), [(t0, uint(1, u64::MAX, avg, 3))]);
        // An hour that would fill a row past its count is written as it was.
        let mut full = Trends::new(both.clone());
        for _ in 0..MAX_COUNT {
            full.record(&sample(&both, "h", "x", t0, Value::Uint(4)), &mut out);
        }
        out.clear();
        assert_eq!(
            full.restore_open(&saved, H, SavedBy::Stop, &mut out),
            Ok(stopped(0, 1))
        );
        assert_eq!(stats(&out, "x"), [(t0, uint(1, u64::MAX, avg, 3))]);
    }

    #[test]
    fn a_name_past_65535_bytes_is_cut_on_a_character_boundary() {
        // 'é' is two bytes, across the 65,535th: cut before it.
        let key = format!("x[{}é]", "a".repeat(65_532));
        let p = plan(&[("h", &[(key.as_str(), ValueType::Uint)])]);
        let mut t = Trends::new(p.clone());
        let mut out = Vec::new();
        t.record(&sample(&p, "h", &key, H * 3600, Value::Uint(1)), &mut out);
        let mut saved = Vec::new();
        t.save_open(&mut saved).unwrap();
        // Taken back (and, the item gone, written with the name cut).
        let other = plan(&[("h", &[("y", ValueType::Uint)])]);
        assert_eq!(
            Trends::new(other).restore_open(&saved, H, SavedBy::Stop, &mut out),
            Ok(stopped(0, 1))
        );
        assert_eq!(out[0].key.len(), 65_534);
        assert!(key.starts_with(&*out[0].key));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Saved hours damaged anywhere, even with a checksum that matches (what a bug
        /// could write), are refused or taken back in part: never a panic.
        #[test]
        fn damaged_saves_never_panic(
            at in 0usize..10_000,
            byte in proptest::prelude::any::<u8>(),
            cut in 0usize..64,
            fix_sum in proptest::prelude::any::<bool>(),
        ) {
            let p = plan(&[("a", &[("f", ValueType::Float), ("u", ValueType::Uint)])]);
            let mut t = Trends::new(p.clone());
            let mut out = Vec::new();
            t.record(&sample(&p, "a", "f", H * 3600, Value::Float(1.5)), &mut out);
            t.record(&sample(&p, "a", "u", H * 3600, Value::Uint(7)), &mut out);
            let mut b = Vec::new();
            t.save_open(&mut b).unwrap();
            let i = at % b.len();
            b[i] ^= byte.max(1);
            b.truncate(b.len() - cut.min(b.len()));
            if fix_sum && b.len() >= 8 {
                let n = b.len() - 8;
                let h = fnv1a(FNV_OFFSET, &b[..n]);
                b[n..].copy_from_slice(&h.to_le_bytes());
            }
            let _ = Trends::new(p).restore_open(&b, H, SavedBy::Stop, &mut out);
        }
    }

    #[test]
    fn the_sweep_runs_a_minute_after_each_hour() {
        let t0 = H * 3600;
        assert_eq!(secs_to_sweep(t0), 60);
        assert_eq!(secs_to_sweep(t0 + 59), 1);
        assert_eq!(secs_to_sweep(t0 + 60), 3600);
        assert_eq!(secs_to_sweep(t0 + 3599), 61);
    }

    /// An NPTREND1 float sum that had already overflowed (two values of 1e308) is taken
    /// back with the middle of min and max for its average, not an infinite one.
    #[test]
    fn an_overflowed_v1_sum_gets_a_finite_average() {
        let p = plan(&[("h", &[("g", ValueType::Float)])]);
        let t = huge_g(&p);
        let mut out = Vec::new();
        let mut v2 = Vec::new();
        t.save_open(&mut v2).unwrap();
        let v1 = as_v1(&v2, f64::INFINITY);
        let mut t = Trends::new(p);
        t.restore_open(&v1, H, SavedBy::Stop, &mut out).unwrap();
        t.drain(&mut out);
        let [(_, TrendStats::Float(f))] = stats(&out, "g")[..] else {
            panic!("{out:?}")
        };
        assert!(f.avg.is_finite(), "{f:?}");
    }
}
