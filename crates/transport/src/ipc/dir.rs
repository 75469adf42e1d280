//! The segment directory: where one user's (or one group's) segments live, and the checks that
//! keep every other user out of them.
//!
//! Segments never live directly in the world-writable shared-memory directory (`/dev/shm`, or
//! `$PEREGRINE_SHM_DIR`: the *base*), where any local user can create, link or lock any name.
//! They live in a directory of their own inside it:
//!
//! - `BASE/peregrine-UID/`, owned by the user, mode 0700: nobody else (but root) can list it,
//!   create, rename or remove a file in it, open a segment in it, or lock it;
//! - `BASE/peregrine-group-GID/` with `group=NAME`: group GID, mode 0770, segments mode 0660
//!   and group GID; shared by the members of that group, who trust each other.
//!
//! It is created when missing, and opened (never followed through a symbolic link: `O_NOFOLLOW`
//! on a descriptor of the base) and checked every time: a directory of that name that belongs
//! to someone else, has another mode, or is a link, is refused with an error saying what to do
//! (another user can still *squat* the name in the base, which denies service but reads
//! nothing). Every file operation afterwards is relative to the checked directory's descriptor
//! (`openat`, `renameat`, `linkat`, `unlinkat`, all with `O_NOFOLLOW` or their no-follow
//! flag), so nothing can be swapped under a path between a check and a use.
//!
//! Creators take turns through an exclusive `flock` of this directory (each turn on a fresh
//! open file description, so threads of one process exclude each other too): only its owner
//! (and group) can open it, so no other user can block creations.

use crate::error::OpenError;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The environment variable that replaces `/dev/shm` as the base directory.
pub const SHM_DIR_VAR: &str = "PEREGRINE_SHM_DIR";
/// The base directory when [`SHM_DIR_VAR`] is not set.
pub const DEFAULT_BASE: &str = "/dev/shm";

/// How long a creator waits for its turn before giving up (a creation takes milliseconds;
/// only a creator stopped mid-way, e.g. by SIGSTOP, holds the turn longer).
const CREATORS_TURN_WAIT_MS: u64 = 5_000;

/// Prefix of the temporary names segments are built under (a segment name never starts with
/// a dot, so they cannot collide).
pub(crate) const TEMP_PREFIX: &str = ".tmp.";

/// Where a segment directory is and who shares it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirSpec {
    /// The base directory; `None`: `$PEREGRINE_SHM_DIR`, else `/dev/shm`.
    pub base: Option<PathBuf>,
    /// Share with this group (`group=` of an `ipc://` URI) instead of keeping to the user.
    pub group: Option<u32>,
}

