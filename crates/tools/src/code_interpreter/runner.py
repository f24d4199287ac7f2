"""respgw code_interpreter runner: runs one cell of model-written Python inside the sandbox.

Shipped inside the gateway binary (include_str!) and bound read-only at /run/respgw/runner.py;
started by the gateway under bubblewrap as

    /opt/venv/bin/python3 -I -B -u /run/respgw/runner.py --status-fd N --nproc N

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
Processes the cell leaves behind are killed when the parent exits: the parent is the sandbox's
main process, and bubblewrap tears the PID namespace down after it.
"""

import json
import os
import resource
import select
import signal
import sys

SHOW_DIR = "/mnt/data/.respgw-show"
MPLCACHE_SEED = "/run/respgw/mplcache"
CHILD_MESSAGE_CAP = 1 << 20
RESULT_CHARS_CAP = 1 << 16


def main():
    args = sys.argv[1:]
    opts = dict(zip(args[::2], args[1::2]))
    status_fd = int(opts["--status-fd"])
    nproc = int(opts["--nproc"])

    # Nothing but stdin/stdout/stderr and the status pipe may stay open (defence in depth: an
    # inherited descriptor of a host directory would lead outside the sandbox).
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = 1 << 16 if nofile_hard == resource.RLIM_INFINITY else max(nofile_hard, status_fd + 1)
    os.closerange(3, status_fd)
    os.closerange(status_fd + 1, top)

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

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(status_fd)
            _child(code, w)
        finally:
            os._exit(70)
    os.close(w)

    buf = bytearray()
    eof = False
    status = None
    while status is None:
        if eof:
            _, status = os.waitpid(pid, 0)
            break
        ready, _, _ = select.select([r], [], [], 0.1)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                eof = True
            elif len(buf) < CHILD_MESSAGE_CAP:
                buf += chunk
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
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
    report({"event": "finished", "child": child, "outcome": _parse_outcome(bytes(buf))})
    return 0


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
