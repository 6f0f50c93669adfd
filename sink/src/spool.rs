//! Disk spool: append-only segment files of checksummed records (see [`crate::record`]).
//!
//! Invariants:
//! * Records are only ever appended, to the one active segment; a segment is sealed
//!   (fsynced, never written again) when it reaches its target size or when replay
//!   wants it. After a restart every existing segment counts as sealed.
//! * Appends are fsynced at most `fsync_interval` after they were written (crash
//!   window of a power loss; a `kill -9` loses nothing already written, since the page
//!   cache survives the process).
//! * A segment is deleted only by [`Spool::finish`] (every record confirmed by
//!   ClickHouse, rejected to the reject file, or skipped as corrupted) or by the size
//!   cap, which deletes the oldest segment not being replayed and counts its rows as
//!   dropped (`reason="spool_cap"`).
//! * A segment leaves the reject spool only by its cap or by [`Spool::hand_over`], which
//!   renames it (with its `.ack`) into the data spool as that spool's newest segment,
//!   never over the data spool's cap.
//! * Confirmed records of a segment under replay are noted in `<seq>.ack` (the record
//!   offsets, appended), so a crash during replay re-sends only the batches whose
//!   confirmation was not yet noted: at most the batches in flight at the crash.
//! * One process at a time: the spool holds an exclusive lock on `spool.lock`.

use crate::batch::Batch;
use crate::config::SpoolConfig;
use crate::metrics::{DropReason, SinkMetrics};
use crate::record;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Spool errors (I/O with the path concerned).
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Filesystem error. The cause is part of the message, not a `source()`: printed
    /// with its chain (`{:#}`) it would appear twice.
    #[error("spool {path}: {what}: {cause}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// Operation.
        what: &'static str,
        /// Cause.
        cause: io::Error,
    },
    /// Another process holds the spool: its pid, when it wrote it in `spool.lock`.
    #[error(
        "spool {} is in use by another process ({whose}lock held on spool.lock): each \
         netpoller needs a spool_dir of its own (shards on one machine too)",
        .0.display(),
        whose = .1.map(|pid| format!("pid {pid}: ")).unwrap_or_default()
    )]
    Locked(PathBuf, Option<u32>),
}

impl SpoolError {
    /// Whether a segment could not be read (not a write to the spool failing).
    pub fn is_unreadable(&self) -> bool {
        matches!(self, SpoolError::Io { what, .. } if *what == READING)
    }

    /// Whether the file is gone (a segment deleted after it was listed: replayed, or
    /// dropped by the size cap, by the process that owns the spool).
    pub fn is_gone(&self) -> bool {
        matches!(self, SpoolError::Io { cause, .. } if cause.kind() == io::ErrorKind::NotFound)
    }
}

pub(crate) const READING: &str = "reading segment";

/// fsyncs `file`, at `path`: a directory's entries (`dir`), or a segment's data. The
/// one place the spool fsyncs, so that its tests see each fsync asked for (what
/// reached the disk no test sees short of cutting its power).
fn fsync(file: &File, path: &Path, dir: bool) -> io::Result<()> {
    #[cfg(test)]
    {
        FSYNCS.with(|f| f.borrow_mut().push(path.to_path_buf()));
        if FSYNC_FAILS.with(|f| f.borrow().as_deref() == Some(path)) {
            return Err(io::Error::other("test: this fsync fails"));
        }
    }
    #[cfg(not(test))]
    let _ = path;
    if dir {
        file.sync_all()
    } else {
        file.sync_data()
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: the paths this thread's spools fsynced, in order ([`fsync`]).
    static FSYNCS: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Tests: the path whose fsyncs fail on this thread (a failing disk).
    static FSYNC_FAILS: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// Opens `dir`'s `spool.lock` (creating it) and locks it: one process per spool
/// directory (the lock ends with the file's last descriptor). The holder writes its pid
/// in it, so that a process refused can say whose it is (`spool replay` beside a daemon
/// names the pid to signal); the pid is only ever read for that, never trusted for the
/// lock itself.
fn lock_dir(dir: &Path) -> Result<File, SpoolError> {
    let lock_path = dir.join("spool.lock");
    let mut lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(ioe(&lock_path, "opening lock file"))?;
    match lock.try_lock() {
        Ok(()) => {
            // Not fatal: the lock is what keeps others out, the pid only informs.
            let pid = format!("{}\n", std::process::id());
            let _ = lock
                .set_len(0)
                .and_then(|()| lock.write_all(pid.as_bytes()));
            Ok(lock)
        }
        Err(fs::TryLockError::WouldBlock) => {
            let pid = fs::read_to_string(&lock_path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            Err(SpoolError::Locked(dir.to_path_buf(), pid))
        }
        Err(fs::TryLockError::Error(e)) => Err(ioe(&lock_path, "locking")(e)),
    }
}

/// fsyncs directory `dir`'s entries (a segment made or moved there).
fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| fsync(&d, dir, true))
}

fn ioe(path: &Path, what: &'static str) -> impl FnOnce(io::Error) -> SpoolError {
    let path = path.to_path_buf();
    move |cause| SpoolError::Io { path, what, cause }
}

/// One segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Sequence number (file `<seq>.seg`; higher = newer).
    pub seq: u64,
    /// Path of the `.seg` file.
    pub path: PathBuf,
    /// Size in bytes.
    pub bytes: u64,
    /// Rows in it, when known without reading it (written by this process).
    pub rows: Option<u64>,
}

impl Segment {
    /// Path of the acknowledgement file beside the segment.
    pub fn ack_path(&self) -> PathBuf {
        self.path.with_extension("ack")
    }
}

/// What [`Spool::hand_over`] moved.
#[derive(Debug, Default)]
pub struct HandOver {
    /// Segments moved.
    pub segments: u64,
    /// Their rows not yet confirmed.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Segments left behind: the cap of the spool they were to go to, or `error`.
    pub left: u64,
    /// The rename that failed, if one did.
    pub error: Option<SpoolError>,
}

struct Active {
    seg: Segment,
    file: File,
}

/// The spool of one directory. Synchronous (std::fs); the async sink calls it from
/// `spawn_blocking`.
pub struct Spool {
    cfg: SpoolConfig,
    /// The exclusive lock on `spool.lock`, held (never read) while the spool is open.
    lock: File,
    sealed: VecDeque<Segment>,
    active: Option<Active>,
    next_seq: u64,
    segment_target: u64,
    replaying: Option<u64>,
    last_sync: Instant,
    dirty: bool,
    metrics: Arc<SinkMetrics>,
    kind: Kind,
    /// Records of each segment (by number) that ClickHouse confirmed (or refused for
    /// good) but whose `.ack` entry could not be written (a full disk): replay skips
    /// them as it does acknowledged ones, so a retry does not insert them again and
    /// the segment still drains (freeing the disk), and the cap does not count them as
    /// dropped. Kept until the segment leaves the spool (replayed, set aside or dropped
    /// by the cap): a segment held back is left for others and replayed again later.
    /// Lost at a stop: a restart may send these records once more.
    acked_in_memory: HashMap<u64, HashSet<u64>>,
    /// Segments whose damaged records were counted lost (and logged): a segment
    /// scanned again (a later pass over one ClickHouse held back) does not count them
    /// once more.
    damage_counted: HashSet<u64>,
}

/// Which spool: their metrics differ (rejected batches were counted as rejected, not
/// spooled, and are replayed only once [`Spool::hand_over`] moved them into the data
/// spool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Data,
    Rejects,
}

