//! The sweep's results on their way to stdout, written by a thread of their own.
//!
//! A write to a pipe nobody reads blocks; on the sweep's thread it held up the sweep
//! and the signal handling that runs beside it, so Ctrl-C and SIGTERM could not end the
//! sweep. The lines are gathered here (no allocation per host but on a terminal, where
//! each line goes at once) and handed over in chunks to the thread writing them.
//!
//! Why the engine never waits for stdout: the hosts' lines come from the ICMP engine's
//! callback, in the middle of its sweep (one sweep per command: there is no "between
//! iterations" where it could pause). Blocking there would stop it reading replies and
//! sending the next hosts' probes: replies would be judged late, or dropped by a full
//! receive buffer, and hosts read as lost because their reader was slow. So the
//! backlog is never refused; it is kept out of memory instead.
//!
//! Invariants:
//! * Lines reach the writer whole and in the order they were added, once each.
//! * What stdout has not taken yet is held in memory up to the bound given to
//!   [`Output::start`] ([`HELD_IN_MEMORY`] for stdout); past it, and until stdout has
//!   taken all of it, chunks are appended to an unlinked temporary file (in `$TMPDIR`,
//!   gone with the process), which the writer reads back in order: memory stays within
//!   the bound, plus the chunk being gathered and one read back. A sweep whose
//!   stdout is never read (`netpoller sweep ... | sleep 1000`) holds that much, whatever
//!   its size; the disk holds the rest. When no temporary file can be written, the
//!   backlog stays in memory, as before, with a warning.
//! * The engine's side does not wait on the writer: it takes a lock the writer holds
//!   only to take or give back a piece, never while writing to stdout; the most it
//!   does itself is append a chunk to the file (to the page cache). Nor does it write
//!   to stderr, which may be the same pipe (its notes go by a thread of their own).
//! * The temporary file is emptied whenever stdout has caught up with it.
//! * The lines counted as written ([`Output::written`]) are those stdout took: each
//!   write is of [`WRITE_AT_MOST`] bytes at most, which a pipe takes whole or not at all, and
//!   is counted once it returned, to an unbuffered stdout ([`stdout`]). (Written whole,
//!   a 64 KiB chunk that a full pipe took part of was counted as none of it printed.)
//! * The message a process ends with ([`last_words`]) never holds the exit: it leaves
//!   from a thread of its own, as the notes do, and is waited for a bounded time.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Bytes of result lines gathered before they go to stdout (when it is not a terminal).
pub const CHUNK: usize = 1 << 16;

/// Room a chunk keeps for one more line: it is handed over when less is left, so that
/// no line makes it grow (to twice its size: a line is under 250 bytes, JSON of an
/// IPv6 host included).
const LINE_ROOM: usize = 512;

/// Most bytes given to one write to stdout: PIPE_BUF, which a pipe takes whole or not
/// at all (pipe(7)). A longer write to a full pipe puts what fits in it and blocks for
/// the rest: the lines already in the pipe were not counted.
const WRITE_AT_MOST: usize = libc::PIPE_BUF;

/// Bytes of results held in memory while stdout does not take them; the rest wait in a
/// temporary file. 64 chunks: a reader that is merely slow (a terminal over ssh) finds
/// them in memory.
pub const HELD_IN_MEMORY: usize = 4 << 20;

/// The hosts' lines, handed to a thread writing them (see the module docs).
pub struct Output {
    buf: Vec<u8>,
    live: bool,
    backlog: Arc<Backlog>,
    done: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
    /// Lines the thread has written.
    written: Arc<AtomicU64>,
}

/// Makes the temporary file (`tempfile::tempfile`: unlinked, in `$TMPDIR`).
type NewFile = fn() -> std::io::Result<File>;

/// What was handed over and not yet written, shared by the two sides.
struct Backlog {
    pending: Mutex<Pending>,
    /// Signalled when a piece is added or the output closed.
    ready: Condvar,
    /// Most bytes of `Piece::Memory` held at once.
    in_memory: usize,
    new_file: NewFile,
}

