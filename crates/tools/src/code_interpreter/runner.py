"""respgw code_interpreter runner: runs one cell of model-written Python inside the sandbox.

Shipped inside the gateway binary (include_str!) and bound read-only at /run/respgw/runner.py;
started by the gateway under bubblewrap as

    /opt/venv/bin/python3 -I -B -u /run/respgw/runner.py --status-fd N --nproc N \
        --data-fd N --timeout SECONDS --max-files N --max-bytes N

It reads the cell from stdin and runs it like a notebook cell: fresh globals, the value of a
trailing expression is returned as its repr (unless the cell ends with ';'), an exception prints
its traceback to stderr. `plt.show()` saves every open figure as a PNG under
/mnt/data/.respgw-show/ (the gateway collects every new PNG, then removes that directory).

Two processes, so that model code cannot forge the report:
  * the parent (this process) sets the per-sandbox RLIMIT_NPROC, reads the cell, makes itself
    non-dumpable (so that the child, same uid, can neither ptrace it nor open its
    /proc/<pid>/fd/N), forks, and waits. It alone holds the status pipe and writes the single
    machine-readable report to it: {"event": "finished", "child": {"exit": n} | {"signal": n},
    "outcome": ...}. How the child ended comes from waitpid, which model code cannot fake.
  * the child closes the status pipe, runs the cell, and sends its outcome (result repr,
    exception type, which resource limit an exception points at) to the parent over a private
    pipe. That part is produced next to model code and could be faked by it, but it only carries
    what the code could legitimately produce anyway (a value, an exception); the gateway parses
    it strictly and bounds it.

The container's files. /mnt/data is a tmpfs of the container's size (bubblewrap's --size), so a
write past the limit fails with ENOSPC inside the sandbox. The container's files live on the host
in a directory the parent alone can reach, through --data-fd (a descriptor the child closes
first; the parent is non-dumpable, so the child cannot open it through /proc either). Before the
cell runs the parent copies them into /mnt/data; after it, it kills every process left in the
sandbox (the cell's leftovers) and writes the changes back: first it removes from the host what
is gone or changed, then it copies what is new or changed, so the host directory never holds more
than the new contents do (bounded by --max-bytes and --max-files). The parent enforces the
wall-clock --timeout itself, so that what the cell wrote before it was stopped is kept.
"""

import errno
import json
import os
import resource
import select
import signal
import stat
import sys
import time

DATA_DIR = "/mnt/data"
SHOW_DIR = "/mnt/data/.respgw-show"
MPLCACHE_SEED = "/run/respgw/mplcache"
CHILD_MESSAGE_CAP = 1 << 20
RESULT_CHARS_CAP = 1 << 16


