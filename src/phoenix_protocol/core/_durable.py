"""Durable file I/O: the only module in Phoenix that writes bytes to disk.

Three primitives, each with the guarantee it gives and the one it does not:

``atomic_write(path, data)``
    Temp file in the destination directory (``O_EXCL``, mode 0600, named by ``temp_name``:
    writer's pid and host tag, which ``phx doctor`` reads), every byte written,
    ``fsync``, ``os.replace`` onto ``path``, ``fsync`` of the directory. Readers see the old
    content or the new, never a mix, whatever process is killed when. With ``durable=False``
    the two fsyncs are skipped: still atomic against crashes of processes, but a power loss
    may lose the write (used for heartbeats, which the next heartbeat replaces). On failure
    the temp file is removed and ``StorageError`` is raised; the old file is untouched, except
    when only the final directory fsync fails: then the new content is in place but not
    confirmed durable, and the error says so.

``durable_append(path, data)``
    One ``write`` with ``O_APPEND`` (looping on short writes), then ``fsync`` (and an fsync of
    the directory when the file was created). Concurrent appenders must hold ``FileLock`` if
    they need whole lines never to interleave: a process killed in the middle of a large
    write can leave a torn tail, which readers skip (``iter_lines``) and the next locked
    append repairs (``repair_tail``).

``InPlaceFile(path)``
    A file read and overwritten at offsets through one descriptor kept open per process (the
    checkpoint log). ``write(chunks, offset)`` writes every byte with ``pwritev`` and, when
    durable, ``fdatasync``s: over blocks written before, that flushes the data alone, not the
    file's metadata, the cheapest durable write a file system offers (SQLite's write-ahead log
    relies on the same). It guarantees nothing about torn writes: the caller frames and checksums
    what it writes. The descriptor is reopened when the path names another file or after a fork.
    ``identity()`` tells which file the path names without asking for its timestamps (see there):
    on Linux 6.13+ a ``stat`` of a file makes its next write record a fine-grained modification
    time, and the ``fdatasync`` after that commits the journal (measured: 0.12 -> 0.18 ms).

``FileLock(path)``
    An exclusive ``flock`` on a separate ``*.lock`` file, re-entrant within a thread (threads of
    one process take turns on a per-path lock first, since a flock belongs to the process), released
    by the kernel when the holder dies (SIGKILL included), so a crashed writer never leaves a
    stale lock. An uncontended lock costs one non-blocking ``flock``; a contended one waits in
    the kernel (fair to every waiter) with a ``SIGALRM`` timer as the bound, or, outside the main
    thread, polls with short jittered sleeps. Waiting is bounded: ``LockTimeoutError`` after
    ``timeout`` seconds. Lock files are never deleted (deleting one while another process waits
    on it breaks exclusion). A process keeps the descriptor of a lock file open between two locks
    of it (for a few dozen files; one deleted by hand is opened again; a forked child opens its
    own). POSIX only.

Agent files (``confine``)
    Below a registered root (every ``Home`` registers its own; the heartbeats' runtime directory
    its own) every primitive here touches only regular files of this user: each directory from
    the root down is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the one above it and
    must belong to this user, the file itself is opened with ``O_NOFOLLOW | O_NONBLOCK`` and
    ``fstat``-ed (a FIFO, a device, a socket, a directory, a symbolic link or another user's file
    is refused with ``UnsafeFileError`` at once: nothing blocks, nothing is followed), and a read
    given a ``limit`` refuses a larger file before reading it. Outside the registered roots files
    are still opened without blocking and must be regular files (symbolic links are followed
    there: settings files are often links). ``check_entry`` tells the same without opening;
    ``move_aside`` is how ``phx doctor`` puts a refused entry out of the way (never deleted).

Files are created 0600 and directories 0700. Hot path: imports ``os``, ``fcntl``, ``time``.
"""

from __future__ import annotations

import _thread
import errno
import fcntl
import os
import time

from phoenix_protocol.core._errors import LockTimeoutError, StorageError, UnsafeFileError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import TracebackType

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "FileLock",
    "InPlaceFile",
    "atomic_create",
    "atomic_write",
    "check_entry",
    "confine",
    "durable_append",
    "ensure_dir",
    "fsync_dir",
    "fsync_file",
    "fsync_files",
    "host_tag",
    "in_place_file",
    "iter_lines",
    "keep_damaged",
    "move_aside",
    "open_regular",
    "read_bytes",
    "read_last_line",
    "read_range",
    "repair_tail",
    "temp_name",
    "temp_writer",
    "torn_tail_length",
    "truncate_file",
]

FILE_MODE = 0o600
DIR_MODE = 0o700
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_OPEN = _CLOEXEC | _NONBLOCK | _NOCTTY  # every file this module opens: never blocks, never a terminal
_DIR_FDS = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd  # os.replace goes with rename
_ADVISE = hasattr(os, "posix_fadvise")
_PWRITEV = hasattr(os, "pwritev")
_tmp_counter = 0
_host_tags: dict[str, str] = {}  # host name -> its tag (few entries: this host, the hosts a doctor saw)


def host_tag(host: str | None = None) -> str:
    """The tag a temporary file's name carries for the host of its writer (this host by
    default): ``h`` and 8 hex digits of FNV-1a over the host name, so that a home shared between
    machines tells which machine's writer a temporary file belongs to (a pid means something
    only on its own host). Never all digits, so it cannot be mistaken for a pid or a counter."""
    if host is None:
        host = os.uname().nodename  # _process.hostname(), without importing it on the hot path
    tag = _host_tags.get(host)
    if tag is None:
        h = 0x811C9DC5
        for byte in host.encode("utf-8", "surrogateescape"):
            h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
        tag = _host_tags[host] = f"h{h:08x}"
    return tag