/// One run of bytes to write, in order.
enum Piece {
    Memory(Vec<u8>),
    /// Bytes `start..start + len` of the temporary file.
    Disk {
        start: u64,
        len: u64,
    },
}

#[derive(Default)]
struct Pending {
    pieces: VecDeque<Piece>,
    /// Bytes the `Memory` pieces hold (their capacity), queued or being written.
    memory: usize,
    /// The most `memory` has been, and the largest chunk handed over (for tests: the
    /// bound held, by chunks of the size planned).
    peak: usize,
    largest: usize,
    /// Bytes of the file not yet written (queued or being written): while there are
    /// any, new chunks go after them, to the file, so that order is kept.
    on_disk: u64,
    /// Where the next chunk is appended to the file.
    end: u64,
    file: Option<Arc<File>>,
    /// Bytes ever sent through the file.
    spilled: u64,
    /// The file could not be created or written: the backlog stays in memory.
    no_spill: bool,
    /// No more chunks will come: the writer ends once the pieces are written.
    closed: bool,
    /// The writer has ended (a write failed): chunks are dropped.
    gone: bool,
}

impl Output {
    /// `live`: each line goes to `out` as it comes (a terminal), else in [`CHUNK`]s;
    /// at most `in_memory` bytes of them wait in memory for `out`, the rest in a file
    /// `new_file` makes (module docs).
    pub fn start(
        live: bool,
        out: impl Write + Send + 'static,
        in_memory: usize,
        new_file: NewFile,
    ) -> std::io::Result<Self> {
        let backlog = Arc::new(Backlog {
            pending: Mutex::new(Pending::default()),
            ready: Condvar::new(),
            in_memory,
            new_file,
        });
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let written = Arc::new(AtomicU64::new(0));
        let (shared, counted) = (Arc::clone(&backlog), Arc::clone(&written));
        std::thread::Builder::new()
            .name("sweep-stdout".into())
            .spawn(move || {
                let result = shared.write_all(out, &counted);
                let mut p = shared.lock();
                p.gone = true;
                p.pieces.clear();
                drop(p);
                let _ = done_tx.send(result);
            })?;
        Ok(Output {
            buf: Vec::with_capacity(if live { 0 } else { CHUNK }),
            live,
            backlog,
            done,
            written,
        })
    }

    /// Adds one host's line (written by `line` into the buffer).
    pub fn line(&mut self, line: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
        // Writing into a Vec does not fail.
        let _ = line(&mut self.buf);
        if self.live || self.buf.len() + LINE_ROOM > CHUNK {
            self.hand_over();
        }
    }

    fn hand_over(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let next = Vec::with_capacity(if self.live { 0 } else { CHUNK });
        let chunk = std::mem::replace(&mut self.buf, next);
        self.backlog.add(chunk);
    }

    /// Hands over what is left; the thread ends once it has written it.
    pub fn close(&mut self) {
        self.hand_over();
        self.backlog.close();
    }

    /// Waits for the thread to have written everything handed over (after [`Self::close`]).
    pub async fn finished(&mut self) -> std::io::Result<()> {
        (&mut self.done).await.unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the thread writing the results ended early",
            ))
        })
    }

    /// Whether the thread has ended before being closed: a write failed (stdout closed,
    /// `sweep --loop | head` once head has its lines), so nothing more is printed.
    pub fn gone(&self) -> bool {
        self.backlog.lock().gone
    }

    /// Lines the thread has written.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

impl Drop for Output {
    /// An output left without [`Output::close`] (an error return) ends its thread too.
    fn drop(&mut self) {
        self.backlog.close();
    }
}