/// Segment numbers from here on are not taken for ours (2^63: a segment a nanosecond
/// for 292 years).
const MAX_SEQ: u64 = 1 << 63;

/// Suffix given to a segment that could not be read ([`Spool::set_aside`]).
pub const UNREADABLE: &str = "unreadable";

/// Segment files of `dir`, oldest first (for read-only tools such as `spool dump`).
pub fn list_segments(dir: &Path) -> Result<Vec<Segment>, SpoolError> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(ioe(dir, "reading directory")(e)),
    };
    for entry in rd {
        let entry = entry.map_err(ioe(dir, "reading directory"))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("seg") {
            continue;
        }
        // Not ours: a directory or a device named like a segment, or a number no spool
        // reaches (the next one would overflow).
        let Some(seq) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&seq| seq < MAX_SEQ)
        else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let bytes = entry.metadata().map_err(ioe(&path, "stat"))?.len();
        out.push(Segment {
            seq,
            path,
            bytes,
            rows: None,
        });
    }
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

/// The number of a segment set aside (`<seq>.seg.unreadable*`) named `name`.
fn set_aside_seq(name: &str) -> Option<u64> {
    let (seq, rest) = name.split_once('.')?;
    rest.starts_with(&format!("seg.{UNREADABLE}"))
        .then(|| seq.parse::<u64>().ok())
        .flatten()
        .filter(|&seq| seq < MAX_SEQ)
}

/// `Ok` when `dir` is a directory: for the commands that read a spool, a directory
/// that is not there is a mistake, not an empty spool.
pub fn existing_dir(dir: &Path) -> Result<(), SpoolError> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ioe(dir, "opening spool")(io::Error::from(
            io::ErrorKind::NotADirectory,
        ))),
        Err(e) => Err(ioe(dir, "opening spool")(e)),
    }
}

/// Reads a whole segment.
/// `Err` of a segment that cannot be read is [`SpoolError::is_unreadable`].
pub fn read_segment(seg: &Segment) -> Result<Vec<u8>, SpoolError> {
    fs::read(&seg.path).map_err(ioe(&seg.path, READING))
}

/// Offsets of the records of `seg` already confirmed (from its `.ack` file).
pub fn load_acks(seg: &Segment) -> HashSet<u64> {
    let Ok(b) = fs::read(seg.ack_path()) else {
        return HashSet::new();
    };
    // A torn last entry (crash mid-write) is ignored: that record is re-sent.
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0xff; 8])))
        .collect()
}

/// Notes that the record at `offset` of `seg` is confirmed (appends to its `.ack`
/// file; no lock needed: only the replaying task writes it).
pub fn ack(seg: &Segment, offset: u64) -> Result<(), SpoolError> {
    let p = seg.ack_path();
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .map_err(ioe(&p, "opening ack file"))?;
    // After a torn last entry (a crash mid-write, which `load_acks` ignores), entries
    // appended behind it would all be misread: cut it first.
    let len = f.metadata().map_err(ioe(&p, "reading ack file"))?.len();
    if len % 8 != 0 {
        f.set_len(len - len % 8)
            .map_err(ioe(&p, "cutting a torn ack entry"))?;
    }
    f.write_all(&offset.to_le_bytes())
        .map_err(ioe(&p, "writing ack file"))
}

/// Scans a segment and logs + counts its damaged regions. Returns the intact records
/// and the segment bytes.
pub fn scan_logged(seg: &Segment, bytes: &[u8], metrics: &SinkMetrics) -> Vec<record::Found> {
    let (found, damage) = record::scan(bytes);
    for d in &damage {
        tracing::warn!(
            segment = %seg.path.display(),
            offset = d.offset,
            bytes = d.len,
            kind = ?d.kind,
            rows_claimed = ?d.rows_claimed,
            "spool: skipping corrupted record(s); the rest of the segment is replayed"
        );
        metrics.corrupt_record();
        // The damaged header's claim is unverified: at most as many rows as its bytes
        // could hold (a RowBinary row takes more than 16), not a garbage 2^32.
        let most = d.len / 16 + 1;
        metrics.dropped(
            DropReason::Corrupt,
            d.rows_claimed.map_or(0, |r| u64::from(r).min(most)),
        );
    }
    found
}

impl Spool {
    /// Opens (creating if needed) the spool directory and locks it. Existing segments
    /// are kept for replay.
    pub fn open(cfg: &SpoolConfig, metrics: Arc<SinkMetrics>) -> Result<Spool, SpoolError> {
        Spool::open_kind(cfg, metrics, Kind::Data)
    }

    /// Opens the reject spool (`rejected/`): batches ClickHouse refused as bad data,
    /// kept for inspection; its size and cap drops have metrics of their own.
    pub fn open_rejects(cfg: &SpoolConfig, metrics: Arc<SinkMetrics>) -> Result<Spool, SpoolError> {
        Spool::open_kind(cfg, metrics, Kind::Rejects)
    }

