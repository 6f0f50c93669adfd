//! Files the daemon keeps between runs (the rows discovery found, the open trends
//! hours): each is replaced whole, never edited in place.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Replaces `path` with what `write` writes: into `<path>.tmp`, synced, renamed over
/// `path`, and the folder synced. A crash leaves the old file or the new one, and at
/// most one `.tmp` beside it (its name is the same at each write).
pub fn replace<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<T>,
) -> anyhow::Result<T> {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    let tmp = PathBuf::from(name);
    let written = (|| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        let out = write(&mut f)?;
        f.flush()?;
        f.get_ref().sync_all()?;
        Ok::<_, std::io::Error>(out)
    })();
    let out = match written {
        Ok(out) => out,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("writing {}", tmp.display()));
        }
    };
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    // The rename itself, on disk.
    let _ = std::fs::File::open(folder(path)).and_then(|d| d.sync_all());
    Ok(out)
}

/// Removes `path` for good: the folder is synced too, so that a power loss cannot bring
/// the file back (a file read once must not be read again).
pub fn remove(path: &Path) -> std::io::Result<()> {
    std::fs::remove_file(path)?;
    let _ = std::fs::File::open(folder(path)).and_then(|d| d.sync_all());
    Ok(())
}

/// The folder `path` is in (`.` for a bare name).
fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_or_left_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("f");
        replace(&path, |w| w.write_all(b"one")).unwrap();
        replace(&path, |w| w.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // A write that fails leaves the file as it was, and no .tmp.
        let e = replace(&path, |w| {
            w.write_all(b"half")?;
            Err::<(), _>(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("disk full"), "{e:#}");
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
        // A folder that does not exist: said, with the path.
        let e = replace(&dir.join("no/such/f"), |w| w.write_all(b"x")).unwrap_err();
        assert!(format!("{e:#}").contains("no/such/f.tmp"), "{e:#}");
        remove(&path).unwrap();
        assert!(!path.exists());
        assert!(remove(&path).is_err(), "gone already");
    }
}