impl Backlog {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic on the other side leaves the queue as consistent as it was: go on.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No more chunks will come: the writer ends once it has written those queued.
    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// Queues `chunk` (the engine's side): in memory while there is room and nothing
    /// waits on disk, else appended to the file.
    fn add(&self, chunk: Vec<u8>) {
        let mut p = self.lock();
        if p.gone {
            return;
        }
        p.largest = p.largest.max(chunk.capacity());
        let full = p.memory + chunk.capacity() > self.in_memory;
        if (p.on_disk > 0 || full) && !p.no_spill {
            let first = p.file.is_none();
            match p.spill(&chunk, self.new_file) {
                Ok(()) => {
                    drop(p);
                    self.ready.notify_one();
                    if first {
                        let held_bytes = self.in_memory;
                        note(move || {
                            tracing::info!(
                                held_bytes,
                                dir = %std::env::temp_dir().display(),
                                "standard output is behind: the results it has not taken wait in a temporary file"
                            )
                        });
                    }
                    return;
                }
                Err(e) => {
                    p.no_spill = true;
                    note(
                        move || tracing::warn!(error = %e, "standard output is behind and no temporary file can be written: the results not yet printed are held in memory"),
                    );
                }
            }
        }
        p.memory += chunk.capacity();
        p.peak = p.peak.max(p.memory);
        p.pieces.push_back(Piece::Memory(chunk));
        drop(p);
        self.ready.notify_one();
    }

    /// The writer's side: writes every piece, in order, until the output is closed
    /// and all is written, or a write fails. Counts the lines written ([`write_counted`]).
    fn write_all(&self, mut out: impl Write, written: &AtomicU64) -> std::io::Result<()> {
        let mut read_back = Vec::new();
        loop {
            let mut p = self.lock();
            let piece = loop {
                match p.pieces.pop_front() {
                    Some(piece) => break piece,
                    None if p.closed => return Ok(()),
                    None => p = self.ready.wait(p).unwrap_or_else(|e| e.into_inner()),
                }
            };
            match piece {
                Piece::Memory(chunk) => {
                    drop(p);
                    write_counted(&mut out, &chunk, written)?;
                    self.lock().memory -= chunk.capacity();
                }
                Piece::Disk { start, len } => {
                    // A chunk's worth at a time; the rest stays first in line.
                    let take = len.min(CHUNK as u64);
                    if take < len {
                        p.pieces.push_front(Piece::Disk {
                            start: start + take,
                            len: len - take,
                        });
                    }
                    let file = p.file.clone().expect("a disk piece has its file");
                    drop(p);
                    read_back.resize(take as usize, 0);
                    file.read_exact_at(&mut read_back, start)?;
                    write_counted(&mut out, &read_back, written)?;
                    let mut p = self.lock();
                    p.on_disk -= take;
                    if p.on_disk == 0 {
                        // Caught up: the file is emptied, and used from its start again.
                        p.end = 0;
                        if let Err(e) = file.set_len(0) {
                            tracing::debug!(error = %e, "cannot empty the sweep's temporary file");
                        }
                    }
                }
            }
        }
    }
}

/// Writes `bytes` (whole lines) to `out` by [`WRITE_AT_MOST`] at most, adding to `written`
/// the lines of each part as `out` has taken it (a line counts once its newline is
/// written): a sweep interrupted while stdout does not read reports the lines printed
/// of the chunk it was writing.
fn write_counted(out: &mut impl Write, bytes: &[u8], written: &AtomicU64) -> std::io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = match out.write(&rest[..rest.len().min(WRITE_AT_MOST)]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let lines = rest[..n].iter().filter(|&&b| b == b'\n').count();
        written.fetch_add(lines as u64, Ordering::Relaxed);
        rest = &rest[n..];
    }
    out.flush()
}

/// Standard output, unbuffered (a duplicate of its descriptor): what a write returns
/// is what stdout took, which [`write_counted`] counts ([`std::io::stdout`] may keep
/// lines in its buffer of 1 KiB and say them written). With no descriptor to be had
/// (too many open), `std::io::stdout` all the same.
pub fn stdout() -> Box<dyn Write + Send> {
    use std::os::fd::AsFd;
    match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(File::from(fd)),
        Err(_) => Box::new(std::io::stdout()),
    }
}