def main():
    args = sys.argv[1:]
    opts = dict(zip(args[::2], args[1::2]))
    status_fd = int(opts["--status-fd"])
    nproc = int(opts["--nproc"])
    data_fd = int(opts["--data-fd"])
    timeout = float(opts["--timeout"])
    budget = _Budget(int(opts["--max-files"]), int(opts["--max-bytes"]))

    # Nothing but stdin/stdout/stderr, the status pipe and the container's host directory may
    # stay open (defence in depth: any other inherited descriptor could lead outside the sandbox).
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    keep = sorted((status_fd, data_fd))
    top = 1 << 16 if nofile_hard == resource.RLIM_INFINITY else max(nofile_hard, keep[-1] + 1)
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, top)

    def report(record):
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(status_fd, data):]

    report({"event": "started"})

    # Model code must not stop the parent with a catchable signal (it runs as the same uid).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM, signal.SIGPIPE, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)

    # The process limit of this execution: counted per user namespace, and each sandbox has its
    # own, so it bounds this execution only. Refuse to run the cell without it.
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        limit = nproc if hard == resource.RLIM_INFINITY else min(nproc, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    except (OSError, ValueError) as e:
        report({"event": "failed", "reason": "cannot set RLIMIT_NPROC: %s" % e})
        return 1

    code = sys.stdin.buffer.read()
    _set_dumpable(False)

    # The container's files into the sandbox's /mnt/data.
    data_dir = os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    restore_problems = []
    _copy_in(data_fd, data_dir, restore_problems)
    restore_note = None
    if restore_problems:
        restore_note = "some of the container's files could not be restored (%s)" % restore_problems[0]

    r, w = os.pipe()
    deadline = time.monotonic() + timeout
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(status_fd)
            os.close(data_fd)
            os.close(data_dir)
            if restore_note:
                sys.stderr.write("[%s]\n" % restore_note)
            _child(code, w)
        finally:
            os._exit(70)
    os.close(w)

    # Wait for the child's end (its pidfd becomes readable) while reading its outcome pipe,
    # until the deadline.
    child_end = os.pidfd_open(pid)
    buf = bytearray()
    eof = False
    status = None
    timed_out = False
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            _kill_others()
            _, status = os.waitpid(pid, 0)
            break
        ready, _, _ = select.select([child_end] if eof else [r, child_end], [], [], left)
        if r in ready:
            chunk = os.read(r, 65536)
            if not chunk:
                eof = True
            elif len(buf) < CHILD_MESSAGE_CAP:
                buf += chunk
        if child_end in ready:
            _, status = os.waitpid(pid, 0)
    os.close(child_end)
    # The child may have written its message just before exiting; processes it left behind may
    # still hold the pipe open, so drain without blocking.
    os.set_blocking(r, False)
    try:
        while len(buf) < CHILD_MESSAGE_CAP:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            buf += chunk
    except BlockingIOError:
        pass

    if os.WIFSIGNALED(status):
        child = {"signal": os.WTERMSIG(status)}
    else:
        child = {"exit": os.waitstatus_to_exitcode(status)}

    # Nothing of the cell may still write while its files are saved.
    _kill_others()
    save = {}
    try:
        _remove_stale(data_dir, data_fd)
        _copy_out(data_dir, data_fd, budget)
    except OSError as e:
        save["error"] = "%s" % e
    if budget.skipped:
        save["skipped"] = budget.skipped
    record = {"event": "finished", "child": child, "outcome": _parse_outcome(bytes(buf)), "timed_out": timed_out}
    if save:
        record["save"] = save
    report(record)
    return 0


def _kill_others():
    """Kill every process of the sandbox but bubblewrap's init (PID 1) and this one, and wait
    until they are gone (at most a few seconds)."""
    me = os.getpid()
    until = time.monotonic() + 5
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        alive = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in (1, me):
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                alive.append(name)
        if not alive or time.monotonic() > until:
            return
        time.sleep(0.01)


class _Budget:
    """What the host copy may hold: entries and bytes (a directory or a link counts one block)."""

    def __init__(self, max_files, max_bytes):
        self.files = max_files
        self.bytes = max_bytes
        self.skipped = 0

    def take(self, size):
        cost = -(-max(size, 1) // 4096) * 4096
        if self.files < 1 or cost > self.bytes:
            self.skipped += 1
            return False
        self.files -= 1
        self.bytes -= cost
        return True


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _entries(dir_fd):
    """(name, lstat) of a directory's entries; names as bytes (any name the code chose)."""
    out = []
    for name in os.listdir(dir_fd):
        name = os.fsencode(name)
        try:
            out.append((name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)))
        except OSError:
            continue
    return out


def _same(a, b):
    if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode):
        return False
    if stat.S_ISREG(a.st_mode):
        return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns and \
            stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode)
    return True


