//! The rows of an SNMP table that one item stands for: an `indices` value, or the rows a
//! discovery rule found. A row's index is the arcs of its OIDs under the table's columns,
//! what Zabbix's `{#SNMPINDEX}` holds: `3` for ifIndex 3, `10.0.0.1` for a BGP peer
//! (bgpPeerTable is indexed by the peer's address), `9.1.0.0` for a row of Juniper's
//! jnxOperatingTable (four integers), a string index as its length and its bytes.
//!
//! Invariants of [`Indices`]: rows of one arc are kept as sorted, disjoint, inclusive
//! ranges (a switch's `1-48` is one pair, not 48 numbers: the form a million discovered
//! items are kept in); rows of more arcs as a sorted list without repeats. The two never
//! share a row (their lengths differ). Iteration yields the ranges' rows, then the longer
//! ones, each in order. The text form ([`fmt::Display`], `"1-48,101,9.1.0.0"`) is what
//! [`Indices::parse`] reads back; only rows of one arc form ranges.

use std::fmt;

use super::MAX_INDICES;

/// A set of table rows; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indices {
    ranges: Box<[(u32, u32)]>,
    arcs: Box<[Box<[u32]>]>,
}

/// One row of an [`Indices`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row<'a> {
    One(u32),
    Arcs(&'a [u32]),
}

impl Row<'_> {
    /// The row's arcs, appended to a column's OID to name the row's cell.
    pub fn arcs(&self) -> &[u32] {
        match self {
            Row::One(i) => std::slice::from_ref(i),
            Row::Arcs(a) => a,
        }
    }
}

impl fmt::Display for Row<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Row::One(i) => write!(f, "{i}"),
            Row::Arcs(a) => {
                for (n, arc) in a.iter().enumerate() {
                    if n > 0 {
                        f.write_str(".")?;
                    }
                    write!(f, "{arc}")?;
                }
                Ok(())
            }
        }
    }
}

impl Indices {
    /// Rows as they were found (any order, repeats allowed; none empty).
    pub fn from_rows<R: AsRef<[u32]>>(rows: impl IntoIterator<Item = R>) -> Indices {
        let (mut ones, mut arcs) = (Vec::new(), Vec::new());
        for r in rows {
            match r.as_ref() {
                [] => {}
                [i] => ones.push(*i),
                a => arcs.push(Box::from(a)),
            }
        }
        ones.sort_unstable();
        ones.dedup();
        arcs.sort_unstable();
        arcs.dedup();
        let ranges = ones
            .chunk_by(|a, b| b.checked_sub(*a) == Some(1))
            .map(|run| (run[0], run[run.len() - 1]))
            .collect();
        Indices {
            ranges,
            arcs: arcs.into(),
        }
    }

    /// An `indices` value: `"1-48,101"` (ranges of one-arc rows), `"10.0.0.1,10.0.0.2"`
    /// (rows of more arcs, each listed), or both. Each row once, at most [`MAX_INDICES`].
    pub fn parse(s: &str) -> Result<Indices, String> {
        const EXAMPLE: &str =
            "indices = \"1-48,101\", or \"10.0.0.1,10.0.0.2\" for rows of more than one arc";
        let (mut ranges, mut arcs) = (Vec::new(), Vec::new());
        for part in s.split(',').map(str::trim) {
            let num = |n: &str| {
                let n = n.trim();
                n.parse::<u32>()
                    .ok()
                    .filter(|_| n.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| format!("{part:?}: {n:?} is not an index ({EXAMPLE})"))
            };
            if part.contains('.') {
                if part.contains('-') {
                    return Err(format!(
                        "{part:?}: a range is of rows of one arc (1-48); list each row of more arcs"
                    ));
                }
                let a = part
                    .split('.')
                    .map(num)
                    .collect::<Result<Box<[u32]>, _>>()?;
                if a.len() > snmp::MAX_ARCS {
                    return Err(format!(
                        "{part:?}: more than the {} arcs of an OID",
                        snmp::MAX_ARCS
                    ));
                }
                arcs.push(a);
                continue;
            }
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(part)?, num(part)?),
            };
            if a > b {
                return Err(format!("{part:?}: the range runs backwards"));
            }
            ranges.push((a, b));
        }
        ranges.sort_unstable();
        if let Some(w) = ranges.windows(2).find(|w| w[1].0 <= w[0].1) {
            return Err(twice(Row::One(w[1].0)));
        }
        arcs.sort_unstable();
        if let Some(w) = arcs.windows(2).find(|w| w[0] == w[1]) {
            return Err(twice(Row::Arcs(&w[0])));
        }
        let out = Indices {
            ranges: ranges.into(),
            arcs: arcs.into(),
        };
        let count = out.len();
        if count > MAX_INDICES {
            return Err(format!(
                "{count} indices: more than the {MAX_INDICES} one item may stand for"
            ));
        }
        Ok(out)
    }

    /// How many rows.
    pub fn len(&self) -> u64 {
        let ones: u64 = self.ranges.iter().map(|&(a, b)| u64::from(b - a) + 1).sum();
        ones + self.arcs.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.arcs.is_empty()
    }

    /// The most characters of a row's text (`4294967295`: 10; 0 when empty), what a
    /// key's `{#SNMPINDEX}` becomes at most.
    pub fn max_text_len(&self) -> usize {
        let digits = |n: u32| n.checked_ilog10().map_or(1, |l| l as usize + 1);
        // Sorted: the last range ends with the largest one-arc row.
        let ones = self.ranges.last().map_or(0, |&(_, b)| digits(b));
        self.arcs
            .iter()
            .map(|a| a.iter().map(|&x| digits(x)).sum::<usize>() + a.len() - 1)
            .fold(ones, usize::max)
    }

    /// The most arcs of a row (0 when empty).
    pub fn max_arcs(&self) -> usize {
        let ones = usize::from(!self.ranges.is_empty());
        self.arcs.iter().map(|a| a.len()).fold(ones, usize::max)
    }

    /// The rows; see the module docs for their order.
    pub fn iter(&self) -> impl Iterator<Item = Row<'_>> + '_ {
        let ones = self.ranges.iter().flat_map(|&(a, b)| (a..=b).map(Row::One));
        ones.chain(self.arcs.iter().map(|a| Row::Arcs(a)))
    }

    /// The first `most` rows `keep` takes, in order.
    pub fn filtered(&self, most: usize, mut keep: impl FnMut(Row<'_>) -> bool) -> Indices {
        let rows: Vec<Row<'_>> = self.iter().filter(|&r| keep(r)).take(most).collect();
        Indices::from_rows(rows.iter().map(Row::arcs))
    }
}

