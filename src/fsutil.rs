//! Files the daemon keeps between runs (the rows discovery found, the open trends
//! hours): each is replaced whole, never edited in place.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Replaces `path` with what `write` writes: into `<path>.tmp`, synced, renamed over
/// `path`, and the folder synced. A crash leaves the old file or the new one, and at
/// most one `.tmp` beside it (its name is the same at each write).
pub fn replace<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<T>,
) -> anyhow::Result<T> {
    let (staged, out) = stage(path, write)?;
    staged.commit()?;
    Ok(out)
}

/// A replacement of a file, written but not yet in place ([`stage`]).
#[must_use = "nothing replaces the file until it is committed"]
pub struct Staged {
    file: std::fs::File,
    tmp: PathBuf,
    path: PathBuf,
}

/// The first half of [`replace`]: writes `<path>.tmp` (into the page cache: fast), for
/// [`Staged::commit`], the slow half, which can then run on another thread. Only one
/// replacement of a path may be staged at a time (they share the `.tmp`).
pub fn stage<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<T>,
) -> anyhow::Result<(Staged, T)> {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    let tmp = PathBuf::from(name);
    let written = (|| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        let out = write(&mut f)?;
        let file = f.into_inner().map_err(|e| e.into_error())?;
        Ok::<_, std::io::Error>((file, out))
    })();
    match written {
        Ok((file, out)) => Ok((
            Staged {
                file,
                tmp,
                path: path.to_owned(),
            },
            out,
        )),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e).with_context(|| format!("writing {}", tmp.display()))
        }
    }
}

impl Staged {
    /// Syncs the written file, renames it over the path, and syncs the folder.
    pub fn commit(self) -> anyhow::Result<()> {
        if let Err(e) = self.file.sync_all() {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e).with_context(|| format!("writing {}", self.tmp.display()));
        }
        std::fs::rename(&self.tmp, &self.path)
            .with_context(|| format!("renaming to {}", self.path.display()))?;
        // The rename itself, on disk.
        let _ = std::fs::File::open(folder(&self.path)).and_then(|d| d.sync_all());
        Ok(())
    }
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
    use std::io::Write as _;

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
        // Staged: the file stays as it was until the commit.
        let (staged, ()) = stage(&path, |w| w.write_all(b"three")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        staged.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"three");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
        remove(&path).unwrap();
        assert!(!path.exists());
        assert!(remove(&path).is_err(), "gone already");
    }
}
