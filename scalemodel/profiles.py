"""Workload profiles: what one worker computes and when its gradients are ready.

A :class:`~scalemodel.WorkloadProfile` holds, for one model on one device at one batch
size, the forward, backward and update times, the gradient tensors in the order they
become ready during backward (sizes [bytes], ready times [s]) and the cost of the
element-wise reduction on that device. Built-in profiles ship in ``scalemodel/data/``
(see :func:`~scalemodel.list_profiles`); the file format is described in
``scalemodel/data/FORMAT.md`` and in the design guide.

Short names: ``"bert"`` means ``"bert-base"``, ``"gpt2-small"`` and ``"gpt-2"`` mean
``"gpt2"`` (124M parameters), ``"vgg16_bn"`` means ``"vgg16"`` (the paper's log was
recorded with torchvision's ``vgg16_bn``).

This module resolves names (built-in files, aliases, the LLMs built from their
configurations by ``scalemodel.workloads``, paths) and writes files atomically. The
profile record itself and its file format live one layer down, in
:mod:`scalemodel.profile_format` (re-exported here: ``scalemodel.profiles.WorkloadProfile``,
``MAX_TIME``, ... keep working), so the stack stays one-way: profile_format <- workloads
(the LLM layer) <- profiles (:data:`scalemodel._layers.LAYERS`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import tempfile
import threading
from pathlib import Path

from ._jsonfile import read_json_file
from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from .profile_format import (_CACHE, FORMAT, FORMAT_VERSION, MAX_GRADIENT_BYTES,  # noqa: F401
                             MAX_TIME, MIN_SCALED_TIME, WorkloadProfile, _builtin_names,
                             _data_dir, _parse, _reduction_from, load_builtin)
from .workloads import _llm_key, llm_names, llm_profile

__all__ = ["WorkloadProfile", "load_profile", "list_profiles", "save_profile", "ALIASES"]

ALIASES = {"bert": "bert-base", "bert_base": "bert-base", "bert_large": "bert-large",
           "gpt2-small": "gpt2", "gpt-2": "gpt2", "gpt2-124m": "gpt2",
           "vgg16_bn": "vgg16", "vgg16-bn": "vgg16", "resnet-50": "resnet50",
           "resnet-101": "resnet101"}
"""Short or alternative names and the built-in profile each means."""


def _llm_names():
    return llm_names()  # built from data/llm_configs.json by workloads.py


def list_profiles() -> list[str]:
    """Names of the built-in workload profiles (aliases in
    :data:`~scalemodel.profiles.ALIASES`), the LLMs built from their configs included
    (``scalemodel.workloads.llm_profile``)."""
    return sorted(_builtin_names() + _llm_names())


def load_profile(name_or_path) -> WorkloadProfile:
    """Load a built-in profile by name, a profile file by path, or pass a profile through.

    Parameters
    ----------
    name_or_path : str, os.PathLike or WorkloadProfile
        A built-in name (see :func:`list_profiles`; case-insensitive; aliases such as
        ``"bert"``), or the path to a profile JSON file.

    Raises
    ------
    UnknownNameError
        Neither a built-in name nor an existing file; lists the known names.
    ProfileFormatError
        The file is malformed or truncated; names the field.
    """
    if isinstance(name_or_path, WorkloadProfile):
        return name_or_path
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ParameterTypeError("model", name_or_path,
                                 "a built-in profile name, a path to a profile file, "
                                 "or a WorkloadProfile")
    text = os.fspath(name_or_path)
    key = ALIASES.get(text.strip().lower(), text.strip().lower())
    if not isinstance(name_or_path, os.PathLike) and key in _CACHE:  # loaded before: no disk
        return _CACHE[key]
    if not isinstance(name_or_path, os.PathLike) and key in _builtin_names():
        return load_builtin(key)
    if not isinstance(name_or_path, os.PathLike):
        llm = _llm_key(key)
        if llm in _llm_names():
            if llm not in _CACHE:
                _CACHE[llm] = llm_profile(llm)
            _CACHE[key] = _CACHE[llm]
            return _CACHE[llm]
    path = Path(text)
    if text.strip() and os.path.lexists(path):  # a FIFO, a folder or a huge file: a clear error, no hang
        return WorkloadProfile.from_dict(read_json_file(path, what="workload profile"),
                                         str(path))
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(text):
        raise UnknownNameError("model", name_or_path, list_profiles(), aliases=ALIASES,
                               reason=f"no such profile file ({path.absolute()} does not "
                               "exist) and no built-in name",
                               extra="or give the path to an existing profile file")
    raise UnknownNameError("model", name_or_path, list_profiles(), aliases=ALIASES,
                           extra="or give the path to a profile file (no such file here)")


def _looks_like_path(text: str) -> bool:
    """A model given as a file (a folder in it, or a .json name), not a profile name."""
    t = text.strip()
    return os.sep in t or "/" in t or t.lower().endswith(".json")


def save_profile(profile: WorkloadProfile, path) -> Path:
    """Write ``profile`` to ``path`` as JSON, atomically (never half written).

    Parameters
    ----------
    profile : WorkloadProfile
        The profile to write [-].
    path : str or os.PathLike
        Destination file; written via a temporary file and a rename [path].

    Returns
    -------
    pathlib.Path
        The path written.
    """
    if not isinstance(profile, WorkloadProfile):
        raise ParameterTypeError("profile", profile, "a WorkloadProfile (load_profile("
                                 "name) gives one)")
    path = Path(check_destination_path(path))
    text = json.dumps(profile.to_dict(), indent=1)
    atomic_write_text(path, text)
    return path


def check_destination_path(path, parameter="path"):
    """``path`` to write to, checked: a str or os.PathLike that is not empty (``Path("")``
    is the current folder) [path].

    Parameters
    ----------
    path : str or os.PathLike
        The destination given [path].
    parameter : str
        Its name, for the message [-].
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ParameterTypeError(parameter, path, "a file path (str or os.PathLike)")
    if not os.fspath(path):
        raise InvalidParameterError(parameter, path, "is empty; name a file")
    return path


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename.

    Missing parent folders are created, so ``--out results/cluster.json`` just works. A
    new file gets the permissions the umask allows (``0o666 & ~umask``, as any other
    tool's output); a replaced file keeps its own. SIGINT, SIGTERM, SIGHUP and the other
    signals of ``HELD_SIGNALS`` that arrive during the write are held until the file
    is complete (or, after an error, the temporary
    file removed) and then take effect as usual: an interrupted write leaves either the
    old file or the new one, never a half-written one and never a ``.*.tmp`` file.

    Parameters
    ----------
    path : str or os.PathLike
        Destination file [path].
    text : str
        Its content, written as UTF-8 [-].
    """
    atomic_write_files({path: text})


def atomic_write_files(files) -> None:
    """Write several files as one set: all of them or none, never a mixture.

    Every file is first written to a temporary file beside it; then, holding an exclusive
    lock on each destination folder (``flock`` of the folder itself: no lock file) and
    the signals of ``HELD_SIGNALS`` (see :func:`atomic_write_text`), each is renamed
    into place. If a
    rename fails, those already made are undone (a replaced file comes back, from a hard
    link taken before), so a failure part-way leaves the folder as it was; concurrent
    writers of the same names each write their whole set in turn, so the files left are
    all one writer's. A destination that is a folder, not a regular file or a path
    ending in a separator (``"new/"``, a folder) is refused before anything is written.
    A symbolic link to a file is written through (its target replaced, the link kept).
    No temporary file, backup or lock file remains.

    Parameters
    ----------
    files : dict
        ``{path: text}``, destinations [path] and contents [-]; a text of None removes
        that destination as part of the set (a stale output of an earlier run).

    Raises
    ------
    OSError
        A destination is a folder or not a regular file (``IsADirectoryError``, with
        ``filename``), or a write failed; nothing was changed.
    """
    for path in files:  # as given: Path("new/") drops the separator that says "folder"
        _check_destination(path)
    # a symbolic link to a file is written through: its target gets the new content and
    # the link stays (a rename onto the link replaced it by a file, the target left stale)
    items = [(Path(os.path.realpath(path)) if os.path.islink(path) and
              os.path.isfile(path) else Path(path), text) for path, text in files.items()]
    staged = []
    with _signals_held():
        try:
            for path, text in items:
                path.parent.mkdir(parents=True, exist_ok=True)
                if text is None:
                    staged.append((None, path))
                    continue
                mode = _mode_for(path)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                           dir=path.parent)
                staged.append((tmp, path))
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    if hasattr(os, "fchmod"):  # mkstemp makes it 0600
                        os.fchmod(fh.fileno(), mode)
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
            with _folders_locked(sorted({str(path.parent.resolve()) for _, path in staged})):
                _rename_all(staged)
            WRITTEN.extend(str(path) for tmp, path in staged if tmp is not None)
            staged = []
        finally:
            for tmp, _ in staged:
                if tmp is not None:
                    _unlink_quietly(tmp)


def output_problem(path):
    """Why ``path`` cannot be written as an output file, or None when it can: it is a
    folder, not a regular file, or under a file, or its folder is not writable.

    Parameters
    ----------
    path : str or os.PathLike
        The destination [path].

    Returns
    -------
    str or None
        The reason, in words, or None.
    """
    text = os.fspath(path)
    if not str(text).strip():
        return "is empty; name a file"
    try:
        return _output_problem(Path(path), text)
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a loop of links
        return f"cannot be written ({getattr(exc, 'strerror', None) or exc})"


def _output_problem(p, text):
    if p.is_dir():
        return "is a folder; name a file in it, e.g. " + str(p / "cluster.json")
    if _ends_with_separator(text):  # "new/": a folder that does not exist yet
        return "ends with a path separator but is no folder; name a file, e.g. " + \
            str(p / "cluster.json")
    if os.path.lexists(p) and not p.is_file():
        return "exists and is not a regular file"
    ancestor = p.absolute().parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"the folder {ancestor} is not writable"
    return None


def _ends_with_separator(path) -> bool:
    """Whether ``path`` as given ends with a path separator: it names a folder, though
    ``Path(path)`` drops the separator [-]."""
    return os.fsdecode(path).endswith(("/", os.sep))


def _check_destination(path):
    """Refuse a destination that is a folder or another non-regular file, or a path no
    file can have (a NUL byte: os.stat would raise a bare ValueError)."""
    import errno
    if "\x00" in os.fsdecode(path):
        raise InvalidParameterError("path", os.fspath(path), "contains a NUL byte (\\x00), "
                                    "which no file name can hold")
    if _ends_with_separator(path):  # "new/" would write a file "new"
        raise IsADirectoryError(errno.EISDIR, "ends with a path separator; name a file",
                                str(path))
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder; name a file", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def _folders_locked(folders):
    """An exclusive ``flock`` on each folder, in a fixed order (no deadlock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: renames are not serialised
        yield
        return
    fds = []
    try:
        for folder in folders:
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                         | getattr(os, "O_CLOEXEC", 0))
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)  # closing releases the lock