/// The user whose segment directory this process uses (its effective user id).
pub fn current_user() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The base directory: `$PEREGRINE_SHM_DIR` if set (it must be an existing directory), else
/// `/dev/shm`.
pub fn base_dir() -> Result<PathBuf, OpenError> {
    let Some(value) = std::env::var_os(SHM_DIR_VAR) else {
        let base = PathBuf::from(DEFAULT_BASE);
        return match std::fs::metadata(&base) {
            Ok(m) if m.is_dir() => Ok(base),
            _ => Err(OpenError::SegmentDir {
                path: base,
                problem: format!(
                    "it does not exist or is not a directory: mount a tmpfs there, or set {SHM_DIR_VAR} to a directory (on a tmpfs, for speed)"
                ),
            }),
        };
    };
    let base = PathBuf::from(&value);
    let problem = if value.is_empty() {
        Some("it is empty")
    } else {
        match std::fs::metadata(&base) {
            Ok(m) if m.is_dir() => None,
            Ok(_) => Some("it is not a directory"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some("no such directory"),
            Err(_) => Some("it cannot be read"),
        }
    };
    match problem {
        None => Ok(base),
        Some(p) => Err(OpenError::SegmentDir {
            path: base.clone(),
            problem: format!(
                "{SHM_DIR_VAR}={} is not usable: {p}; create the directory (mkdir -p {}) or unset {SHM_DIR_VAR} to use {DEFAULT_BASE}",
                base.display(),
                base.display()
            ),
        }),
    }
}

/// An opened and checked segment directory.
#[derive(Debug)]
pub(crate) struct SegmentDir {
    fd: OwnedFd,
    path: PathBuf,
    group: Option<u32>,
}

/// The creators' turn: held until dropped (or the process dies).
#[derive(Debug)]
pub(crate) struct Turn(#[allow(dead_code)] OwnedFd);

fn io_err(op: &'static str, path: &Path, e: impl Into<io::Error>) -> OpenError {
    OpenError::Io {
        op,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// The kind, permission bits, owner and group of a `stat` (whose field types vary by target).
#[allow(clippy::unnecessary_cast)]
fn kind_and_mode(st: &rustix::fs::Stat) -> (FileType, u32, u32, u32) {
    let mode = st.st_mode as u32;
    (
        FileType::from_raw_mode(mode as _),
        mode & 0o7777,
        st.st_uid as u32,
        st.st_gid as u32,
    )
}

impl SegmentDir {
    /// Opens (creating it if missing) and checks the directory `spec` names.
    pub fn open(spec: &DirSpec) -> Result<SegmentDir, OpenError> {
        let base = match &spec.base {
            Some(b) => b.clone(),
            None => base_dir()?,
        };
        let base_fd = rustix::fs::open(
            &base,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| OpenError::SegmentDir {
            path: base.clone(),
            problem: format!("cannot open it: {}", io::Error::from(e)),
        })?;
        let euid = rustix::process::geteuid().as_raw();
        let (name, want_mode) = match spec.group {
            None => (format!("peregrine-{euid}"), 0o700),
            Some(gid) => {
                check_member(gid, &base)?;
                (format!("peregrine-group-{gid}"), 0o770)
            }
        };
        let path = base.join(&name);
        let dir_err = |problem: String| OpenError::SegmentDir {
            path: path.clone(),
            problem,
        };
        let created = match rustix::fs::mkdirat(&base_fd, &name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(io_err("create the directory", &path, e)),
        };
        let fd = match rustix::fs::openat(
            &base_fd,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // With O_DIRECTORY, a link gives ENOTDIR rather than ELOOP: tell them apart.
            Err(Errno::LOOP | Errno::NOTDIR)
                if rustix::fs::statat(&base_fd, &name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(
                    |st| kind_and_mode(&st).0 == FileType::Symlink,
                ) =>
            {
                return Err(dir_err(format!(
                    "it is a symbolic link, and segment directories are never followed through links (someone may be redirecting your segments): remove it (rm {})",
                    path.display()
                )))
            }
            Err(Errno::NOTDIR) => {
                return Err(dir_err(format!(
                    "it is not a directory: remove it (rm {}) or set {SHM_DIR_VAR} to another base",
                    path.display()
                )))
            }
            Err(e) => return Err(io_err("open the directory", &path, e)),
        };
        if created {
            // mkdir's mode went through the umask; make it exact, and give it to the group.
            if let Some(gid) = spec.group {
                rustix::fs::fchown(&fd, None, Some(rustix::process::Gid::from_raw(gid)))
                    .map_err(|e| io_err("give the directory to its group", &path, e))?;
            }
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(want_mode))
                .map_err(|e| io_err("chmod the directory", &path, e))?;
        }
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err("stat the directory", &path, e))?;
        let (_, mode, uid, gid_of_dir) = kind_and_mode(&st);
        match spec.group {
            None if uid != euid => {
                return Err(dir_err(format!(
                    "it belongs to uid {uid}, not to you (uid {euid}): another user made it, maybe to read or replace your segments; have root remove it (rm -r {}), or set {SHM_DIR_VAR} to another base",
                    path.display()
                )))
            }
            Some(gid) if gid_of_dir != gid => {
                return Err(dir_err(format!(
                    "its group is {gid_of_dir}, not {gid}: have its owner (uid {uid}) or root fix it (chgrp {gid} {}) or remove it",
                    path.display()
                )))
            }
            _ => {}
        }
        if mode & 0o777 != want_mode {
            return Err(dir_err(format!(
                "its mode is {:04o}, not {want_mode:04o}: {}; fix it (chmod {want_mode:o} {})",
                mode,
                if mode & 0o007 != 0 {
                    "other users could read or replace your segments"
                } else {
                    "segments could not be shared as configured"
                },
                path.display()
            )));
        }
        Ok(SegmentDir {
            fd,
            path,
            group: spec.group,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another descriptor of the same checked directory.
    pub fn try_clone(&self) -> io::Result<SegmentDir> {
        Ok(SegmentDir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
            group: self.group,
        })
    }

    pub fn file_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Takes the creators' turn: an exclusive `flock` of this directory on a new open file
    /// description, waiting up to 5 s.
    pub fn turn(&self) -> Result<Turn, OpenError> {
        self.turn_within(CREATORS_TURN_WAIT_MS)
    }

    /// [`turn`](Self::turn) without waiting more than `wait_ms` (0: one try): for a publisher
    /// creating a successor on its data path, which must not block there.
    pub fn turn_within(&self, wait_ms: u64) -> Result<Turn, OpenError> {
        let fd = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open the directory", &self.path, e))?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Turn(fd)),
                Err(Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(Errno::WOULDBLOCK) => {
                    return Err(io_err(
                        "lock (another of your processes has been creating a segment for too long; is it stopped?)",
                        &self.path,
                        io::Error::from(io::ErrorKind::WouldBlock),
                    ))
                }
                Err(e) => return Err(io_err("lock", &self.path, e)),
            }
        }
    }

    /// Opens the file under `name` read-write, without following a link, and checks it is a
    /// regular file of this user (or of the configured group). `Ok(None)` if there is none.
    pub fn open_segment(&self, name: &str) -> Result<Option<File>, OpenError> {
        let path = self.file_path(name);
        let refused = |why: String| OpenError::Refused {
            path: path.clone(),
            why,
        };
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(refused(
                    "it is a symbolic link; segments are never opened through links".into(),
                ))
            }
            Err(e) => return Err(io_err("open", &path, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &path, e))?;
        let (kind, _, uid, gid) = kind_and_mode(&st);
        if kind != FileType::RegularFile {
            return Err(refused(format!("it is not a regular file but a {kind:?}")));
        }
        self.check_owner(&path, uid, gid)?;
        Ok(Some(File::from(fd)))
    }

    /// Refuses a file that is not this user's (or, with a group, not that group's).
    fn check_owner(&self, path: &Path, uid: u32, gid: u32) -> Result<(), OpenError> {
        let euid = rustix::process::geteuid().as_raw();
        let why = match self.group {
            None if uid != euid => format!(
                "it belongs to uid {uid}, not to you (uid {euid}); only your own segments are read"
            ),
            Some(g) if gid != g => {
                format!("its group is {gid}, not the configured group {g}")
            }
            _ => return Ok(()),
        };
        Err(OpenError::Refused {
            path: path.to_path_buf(),
            why,
        })
    }

    /// Creates a new empty file under a private temporary name, mode 0600 (0660 and the
    /// group's with a group), and returns it with its name.
    pub fn create_temp(&self, tag: &str) -> Result<(File, String), OpenError> {
        let name = format!(
            "{TEMP_PREFIX}{}.{:08x}.{tag}",
            std::process::id(),
            crate::random_u32()
        );
        let path = self.file_path(&name);
        let fd = rustix::fs::openat(
            &self.fd,
            &name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io_err("create", &path, e))?;
        let fail = |op: &'static str, e: Errno| {
            let _ = rustix::fs::unlinkat(&self.fd, &name, AtFlags::empty());
            io_err(op, &path, e)
        };
        let mode = match self.group {
            Some(gid) => {
                rustix::fs::fchown(&fd, None, Some(rustix::process::Gid::from_raw(gid)))
                    .map_err(|e| fail("give to the group", e))?;
                0o660
            }
            None => 0o600,
        };
        // The mode given to open() went through the umask; make it exact.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| fail("chmod", e))?;
        Ok((File::from(fd), name))
    }

    /// `linkat(temp, name)`: fails with `EEXIST` if the name is taken.
    pub fn link(&self, temp: &str, name: &str) -> io::Result<()> {
        rustix::fs::linkat(&self.fd, temp, &self.fd, name, AtFlags::empty()).map_err(Into::into)
    }

    /// `renameat(temp, name)`: replaces whatever the name held (a link is replaced, not
    /// followed).
    pub fn rename(&self, temp: &str, name: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, temp, &self.fd, name).map_err(Into::into)
    }

    pub fn unlink(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(Into::into)
    }

    /// True when `name` is (still) `file` itself, not a link to it nor a newer file.
    pub fn names(&self, name: &str, file: &impl AsFd) -> bool {
        match (
            rustix::fs::fstat(file),
            rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW),
        ) {
            (Ok(mine), Ok(named)) => mine.st_ino == named.st_ino && mine.st_dev == named.st_dev,
            _ => false,
        }
    }

    /// The names in the directory that may be segments or leftovers of a creation.
    pub fn entries(&self) -> Result<Vec<String>, OpenError> {
        let dir = rustix::fs::Dir::read_from(&self.fd)
            .map_err(|e| io_err("list the directory", &self.path, e))?;
        Ok(dir
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
            .filter(|n| n != "." && n != "..")
            .filter(|n| n.starts_with(TEMP_PREFIX) || validate_name(n).is_ok())
            .collect())
    }
}

