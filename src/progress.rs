//! A one-line progress indicator on stderr for one-shot commands (`sweep`, `poll-once`,
//! `spool replay`).
//!
//! Invariants:
//! * Silent (no byte written, no clock read) when stderr is not a terminal or with
//!   `--quiet`: piped and logged output stays clean; and beside results on a terminal
//!   ([`Progress::beside_results`]), which never share a line with it.
//! * Redraws at most once per [`REDRAW_INTERVAL`] (~10/s) however often `inc` is called,
//!   so a 100k-item sweep costs a handful of writes, not 100k; the first update and the
//!   one reaching `total` are always drawn.
//! * The line is rewritten in place with `\r` + erase-to-end-of-line, and erased by
//!   [`Progress::finish`] (or on drop), so the next output starts on a clean line.
//! * Log lines written to stderr while a progress line is shown appear after it; the next
//!   redraw starts a fresh line only at the next `\r`, so commands should log little
//!   while showing progress.

use std::io::Write;
use std::time::{Duration, Instant};

/// Minimum time between two redraws.
pub const REDRAW_INTERVAL: Duration = Duration::from_millis(100);

/// Progress over `total` units of work (0 = unknown total: only the count is shown).
pub struct Progress {
    inner: Option<Inner>,
}

struct Inner {
    total: u64,
    done: u64,
    label: String,
    started: Instant,
    last_draw: Option<Instant>,
    out: Box<dyn Write + Send>,
}

impl Progress {
    /// A progress line on stderr; a no-op when `quiet` or when stderr is not a TTY.
    pub fn new(total: u64, label: &str, quiet: bool) -> Self {
        let active = !quiet && is_tty(libc::STDERR_FILENO);
        Self::with_output(total, label, active, Box::new(std::io::stderr()))
    }

    /// For commands whose results go to stdout line by line (`sweep`, `poll-once`): on a
    /// terminal the results, flushed as they come ([`stdout_is_tty`]), are the progress,
    /// and a line redrawn on stderr would glue itself to them; so only when stdout is
    /// not a terminal (piped, or in a file) is the line drawn.
    pub fn beside_results(total: u64, label: &str, quiet: bool) -> Self {
        Self::new(total, label, quiet || stdout_is_tty())
    }

    /// Like [`new`](Self::new) with an explicit decision and output (tests).
    fn with_output(total: u64, label: &str, active: bool, out: Box<dyn Write + Send>) -> Self {
        let inner = active.then(|| Inner {
            total,
            done: 0,
            label: label.to_owned(),
            started: Instant::now(),
            last_draw: None,
            out,
        });
        Progress { inner }
    }

    /// Whether anything will be drawn.
    #[allow(dead_code)] // API for commands that want to skip work when silent
    pub fn is_active(&self) -> bool {
        self.inner.is_some()
    }

    /// Records `n` more units done; redraws if the last redraw is old enough.
    pub fn inc(&mut self, n: u64) {
        if self.inner.is_some() {
            self.inc_at(n, Instant::now());
        }
    }

    fn inc_at(&mut self, n: u64, now: Instant) {
        let Some(p) = self.inner.as_mut() else { return };
        p.done = p.done.saturating_add(n);
        let due = match p.last_draw {
            None => true,
            Some(t) => now.saturating_duration_since(t) >= REDRAW_INTERVAL,
        };
        let reached = p.total != 0 && p.done >= p.total && p.done - n < p.total;
        if due || reached {
            p.draw(now);
        }
    }