/// Writes `text` to stderr from a thread of its own, and waits for it `bound` at most:
/// the message a process ends with. stderr may be the pipe stdout is (`netpoller
/// sweep ... 2>&1 | less`), full just when stdout was not read: written by the thread
/// that ends the process, it held the exit until the reader read on (for good with
/// `| sleep 1000`), as does a note blocked there holding stderr. Past `bound` the
/// process ends without it (or with the part the pipe took); with no thread to be
/// had it is left out: it leaves as a note does ([`note`]).
pub fn last_words(text: String, bound: Duration) {
    let (done, written) = std::sync::mpsc::channel();
    note(move || {
        // (A closed stderr, or one that fails: nothing more to do either way.)
        let _ = std::io::stderr().write_all(text.as_bytes());
        let _ = done.send(());
    });
    // With no thread, `done` went with the message: this returns at once.
    let _ = written.recv_timeout(bound);
}

/// Logs a note on the backlog from a thread of its own, through the caller's
/// subscriber. The log is stderr, which may be the pipe stdout is (`netpoller sweep ...
/// 2>&1 | less`), full just when stdout falls behind: a write there on the engine's side
/// would stop the sweep and its signal handling until the reader reads on. With no
/// thread to be had, the note is left out rather than risked.
fn note(log: impl FnOnce() + Send + 'static) {
    let dispatch = tracing::dispatcher::get_default(tracing::Dispatch::clone);
    let _ = std::thread::Builder::new()
        .name("sweep-note".into())
        .spawn(move || tracing::dispatcher::with_default(&dispatch, log));
}

impl Pending {
    /// Appends `chunk` to the temporary file (made by `new_file` at the first call).
    fn spill(&mut self, chunk: &[u8], new_file: NewFile) -> std::io::Result<()> {
        let file = match &self.file {
            Some(file) => Arc::clone(file),
            None => {
                let file = Arc::new(new_file()?);
                self.file = Some(Arc::clone(&file));
                file
            }
        };
        file.write_all_at(chunk, self.end)?;
        let (start, len) = (self.end, chunk.len() as u64);
        self.end += len;
        self.on_disk += len;
        self.spilled += len;
        match self.pieces.back_mut() {
            Some(Piece::Disk { start: s, len: l }) if *s + *l == start => *l += len,
            _ => self.pieces.push_back(Piece::Disk { start, len }),
        }
        Ok(())
    }
}