def _copy_file(src_dir, dst_dir, name, st):
    src = os.open(name, _OPEN_FILE, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):
            return
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=dst_dir)
        try:
            left = st.st_size
            while left > 0:
                n = os.sendfile(dst, src, None, min(left, 1 << 24))
                if n == 0:
                    break
                left -= n
            os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_in(src_dir, dst_dir, problems, depth=0):
    """The host copy into /mnt/data (regular files, directories, links; modes and times kept)."""
    for name, st in _entries(src_dir):
        try:
            if stat.S_ISDIR(st.st_mode) and depth < 64:
                os.mkdir(name, 0o700, dir_fd=dst_dir)
                src = os.open(name, _OPEN_DIR, dir_fd=src_dir)
                dst = os.open(name, _OPEN_DIR, dir_fd=dst_dir)
                try:
                    _copy_in(src, dst, problems, depth + 1)
                    os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777 | 0o700)
                    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(src)
                    os.close(dst)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=src_dir), name, dir_fd=dst_dir)
            elif stat.S_ISREG(st.st_mode):
                _copy_file(src_dir, dst_dir, name, st)
        except OSError as e:
            if not problems:
                problems.append(os.strerror(e.errno) if e.errno else str(e))


def _remove_stale(src_dir, dst_dir, depth=0):
    """Remove from the host copy what /mnt/data no longer has, or has in another version."""
    current = dict(_entries(src_dir))
    for name, st in _entries(dst_dir):
        now = current.get(name)
        if now is not None and _same(now, st):
            if stat.S_ISDIR(st.st_mode):
                src = os.open(name, _OPEN_DIR, dir_fd=src_dir)
                dst = os.open(name, _OPEN_DIR, dir_fd=dst_dir)
                try:
                    _remove_stale(src, dst, depth + 1)
                finally:
                    os.close(src)
                    os.close(dst)
            elif stat.S_ISLNK(st.st_mode) and \
                    os.readlink(name, dir_fd=src_dir) != os.readlink(name, dir_fd=dst_dir):
                os.unlink(name, dir_fd=dst_dir)
            continue
        _remove(dst_dir, name, st)


def _remove(dir_fd, name, st):
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, _OPEN_DIR, dir_fd=dir_fd)
        try:
            for child, child_st in _entries(sub):
                _remove(sub, child, child_st)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _copy_out(src_dir, dst_dir, budget, depth=0):
    """Copy what is new or changed in /mnt/data to the host copy, within the budget."""
    existing = {name: st for name, st in _entries(dst_dir)}
    for name, st in _entries(src_dir):
        kind = stat.S_IFMT(st.st_mode)
        if kind not in (stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK):
            continue
        if not budget.take(st.st_size if kind == stat.S_IFREG else 4096):
            continue
        if name in existing:
            if kind == stat.S_IFDIR:
                src = os.open(name, _OPEN_DIR, dir_fd=src_dir)
                dst = os.open(name, _OPEN_DIR, dir_fd=dst_dir)
                try:
                    _copy_out(src, dst, budget, depth + 1)
                    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(src)
                    os.close(dst)
            continue
        try:
            if kind == stat.S_IFDIR:
                if depth >= 64:
                    continue
                os.mkdir(name, 0o700, dir_fd=dst_dir)
                src = os.open(name, _OPEN_DIR, dir_fd=src_dir)
                dst = os.open(name, _OPEN_DIR, dir_fd=dst_dir)
                try:
                    _copy_out(src, dst, budget, depth + 1)
                    os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777 | 0o700)
                    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(src)
                    os.close(dst)
            elif kind == stat.S_IFLNK:
                os.symlink(os.readlink(name, dir_fd=src_dir), name, dir_fd=dst_dir)
            else:
                _copy_file(src_dir, dst_dir, name, st)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
                raise
            budget.skipped += 1


def _parse_outcome(raw):
    # The child writes its outcome last, just before exiting; model code writing lines of its own
    # into that pipe earlier cannot override it (and the gateway checks the outcome against the
    # exit status that waitpid gave us).
    lines = [l for l in raw.split(b"\n") if l.strip()]
    if not lines or not raw.endswith(b"\n"):
        return None
    line = lines[-1]
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(msg, dict) or msg.get("kind") not in ("ok", "exception"):
        return None
    out = {"kind": msg["kind"]}
    for key in ("result", "type", "limit"):
        value = msg.get(key)
        if isinstance(value, str):
            out[key] = value[:RESULT_CHARS_CAP]
    return out


