"""Atomic file writes: whoever reads the target, and whatever happens to the writer, sees the
old content or the new one, never a part.

The new content is written under a temporary name in the target's directory,
``.<name>.<16 hex digits>.tmp`` (hidden, unique per write, so concurrent writers never share
it), and renamed onto the target with :func:`os.replace`: one ``rename(2)``, atomic on a POSIX
file system because both names are in the same directory. When the writing raises, the
temporary is removed and the target is left as it was. A writer killed outright (``SIGKILL``,
power loss) can leave its temporary behind; nothing removes it later.

Without ``fsync`` this is safe against a crash of the process and against concurrent readers;
after a crash of the machine the file can hold the old content, the new one, or (with some file
systems) nothing. :func:`atomic_write` with ``fsync=True`` also makes the new content and the
rename durable before it returns.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write"]


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    encoding: str = "utf-8",
    mode: int = 0o666,
    fsync: bool = False,
) -> None:
    """Replace the file ``path`` by ``data`` atomically (see the module documentation).

    ``data`` is written as is, or for a ``str`` encoded with ``encoding`` (newlines are not
    translated). The new file gets the permission bits ``mode`` less the process's umask, as
    :func:`os.open` gives them (the default, ``0o666``, is what :func:`open` gives); the old
    file's permissions are not kept. ``fsync``: flush the file to disk before the rename and the
    directory after it, so the new content survives a crash of the machine once this returns.
    """
    payload = data.encode(encoding) if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with open(fd, "wb") as fh:
            fh.write(payload)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
    if fsync:
        directory = os.open(Path(path).parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, mkdir: bool = False) -> Iterator[Path]:
    """A temporary path next to ``path`` for a writer that wants a path of its own (``torch.save``,
    ``savefig``, a directory built in place); renamed onto ``path`` when the ``with`` body
    returns, removed (a file, or a directory with its contents) when the body or the rename
    raises.

    Nothing exists at the yielded path unless ``mkdir``: then it is an empty directory, private
    (``0o700`` less the umask) like one from :func:`tempfile.mkdtemp`. Whatever the body creates
    there gets its permissions as if created at ``path``. The rename is :func:`os.replace`: a file
    atomically replaces a file; a directory takes the place of nothing or of an empty directory
    and otherwise raises ``OSError`` (a body that means to replace a directory removes it last,
    leaving a moment with neither).
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    if mkdir:
        tmp.mkdir(mode=0o700)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