#[cfg(test)]
impl Output {
    /// The most bytes held in memory at once, the bytes sent through the file, and the
    /// largest chunk's memory.
    pub fn backlog(&self) -> (usize, u64, usize) {
        let p = self.backlog.lock();
        (p.peak, p.spilled, p.largest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{gated, SharedBuf};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    /// With no temporary file to be had (`$TMPDIR` full or read-only), the backlog is
    /// held in memory, as before, nothing lost (the warning that says so:
    /// [`the_notes_on_a_backlog_are_not_written_by_the_sweep`]).
    #[test]
    fn without_a_temporary_file_the_backlog_stays_in_memory() {
        let printed = SharedBuf::default();
        let (writer, open) = gated(printed.clone());
        let no_file = || Err(std::io::Error::other("no space left"));
        let mut out = Output::start(true, writer, 1024, no_file).unwrap();
        let mut want = String::new();
        for k in 0..1_000 {
            let line = format!("127.0.163.{} alive 1/1 0% {k}\n", k % 250 + 1);
            want.push_str(&line);
            out.line(|b| b.write_all(line.as_bytes()));
        }
        let (peak, spilled, _) = out.backlog();
        assert_eq!(spilled, 0);
        assert!(peak > 1024 && peak >= want.len(), "{peak}");
        open.send(()).unwrap();
        out.close();
        rt().block_on(out.finished()).unwrap();
        assert!(
            printed.text() == want,
            "lines lost, doubled or out of order"
        );
    }

    /// The notes on a backlog (it waits in a temporary file; no file can be had) are
    /// not written on the sweep's side: the log is stderr, which may be the pipe stdout
    /// is (`netpoller sweep ... 2>&1 | less` on its first page), full just when stdout
    /// falls behind. Written there, a note held up the sweep (its replies read late,
    /// hosts read as lost) and its Ctrl-C until the reader read on.
    #[test]
    fn the_notes_on_a_backlog_are_not_written_by_the_sweep() {
        let log = SharedBuf::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .with_thread_names(true)
            .finish();
        let dispatch = crate::test_util::dispatch(sub);
        let no_file = || Err(std::io::Error::other("no space left"));
        let files: [(NewFile, &str); 2] = [
            (tempfile::tempfile, "wait in a temporary file"),
            (no_file, "no temporary file can be written"),
        ];
        for (new_file, note) in files {
            let printed = SharedBuf::default();
            let (writer, open) = gated(printed.clone());
            // The sweep's side, on a thread the log names.
            let d = dispatch.clone();
            let sweep = move || {
                tracing::dispatcher::with_default(&d, || {
                    let mut out = Output::start(false, writer, CHUNK, new_file).unwrap();
                    for k in 0..10_000 {
                        out.line(|b| writeln!(b, "127.0.171.{} alive 1/1 0% {k}", k % 250 + 1));
                    }
                    out
                })
            };
            let thread = std::thread::Builder::new().name("the-sweep".into());
            let mut out = thread.spawn(sweep).unwrap().join().unwrap();
            // The note comes all the same, once.
            while !log.text().contains(note) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            open.send(()).unwrap();
            out.close();
            rt().block_on(out.finished()).unwrap();
            assert_eq!(printed.text().lines().count(), 10_000);
            assert_eq!(log.text().matches(note).count(), 1, "{}", log.text());
        }
        let text = log.text();
        assert!(
            !text.contains("the-sweep"),
            "written by the sweep's thread: {text}"
        );
    }

    /// The README and `sweep --help` give the bound.
    #[test]
    fn the_docs_give_the_bound_held_in_memory() {
        use clap::CommandFactory;
        let bound = format!("{} MiB", HELD_IN_MEMORY >> 20);
        assert!(crate::test_util::readme().contains(&format!("in memory up to {bound}")));
        let mut cli = crate::Cli::command();
        let help = cli.find_subcommand_mut("sweep").unwrap().render_long_help();
        let help = help.to_string().replace('\n', " ");
        assert!(help.contains(&format!("in memory up to {bound}")), "{help}");
    }

    /// Lines stdout does not take are held in memory up to the bound, the rest in the
    /// temporary file (all of them were held in memory: a sweep's whole output), and
    /// all reach it, in order, once it reads; caught up, lines are held in memory again.
    /// The bound counts the chunks' memory, as allocated.
    #[test]
    fn a_backlog_past_its_bound_waits_in_a_file_and_comes_out_in_order() {
        let printed = SharedBuf::default();
        let (writer, open) = gated(printed.clone());
        let bound = 4 * CHUNK;
        let mut out = Output::start(false, writer, bound, tempfile::tempfile).unwrap();
        let line = |k: u32| format!("127.0.163.{} alive 1/1 0% {k}\n", k % 250 + 1);
        let mut want = String::new();
        for k in 0..40_000 {
            want.push_str(&line(k));
            out.line(|b| b.write_all(line(k).as_bytes()));
        }
        let (peak, spilled, largest) = out.backlog();
        assert!(want.len() > 10 * CHUNK, "{}", want.len());
        assert!(
            peak <= bound,
            "{peak} bytes held in memory, more than {bound}"
        );
        // No chunk grown past CHUNK by its last line (most were reallocated to twice
        // their size: a chunk held 128 KiB of memory for 64 KiB of lines).
        assert_eq!(largest, CHUNK);
        // What is not in memory (nor in the chunk being gathered) is on disk.
        assert!(spilled as usize >= want.len() - bound - CHUNK, "{spilled}");
        // The reader comes back: everything is printed, in order.
        open.send(()).unwrap();
        let gathered = out.buf.iter().filter(|&&b| b == b'\n').count() as u64;
        while out.written() < 40_000 - gathered {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Caught up: the next lines are held in memory, not sent through the file.
        for k in 40_000..41_000 {
            want.push_str(&line(k));
            out.line(|b| b.write_all(line(k).as_bytes()));
        }
        out.close();
        assert_eq!(out.backlog().1, spilled);
        assert_eq!(out.backlog().2, CHUNK);
        rt().block_on(out.finished()).unwrap();
        assert_eq!(out.written(), 41_000);
        assert!(
            printed.text() == want,
            "lines lost, doubled or out of order"
        );
    }
}