fn twice(r: Row<'_>) -> String {
    format!("index {r} is listed twice (each index is one item)")
}

impl fmt::Display for Indices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| match std::mem::take(&mut first) {
            true => Ok(()),
            false => f.write_str(","),
        };
        for &(a, b) in self.ranges.iter() {
            sep(f)?;
            match a == b {
                true => write!(f, "{a}")?,
                false => write!(f, "{a}-{b}")?,
            }
        }
        for a in self.arcs.iter() {
            sep(f)?;
            write!(f, "{}", Row::Arcs(a))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(rows: &[&[u32]]) -> String {
        Indices::from_rows(rows.iter().copied()).to_string()
    }

    #[test]
    fn rows_of_one_arc_form_ranges_and_longer_rows_are_listed_in_oid_order() {
        assert_eq!(text(&[&[3], &[1], &[2], &[7], &[2]]), "1-3,7");
        assert_eq!(
            text(&[&[10, 0, 0, 2], &[9, 1, 0, 0], &[4], &[10, 0, 0, 2], &[5]]),
            "4-5,9.1.0.0,10.0.0.2"
        );
        // OID order: arc by arc, not as text ("10..." after "9...").
        assert_eq!(text(&[&[10, 1], &[9, 1, 1]]), "9.1.1,10.1");
        assert_eq!(text(&[]), "");
        let i = Indices::from_rows([[4u32, 1].as_slice(), &[2], &[3]]);
        let rows: Vec<String> = i.iter().map(|r| r.to_string()).collect();
        assert_eq!(rows, ["2", "3", "4.1"]);
        assert_eq!(i.iter().nth(2).map(|r| r.arcs().to_vec()), Some(vec![4, 1]));
        assert_eq!((i.len(), i.max_arcs(), i.max_text_len()), (3, 2, 3));
        assert_eq!(Indices::default().max_arcs(), 0);
        assert_eq!(Indices::default().max_text_len(), 0);
        let t = Indices::parse("0-9,4294967295,10.0.0.1,1.2").unwrap();
        assert_eq!(t.max_text_len(), 10);
        assert_eq!(
            Indices::parse("0,7.255.255.255").unwrap().max_text_len(),
            13
        );
    }

    #[test]
    fn parse_reads_back_what_display_writes() {
        for s in [
            "1-48,101",
            "7",
            "1.1.0.0,2.1.0.0",
            "1-3,10.0.0.1",
            "0,4294967294-4294967295",
        ] {
            let i = Indices::parse(s).unwrap();
            assert_eq!(i.to_string(), s);
            assert_eq!(Indices::parse(&i.to_string()).unwrap(), i);
        }
        let i = Indices::parse(" 10.0.0.2 , 1-2,10.0.0.1").unwrap();
        assert_eq!(i.to_string(), "1-2,10.0.0.1,10.0.0.2");
        assert_eq!(i.len(), 4);
    }

    #[test]
    fn parse_says_what_is_wrong() {
        let e = |s: &str| Indices::parse(s).unwrap_err();
        assert!(
            e("1-4,3").contains("index 3 is listed twice"),
            "{}",
            e("1-4,3")
        );
        assert!(e("1.2,1.2").contains("index 1.2 is listed twice"));
        assert!(e("5-2").contains("runs backwards"));
        assert!(e("1.1-1.4").contains("list each row of more arcs"));
        assert!(e("1..2").contains("\"\" is not an index"), "{}", e("1..2"));
        assert!(e("x").contains("is not an index"));
        assert!(e("+3").contains("is not an index"));
        assert!(e("").contains("is not an index"));
        assert!(e("0-65536").contains("65537 indices: more than the 65536"));
        let long = vec!["1"; snmp::MAX_ARCS + 1].join(".");
        assert!(e(&long).contains("more than the 128 arcs"));
    }

    #[test]
    fn filtered_keeps_the_first_rows_taken() {
        let i = Indices::parse("1-10,3.1,3.2").unwrap();
        let odd = i.filtered(usize::MAX, |r| r.arcs().last().is_some_and(|a| a % 2 == 1));
        assert_eq!(odd.to_string(), "1,3,5,7,9,3.1");
        assert_eq!(i.filtered(3, |_| true).to_string(), "1-3");
        assert!(i.filtered(5, |_| false).is_empty());
    }
}
