//! Helpers for unit tests of the binary's modules.
//!
//! Invariant: a test sees its logs through a dispatcher made by [`dispatch`] (as
//! [`logged`] does), never one of its own `tracing::Dispatch::new` or
//! `tracing::subscriber::with_default` (clippy refuses those, `clippy.toml`). tracing
//! settles once, at a log call's first reach, whether any subscriber wants it; with
//! one dispatcher in the process it asks only the reaching thread's, and a thread with
//! none (a test beside this one, a thread of the code under test) settled "no one"
//! for good: the line the test waited for was never written. [`dispatch`] keeps a
//! second dispatcher for the whole process, and tracing then asks every one.

use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};

/// A cloneable in-memory writer: every clone appends to the same buffer.
#[derive(Clone, Default)]
pub struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SharedBuf {
    type Writer = SharedBuf;
    fn make_writer(&'a self) -> SharedBuf {
        self.clone()
    }
}

impl SharedBuf {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// What `f` returns, with what it logged (plain text, no colours, `info` and up) on
/// this thread and on the threads its code hands its dispatcher to (as the daemon's
/// `off_thread` and the sweep's notes do). A thread `f` starts without it logs
/// nowhere: its lines are not in the text.
pub fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    let log = SharedBuf::default();
    let sub = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .finish();
    let r = tracing::dispatcher::with_default(&dispatch(sub), f);
    (r, log.text())
}

/// A dispatcher for a test's own `subscriber`, to install on the threads whose logs
/// the test reads (`tracing::dispatcher::with_default`): it sees every log call it
/// wants, whichever thread reached the call first (the module's invariant).
#[allow(clippy::disallowed_methods)] // the one place that makes them
pub fn dispatch(subscriber: impl tracing::Subscriber + Send + Sync + 'static) -> tracing::Dispatch {
    // Never dropped (a static), wanting nothing: from its making on, at least two
    // dispatchers live, and a log call's first reach asks all of them, this test's too.
    static SECOND: LazyLock<tracing::Dispatch> =
        LazyLock::new(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    LazyLock::force(&SECOND);
    tracing::Dispatch::new(subscriber)
}

/// The rows `entries` give: `(host, rule, rows as an indices value)`.
pub fn found(entries: &[(&str, &str, &str)]) -> crate::config::Found {
    let mut f = crate::config::Found::default();
    for (host, rule, rows) in entries {
        let rows = crate::config::Indices::parse(rows).unwrap();
        f.set(&Arc::from(*host), &Arc::from(*rule), rows);
    }
    f
}

/// A file (`daemon`: its `[daemon]` keys) of hosts `big` and `small` with a template of
/// 129 items per row of the discovery rule `if`: 65,536 rows of one host (what one item
/// may stand for) take it past the loader's `MAX_ITEMS`, and are refused.
pub fn one_host_past_the_item_limit(daemon: &str) -> String {
    let prototypes: Vec<String> = (0..129)
        .map(|k| format!("{{ key = \"p{k}[{{#SNMPINDEX}}]\", oid = \"1.3.6.1.2.1.2.2.1.{k}.{{#SNMPINDEX}}\", type = \"uint\", interval = \"1m\", discovery = \"if\" }}"))
        .collect();
    let host = |name: &str, ip: &str| {
        format!("[[hosts]]\nname = \"{name}\"\nip = \"{ip}\"\ntemplates = [\"t\"]\nsnmp = {{ community = \"public\" }}\n")
    };
    format!(
        "[daemon]\n{daemon}\n[[templates]]\nname = \"t\"\n\
         discovery = [{{ name = \"if\", oid = \"1.3.6.1.2.1.2.2.1.2\" }}]\n\
         items = [{}]\n{}{}",
        prototypes.join(", "),
        host("big", "127.0.51.1"),
        host("small", "127.0.51.2"),
    )
}

/// The README, as the operator reads it.
pub fn readme() -> String {
    doc("README.md")
}

/// A document of the repository (`docs/production.md`), as the operator reads it.
pub fn doc(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// A writer that takes nothing until it is opened (a reader that has stopped reading:
/// a pager on its first page, `| sleep 1000`): its first write waits for the
/// returned sender to send, or be dropped; then it appends to `out`.
pub fn gated(out: SharedBuf) -> (Gated, std::sync::mpsc::Sender<()>) {
    let (open, gate) = std::sync::mpsc::channel();
    let gated = Gated {
        gate,
        opened: false,
        out,
    };
    (gated, open)
}

/// See [`gated`].
pub struct Gated {
    gate: std::sync::mpsc::Receiver<()>,
    opened: bool,
    out: SharedBuf,
}

impl Write for Gated {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if !self.opened {
            let _ = self.gate.recv();
            self.opened = true;
        }
        self.out.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

mod tests {
    use super::*;

    /// A log call that another thread, with no subscriber, reaches first while a test
    /// captures is captured all the same (the first reach settled for good that no one
    /// wanted it, and the test's line was missed: a test beside it decided what it saw).
    #[test]
    fn a_line_first_reached_on_a_thread_with_no_subscriber_is_captured() {
        // A log call no other test reaches: its first reach is this test's.
        fn say() {
            tracing::warn!("said once per call");
        }
        let ((), text) = logged(|| {
            std::thread::spawn(say).join().unwrap();
            say();
        });
        assert_eq!(text.matches("said once per call").count(), 1, "{text:?}");
    }

    /// `logged` takes the lines of a thread its code hands the dispatcher to, and of no
    /// other thread (its doc's limit).
    #[test]
    fn logged_takes_the_threads_given_its_dispatcher_only() {
        fn say(whose: &str) {
            tracing::info!(whose, "a thread's line");
        }
        let ((), text) = logged(|| {
            let carried = tracing::dispatcher::get_default(tracing::Dispatch::clone);
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&carried, || say("carried"))
            })
            .join()
            .unwrap();
            std::thread::spawn(|| say("not carried")).join().unwrap();
        });
        assert_eq!(text.matches("a thread's line").count(), 1, "{text:?}");
        assert!(text.contains("whose=\"carried\""), "{text:?}");
    }
}