/// Refuses a group this process is not a member of (it could not give files to it).
fn check_member(gid: u32, base: &Path) -> Result<(), OpenError> {
    if rustix::process::getegid().as_raw() == gid || rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let groups = rustix::process::getgroups().map_err(|e| io_err("getgroups", base, e))?;
    if groups.iter().any(|g| g.as_raw() == gid) {
        return Ok(());
    }
    Err(OpenError::SegmentDir {
        path: base.join(format!("peregrine-group-{gid}")),
        problem: format!(
            "you are not a member of group {gid} (group= of the ipc URI or [ipc] group): add your user to it, or drop group="
        ),
    })
}

/// The id of group `name` (a name, or a number).
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Some(gid);
    }
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        // SAFETY: `group` and `result` are valid out-pointers, `buf` is writable for its length;
        // getgrnam_r is the re-entrant form and keeps nothing after it returns.
        let (rc, found, gid) = unsafe {
            let mut group: libc::group = std::mem::zeroed();
            let mut result: *mut libc::group = std::ptr::null_mut();
            let rc = libc::getgrnam_r(
                cname.as_ptr(),
                &mut group,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            );
            (rc, !result.is_null(), group.gr_gid)
        };
        if rc == libc::ERANGE && buf.len() < 1 << 24 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return (rc == 0 && found).then_some(gid);
    }
}