def temp_name(name: str) -> str:
    """A fresh name for the temporary file of a write of ``name`` (a base name), in the same
    directory: ``.<name>.<pid>.<n>.<host tag>.tmp`` (see ``host_tag``; ``phx doctor`` removes one
    whose writer is gone, and reads the older ``.<name>.<pid>.<n>.tmp`` as this host's)."""
    global _tmp_counter
    _tmp_counter += 1
    return f".{name}.{os.getpid()}.{_tmp_counter}.{host_tag()}.tmp"


def temp_writer(name: str) -> tuple[int, str | None] | None:
    """The writer a temporary file's name (a base name) names: ``(pid, host tag)`` for a name
    made by ``temp_name``, ``(pid, None)`` for one from before host tags (``.<name>.<pid>.<n>.tmp``,
    this host's), ``None`` for any other name."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    parts = name.rsplit(".", 4)  # [".<name>", pid, n, host tag, "tmp"]
    if len(parts) == 5 and _decimal(parts[1]) and _decimal(parts[2]) and _is_host_tag(parts[3]):
        return int(parts[1]), parts[3]
    parts = name.rsplit(".", 3)  # [".<name>", pid, n, "tmp"]
    if len(parts) == 4 and _decimal(parts[1]) and _decimal(parts[2]):
        return int(parts[1]), None
    return None


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdecimal()


def _is_host_tag(text: str) -> bool:
    """Whether ``text`` has the shape of ``host_tag``'s tags: ``h`` and 8 hex digits."""
    return len(text) == 9 and text[0] == "h" and all(c in "0123456789abcdef" for c in text[1:])


def _fail(action: str, path: str, exc: OSError) -> StorageError:
    reason = exc.strerror or str(exc)
    hint = ""
    if exc.errno == errno.ENOSPC:
        hint = " Free some disk space and retry."
    elif exc.errno in (errno.EACCES, errno.EPERM):
        hint = " Check the owner and permissions of the Phoenix home."
    elif exc.errno == errno.EROFS:
        hint = " The file system is read-only."
    err = StorageError(f"could not {action} {path}: {reason}.{hint}", path=path)
    err.__cause__ = exc
    return err


# -- agent files: confined below registered roots ---------------------------------------------

_roots: list[tuple[str, bool]] = []
"""Registered roots, longest first: ``(root, follow)``; ``follow``: the root itself may be a
symbolic link (a home the user pointed somewhere), else it is opened with ``O_NOFOLLOW`` too
(a runtime directory in a shared /tmp)."""
_euid = os.geteuid() if hasattr(os, "geteuid") else -1

_KINDS = {
    "symlink": "a symbolic link",
    "fifo": "a named pipe (FIFO)",
    "socket": "a socket",
    "device": "a device",
    "directory": "a directory",
    "not-directory": "not a directory",
    "foreign-owner": "owned by another user",
    "too-large": "too large",
}


def confine(root: str, *, follow: bool = True) -> None:
    """Treat every path below ``root`` (absolute) as an agent file (see the module docstring).
    Registering a root twice is harmless; the longest registered root containing a path wins."""
    global _roots
    root = os.path.normpath(root)
    if not os.path.isabs(root) or root == "/":
        return
    known = dict(_roots)
    if root in known and (follow or not known[root]):
        return
    known[root] = follow and known.get(root, True)
    # A new list, bound at once: a reader in another thread sees the old one or the new one
    # (sorting in place would show it an empty list meanwhile).
    _roots = sorted(known.items(), key=lambda item: -len(item[0]))


def _confined(path: str) -> tuple[str, bool, list[str]] | None:
    """``(root, follow, parts below the root)`` for a path below a registered root, else ``None``."""
    for root, follow in _roots:
        if path.startswith(root) and path[len(root) : len(root) + 1] == "/":
            parts = path[len(root) + 1 :].split("/")
            if "" in parts or "." in parts or ".." in parts:
                normal = os.path.normpath(path)
                return None if normal == path else _confined(normal)
            return root, follow, parts
    return None


def _kind_of(mode: int) -> str:
    import stat

    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "not-directory"


def _unsafe(path: str, kind: str, detail: str = "") -> UnsafeFileError:
    what = _KINDS.get(kind, kind) + (f" ({detail})" if detail else "")
    if kind == "too-large":
        message = f"{path} is {what}: Phoenix does not read it. Run `phx doctor`, which moves it aside."
    elif kind in ("directory", "not-directory") and detail == "in the way":
        message = f"{path} is {_KINDS[kind]}: Phoenix cannot use it. Run `phx doctor`, which moves it aside."
    else:
        message = (
            f"{path} is {what}, not a regular file of this user: Phoenix neither reads nor writes it. "
            "Run `phx doctor`, which moves it aside."
        )
    return UnsafeFileError(message, path=path, kind=kind)


