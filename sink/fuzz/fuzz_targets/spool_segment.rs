//! Spool segments are read back from disk after crashes and disk faults: the record
//! scanner and the RowBinary decoder must never panic, and every record the scanner
//! accepts must re-encode to exactly the bytes it was read from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sink::{record, rowbinary, Batch, Table};

fuzz_target!(|data: &[u8]| {
    let (found, damage) = record::scan(data);
    let mut covered = 0u64;
    for f in &found {
        let payload = &data[f.payload.clone()];
        let batch = Batch {
            table: f.table,
            rows: f.rows,
            first_clock: f.first_clock,
            data: payload.to_vec().into(),
        };
        let again = record::encode(&batch);
        let start = f.offset as usize;
        assert_eq!(&data[start..start + again.len()], &again[..]);
        covered += again.len() as u64;
        let _ = rowbinary::decode_rows(f.table, payload);
    }
    covered += damage.iter().map(|d| d.len).sum::<u64>();
    assert_eq!(
        covered,
        data.len() as u64,
        "every byte is a record or damage"
    );
    for t in Table::ALL {
        let _ = rowbinary::decode_rows(t, data);
    }
});