    fn open_kind(
        cfg: &SpoolConfig,
        metrics: Arc<SinkMetrics>,
        kind: Kind,
    ) -> Result<Spool, SpoolError> {
        fs::create_dir_all(&cfg.dir).map_err(|e| {
            // Of a file where the directory should be, the OS says "File exists": read
            // as the directory being there, it sent the operator looking elsewhere.
            let e = match fs::metadata(&cfg.dir) {
                Ok(m) if !m.is_dir() => io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "a file is there, not a directory",
                ),
                _ => e,
            };
            ioe(&cfg.dir, "creating directory")(e)
        })?;
        let lock = lock_dir(&cfg.dir)?;
        let sealed: VecDeque<Segment> = list_segments(&cfg.dir)?.into();
        // Numbered past the segments set aside too: a new segment of the same number,
        // set aside in its turn, would replace the one kept for the operator.
        let mut last_seq = sealed.back().map_or(0, |s| s.seq);
        if let Ok(rd) = fs::read_dir(&cfg.dir) {
            for e in rd.flatten() {
                let p = e.path();
                // Acknowledgement files whose segment is gone (deleted before its .ack).
                if p.extension().and_then(|x| x.to_str()) == Some("ack")
                    && !p.with_extension("seg").exists()
                {
                    let _ = fs::remove_file(&p);
                }
                if let Some(seq) = e.file_name().to_str().and_then(set_aside_seq) {
                    last_seq = last_seq.max(seq);
                }
            }
        }
        let next_seq = last_seq + 1;
        let segment_target = (cfg.max_bytes / 8).clamp(64 << 10, 64 << 20);
        let s = Spool {
            cfg: cfg.clone(),
            lock,
            sealed,
            active: None,
            next_seq,
            segment_target,
            replaying: None,
            last_sync: Instant::now(),
            dirty: false,
            metrics,
            kind,
            acked_in_memory: HashMap::new(),
            damage_counted: HashSet::new(),
        };
        s.publish();
        match kind {
            _ if s.sealed.is_empty() => {}
            Kind::Data => {
                tracing::info!(dir = %cfg.dir.display(), segments = s.sealed.len(), bytes = s.total_bytes(), "spool: found spooled data from an earlier run");
            }
            Kind::Rejects => {
                tracing::info!(dir = %cfg.dir.display(), segments = s.sealed.len(), bytes = s.total_bytes(), "spool: the reject spool holds batches ClickHouse refused before (`netpoller spool dump --rejected` shows them); once their cause is fixed, SIGUSR1 sends them again");
            }
        }
        Ok(s)
    }

    /// Directory.
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    /// Bytes in all segments.
    pub fn total_bytes(&self) -> u64 {
        self.sealed.iter().map(|s| s.bytes).sum::<u64>()
            + self.active.as_ref().map_or(0, |a| a.seg.bytes)
    }

    /// Whether no data is spooled.
    pub fn is_empty(&self) -> bool {
        self.sealed.is_empty() && self.active.as_ref().is_none_or(|a| a.seg.bytes == 0)
    }

    fn publish(&self) {
        let files = self.sealed.len() + usize::from(self.active.is_some());
        match self.kind {
            Kind::Data => self.metrics.set_spool(self.total_bytes(), files as u64),
            Kind::Rejects => self.metrics.set_reject_spool(self.total_bytes()),
        }
    }

    /// Appends `batch` as one record (one `write`). Rotates and enforces the size cap.
    pub fn append(&mut self, batch: &Batch) -> Result<(), SpoolError> {
        let rec = record::encode(batch);
        self.drop_deleted_active();
        if self.active.is_none() {
            self.new_active()?;
        }
        let a = self.active.as_mut().expect("active segment exists");
        if let Err(e) = a.file.write_all(&rec) {
            // Cut what part of the record was written (a full disk takes some bytes
            // and refuses the rest): the rows are counted lost once, by the caller, not
            // a second time as a "corrupted" record at the next replay. Should the cut
            // fail too, the scanner skips the torn tail. Either way no more appends to
            // this segment: a fresh one next time.
            let _ = a.file.set_len(a.seg.bytes);
            let path = a.seg.path.clone();
            self.seal_active();
            return Err(ioe(&path, "appending record")(e));
        }
        a.seg.bytes += rec.len() as u64;
        a.seg.rows = Some(a.seg.rows.unwrap_or(0) + u64::from(batch.rows));
        self.dirty = true;
        if self.kind == Kind::Data {
            self.metrics
                .spooled(u64::from(batch.rows), rec.len() as u64);
        }
        if a.seg.bytes >= self.segment_target {
            self.seal_active();
        }
        self.enforce_cap();
        self.sync_if_due();
        self.publish();
        Ok(())
    }

    /// Drops the active segment if it was deleted under the daemon (its directory
    /// removed: a clean-up of a temporary directory, a mistaken `rm -r`). Written on,
    /// it took every row of the outage while counting them spooled, and the replay
    /// found nothing: its rows are counted lost (`corrupt`) and logged, and the next
    /// segment goes to the directory made again ([`Spool::new_active`]).
    fn drop_deleted_active(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let deleted = |a: &mut Active| a.file.metadata().is_ok_and(|m| m.nlink() == 0);
        if let Some(a) = self.active.take_if(deleted) {
            let rows = a.seg.rows.unwrap_or(0);
            tracing::error!(segment = %a.seg.path.display(), rows, "spool: the segment being written was deleted (its directory removed?): its rows are lost; new ones go to a new segment");
            self.metrics.dropped(DropReason::Corrupt, rows);
            self.dirty = false;
            self.publish();
        }
    }

    /// The next segment number, used up, and its file's path: where a new segment is
    /// written or a moved one goes ([`Spool::hand_over`]).
    fn take_number(&mut self) -> (u64, PathBuf) {
        let seq = self.next_seq;
        self.next_seq += 1;
        (seq, self.cfg.dir.join(format!("{seq:020}.seg")))
    }

    fn new_active(&mut self) -> Result<(), SpoolError> {
        let (seq, path) = self.take_number();
        let create = || OpenOptions::new().create_new(true).append(true).open(&path);
        let file = match create() {
            // The directory was removed under the daemon: made again, as at the start,
            // and locked again (the lock held is on the removed `spool.lock`: another
            // netpoller could take the directory made again beside this one).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&self.cfg.dir)
                    .map_err(ioe(&self.cfg.dir, "creating directory"))?;
                self.lock = lock_dir(&self.cfg.dir)?;
                create().map_err(ioe(&path, "creating segment"))?
            }
            r => r.map_err(ioe(&path, "creating segment"))?,
        };
        // Make the new directory entry durable too: without it a power loss may take
        // the segment, its fsynced data with it. A failure is said and counted as the
        // data's are (it went unnoticed); the segment is used all the same (its data
        // is as safe as the disk allows, and the next segment's fsync may still save
        // its entry).
        let dir = &self.cfg.dir;
        if let Err(e) = fsync_dir(dir) {
            tracing::error!(dir = %dir.display(), segment = %path.display(), error = %e, "spool: fsync of the spool directory failed: the new segment may not survive a power loss");
            self.metrics.fsync_error();
        }
        self.active = Some(Active {
            seg: Segment {
                seq,
                path,
                bytes: 0,
                rows: Some(0),
            },
            file,
        });
        Ok(())
    }

    fn seal_active(&mut self) {
        if let Some(a) = self.active.take() {
            if let Err(e) = fsync(&a.file, &a.seg.path, false) {
                self.fsync_failed(&a.seg, &e);
            }
            if a.seg.bytes > 0 {
                self.sealed.push_back(a.seg);
            } else {
                let _ = fs::remove_file(&a.seg.path);
            }
            self.dirty = false;
            self.last_sync = Instant::now();
        }
    }

    /// fsyncs the active segment if it has unsynced data older than `fsync_interval`.
    /// Call periodically (the sink does, every `fsync_interval`).
    pub fn sync_if_due(&mut self) {
        if self.sync_due() {
            self.sync();
        }
    }

    /// Whether [`Self::sync_if_due`] would fsync now: unsynced data older than
    /// `fsync_interval`.
    pub fn sync_due(&self) -> bool {
        self.dirty && self.last_sync.elapsed() >= self.cfg.fsync_interval
    }

    /// When [`Self::sync_if_due`] has unsynced data to fsync: `fsync_interval` after the
    /// last fsync, if anything was appended since.
    pub fn sync_deadline(&self) -> Option<Instant> {
        self.dirty.then(|| self.last_sync + self.cfg.fsync_interval)
    }

    /// The sealed segments' numbers, oldest first.
    pub(crate) fn sealed_seqs(&self) -> Vec<u64> {
        self.sealed.iter().map(|s| s.seq).collect()
    }

    /// Whether appends wait for their fsync.
    #[cfg(test)]
    pub(crate) fn unsynced(&self) -> bool {
        self.dirty
    }

    /// fsyncs the active segment now. When that fails the segment is sealed: Linux may
    /// have dropped the pages it could not write and forgotten the error, so a later
    /// fsync of the same file could report a success it did not have.
    pub fn sync(&mut self) {
        let failed = match &self.active {
            Some(a) => fsync(&a.file, &a.seg.path, false)
                .err()
                .map(|e| (a.seg.clone(), e)),
            None => None,
        };
        if let Some((seg, e)) = failed {
            self.fsync_failed(&seg, &e);
            if let Some(a) = self.active.take() {
                self.sealed.push_back(a.seg);
            }
        }
        self.dirty = false;
        self.last_sync = Instant::now();
    }

    /// Says (log, `netpoller_sink_spool_fsync_errors_total`) that `seg`'s fsync failed.
    fn fsync_failed(&self, seg: &Segment, e: &io::Error) {
        tracing::error!(segment = %seg.path.display(), error = %e, "spool: fsync failed: what was spooled since the last good one may not survive a power loss (the process still has it); new data goes to a new segment");
        self.metrics.fsync_error();
    }

    /// Remembers that the record at `offset` of segment `seq` is done with, when its
    /// `.ack` entry could not be written. True for the first of the segment (to say it
    /// once).
    pub fn remember_ack(&mut self, seq: u64, offset: u64) -> bool {
        let acks = self.acked_in_memory.entry(seq).or_default();
        acks.insert(offset) && acks.len() == 1
    }

    /// Offsets of the records of `seg` done with: those of its `.ack` file and those
    /// remembered by [`Spool::remember_ack`].
    pub fn confirmed(&self, seg: &Segment) -> HashSet<u64> {
        let mut acks = load_acks(seg);
        if let Some(in_memory) = self.acked_in_memory.get(&seg.seq) {
            acks.extend(in_memory);
        }
        acks
    }

    /// What is kept in memory of segment `seq`, which left the spool (replayed, set
    /// aside or dropped by the cap).
    fn forget(&mut self, seq: u64) {
        self.acked_in_memory.remove(&seq);
        self.damage_counted.remove(&seq);
    }

    /// Whether segment `seq`'s damaged records are still to be counted and logged
    /// ([`scan_logged`]): true the first time it is asked only. A segment is scanned at
    /// each pass of a replay; its damage is lost once.
    pub(crate) fn first_scan(&mut self, seq: u64) -> bool {
        self.damage_counted.insert(seq)
    }

    fn enforce_cap(&mut self) {
        while self.total_bytes() > self.cfg.max_bytes {
            let Some(i) = self
                .sealed
                .iter()
                .position(|s| Some(s.seq) != self.replaying)
            else {
                return;
            };
            let Some(seg) = self.sealed.remove(i) else {
                return;
            };
            let rows = self.unconfirmed_rows(&seg);
            self.forget(seg.seq);
            let _ = fs::remove_file(&seg.path);
            let _ = fs::remove_file(seg.ack_path());
            tracing::warn!(
                segment = %seg.path.display(),
                bytes = seg.bytes,
                rows,
                max_bytes = self.cfg.max_bytes,
                "spool: over spool_max_bytes, dropped the oldest segment"
            );
            let reason = match self.kind {
                Kind::Data => DropReason::SpoolCap,
                Kind::Rejects => DropReason::RejectSpoolCap,
            };
            self.metrics.dropped(reason, rows);
        }
    }

    /// Rows of `seg` not yet confirmed: known when this process wrote it and nothing of
    /// it was confirmed, else counted in its intact records (0 when it cannot be read).
    fn unconfirmed_rows(&self, seg: &Segment) -> u64 {
        let acks = self.confirmed(seg);
        match seg.rows {
            Some(rows) if acks.is_empty() => rows,
            // Written by an earlier run or partly replayed.
            _ => fs::read(&seg.path)
                .map(|b| {
                    record::scan(&b)
                        .0
                        .iter()
                        .filter(|r| !acks.contains(&r.offset))
                        .map(|r| u64::from(r.rows))
                        .sum()
                })
                .unwrap_or(0),
        }
    }

    /// Rows not yet confirmed of each segment (the active one sealed first), by number:
    /// read here, before [`Spool::hand_over`], so that it holds the data spool's lock
    /// only for renames, not for reading up to `spool_max_bytes` of segments an earlier
    /// run left (whose rows this process does not know).
    pub fn unconfirmed_row_counts(&mut self) -> HashMap<u64, u64> {
        self.seal_active();
        self.publish();
        let sealed = self.sealed.iter();
        sealed
            .map(|seg| (seg.seq, self.unconfirmed_rows(seg)))
            .collect()
    }

    /// Moves this spool's segments (the reject spool's, once what ClickHouse refused is
    /// fixed) into `to` (the data spool, whose subdirectory `rejected/` is: one
    /// filesystem, so a rename), oldest first, each as `to`'s newest segment with its
    /// `.ack` file: the replay loads them as any spooled data, and a record refused
    /// again comes back here in a new segment, never one of those moved. Both active
    /// segments are sealed first, so that `to`'s segments stay in order of number.
    ///
    /// Stops before a segment that would take `to` over its cap (it stays here, for a
    /// later retry: moved, the cap would drop the oldest data for it) and at a rename
    /// that fails (the error is returned with what was moved before it). A crash
    /// between a segment's rename and its `.ack`'s may send that segment's confirmed
    /// records again (an `.ack` exists only where a replay of this spool was cut short).
    /// `rows`: the segments' rows, where [`Spool::unconfirmed_row_counts`] counted them.
    pub fn hand_over(&mut self, to: &mut Spool, rows: &HashMap<u64, u64>) -> HandOver {
        self.seal_active();
        to.seal_active();
        let mut out = HandOver::default();
        while let Some(seg) = self.sealed.front().cloned() {
            if to.total_bytes() + seg.bytes > to.cfg.max_bytes {
                break;
            }
            let seg_rows = match rows.get(&seg.seq) {
                Some(&n) => n,
                None => self.unconfirmed_rows(&seg),
            };
            // The number is used up even if the rename fails: what stood in its way
            // does not stand in the next try's.
            let (seq, path) = to.take_number();
            if let Err(e) = fs::rename(&seg.path, &path) {
                out.error = Some(ioe(&seg.path, "moving segment")(e));
                break;
            }
            let acks = seg.ack_path();
            let with_acks = match fs::rename(&acks, path.with_extension("ack")) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => {
                    tracing::warn!(segment = %seg.path.display(), error = %e, "spool: cannot move a segment's confirmations with it: its confirmed records will be sent again");
                    false
                }
            };
            self.sealed.pop_front();
            self.forget(seg.seq);
            to.sealed.push_back(Segment {
                seq,
                path,
                bytes: seg.bytes,
                // Counted again from its records when the cap drops it.
                rows: seg.rows.filter(|_| !with_acks),
            });
            out.segments += 1;
            out.rows += seg_rows;
            out.bytes += seg.bytes;
        }
        out.left = self.sealed.len() as u64;
        if out.segments > 0 {
            // The renames' directory entries, durable on both sides.
            for dir in [&self.cfg.dir, &to.cfg.dir] {
                if let Err(e) = fsync_dir(dir) {
                    tracing::error!(dir = %dir.display(), error = %e, "spool: fsync of the spool directory failed: the segments moved may not survive a power loss where they are");
                    self.metrics.fsync_error();
                }
            }
        }
        self.publish();
        to.publish();
        out
    }

    /// The oldest segment, reserved for replay (sealing the active one if it is the
    /// only data). `None` when the spool is empty or a segment is already reserved.
    pub fn checkout_oldest(&mut self) -> Option<Segment> {
        self.checkout_oldest_but(&HashSet::new())
    }

    /// The oldest segment whose number is not in `skip`, reserved for replay; the
    /// active segment is sealed for it when every sealed one is skipped. `None` when
    /// there is no such segment or a segment is already reserved.
    pub fn checkout_oldest_but(&mut self, skip: &HashSet<u64>) -> Option<Segment> {
        if self.replaying.is_some() {
            return None;
        }
        let open = |s: &&Segment| !skip.contains(&s.seq);
        if !self.sealed.iter().any(|s| open(&s))
            && self.active.as_ref().is_some_and(|a| a.seg.bytes > 0)
        {
            self.seal_active();
        }
        let seg = self.sealed.iter().find(open)?.clone();
        self.replaying = Some(seg.seq);
        Some(seg)
    }

    /// Gives a reserved segment back without deleting it (replay interrupted).
    pub fn release(&mut self, seq: u64) {
        if self.replaying == Some(seq) {
            self.replaying = None;
        }
    }

    /// Takes a reserved segment that cannot be read out of the spool, so that the
    /// segments after it are replayed: renamed `<seq>.seg.unreadable` (its `.ack` file
    /// removed), kept for the operator outside the spool's size, never over another
    /// one (`<seq>.seg.unreadable.2`, ...). Its rows, when this process wrote it (else
    /// 0), count as dropped (`reason="corrupt"`), as do those of a segment that is gone
    /// (deleted under the daemon). If even the rename fails it is left out of this
    /// run's replay only: it stays a segment, with its `.ack`, for the next start to try
    /// again, and nothing counts as dropped. Returns where it is.
    pub fn set_aside(&mut self, seq: u64) -> Option<PathBuf> {
        let i = self.sealed.iter().position(|s| s.seq == seq)?;
        let seg = self.sealed.remove(i)?;
        self.release(seq);
        self.forget(seq);
        let first = seg.path.with_extension(format!("seg.{UNREADABLE}"));
        let to = std::iter::once(first.clone())
            .chain((2..1000).map(|k| first.with_extension(format!("{UNREADABLE}.{k}"))))
            .find(|p| !p.exists())
            .unwrap_or(first);
        // Where it is, and whether its rows are lost (set aside, or gone).
        let (at, lost) = match fs::rename(&seg.path, &to) {
            Ok(()) => (to, true),
            // Deleted under the daemon (its directory removed): its rows are gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound && !seg.path.exists() => {
                tracing::error!(segment = %seg.path.display(), rows = seg.rows, "spool: the unreadable segment is gone (deleted under the daemon?): its rows are lost");
                (seg.path.clone(), true)
            }
            Err(e) => {
                tracing::warn!(segment = %seg.path.display(), error = %e, "spool: cannot rename the unreadable segment; it is left out of this run's replay only (the next start tries it again)");
                (seg.path.clone(), false)
            }
        };
        if lost {
            let _ = fs::remove_file(seg.ack_path());
            self.metrics
                .dropped(DropReason::Corrupt, seg.rows.unwrap_or(0));
        }
        self.publish();
        Some(at)
    }

    /// Deletes a fully replayed segment and its ack file. A segment that cannot be
    /// deleted keeps its ack file: the next start finds every record confirmed instead
    /// of sending them all again.
    pub fn finish(&mut self, seq: u64) {
        if let Some(i) = self.sealed.iter().position(|s| s.seq == seq) {
            if let Some(seg) = self.sealed.remove(i) {
                match fs::remove_file(&seg.path) {
                    Ok(()) => {
                        let _ = fs::remove_file(seg.ack_path());
                    }
                    Err(e) => {
                        tracing::warn!(segment = %seg.path.display(), error = %e, "spool: cannot delete replayed segment; its confirmations are kept");
                    }
                }
            }
        }
        self.forget(seq);
        self.release(seq);
        self.publish();
    }

    /// Seals the active segment (fsync) — used at shutdown.
    pub fn close(&mut self) {
        self.seal_active();
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Table;
    use bytes::Bytes;
    use std::time::Duration;

    fn batch(i: u32, size: usize) -> Batch {
        Batch {
            table: Table::Dbl,
            rows: i,
            first_clock: i,
            data: Bytes::from(vec![i as u8; size]),
        }
    }

    fn cfg(dir: &Path, max: u64) -> SpoolConfig {
        SpoolConfig {
            dir: dir.to_path_buf(),
            max_bytes: max,
            fsync_interval: Duration::from_millis(10),
        }
    }

    #[test]
    fn an_fsync_is_due_only_for_unsynced_data_older_than_the_interval() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let c = SpoolConfig {
            fsync_interval: Duration::from_millis(200),
            ..cfg(tmp.path(), 1 << 30)
        };
        let mut s = Spool::open(&c, m).unwrap();
        std::thread::sleep(Duration::from_millis(250));
        assert!(!s.sync_due(), "nothing written: nothing to fsync");
        assert_eq!(s.sync_deadline(), None);
        s.append(&batch(1, 100)).unwrap(); // fsynced at once: the last fsync is old
        assert!(!s.sync_due(), "fsynced by the append");
        assert_eq!(s.sync_deadline(), None);
        let synced = Instant::now();
        s.append(&batch(2, 100)).unwrap();
        // The sink's timer re-arms at this deadline: what is appended after an
        // append's own fsync is due an interval after that fsync, not after the timer.
        let due = s.sync_deadline().unwrap();
        assert!(due <= synced + c.fsync_interval, "{due:?} {synced:?}");
        assert!(due + Duration::from_millis(50) > synced + c.fsync_interval);
        assert!(!s.sync_due(), "unsynced, but younger than the interval");
        std::thread::sleep(Duration::from_millis(250));
        assert!(s.sync_due(), "unsynced and older than the interval");
        s.sync_if_due();
        assert!(!s.sync_due());
    }

    #[test]
    fn appends_are_fsynced_and_each_new_segment_with_its_directory_entry() {
        // What a power loss keeps: an append's data once fsynced (here at once: an
        // interval of 0), a segment's data when it is sealed (full, or at the stop),
        // and the entry of each new segment in the directory (without it a segment
        // whose data was fsynced may be gone after a power loss, with all its rows).
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let m = Arc::new(SinkMetrics::default());
        let c = SpoolConfig {
            fsync_interval: Duration::ZERO,
            ..cfg(&dir, 512 << 10) // segments of 64 KiB
        };
        let mut s = Spool::open(&c, m).unwrap();
        let fsyncs = || FSYNCS.with(|f| std::mem::take(&mut *f.borrow_mut()));
        fsyncs();
        s.append(&batch(1, 100)).unwrap();
        let first = s.active.as_ref().unwrap().seg.path.clone();
        assert_eq!(fsyncs(), [dir.clone(), first.clone()], "created, appended");
        s.append(&batch(2, 70_000)).unwrap();
        assert!(s.active.is_none(), "the segment is full");
        assert_eq!(fsyncs(), [first], "sealed");
        s.append(&batch(3, 100)).unwrap();
        let second = s.active.as_ref().unwrap().seg.path.clone();
        assert_eq!(
            fsyncs(),
            [dir, second.clone()],
            "rotated: created, appended"
        );
        s.append(&batch(4, 100)).unwrap();
        assert_eq!(fsyncs(), std::slice::from_ref(&second), "appended");
        s.close();
        assert_eq!(fsyncs(), [second], "sealed at the stop");
    }

    #[test]
    fn a_failed_fsync_of_the_directory_is_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
        FSYNC_FAILS.with(|f| *f.borrow_mut() = Some(tmp.path().to_path_buf()));
        s.append(&batch(1, 100)).unwrap();
        assert_eq!(
            m.fsync_errors(),
            1,
            "the new segment's entry is not durable"
        );
    }

    #[test]
    fn a_record_the_disk_takes_only_part_of_leaves_no_torn_tail() {
        // A full disk, as RLIMIT_FSIZE makes one: the write that crosses the limit is
        // cut short, the next fails. Done in a child process of this test binary, so
        // that no other test's files meet the limit.
        if std::env::var_os("SPOOL_FSIZE_CHILD").is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "spool::tests::a_record_the_disk_takes_only_part_of_leaves_no_torn_tail",
                    "--nocapture",
                ])
                .env("SPOOL_FSIZE_CHILD", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
        s.append(&batch(1, 100)).unwrap();
        let seg = s.active.as_ref().unwrap().seg.clone();
        let whole = fs::metadata(&seg.path).unwrap().len();
        // SAFETY: plain libc calls on this (child) process's own signal and limit.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: whole + 50,
                rlim_max: libc::RLIM_INFINITY,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
        }
        assert!(s.append(&batch(2, 100)).is_err());
        assert_eq!(
            fs::metadata(&seg.path).unwrap().len(),
            whole,
            "the part written is cut"
        );
        let (found, damage) = record::scan(&fs::read(&seg.path).unwrap());
        assert_eq!((found.len(), damage.len()), (1, 0), "{damage:?}");
    }

    #[test]
    fn a_damaged_headers_row_count_is_believed_only_as_far_as_its_bytes_go() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
        s.append(&batch(3, 100)).unwrap();
        s.close();
        let seg = list_segments(tmp.path()).unwrap().remove(0);
        let mut bytes = fs::read(&seg.path).unwrap();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes()); // rows: 4 billion
        let m2 = SinkMetrics::default();
        assert!(scan_logged(&seg, &bytes, &m2).is_empty());
        let dropped = m2.dropped_rows(DropReason::Corrupt);
        assert!(dropped <= bytes.len() as u64 / 16 + 1, "{dropped}");
    }

    #[test]
    fn append_reopen_replay_finish() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        {
            let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
            assert!(matches!(
                Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()),
                Err(SpoolError::Locked(_, Some(pid))) if pid == std::process::id()
            ));
            for i in 1..=3 {
                s.append(&batch(i, 100)).unwrap();
            }
            // dropped without close(): like a crash after write()
        }
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
        s.append(&batch(4, 10)).unwrap();
        let seg = s.checkout_oldest().unwrap();
        assert!(s.checkout_oldest().is_none(), "one segment at a time");
        let bytes = read_segment(&seg).unwrap();
        let recs = scan_logged(&seg, &bytes, &m);
        assert_eq!(
            recs.iter().map(|r| r.rows).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        ack(&seg, recs[0].offset).unwrap();
        ack(&seg, recs[1].offset).unwrap();
        assert_eq!(
            load_acks(&seg),
            HashSet::from([recs[0].offset, recs[1].offset])
        );
        s.finish(seg.seq);
        assert!(!seg.path.exists() && !seg.ack_path().exists());
        let seg2 = s.checkout_oldest().unwrap();
        assert_eq!(
            scan_logged(&seg2, &read_segment(&seg2).unwrap(), &m)[0].rows,
            4
        );
        s.finish(seg2.seq);
        assert!(s.is_empty());
        assert_eq!(m.spooled_rows(), 10);
    }

    /// The rows of each record of the segments of `s` not confirmed, oldest first.
    fn rows_left(s: &mut Spool, m: &SinkMetrics) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        while let Some(seg) = s.checkout_oldest() {
            let acks = s.confirmed(&seg);
            let recs = scan_logged(&seg, &read_segment(&seg).unwrap(), m);
            out.push(
                recs.iter()
                    .filter(|r| !acks.contains(&r.offset))
                    .map(|r| r.rows)
                    .collect(),
            );
            s.finish(seg.seq);
        }
        out
    }

    #[test]
    fn rejected_segments_move_into_the_spool_behind_its_own_with_their_confirmations() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let rdir = tmp.path().join("rejected");
        // A reject spool of an earlier run whose replay was cut short: its first record
        // confirmed in its .ack.
        {
            let mut r = Spool::open_rejects(&cfg(&rdir, 1 << 30), m.clone()).unwrap();
            r.append(&batch(1, 100)).unwrap();
            r.append(&batch(2, 100)).unwrap();
            r.close();
            let seg = r.checkout_oldest().unwrap();
            let first = scan_logged(&seg, &read_segment(&seg).unwrap(), &m)[0].offset;
            ack(&seg, first).unwrap();
        }
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
        let mut r = Spool::open_rejects(&cfg(&rdir, 1 << 30), m.clone()).unwrap();
        r.append(&batch(3, 100)).unwrap(); // this run's, in the active segment
        s.append(&batch(4, 100)).unwrap(); // the spool's own, active too
        let rows = r.unconfirmed_row_counts();
        assert_eq!(
            rows.values().sum::<u64>(),
            2 + 3,
            "the confirmed record left out"
        );
        let moved = r.hand_over(&mut s, &rows);
        assert!(moved.error.is_none());
        assert_eq!((moved.segments, moved.rows, moved.left), (2, 2 + 3, 0));
        assert!(r.is_empty() && list_segments(&rdir).unwrap().is_empty());
        assert_eq!(m.spool_bytes(), s.total_bytes());
        // Refused again: a new segment of the reject spool, not one of those moved.
        r.append(&batch(5, 100)).unwrap();
        r.close();
        assert_eq!(rows_left(&mut r, &m), vec![vec![5]]);
        // The spool's own first, then the moved ones in their order, the confirmed
        // record left out.
        s.append(&batch(6, 100)).unwrap();
        assert_eq!(
            rows_left(&mut s, &m),
            vec![vec![4], vec![2], vec![3], vec![6]]
        );
        assert_eq!(m.spooled_rows(), 4 + 6, "moved rows are not spooled anew");
    }

    #[test]
    fn rejected_segments_wait_rather_than_take_the_spool_over_its_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let rdir = tmp.path().join("rejected");
        // Segments of 64 KiB (the smallest target): each batch of 70 KiB seals one.
        let (big, cap) = (70 << 10, 160 << 10);
        let mut s = Spool::open(&cfg(tmp.path(), cap), m.clone()).unwrap();
        let mut r = Spool::open_rejects(&cfg(&rdir, 512 << 10), m.clone()).unwrap();
        for i in 1..=3 {
            r.append(&batch(i, big)).unwrap();
        }
        r.close();
        s.append(&batch(9, 10 << 10)).unwrap();
        let moved = r.hand_over(&mut s, &HashMap::new());
        assert_eq!((moved.segments, moved.rows, moved.left), (2, 1 + 2, 1));
        assert!(s.total_bytes() <= cap);
        assert_eq!(m.dropped_rows(DropReason::SpoolCap), 0);
        assert_eq!(rows_left(&mut s, &m), vec![vec![9], vec![1], vec![2]]);
        // Room again: the one left follows.
        let moved = r.hand_over(&mut s, &HashMap::new());
        assert_eq!((moved.segments, moved.rows, moved.left), (1, 3, 0));
        assert_eq!(rows_left(&mut s, &m), vec![vec![3]]);
    }

    #[test]
    fn a_rejected_segment_that_cannot_be_moved_stays_where_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let rdir = tmp.path().join("rejected");
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m.clone()).unwrap();
        let mut r = Spool::open_rejects(&cfg(&rdir, 1 << 30), m.clone()).unwrap();
        r.append(&batch(1, 100)).unwrap();
        r.append(&batch(2, 100)).unwrap();
        // A directory where the spool's next segment goes: the rename fails.
        let blocker = tmp.path().join(format!("{:020}.seg", s.next_seq));
        fs::create_dir(&blocker).unwrap();
        fs::write(blocker.join("x"), b"x").unwrap();
        let moved = r.hand_over(&mut s, &HashMap::new());
        assert!(
            matches!(&moved.error, Some(SpoolError::Io { what, .. }) if *what == "moving segment"),
            "{moved:?}"
        );
        assert_eq!((moved.segments, moved.rows, moved.left), (0, 0, 1));
        assert!(s.is_empty());
        // Nothing lost: the next try takes another number, and the segment moves whole.
        let moved = r.hand_over(&mut s, &HashMap::new());
        assert_eq!((moved.segments, moved.rows, moved.left), (1, 3, 0));
        assert_eq!(rows_left(&mut s, &m), vec![vec![1, 2]]);
    }

    /// A spool in `dir` with one sealed segment of one batch (`fill`), checked out.
    fn one_segment(dir: &Path, fill: u8) -> (Spool, Segment) {
        let mut s = Spool::open(&cfg(dir, 1 << 30), Arc::new(SinkMetrics::default())).unwrap();
        s.append(&batch(u32::from(fill), 10)).unwrap();
        s.close();
        let seg = s.checkout_oldest().unwrap();
        (s, seg)
    }

    /// A torn last `.ack` entry (a crash mid-write) is cut before the next one is
    /// appended: the entries behind it were all misread, their records sent again.
    #[test]
    fn acks_after_a_torn_entry_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let (_spool, seg) = one_segment(tmp.path(), 1);
        ack(&seg, 8).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(seg.ack_path())
            .unwrap();
        f.write_all(&[1, 2, 3]).unwrap();
        drop(f);
        assert_eq!(load_acks(&seg), HashSet::from([8]));
        ack(&seg, 24).unwrap();
        ack(&seg, 32).unwrap();
        assert_eq!(load_acks(&seg), HashSet::from([8, 24, 32]));
    }

    /// A segment set aside is kept for the operator: a later one of the same number
    /// (the spool numbers from its segments at a start) does not replace it.
    #[test]
    fn a_segment_set_aside_is_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let set_aside_one = |fill: u8| {
            let (mut s, seg) = one_segment(tmp.path(), fill);
            let at = s.set_aside(seg.seq).unwrap();
            assert!(s.is_empty());
            let bytes = fs::read(&at).unwrap();
            (at, bytes)
        };
        let (first, kept) = set_aside_one(1);
        // A restart with nothing else in the spool, and another segment set aside.
        let (second, _) = set_aside_one(2);
        assert_ne!(first, second);
        assert_eq!(fs::read(&first).unwrap(), kept);
        // A name taken meanwhile (a copy the operator made) is not replaced either.
        let (mut s, seg) = one_segment(tmp.path(), 3);
        let taken = seg.path.with_extension(format!("seg.{UNREADABLE}"));
        fs::write(&taken, b"the operator's").unwrap();
        let third = s.set_aside(seg.seq).unwrap();
        assert_eq!(third, taken.with_extension(format!("{UNREADABLE}.2")));
        assert_eq!(fs::read(&taken).unwrap(), b"the operator's");
    }

    /// A replayed segment that cannot be deleted keeps its confirmations: the next
    /// start skips its records instead of sending them all again.
    #[test]
    fn a_segment_that_cannot_be_deleted_keeps_its_acks() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut s, seg) = one_segment(tmp.path(), 1);
        ack(&seg, 0).unwrap();
        // A directory with an entry where the segment was: unlink fails (as EPERM or
        // EIO would).
        fs::remove_file(&seg.path).unwrap();
        fs::create_dir(&seg.path).unwrap();
        fs::write(seg.path.join("x"), b"x").unwrap();
        s.finish(seg.seq);
        assert_eq!(load_acks(&seg), HashSet::from([0]));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(u8, usize),
        /// Replay the oldest segment, confirming its first `n` records.
        Replay(usize),
        /// Drop the spool without closing it (crash) and reopen.
        Crash,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (1u8..50, 1usize..30_000).prop_map(|(r, s)| Op::Append(r, s)),
            2 => (0usize..6).prop_map(Op::Replay),
            1 => Just(Op::Crash),
        ]
    }

    fn remaining_rows(dir: &Path) -> u64 {
        list_segments(dir)
            .unwrap()
            .iter()
            .map(|seg| {
                let acks = load_acks(seg);
                record::scan(&read_segment(seg).unwrap())
                    .0
                    .iter()
                    .filter(|r| !acks.contains(&r.offset))
                    .map(|r| u64::from(r.rows))
                    .sum::<u64>()
            })
            .sum()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
        /// Model check: every appended row is confirmed, still spooled, or counted as
        /// dropped by the cap — across replays, partial replays and crashes.
        #[test]
        fn rows_are_conserved(ops in proptest::collection::vec(op(), 1..40)) {
            let tmp = tempfile::tempdir().unwrap();
            let m = Arc::new(SinkMetrics::default());
            let c = cfg(tmp.path(), 150 << 10);
            let mut s = Spool::open(&c, m.clone()).unwrap();
            let (mut appended, mut confirmed) = (0u64, 0u64);
            for o in ops {
                match o {
                    Op::Append(rows, size) => {
                        s.append(&batch(u32::from(rows), size)).unwrap();
                        appended += u64::from(rows);
                    }
                    Op::Replay(n) => {
                        if let Some(seg) = s.checkout_oldest() {
                            let bytes = read_segment(&seg).unwrap();
                            let acks = load_acks(&seg);
                            let recs: Vec<_> = scan_logged(&seg, &bytes, &m).into_iter().filter(|r| !acks.contains(&r.offset)).collect();
                            for r in recs.iter().take(n) {
                                ack(&seg, r.offset).unwrap();
                                confirmed += u64::from(r.rows);
                            }
                            if n >= recs.len() { s.finish(seg.seq) } else { s.release(seg.seq) }
                        }
                    }
                    Op::Crash => {
                        drop(s);
                        s = Spool::open(&c, m.clone()).unwrap();
                    }
                }
            }
            drop(s);
            let left = remaining_rows(tmp.path());
            proptest::prop_assert_eq!(appended, confirmed + left + m.dropped_rows(DropReason::SpoolCap));
            proptest::prop_assert_eq!(m.corrupt_records(), 0);
        }
    }

    /// Records a replay had confirmed but could note only in memory (a full disk) are
    /// not counted as dropped when the cap removes their segment: ClickHouse has them.
    #[test]
    fn the_cap_does_not_count_records_confirmed_in_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        // Records of ~40 KiB, two per segment (64 KiB target).
        let mut s = Spool::open(&cfg(tmp.path(), 200 << 10), m.clone()).unwrap();
        s.append(&batch(1, 40 << 10)).unwrap();
        s.append(&batch(2, 40 << 10)).unwrap();
        s.append(&batch(4, 40 << 10)).unwrap();
        let seg = s.checkout_oldest().unwrap();
        let recs = record::scan(&read_segment(&seg).unwrap()).0;
        assert_eq!(recs.iter().map(|r| r.rows).collect::<Vec<_>>(), [1, 2]);
        // The first record was inserted, its .ack entry could not be written; the
        // replay stopped (ClickHouse went away again).
        assert!(s.remember_ack(seg.seq, recs[0].offset));
        assert!(!s.remember_ack(seg.seq, recs[0].offset));
        assert_eq!(s.confirmed(&seg), HashSet::from([recs[0].offset]));
        let other = Segment {
            seq: seg.seq + 1,
            ..seg.clone()
        };
        assert_eq!(s.confirmed(&other).len(), 0);
        s.release(seg.seq);
        while list_segments(tmp.path()).unwrap()[0].seq == seg.seq {
            s.append(&batch(100, 40 << 10)).unwrap();
        }
        // Of the segment dropped, only the record ClickHouse does not have.
        assert_eq!(m.dropped_rows(DropReason::SpoolCap), 2);
    }

    /// Confirmations noted in memory (the `.ack` file could not be written) are kept
    /// per segment until it is done: the daemon turns to other segments while one is
    /// held back (ClickHouse refuses records of it), and the first confirmation noted
    /// for another segment replaced the held one's, so its next pass sent the records
    /// ClickHouse already had again.
    #[test]
    fn confirmations_in_memory_outlive_the_replay_of_another_segment() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open(&cfg(tmp.path(), 1 << 30), m).unwrap();
        s.append(&batch(1, 100)).unwrap();
        s.append(&batch(2, 100)).unwrap();
        s.close();
        s.append(&batch(3, 100)).unwrap();
        s.close();
        // Segment 1: its first record stored (noted in memory only), its second
        // refused: held back.
        let held = s.checkout_oldest().unwrap();
        let recs = record::scan(&read_segment(&held).unwrap()).0;
        assert!(s.remember_ack(held.seq, recs[0].offset));
        s.release(held.seq);
        // The replayer turns to segment 2, whose record is stored (noted in memory).
        let next = s.checkout_oldest_but(&HashSet::from([held.seq])).unwrap();
        assert_ne!(next.seq, held.seq);
        assert!(s.remember_ack(next.seq, 0));
        s.finish(next.seq);
        // The next pass over segment 1 still skips its first record.
        let again = s.checkout_oldest().unwrap();
        assert_eq!(again.seq, held.seq);
        assert_eq!(s.confirmed(&again), HashSet::from([recs[0].offset]));
    }

    /// What the spool keeps in memory of a segment (its damage counted, its acks noted)
    /// goes with the segment when the cap drops it: a long outage's dropped segments
    /// each left an entry behind.
    #[test]
    fn a_segment_the_cap_drops_leaves_nothing_in_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open(&cfg(tmp.path(), 200 << 10), m).unwrap();
        s.append(&batch(1, 40 << 10)).unwrap();
        s.close();
        let first = list_segments(tmp.path()).unwrap()[0].seq;
        assert!(s.first_scan(first));
        assert!(s.remember_ack(first, 0));
        for i in 2..=12 {
            s.append(&batch(i, 40 << 10)).unwrap();
        }
        assert!(list_segments(tmp.path()).unwrap()[0].seq > first, "dropped");
        assert!(s.damage_counted.is_empty() && s.acked_in_memory.is_empty());
    }

    #[test]
    fn cap_drops_oldest_and_counts_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        // target segment size is clamped to 64 KiB; records of ~40 KiB → 2 per segment.
        let mut s = Spool::open(&cfg(tmp.path(), 200 << 10), m.clone()).unwrap();
        for i in 1..=12 {
            s.append(&batch(i, 40 << 10)).unwrap();
        }
        assert!(s.total_bytes() <= 200 << 10, "{}", s.total_bytes());
        let dropped = m.dropped_rows(DropReason::SpoolCap);
        let left: u64 = list_segments(tmp.path())
            .unwrap()
            .iter()
            .map(|seg| {
                record::scan(&read_segment(seg).unwrap())
                    .0
                    .iter()
                    .map(|r| u64::from(r.rows))
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(dropped + left, (1..=12).sum::<u64>());
        // The newest data survives.
        let seg = list_segments(tmp.path()).unwrap().pop().unwrap();
        assert_eq!(
            record::scan(&read_segment(&seg).unwrap())
                .0
                .last()
                .unwrap()
                .rows,
            12
        );
        assert!(dropped > 0);
    }

    #[test]
    fn a_spool_directory_removed_under_it_is_made_again_and_the_loss_counted() {
        // The directory removed while the daemon spools (a clean-up of /tmp, a
        // mistaken `rm -r`): appends went on into the deleted segment, every row
        // counted spooled and none left to replay, and no directory came back. Made
        // again, it is locked again (the lock held was on the removed `spool.lock`: a
        // second netpoller could spool into it beside this one).
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spool");
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open(&cfg(&dir, 1 << 20), m.clone()).unwrap();
        s.append(&batch(3, 100)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        s.append(&batch(4, 100)).unwrap();
        let second = Spool::open(&cfg(&dir, 1 << 20), m.clone()).err();
        assert!(
            matches!(second, Some(SpoolError::Locked(..))),
            "{:?}",
            second.map(|e| e.to_string())
        );
        s.close();
        assert_eq!(m.dropped_rows(DropReason::Corrupt), 3, "the deleted rows");
        let segs = list_segments(&dir).unwrap();
        assert_eq!(segs.len(), 1, "{segs:?}");
        let bytes = read_segment(&segs[0]).unwrap();
        let rows: u64 = scan_logged(&segs[0], &bytes, &m)
            .iter()
            .map(|r| u64::from(r.rows))
            .sum();
        assert_eq!(rows, 4, "the rows appended after");
        assert_eq!(m.spool_bytes(), segs[0].bytes);
    }

    #[test]
    fn a_segment_set_aside_that_is_gone_counts_its_rows_lost() {
        // Deleted under the daemon, it could not be renamed: "left out of this run's
        // replay only", its rows counted nowhere.
        let tmp = tempfile::tempdir().unwrap();
        let (mut s, seg) = one_segment(tmp.path(), 5);
        std::fs::remove_file(&seg.path).unwrap();
        s.set_aside(seg.seq);
        assert_eq!(s.metrics.dropped_rows(DropReason::Corrupt), 5);
        assert_eq!(s.metrics.spool_bytes(), 0);
    }

    #[test]
    fn a_file_where_the_spool_should_be_is_named_so() {
        // `spool_dir` naming a file: the start failed with "creating directory: File
        // exists (os error 17)", which says the directory is there.
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("spool");
        std::fs::write(&file, b"x").unwrap();
        let e = Spool::open(&cfg(&file, 1 << 20), Arc::new(SinkMetrics::default()))
            .err()
            .expect("a file is no spool");
        assert_eq!(
            e.to_string(),
            format!(
                "spool {}: creating directory: a file is there, not a directory",
                file.display()
            )
        );
    }

    #[test]
    fn the_reject_spool_has_metrics_of_its_own() {
        // Rejected batches were counted as rejected already: filling the reject spool
        // must not count them as spooled, nor show in the spool gauge, and its cap
        // drops must be visible under their own reason.
        let tmp = tempfile::tempdir().unwrap();
        let m = Arc::new(SinkMetrics::default());
        let mut s = Spool::open_rejects(&cfg(tmp.path(), 200 << 10), m.clone()).unwrap();
        for i in 1..=12 {
            s.append(&batch(i, 40 << 10)).unwrap();
        }
        assert!(m.dropped_rows(DropReason::RejectSpoolCap) > 0);
        assert_eq!(m.dropped_rows(DropReason::SpoolCap), 0);
        assert_eq!((m.spooled_rows(), m.spool_bytes()), (0, 0));
        let text = m.render_text();
        let gauge = format!("netpoller_sink_reject_spool_bytes {}", s.total_bytes());
        assert!(s.total_bytes() > 0 && text.contains(&gauge), "{text}");
        assert!(text.contains("netpoller_sink_dropped_rows_total{reason=\"reject_spool_cap\"}"));
    }
}