def _refuse_entry(path: str, name: str, dir_fd: int | None) -> UnsafeFileError:
    """The refusal for entry ``name`` (of ``dir_fd``, or the path itself) that could not be opened
    as a regular file or a directory: what it is, said by ``lstat``."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False) if dir_fd is not None else os.lstat(path)
    except OSError:
        return _unsafe(path, "not-directory")
    kind = _kind_of(st.st_mode)
    detail = ""
    if kind == "symlink":
        try:
            target = os.readlink(name, dir_fd=dir_fd) if dir_fd is not None else os.readlink(path)
            detail = "to " + (target if len(target) <= 200 else target[:199] + "…")
        except OSError:
            pass
    return _unsafe(path, kind, detail)


def _check_owner(fd: int, path: str, st: os.stat_result | None = None) -> os.stat_result:
    st = st or os.fstat(fd)
    if _euid >= 0 and st.st_uid != _euid:
        raise _unsafe(path, "foreign-owner", f"uid {st.st_uid}")
    return st


def _walk(root: str, follow: bool, parts: list[str], path: str, *, create: bool = False) -> int:
    """A descriptor of the directory ``root/parts...``, each step opened without following a
    symbolic link and checked to belong to this user; ``create`` makes the missing ones (0700).
    Raises ``FileNotFoundError`` (one is missing) or ``UnsafeFileError``."""
    flags = os.O_RDONLY | _DIRECTORY | _OPEN
    try:
        fd = os.open(root, flags | (0 if follow else _NOFOLLOW))
    except FileNotFoundError:
        if not create:
            raise
        ensure_dir(root)
        fd = os.open(root, flags | (0 if follow else _NOFOLLOW))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise _refuse_entry(root, root, None) from None
        raise
    try:
        _check_owner(fd, root)
        here = root
        for part in parts:
            here = here + "/" + part
            try:
                child = os.open(part, flags | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    os.fsync(fd)
                try:
                    child = os.open(part, flags | _NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise _refuse_entry(here, part, fd) from None
                    raise
                os.fchmod(child, DIR_MODE)  # mkdir's mode is masked by the umask
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _refuse_entry(here, part, fd) from None
                raise
            os.close(fd)
            fd = child
            _check_owner(fd, here)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_checked(path: str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> tuple[int, os.stat_result]:
    """``open_regular``, and the file's ``fstat``."""
    import stat

    where = _confined(path)
    if where is None:
        fd = os.open(path, flags | _OPEN, mode)
        owned = False
    else:
        root, follow, parts = where
        dir_fd = _walk(root, follow, parts[:-1], path)
        try:
            fd = os.open(parts[-1], flags | _OPEN | _NOFOLLOW, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
                raise _refuse_entry(path, parts[-1], dir_fd) from None
            raise
        finally:
            os.close(dir_fd)
        owned = True
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _unsafe(path, _kind_of(st.st_mode))
        if owned:
            _check_owner(fd, path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """A descriptor of the regular file ``path`` (``flags`` as for ``os.open``; ``O_CREAT`` makes
    it, ``mode``), opened without blocking. Below a registered root (``confine``) nothing on the
    way is followed and everything must belong to this user. Raises ``FileNotFoundError`` (or
    another ``OSError``) as ``os.open`` does, and ``UnsafeFileError`` for what it refuses."""
    return _open_checked(path, flags, mode)[0]


def check_entry(path: str, *, limit: int | None = None) -> UnsafeFileError | None:
    """What is wrong with ``path`` as an agent file, without opening it (``lstat``; below a
    registered root its directories are checked as ``open_regular`` would): the refusal
    ``open_regular`` or a read bounded by ``limit`` would raise, or ``None`` (a regular file of
    this user, or nothing there)."""
    import stat

    try:
        where = _confined(path)
        if where is None:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                st = os.stat(path)
        else:
            root, follow, parts = where
            dir_fd = _walk(root, follow, parts[:-1], path)
            try:
                st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    return _refuse_entry(path, parts[-1], dir_fd)
            finally:
                os.close(dir_fd)
            if _euid >= 0 and st.st_uid != _euid:
                return _unsafe(path, "foreign-owner", f"uid {st.st_uid}")
        if not stat.S_ISREG(st.st_mode):
            return _unsafe(path, _kind_of(st.st_mode))
        if limit is not None and st.st_size > limit:
            return _too_large(path, st.st_size, limit)
    except FileNotFoundError:
        return None
    except UnsafeFileError as exc:
        return exc
    except OSError as exc:
        raise _fail("check", path, exc) from exc
    return None


def _too_large(path: str, size: int, limit: int) -> UnsafeFileError:
    return _unsafe(path, "too-large", f"{size:,} bytes; Phoenix reads at most {limit:,} from it")


def move_aside(path: str, now_ms: int) -> str:
    """Rename the entry at ``path`` (whatever it is: a symbolic link is renamed, not followed) to
    ``<path>.quarantine-<time>`` beside it, durably, so that Phoenix can write a file of its own
    there; nothing is deleted or changed. Returns the new path."""
    from phoenix_protocol.core._clock import iso_from_ms

    stamp = iso_from_ms(now_ms).replace(":", "").replace("-", "")
    target = f"{path}.quarantine-{stamp}"
    n = 1
    while os.path.lexists(target):
        n += 1
        target = f"{path}.quarantine-{stamp}-{n}"
    try:
        os.rename(path, target)
        fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        raise _fail("move aside", path, exc) from exc
    return target


def _parent_fd(path: str) -> tuple[int, str] | None:
    """For a path below a registered root: a checked descriptor of its directory and its name;
    ``None`` elsewhere."""
    if not _DIR_FDS:  # pragma: no cover - platforms without *at() calls
        return None
    where = _confined(path)
    if where is None:
        return None
    root, follow, parts = where
    return _walk(root, follow, parts[:-1], path), parts[-1]


def _check_target(dir_fd: int, name: str, path: str) -> None:
    """Before replacing entry ``name`` of ``dir_fd``: it is missing or a regular file of this user
    (a write never replaces a symbolic link, a FIFO or someone else's file; ``move_aside`` does)."""
    import stat

    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise _refuse_entry(path, name, dir_fd)
    if _euid >= 0 and st.st_uid != _euid:
        raise _unsafe(path, "foreign-owner", f"uid {st.st_uid}")


def ensure_dir(path: str) -> None:
    """Create ``path`` and missing parents with mode 0700. An existing directory is left as it is.
    Below a registered root (``confine``) every directory on the way must be a directory of this
    user, not a symbolic link (``UnsafeFileError``)."""
    where = _confined(path) if _DIR_FDS else None
    if where is not None:
        root, follow, parts = where
        try:
            os.close(_walk(root, follow, parts, path, create=True))
        except OSError as exc:
            raise _fail("create directory", path, exc) from exc
        return
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path:
        ensure_dir(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise StorageError(f"could not create directory {path}: a file is in the way.", path=path) from None
        return
    except OSError as exc:
        raise _fail("create directory", path, exc) from exc
    try:
        os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask
        if parent:
            fsync_dir(parent)
    except OSError as exc:
        raise _fail("create directory", path, exc) from exc


def fsync_dir(path: str) -> None:
    """``fsync`` a directory so that a rename or a new entry in it survives a power loss."""
    fd = os.open(path or ".", os.O_RDONLY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _datasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


def _open_existing(path: str, action: str) -> int | None:
    """A read-only descriptor of the regular file ``path`` (``open_regular``), or ``None`` when
    it does not exist."""
    try:
        return _open_checked(path)[0]
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _fail(action, path, exc) from exc


def fsync_file(path: str) -> bool:
    """``fsync`` an existing file (written earlier without it); ``False`` when it is gone."""
    fd = _open_existing(path, "sync")
    if fd is None:
        return False
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _fail("sync", path, exc) from exc
    finally:
        os.close(fd)
    return True


def fsync_files(paths: list[str]) -> list[str]:
    """Flush many files written without a flush (whole data and what reading it needs); returns
    those that are gone. Writeback of all of them is started first (``posix_fadvise(DONTNEED)``
    starts it without waiting), then each is waited for with ``fdatasync``: the file system
    commits them in a few journal transactions rather than one per file (2-3x faster than
    flushing them one by one)."""
    missing: list[str] = []
    for start in range(0, len(paths), 256):  # bounded: a few hundred descriptors at once
        opened: list[tuple[str, int]] = []
        try:
            for path in paths[start : start + 256]:
                fd = _open_existing(path, "sync")
                if fd is None:
                    missing.append(path)
                    continue
                opened.append((path, fd))
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            for path, fd in opened:
                try:
                    _datasync(fd)
                except OSError as exc:
                    raise _fail("sync", path, exc) from exc
        finally:
            for _path, fd in opened:
                _close_quietly(fd)
    return missing


def read_range(path: str, offset: int, length: int | None = None, *, limit: int | None = None) -> bytes | None:
    """``length`` bytes of ``path`` from ``offset`` (fewer at its end; all of it to the end when
    ``length`` is ``None``), or ``None`` when the file does not exist. ``limit``: a file larger
    than this many bytes is refused (``UnsafeFileError``, kind ``too-large``) before any read,
    and so is one found to have grown past it while it was read."""
    try:
        fd, st = _open_checked(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _fail("read", path, exc) from exc
    try:
        if limit is not None:
            if st.st_size > limit:
                raise _too_large(path, st.st_size, limit)
            cap = max(limit - offset, 0) + 1  # a byte more than allowed tells a file that grew
            want = cap if length is None else min(length, cap)
            data = _read_at(fd, want, offset, max(st.st_size - offset, 0) + 1)
            if want == cap and len(data) == cap:
                raise _too_large(path, offset + len(data), limit)
            return data
        if length is None:
            # Sized by the file: one read for a file that does not grow meanwhile (a short read
            # is its end), instead of a 1 MiB buffer cut down, a read of nothing, and a join.
            want = max(st.st_size - offset, 0) + 1
            first = os.pread(fd, want, offset)
            if len(first) < want:
                return first
            offset += len(first)
            chunks = [first]
        else:
            chunks = []
        while length is None or length > 0:
            chunk = os.pread(fd, 1 << 20 if length is None else min(length, 1 << 24), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            if length is not None:
                length -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _fail("read", path, exc) from exc
    finally:
        os.close(fd)


def _read_at(fd: int, length: int, offset: int, expected: int) -> bytes:
    """Up to ``length`` bytes from ``offset`` (fewer only at the end of the file); the first read
    asks for ``expected`` bytes (what ``fstat`` said, and one more to see the end)."""
    first = os.pread(fd, min(length, expected), offset)
    if len(first) == length or len(first) < min(length, expected):
        return first
    chunks = [first]
    got = len(first)
    while got < length:
        chunk = os.pread(fd, min(length - got, 1 << 20), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class InPlaceFile:
    """Positioned reads and durable positioned writes of one file (see the module docstring).
    Get one with ``in_place_file(path)``: a process keeps one per path, and a few dozen open."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1
        self._ino = -1
        self._pid = -1
        self._link: str | None = None  # what /proc/self/fd/<fd> named when it was opened
        self._lock = _thread.allocate_lock()  # one call at a time uses (or closes) the descriptor

    def stat(self) -> os.stat_result | None:
        """The file's ``stat``, or ``None`` when it does not exist."""
        try:
            return os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _fail("read", self.path, exc) from exc

    def identity(self) -> int | None:
        """The inode number of the file now at ``path`` (``None``: there is none), opening it if
        need be. Where ``/proc/self/fd`` shows it (Linux), the open descriptor is checked to still
        be that file (not deleted, not renamed over) by reading its link, which does not query the
        file's timestamps as ``stat`` would (see the module docstring); elsewhere the path is
        ``stat``-ed. A file replaced since is opened anew."""
        with self._lock:
            try:
                return self._identity()
            except OSError as exc:
                raise _fail("read", self.path, exc) from exc

    def look(
        self, offset: int, length: int, offset2: int, length2: int, *, check: bool = True
    ) -> tuple[int, bytes, bytes] | None:
        """``identity()`` and two reads of the file it names (up to ``length`` bytes from
        ``offset``, up to ``length2`` from ``offset2``) in one call: a reader's check of a log
        (its header, and what follows the end it knew). ``None``: there is no file.
        ``check=False``: the caller knows the path was not replaced since (its directory did not
        change), so an open descriptor is read without checking it."""
        with self._lock:
            try:
                if not check and self._fd >= 0 and self._pid == _pid:
                    ino: int | None = self._ino
                else:
                    ino = self._identity()
                if ino is None:
                    return None
                return ino, os.pread(self._fd, length, offset), os.pread(self._fd, length2, offset2)
            except OSError as exc:
                raise _fail("read", self.path, exc) from exc

    def _identity(self) -> int | None:
        """``identity()`` (caller holds ``_lock``)."""
        if self._fd >= 0 and self._pid == _pid:
            if self._link is None:  # no /proc here: ask the path
                try:
                    same = os.stat(self.path).st_ino == self._ino
                except FileNotFoundError:
                    same = False
            else:
                try:
                    link = os.readlink(f"/proc/self/fd/{self._fd}")
                except OSError:
                    link = ""
                same = link == self._link and not link.endswith(" (deleted)")
            if same:
                return self._ino
            self._close()
        try:
            self._descriptor()
        except FileNotFoundError:
            self._close()
            return None
        return self._ino

    def _descriptor(self, ino: int | None = None) -> int:
        """The open descriptor (caller holds ``_lock``), reopened when the file at ``path`` is
        another (``ino``) or after a fork."""
        if self._fd >= 0 and self._pid == _pid and (ino is None or ino == self._ino):
            return self._fd
        self._close()
        try:
            fd, st = _open_checked(self.path, os.O_RDWR)
        except PermissionError:
            fd, st = _open_checked(self.path)  # a reader without write access
        self._fd, self._ino, self._pid = fd, st.st_ino, _pid
        try:
            self._link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            self._link = None
        return fd

    def read(self, offset: int, length: int, *, ino: int | None = None) -> bytes:
        """Up to ``length`` bytes from ``offset`` (fewer at the end of the file); ``ino``: the
        caller's ``stat`` of the path, to make sure the descriptor reads that file."""
        with self._lock:
            try:
                fd = self._descriptor(ino)
                chunks = []
                while length > 0:
                    chunk = os.pread(fd, min(length, 1 << 24), offset)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    offset += len(chunk)
                    length -= len(chunk)
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            except FileNotFoundError:
                self._close()
                return b""
            except OSError as exc:
                raise _fail("read", self.path, exc) from exc

    def write(
        self,
        chunks: Sequence[bytes | memoryview],
        offset: int,
        *,
        durable: bool = True,
        ino: int | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Write ``chunks`` one after the other from ``offset``, then ``fdatasync`` (``durable``);
        ``ino`` as for ``read``. ``meanwhile`` runs between the two, once the device has been
        asked to start writing the range (``posix_fadvise(DONTNEED)`` starts the writeback of the
        dirty pages without waiting): bookkeeping that need not wait for the flush overlaps it
        instead of adding to it (a failed flush raises after it; it must not use this file)."""
        with self._lock:
            try:
                fd = self._descriptor(ino)
                start = offset
                pending = [memoryview(c) for c in chunks]
                if not _PWRITEV and len(pending) > 1:  # pragma: no cover - platforms without pwritev
                    pending = [memoryview(b"".join(pending))]
                while pending:
                    written = os.pwritev(fd, pending, offset) if _PWRITEV else os.pwrite(fd, pending[0], offset)
                    if written <= 0:  # pragma: no cover - regular files never return 0 for a non-empty write
                        raise OSError(errno.EIO, "write returned 0")
                    offset += written
                    while pending and written >= len(pending[0]):
                        written -= len(pending[0])
                        pending.pop(0)
                    if written:
                        pending[0] = pending[0][written:]
                if meanwhile is not None:
                    if durable and _ADVISE:  # start writing the range now: the bookkeeping overlaps it
                        os.posix_fadvise(fd, start, offset - start, os.POSIX_FADV_DONTNEED)
                    meanwhile()
                if durable:
                    _datasync(fd)
            except OSError as exc:
                raise _fail("write", self.path, exc) from exc

    def close(self) -> None:
        """Close the descriptor (the next call opens it again)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._fd >= 0 and self._pid == _pid:
            _close_quietly(self._fd)
        self._fd = -1
        self._ino = -1
        self._link = None

    def __del__(self) -> None:
        self._close()


_in_place: dict[str, InPlaceFile] = {}  # path -> the one InPlaceFile of this process for it
_in_place_guard = _thread.allocate_lock()
_IN_PLACE_MAX = 64


def in_place_file(path: str) -> InPlaceFile:
    """The process's ``InPlaceFile`` for ``path``. At most ``_IN_PLACE_MAX`` are kept (a
    long-running process that touches many agents closes the oldest descriptors), whatever
    becomes of the objects that asked for them."""
    found = _in_place.get(path)
    if found is not None:
        return found
    victim: InPlaceFile | None = None
    with _in_place_guard:
        found = _in_place.get(path)
        if found is None:
            found = _in_place[path] = InPlaceFile(path)
            if len(_in_place) > _IN_PLACE_MAX:
                victim = _in_place.pop(next(iter(_in_place)))
    if victim is not None:
        victim.close()  # under its own lock: never while a call of it uses the descriptor
    return found


def truncate_file(path: str, size: int) -> None:
    """Cut ``path`` to ``size`` bytes (a torn tail a killed writer left), under the caller's lock."""
    try:
        fd = _open_checked(path, os.O_WRONLY)[0]
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _fail("truncate", path, exc) from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - regular files never return 0 for a non-empty write
            raise OSError(errno.EIO, "write returned 0")
        view = view[written:]


def keep_damaged(path: str, data: bytes, now_ms: int) -> str:
    """Keep the bytes of a damaged ``path`` beside it, as ``<path>.corrupt-<time>`` (UTC, e.g.
    ``20260124T101500.123Z``), atomically and durably, before a repair replaces it: damaged data
    is kept for inspection, never deleted. Returns the copy's path."""
    from phoenix_protocol.core._clock import iso_from_ms

    kept = f"{path}.corrupt-{iso_from_ms(now_ms).replace(':', '').replace('-', '')}"
    atomic_write(kept, data)
    return kept


def atomic_write(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring for the guarantee).
    Below a registered root (``confine``) the directory is reached without following anything
    and only a regular file of this user is replaced (``UnsafeFileError`` otherwise)."""
    try:
        parent = _parent_fd(path)
    except OSError as exc:
        raise _fail("write", path, exc) from exc
    if parent is None:
        _atomic_write(path, os.path.dirname(path) or ".", os.path.basename(path), None, data, durable)
        return
    dir_fd, name = parent
    try:
        _atomic_write(path, "", name, dir_fd, data, durable)
    finally:
        os.close(dir_fd)


def _atomic_write(path: str, directory: str, name: str, dir_fd: int | None, data: bytes, durable: bool) -> None:
    """``atomic_write`` in ``directory`` (by name), or in ``dir_fd`` (a checked directory)."""
    fd = -1
    tmp = ""
    for _ in range(100):
        tmp = temp_name(name) if dir_fd is not None else os.path.join(directory, temp_name(name))
        try:
            fd = _open_at(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW, dir_fd)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise _fail("write", path, exc) from exc
    else:  # pragma: no cover
        raise StorageError(f"could not write {path}: no free temporary name.", path=path)
    try:
        try:
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if dir_fd is None:
            os.replace(tmp, path)
        else:
            _check_target(dir_fd, name, path)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        _unlink_quietly(tmp, dir_fd)
        if isinstance(exc, OSError):
            raise _fail("write", path, exc) from exc
        raise
    if durable:
        try:
            if dir_fd is None:
                fsync_dir(directory)
            else:
                os.fsync(dir_fd)
        except OSError as exc:
            raise _fail("confirm durable write of", path, exc) from exc


def atomic_create(path: str, data: bytes, *, sync_dir: bool = True, durable: bool = True) -> None:
    """Create ``path`` with ``data`` atomically, refusing to replace an existing file.

    Temp file in the same directory, every byte written, ``fsync``, then ``link`` to ``path``
    (which fails with ``FileExistsError`` if ``path`` exists: nothing is ever overwritten), then
    the temp name is removed. With ``sync_dir=False`` the caller promises to ``fsync`` the
    directory itself (to batch it with a later write in the same directory). With
    ``durable=False`` neither fsync is done: the file still appears whole or not at all to every
    process, and the caller holds the durable copy elsewhere (the checkpoint log).
    """
    directory = os.path.dirname(path) or "."
    try:
        parent = _parent_fd(path)
    except OSError as exc:
        raise _fail("write", path, exc) from exc
    dir_fd, name = parent if parent is not None else (None, path)
    tmp = temp_name(name) if dir_fd is not None else os.path.join(directory, temp_name(os.path.basename(path)))
    try:
        try:
            fd = _open_at(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW, dir_fd)
        except OSError as exc:
            raise _fail("write", path, exc) from exc
        try:
            try:
                _write_all(fd, data)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            # fails with FileExistsError for any entry at ``name``, a symbolic link included
            if dir_fd is None:
                os.link(tmp, path)
            else:
                os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileExistsError:
            _unlink_quietly(tmp, dir_fd)
            raise
        except BaseException as exc:
            _unlink_quietly(tmp, dir_fd)
            if isinstance(exc, OSError):
                raise _fail("write", path, exc) from exc
            raise
        _unlink_quietly(tmp, dir_fd)
        if sync_dir and durable:
            try:
                if dir_fd is None:
                    fsync_dir(directory)
                else:
                    os.fsync(dir_fd)
            except OSError as exc:
                raise _fail("confirm durable write of", path, exc) from exc
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def _unlink_quietly(path: str, dir_fd: int | None = None) -> None:
    try:
        if dir_fd is None:
            os.unlink(path)
        else:
            os.unlink(path, dir_fd=dir_fd)
    except OSError:
        pass


def _open_at(name: str, flags: int, dir_fd: int | None) -> int:
    """``os.open`` of a new file, relative to ``dir_fd`` when there is one."""
    if dir_fd is None:
        return os.open(name, flags, FILE_MODE)
    return os.open(name, flags, FILE_MODE, dir_fd=dir_fd)


def durable_append(path: str, data: bytes, *, durable: bool = True) -> None:
    """Append ``data`` to ``path`` (created 0600 if missing) and ``fdatasync`` it (which flushes
    the data and the file size, all an append needs). Only to a regular file (``open_regular``)."""
    created = not os.path.exists(path)
    try:
        fd = _open_checked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)[0]
    except OSError as exc:
        raise _fail("append to", path, exc) from exc
    try:
        _write_all(fd, data)
        if durable:
            _datasync(fd)
    except OSError as exc:
        raise _fail("append to", path, exc) from exc
    finally:
        os.close(fd)
    if created and durable:
        try:
            fsync_dir(os.path.dirname(path) or ".")
        except OSError as exc:
            raise _fail("confirm durable append to", path, exc) from exc


def read_bytes(path: str, *, limit: int | None = None) -> bytes | None:
    """The whole content of ``path``, or ``None`` when it does not exist; ``limit`` as for
    ``read_range``."""
    return read_range(path, 0, limit=limit)


def iter_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` for each complete newline-terminated line of ``data``.

    A final fragment without a newline (a torn append) is not yielded; callers learn about it
    from ``torn_tail_length``.
    """
    start = 0
    end = len(data)
    while start < end:
        nl = data.find(b"\n", start)
        if nl < 0:
            return
        yield start, data[start:nl]
        start = nl + 1


def torn_tail_length(data: bytes) -> int:
    """Bytes after the last newline: non-zero when the last append was torn."""
    nl = data.rfind(b"\n")
    return len(data) - (nl + 1)


def repair_tail(path: str, *, limit: int | None = None) -> int:
    """Cut a torn final line (bytes after the last newline) off ``path``. Returns bytes removed.

    Call it holding the file's lock, before appending. The fragment was never acknowledged:
    the append that wrote it did not return. ``limit``: a tail longer than this is no line a
    writer of this file was cut off in; it is refused (``UnsafeFileError``, kind ``too-large``),
    not cut, and not read past the limit.
    """
    try:
        fd, st = _open_checked(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise _fail("repair", path, exc) from exc
    try:
        size = st.st_size
        if size == 0:
            return 0
        pos = size
        block = 4096
        while pos > 0:
            if limit is not None and size - pos > limit:
                raise _unsafe(path, "too-large", f"it ends with more than {limit:,} bytes that are no complete line")
            start = max(0, pos - block)
            chunk = os.pread(fd, pos - start, start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
            block = min(block * 2, 1 << 20)
        else:
            if limit is not None and size > limit:
                raise _unsafe(path, "too-large", f"it ends with more than {limit:,} bytes that are no complete line")
            keep = 0
        if keep == size:
            return 0
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return size - keep
    except OSError as exc:
        raise _fail("repair", path, exc) from exc
    finally:
        os.close(fd)


def read_last_line(path: str, *, limit: int | None = None) -> bytes | None:
    """The last complete line of ``path`` (without its newline), ignoring a torn tail; ``None`` if
    none. ``limit``: reads at most this many bytes back from the end; a file whose last line (and
    torn tail) does not end within them is refused (``UnsafeFileError``, kind ``too-large``)."""
    fd = _open_existing(path, "read")
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        pos = size
        tail = b""
        block = 8192
        while pos > 0:
            if limit is not None and size - pos >= limit:
                raise _unsafe(path, "too-large", f"no complete last line within its last {limit:,} bytes")
            start = max(0, pos - block)
            tail = os.pread(fd, pos - start, start) + tail
            pos = start
            last_nl = tail.rfind(b"\n")
            if last_nl < 0:
                continue
            prev_nl = tail.rfind(b"\n", 0, last_nl)
            if prev_nl >= 0 or pos == 0:
                return tail[prev_nl + 1 : last_nl]
            block *= 2
        return None
    except OSError as exc:
        raise _fail("read", path, exc) from exc
    finally:
        os.close(fd)


_held: dict[str, tuple[int, int, int]] = {}  # lock path -> (fd, depth, owning thread)
_gates: dict[str, _thread.LockType] = {}  # lock path -> the lock threads of this process take turns on
_registry_guard = _thread.allocate_lock()
_idle: dict[str, int] = {}  # lock path -> its descriptor, kept open between two locks (not held now)
_IDLE_MAX = 32


_pid = os.getpid()  # this process (a forked child updates it)


def _after_fork_in_child() -> None:
    """A forked child holds none of its parent's locks and takes its own descriptors."""
    global _registry_guard, _pid, _in_place_guard
    _pid = os.getpid()
    _in_place.clear()  # the parent's (a lock held by one of its threads would stay held here)
    _in_place_guard = _thread.allocate_lock()
    _held.clear()
    _gates.clear()
    _idle.clear()  # the parent's: a child that locked through them would share the parent's flocks
    _registry_guard = _thread.allocate_lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _open_lock_file(path: str) -> int:
    """A descriptor of lock file ``path``: the one kept from the last lock if the file is still
    there (a lock file deleted by hand gets a new one, as every other process would)."""
    with _registry_guard:
        fd = _idle.pop(path, -1)
    if fd >= 0:
        try:
            linked = os.fstat(fd).st_nlink > 0
        except OSError:
            linked = False
        if linked:
            return fd
        _close_quietly(fd)
    return _open_checked(path, os.O_RDWR | os.O_CREAT)[0]


def _keep_lock_file(path: str, fd: int) -> None:
    """Keep an unlocked descriptor for the next lock of ``path`` (a few dozen paths at most)."""
    with _registry_guard:
        if len(_idle) >= _IDLE_MAX:
            _close_quietly(_idle.pop(next(iter(_idle))))  # all under the guard: none in use
        old = _idle.pop(path, -1)
        _idle[path] = fd
    if old >= 0:
        _close_quietly(old)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class _WaitExpired(Exception):
    pass


def _expire(signum: int, frame: object) -> None:
    raise _WaitExpired


def _wait_blocking(fd: int, timeout: float) -> bool | None:
    """Wait for the lock in the kernel, which hands it to waiters fairly (polling lets a busy
    writer that re-takes the lock at once starve the others). The timeout is a one-shot
    ``ITIMER_REAL`` whose handler interrupts ``flock``, as ``flock -w`` of util-linux bounds its
    wait. Returns ``None`` where that cannot be done safely: outside the main thread, or when the
    program already uses ``ITIMER_REAL`` (``alarm`` included).

    Kept over polling and over the ``filelock`` library (which polls, every 50 ms by default,
    and imports about 100 modules) by ``bench/lock_wait.py`` (docs/benchmarks.md): sixteen
    processes re-taking one lock at once waited at most 0.3 s here, 2.6 s polling as
    ``_wait_polling`` does and 3.2 s with ``filelock``, where a hook gives up after 2 s."""
    import signal

    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        return None
    try:
        previous = signal.signal(signal.SIGALRM, _expire)
    except ValueError:  # not the main thread
        return None
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        except _WaitExpired:
            return _try_lock(fd)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _wait_polling(fd: int, timeout: float) -> bool:
    """Poll for the lock with short, jittered sleeps (the fallback of ``_wait_blocking``)."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        if _try_lock(fd):
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        jitter = (time.perf_counter_ns() % 1000) / 1000  # no `random` import on the hot path
        time.sleep(min(delay * (0.5 + jitter), deadline - now))
        delay = min(delay * 2, 0.005)


class FileLock:
    """Exclusive cross-process lock on ``path + ".lock"`` (see the module docstring).

    Use as a context manager. ``timeout`` is in seconds; ``LockTimeoutError`` names the file.
    """

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.lock_path = path + ".lock"
        self.target = path
        self.timeout = timeout
        self._fd = -1

    def acquire(self) -> None:
        me = _thread.get_ident()
        held = _held.get(self.lock_path)
        if held is not None and held[2] == me:
            _held[self.lock_path] = (held[0], held[1] + 1, me)
            return
        # Threads of one process share the flock (it belongs to the process): a per-path thread
        # lock makes them take turns, then the flock excludes other processes.
        gate = _gates.get(self.lock_path)
        if gate is None:
            with _registry_guard:
                gate = _gates.setdefault(self.lock_path, _thread.allocate_lock())
        got = gate.acquire(True, self.timeout) if self.timeout > 0 else gate.acquire(False)
        if not got:
            raise LockTimeoutError(
                f"could not lock {self.target} within {self.timeout:g}s: another thread of this process held it.",
                path=self.target,
            )
        try:
            self._acquire_file()
        except BaseException:
            gate.release()
            raise
        _held[self.lock_path] = (self._fd, 1, me)

    def _acquire_file(self) -> None:
        try:
            fd = _open_lock_file(self.lock_path)
        except OSError as exc:
            raise _fail("lock", self.target, exc) from exc
        try:
            acquired = _try_lock(fd)
            if not acquired and self.timeout > 0:
                blocked = _wait_blocking(fd, self.timeout)
                # None: cannot block here (not the main thread, or a timer in use)
                acquired = _wait_polling(fd, self.timeout) if blocked is None else blocked
        except _WaitExpired:  # the timer fired just as the wait ended: count it as a timeout
            acquired = False
        except OSError as exc:
            os.close(fd)
            raise _fail("lock", self.target, exc) from exc
        except BaseException:
            os.close(fd)  # closing the descriptor releases a lock taken at the last moment
            raise
        if not acquired:
            os.close(fd)
            raise LockTimeoutError(
                f"could not lock {self.target} within {self.timeout:g}s: other processes kept it busy. "
                "A lock is released when its holder exits; retry, or see who holds it with "
                f"`fuser {self.lock_path}`.",
                path=self.target,
            )
        self._fd = fd

    def release(self) -> None:
        fd, depth, owner = _held[self.lock_path]
        if depth > 1:
            _held[self.lock_path] = (fd, depth - 1, owner)
            return
        del _held[self.lock_path]
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            _close_quietly(fd)  # closing releases the lock too
        else:
            _keep_lock_file(self.lock_path, fd)
        finally:
            _gates[self.lock_path].release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