def _set_dumpable(on):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 1 if on else 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def _child(code, w):
    me = os.getpid()
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # The child itself may be inspected by its own descendants like any normal process.
    _set_dumpable(True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    _prepare_matplotlib()
    os.chdir("/mnt/data")
    sys.path.insert(0, "/mnt/data")
    sys.argv = [""]

    outcome, exc = _run_cell(code)
    if os.getpid() != me:
        # A process the cell forked fell out of the cell: it has nothing to report.
        os._exit(0)
    if exc is not None:
        _print_exception(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    data = (json.dumps(outcome) + "\n").encode()
    try:
        while data:
            data = data[os.write(w, data):]
    except OSError:
        pass
    os._exit(0 if outcome["kind"] == "ok" else 1)


def _run_cell(code):
    import ast
    import builtins
    import linecache

    text = code.decode("utf-8", errors="replace")
    filename = "<cell>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    g = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
    try:
        tree = ast.parse(text, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not text.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), g)
        value = eval(compile(last, filename, "eval"), g) if last is not None else None
        result = None if value is None else repr(value)
        if result is not None and len(result) > RESULT_CHARS_CAP:
            result = result[:RESULT_CHARS_CAP]
        return {"kind": "ok", "result": result}, None
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return {"kind": "ok"}, None
        return {"kind": "exception", "type": "SystemExit"}, e
    except BaseException as e:  # noqa: BLE001 - every failure of the cell is reported
        outcome = {"kind": "exception", "type": type(e).__name__}
        limit = _limit_of(e)
        if limit:
            outcome["limit"] = limit
        return outcome, e


def _limit_of(exc):
    """Which resource limit an exception (or one it chains from) points at, if any."""
    import errno

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError):
            return "memory"
        if isinstance(exc, OSError):
            if exc.errno == errno.EFBIG:
                return "file_size"
            if exc.errno == errno.EMFILE:
                return "open_files"
            if exc.errno == errno.ENOSPC:
                return "disk"
            if isinstance(exc, BlockingIOError) and exc.errno == errno.EAGAIN:
                return "processes"
        if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
            return "processes"
        exc = exc.__cause__ or exc.__context__
    return None


def _print_exception(exc):
    import traceback

    tb = exc.__traceback__
    # Hide the runner's own frames: the traceback starts in the cell.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    try:
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
    except Exception:
        try:
            sys.stderr.write("%s\n" % type(exc).__name__)
        except Exception:
            pass


def _prepare_matplotlib():
    # matplotlib's font cache was built once at gateway start-up (scanning fonts costs 1-2 s per
    # execution otherwise); MPLCONFIGDIR must be writable, so copy it into the private /tmp.
    config_dir = os.environ.get("MPLCONFIGDIR", "/tmp/matplotlib")
    try:
        os.makedirs(config_dir, exist_ok=True)
        for name in os.listdir(MPLCACHE_SEED):
            if name.startswith("fontlist") and name.endswith(".json"):
                with open(os.path.join(MPLCACHE_SEED, name), "rb") as src:
                    data = src.read()
                with open(os.path.join(config_dir, name), "wb") as dst:
                    dst.write(data)
    except OSError:
        pass
    sys.meta_path.insert(0, _PyplotHook())


class _PyplotHook:
    """Import hook: when matplotlib.pyplot is imported, replace its show() by one that saves."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "matplotlib.pyplot":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            _patch_pyplot(module)

        spec.loader.exec_module = exec_module
        return spec


def _patch_pyplot(plt):
    counter = [0]
    original_show = plt.show

    def show(*args, **kwargs):
        """Save every open figure as a PNG image output, then close them (like a notebook)."""
        os.makedirs(SHOW_DIR, exist_ok=True)
        for num in plt.get_fignums():
            counter[0] += 1
            fig = plt.figure(num)
            fig.savefig(os.path.join(SHOW_DIR, "figure-%d-%03d.png" % (os.getpid(), counter[0])),
                        format="png", bbox_inches="tight")
        plt.close("all")

    show.__wrapped__ = original_show
    plt.show = show


if __name__ == "__main__":
    sys.exit(main())