/// A file of a process's own shared memory other than a segment (the benchmark floor's line),
/// in the user's segment directory, with the same checks. Held with an exclusive `flock`
/// while the creator's file is open, so publishers being created do not take it for a dead
/// one's and remove it; removed by them once its creator died.
#[derive(Debug)]
pub struct PrivateFile {
    pub file: File,
    pub path: PathBuf,
    dir: SegmentDir,
    name: String,
    creator: bool,
}

impl PrivateFile {
    /// Creates `name` (a segment name) of `len` zero bytes, mode 0600, exclusively locked.
    pub fn create(name: &str, len: u64) -> Result<PrivateFile, OpenError> {
        validate_name(name).map_err(OpenError::InvalidName)?;
        let dir = SegmentDir::open(&DirSpec::default())?;
        let _turn = dir.turn()?;
        let path = dir.file_path(name);
        let (file, tmp) = dir.create_temp(name)?;
        let built = file
            .set_len(len)
            .and_then(|()| {
                rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)
                    .map_err(Into::into)
            })
            .and_then(|()| dir.link(&tmp, name));
        let _ = dir.unlink(&tmp);
        built.map_err(|e| io_err("create", &path, e))?;
        Ok(PrivateFile {
            file,
            path,
            dir,
            name: name.to_string(),
            creator: true,
        })
    }

    /// Opens `name`, created by another process of this user, refusing links, other users'
    /// files, and files shorter than `min_len` (checked on the descriptor).
    pub fn open(name: &str, min_len: u64) -> Result<PrivateFile, OpenError> {
        validate_name(name).map_err(OpenError::InvalidName)?;
        let dir = SegmentDir::open(&DirSpec::default())?;
        let path = dir.file_path(name);
        let file = dir
            .open_segment(name)?
            .ok_or_else(|| io_err("open", &path, io::Error::from(io::ErrorKind::NotFound)))?;
        let len = file.metadata().map_err(|e| io_err("stat", &path, e))?.len();
        if len < min_len {
            return Err(OpenError::Refused {
                path,
                why: format!("it is {len} bytes, shorter than {min_len}"),
            });
        }
        Ok(PrivateFile {
            file,
            path,
            dir,
            name: name.to_string(),
            creator: false,
        })
    }
}

impl Drop for PrivateFile {
    /// The creator removes the name (if it is still this file).
    fn drop(&mut self) {
        if self.creator && self.dir.names(&self.name, &self.file) {
            let _ = self.dir.unlink(&self.name);
        }
    }
}

/// Checks a segment name: 1 to 200 characters of `A-Z a-z 0-9 . _ -`, not starting with a dot.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 200 {
        return Err(format!(
            "segment name '{name}' must be 1 to 200 characters long"
        ));
    }
    if name.starts_with('.')
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "segment name '{name}' may only use letters, digits, '.', '_' and '-' and must not start with '.'"
        ));
    }
    Ok(())
}