def _rename_all(staged):
    """Rename each ``(tmp, path)`` into place (``tmp`` None: remove ``path``); on a failure
    undo the renames made, from hard links of the replaced files, and re-raise."""
    done = []      # (path, backup or None, existed)
    try:
        for tmp, path in staged:
            backup = None
            existed = os.path.lexists(path)
            if existed:
                backup = f"{path.parent}/.{path.name}.{os.getpid()}.{id(done)}.bak"
                try:
                    os.link(path, backup, follow_symlinks=False)
                except OSError:
                    backup = None   # no hard links here: this one cannot be undone
            elif tmp is None:
                continue
            done.append((path, backup, existed))
            if tmp is None:
                os.unlink(path)
            else:
                os.replace(tmp, path)
    except BaseException:
        for path, backup, existed in reversed(done):
            try:
                if backup is not None:
                    os.replace(backup, path)
                elif not existed:
                    _unlink_quietly(path)
            except OSError:
                pass
        raise
    finally:
        for _, backup, _ in done:
            if backup is not None:
                _unlink_quietly(backup)


def _mode_for(path) -> int:
    """Permission bits for ``path``: those of the file it replaces, else the umask's."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux tells it without changing it (no race with other threads)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


WRITTEN: list = []
"""Every file :func:`atomic_write_files` has put in place in this process, in order
(filled before a held signal is delivered): what an interrupt's message says was
written [paths]."""


def written_since(count: int) -> list:
    """The files :func:`atomic_write_files` has put in place since :data:`WRITTEN` held
    ``count`` entries [paths].

    Parameters
    ----------
    count : int
        ``len(WRITTEN)`` before the work [-].
    """
    return list(dict.fromkeys(WRITTEN[count:]))


HELD_SIGNALS = tuple(getattr(signal, name) for name in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(signal, name))
"""Signals an atomic write holds until its files are in place (SIGKILL cannot be
caught; SIGPIPE Python ignores) [-]."""


@contextlib.contextmanager
def _signals_held():
    """Hold the signals that end a process by default and that a process can catch
    (``HELD_SIGNALS``: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM)
    inside the block; deliver them, in order, after it.

    Python runs signal handlers in the main thread only, so elsewhere this holds nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {}
    for sig in HELD_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is None:  # installed outside Python: leave it alone
            continue
        try:
            signal.signal(sig, lambda signum, frame: caught.append(signum))
        except (ValueError, OSError):  # pragma: no cover - not the main interpreter
            continue
        previous[sig] = handler
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)