    /// Erases the line. Nothing more is drawn afterwards.
    pub fn finish(&mut self) {
        if let Some(mut p) = self.inner.take() {
            if p.last_draw.is_some() {
                // Erasing is cosmetic: a closed stderr is no reason to fail the command.
                let _ = p.out.write_all(b"\r\x1b[K");
                let _ = p.out.flush();
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Inner {
    fn draw(&mut self, now: Instant) {
        let secs = now.saturating_duration_since(self.started).as_secs_f64();
        let line = if self.total == 0 {
            format!("\r\x1b[K{} {} ({:.1} s)", self.label, self.done, secs)
        } else {
            let pct = (self.done.min(self.total) as f64 * 100.0 / self.total as f64).floor();
            format!(
                "\r\x1b[K{} {}/{} ({pct:.0}%, {secs:.1} s)",
                self.label, self.done, self.total
            )
        };
        let _ = self.out.write_all(line.as_bytes());
        let _ = self.out.flush();
        self.last_draw = Some(now);
    }
}

/// Whether stdout is a terminal: results are then flushed line by line, for a person
/// watching them come.
pub fn stdout_is_tty() -> bool {
    is_tty(libc::STDOUT_FILENO)
}

fn is_tty(fd: libc::c_int) -> bool {
    // SAFETY: isatty only inspects the descriptor number; an invalid fd returns 0.
    unsafe { libc::isatty(fd) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    use crate::test_util::SharedBuf as Buf;

    fn frames(s: &str) -> Vec<&str> {
        s.split("\r\x1b[K").filter(|f| !f.is_empty()).collect()
    }

    #[test]
    fn redraws_at_most_every_interval() {
        let buf = Buf::default();
        let mut p = Progress::with_output(1000, "polling", true, Box::new(buf.clone()));
        let t0 = p.inner.as_ref().unwrap().started;
        // 999 updates over 0.999 s, one per millisecond: first draw at 1 ms, then every 100 ms.
        for i in 1..1000u64 {
            p.inc_at(1, t0 + Duration::from_millis(i));
        }
        let text = buf.text();
        let f = frames(&text);
        assert_eq!(f.len(), 10, "{f:?}");
        assert_eq!(f[0], "polling 1/1000 (0%, 0.0 s)");
        assert_eq!(f[1], "polling 101/1000 (10%, 0.1 s)");
        assert_eq!(f[9], "polling 901/1000 (90%, 0.9 s)");
        // Reaching the total is drawn even within the interval.
        p.inc_at(1, t0 + Duration::from_millis(1000));
        let text = buf.text();
        assert_eq!(
            *frames(&text).last().unwrap(),
            "polling 1000/1000 (100%, 1.0 s)"
        );
        // Past the total (more results than announced): counts on, rate-limited again.
        p.inc_at(1, t0 + Duration::from_millis(1001));
        assert_eq!(frames(&buf.text()).len(), 11);
        p.finish();
        assert!(
            buf.text().ends_with("1.0 s)\r\x1b[K"),
            "line erased: {:?}",
            buf.text()
        );
        p.inc(5); // after finish: nothing
        assert!(buf.text().ends_with("\r\x1b[K"));
    }

    #[test]
    fn unknown_total_shows_count() {
        let buf = Buf::default();
        let mut p = Progress::with_output(0, "replaying", true, Box::new(buf.clone()));
        let t0 = p.inner.as_ref().unwrap().started;
        p.inc_at(250, t0 + Duration::from_millis(1500));
        drop(p);
        assert_eq!(buf.text(), "\r\x1b[Kreplaying 250 (1.5 s)\r\x1b[K");
    }

    #[test]
    fn inactive_writes_nothing() {
        let buf = Buf::default();
        let mut p = Progress::with_output(10, "x", false, Box::new(buf.clone()));
        assert!(!p.is_active());
        for _ in 0..10 {
            p.inc(1);
        }
        p.finish();
        assert!(buf.text().is_empty());
        // quiet wins even on a terminal; and a quiet Progress never touches stderr.
        assert!(!Progress::new(10, "x", true).is_active());
    }

    #[test]
    fn finish_without_draw_writes_nothing() {
        let buf = Buf::default();
        let mut p = Progress::with_output(10, "x", true, Box::new(buf.clone()));
        p.finish();
        assert!(buf.text().is_empty());
    }

    #[test]
    fn tty_detection_pipe_file_and_pty() {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe writes two descriptors into the array; closed right after.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            assert!(!is_tty(fds[0]) && !is_tty(fds[1]));
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(!is_tty(f.as_raw_fd()));
        assert!(!is_tty(-1));
        // A pseudo-terminal pair: both ends are terminals.
        // SAFETY: plain libc calls on descriptors we own and close below.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            if master < 0 {
                // No /dev/ptmx in this sandbox: nothing more to check here.
                return;
            }
            assert_eq!(libc::grantpt(master), 0);
            assert_eq!(libc::unlockpt(master), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
            let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
            assert!(slave >= 0);
            assert!(is_tty(master) && is_tty(slave));
            libc::close(slave);
            libc::close(master);
        }
        // Whatever stderr is here, `new` follows is_tty(2).
        assert_eq!(
            Progress::new(10, "x", false).is_active(),
            is_tty(libc::STDERR_FILENO)
        );
    }
}
