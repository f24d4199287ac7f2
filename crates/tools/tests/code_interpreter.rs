//! Attack tests of the code_interpreter sandbox: each property of the sandbox is proven by code
//! that tries to break it, run in the real sandbox (bubblewrap + the venv).
//!
//! They need what `scripts/setup-code-interpreter` installs (bubblewrap and the venv): without it
//! they are skipped with a line saying so under plain `cargo test`, and fail under `scripts/test`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use respgw_tools::code_interpreter::{
    Execution, ExecutionStatus, Sandbox, SandboxConfig, SandboxError, SandboxStats, WorkRootClaim, default_venv,
};

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// One work root for the whole test binary (the font cache built by the first probe is reused),
/// in a 0700 directory of the user running the tests under the system's temporary directory
/// (`TMPDIR`), wherever the checkout is.
fn work_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let me = nix::unistd::geteuid().as_raw();
        let base = std::env::temp_dir().join(format!("respgw-code-interpreter-tests-{me}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("cannot create {}: {e}", base.display()),
        }
        let meta = std::fs::symlink_metadata(&base).unwrap();
        assert!(meta.is_dir() && meta.uid() == me, "{} is not a directory of uid {me}", base.display());
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Work roots of earlier runs whose process is gone (they hold up to a few hundred MiB).
        for entry in std::fs::read_dir(&base).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("run-").map(|p| p.split('.').next().unwrap_or(p).to_string());
            if pid.is_some_and(|pid| !Path::new("/proc").join(&pid).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        base.join(format!("run-{}", std::process::id()))
    })
}

/// The defaults, with the venv the gateway would use (`GW_CODE_INTERPRETER_VENV`, else the
/// setup script's path).
fn base_config() -> SandboxConfig {
    let venv = match std::env::var_os("GW_CODE_INTERPRETER_VENV").filter(|v| !v.is_empty()) {
        Some(venv) => PathBuf::from(venv),
        None => default_venv(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")),
    };
    SandboxConfig { venv, work_root: work_root().to_path_buf(), ..SandboxConfig::default() }
}

/// The sandbox with `config`, or `None` when its prerequisites are missing and the test is
/// skipped (see `respgw_testkit::prerequisites`); with them present, a sandbox that does not
/// start fails the test.
async fn sandbox_with(config: SandboxConfig) -> Option<Sandbox> {
    if !respgw_testkit::prerequisites::present(respgw_testkit::prerequisites::code_interpreter_sandbox()) {
        return None;
    }
    match Sandbox::new(config).await {
        Ok(s) => Some(s),
        Err(e) => panic!("the code_interpreter sandbox does not start on this machine: {e}"),
    }
}

async fn sandbox() -> Option<Sandbox> {
    sandbox_with(base_config()).await
}

async fn run(sb: &Sandbox, container: &str, code: &str) -> Execution {
    sb.execute(container, code).await.unwrap_or_else(|e| panic!("execute failed: {e}\ncode:\n{code}"))
}

fn assert_success(e: &Execution) {
    assert_eq!(e.status, ExecutionStatus::Success, "stdout:\n{}\nstderr:\n{}", e.stdout, e.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailing_expression_result_like_a_notebook_cell() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    let e = run(&sb, &c, "2+2").await;
    assert_success(&e);
    assert_eq!(e.result.as_deref(), Some("4"));
    // The reference API's own example: prints go to stdout, only the last expression is the result.
    let e = run(&sb, &c, "print('P1')\n1+1\nprint('P2')\n2+2\n3+3").await;
    assert_success(&e);
    assert_eq!(e.stdout, "P1\nP2\n");
    assert_eq!(e.result.as_deref(), Some("6"));
    for (code, want) in
        [("x = 1", None), ("'a'", Some("'a'")), ("None", None), ("3;", None), ("[1, 'b']", Some("[1, 'b']"))]
    {
        let e = run(&sb, &c, code).await;
        assert_success(&e);
        assert_eq!(e.result.as_deref(), want, "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_are_errors_with_a_traceback() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    let e = run(&sb, &c, "print('before')\ndef f():\n    return 1/0\nf()").await;
    assert_eq!(e.status, ExecutionStatus::Error);
    assert_eq!(e.stdout, "before\n");
    assert!(e.stderr.contains("Traceback (most recent call last)"), "{}", e.stderr);
    assert!(e.stderr.contains("ZeroDivisionError: division by zero"), "{}", e.stderr);
    assert!(e.stderr.contains("File \"<cell>\", line 3, in f"), "{}", e.stderr);
    assert!(e.stderr.contains("return 1/0"), "source lines shown: {}", e.stderr);
    assert!(!e.stderr.contains("runner"), "runner frames hidden: {}", e.stderr);
    assert_eq!(e.result, None);

    let e = run(&sb, &c, "def (:\n").await;
    assert_eq!(e.status, ExecutionStatus::Error);
    assert!(e.stderr.contains("SyntaxError"), "{}", e.stderr);

    let e = run(&sb, &c, "import sys\nsys.exit(3)").await;
    assert_eq!(e.status, ExecutionStatus::Error);
    let e = run(&sb, &c, "import sys\nprint('bye')\nsys.exit(0)").await;
    assert_success(&e);
    let e = run(&sb, &c, "import os\nos._exit(4)").await;
    assert_eq!(e.status, ExecutionStatus::Error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_truncated_with_a_marker() {
    let Some(sb) = sandbox_with(SandboxConfig { max_output_bytes: 1000, ..base_config() }).await else { return };
    let c = Sandbox::new_container_id();
    let e = run(&sb, &c, "import sys\nprint('x' * 100000)\nsys.stderr.write('é' * 50000)\n'r' * 5000").await;
    assert_success(&e);
    assert!(e.stdout.starts_with(&"x".repeat(1000)), "{}", &e.stdout[..50]);
    assert!(e.stdout.contains("[output truncated: 99001 more bytes not shown]"), "{}", &e.stdout[1000..]);
    assert!(e.stdout.len() < 1100);
    // A multi-byte character cut by the bound is dropped, not mangled.
    assert!(e.stderr.starts_with(&"é".repeat(500)), "{:?}", &e.stderr[..20]);
    assert!(e.stderr.contains("[output truncated:"));
    let result = e.result.unwrap();
    assert!(result.len() < 1100 && result.contains("[output truncated:"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matplotlib_savefig_and_show_become_png_images() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    let code = "import matplotlib.pyplot as plt\n\
                plt.plot([1, 2, 3], [1, 4, 9])\n\
                plt.savefig('chart.png')\n\
                plt.figure()\n\
                plt.bar(['a', 'b'], [3, 5])\n\
                plt.show()\n\
                open('notes.txt', 'w').write('not an image')\n\
                open('fake.png', 'wb').write(b'GIF89a not a png')\n";
    let e = run(&sb, &c, code).await;
    assert_success(&e);
    // chart.png, then show() displays both open figures (savefig does not close one), as a
    // notebook does.
    assert_eq!(e.images.len(), 3, "savefig + show; stderr: {}", e.stderr);
    for img in &e.images {
        assert!(img.starts_with(PNG_MAGIC) && img.len() > 1000);
    }
    assert!(e.stderr.is_empty(), "no 'non-interactive' warning from show(): {}", e.stderr);
    let data = sb.container_data_dir(&c).unwrap();
    assert!(data.join("chart.png").exists());
    assert!(!data.join(".respgw-show").exists(), "show() output is not left in the container");

    // Nothing new: no images. Re-saving chart.png: one.
    let e = run(&sb, &c, "import os\nsorted(os.listdir('.'))").await;
    assert_success(&e);
    assert!(e.images.is_empty());
    assert_eq!(e.result.as_deref(), Some("['chart.png', 'fake.png', 'notes.txt']"));
    let e = run(&sb, &c, "import matplotlib.pyplot as plt\nplt.plot([3, 2, 1])\nplt.savefig('chart.png')").await;
    assert_success(&e);
    assert_eq!(e.images.len(), 1);

    // A symlink named .png pointing at a host file is never read.
    let e =
        run(&sb, &c, "import os\nos.symlink('/etc/passwd', 'link.png')\nos.symlink('/proc/self/environ', 'env.png')")
            .await;
    assert_success(&e);
    assert!(e.images.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_persist_within_a_container_and_are_invisible_to_others() {
    let Some(sb) = sandbox().await else { return };
    let (c1, c2) = (Sandbox::new_container_id(), Sandbox::new_container_id());
    let e = run(&sb, &c1, "import os\nopen('note.txt', 'w').write('hello from c1')\nos.getcwd()").await;
    assert_success(&e);
    assert_eq!(e.result.as_deref(), Some("'/mnt/data'"));
    let e = run(&sb, &c1, "open('/mnt/data/note.txt').read()").await;
    assert_success(&e);
    assert_eq!(e.result.as_deref(), Some("'hello from c1'"));

    let note = sb.container_data_dir(&c1).unwrap().join("note.txt");
    if nix::unistd::geteuid().is_root() {
        // The gateway is root, the sandbox is not: its files belong to the sandbox uid.
        assert_eq!(std::fs::metadata(&note).unwrap().uid(), 65534);
    }

    let code = format!(
        "import os\n\
         print(sorted(os.listdir('.')))\n\
         print(sorted(os.listdir('/mnt')))\n\
         for p in ['note.txt', '../{c1}/data/note.txt', '{root}/{c1}/data/note.txt', '/proc/1/root/mnt/data/note.txt']:\n\
         \x20   try:\n\
         \x20       print('READ', p, open(p).read())\n\
         \x20   except OSError as e:\n\
         \x20       print('denied', p, type(e).__name__)\n",
        root = work_root().display()
    );
    let e = run(&sb, &c2, &code).await;
    assert_success(&e);
    assert!(e.stdout.starts_with("[]\n['data']\n"), "{}", e.stdout);
    assert!(!e.stdout.contains("READ"), "{}", e.stdout);
    assert!(!e.stdout.contains("hello from c1"), "{}", e.stdout);
}

/// The work root may sit under a directory only the gateway's user can enter (a home directory
/// such as `/root`, a 0700 temporary directory): the sandbox reaches nothing there by path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_runs_with_the_work_root_under_a_private_directory() {
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let config = SandboxConfig { work_root: private.path().join("state").join("containers"), ..base_config() };
    let Some(sb) = sandbox_with(config).await else { return };
    let c = Sandbox::new_container_id();
    assert_success(&run(&sb, &c, "open('kept.txt', 'w').write('kept')").await);
    let e = run(&sb, &c, "open('kept.txt').read()").await;
    assert_success(&e);
    assert_eq!(e.result.as_deref(), Some("'kept'"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_at_all() {
    let Some(sb) = sandbox().await else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // The public-address attempt is made only once the sandbox has shown it has no interface but
    // loopback and no route, so even a broken sandbox sends nothing off this machine.
    let code = format!(
        "import socket\n\
         ifaces = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:])\n\
         routes = open('/proc/net/route').read().splitlines()[1:]\n\
         print('ifaces', ifaces, 'routes', len(routes))\n\
         def attempt(addr):\n\
         \x20   s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n\
         \x20   s.settimeout(3)\n\
         \x20   try:\n\
         \x20       s.connect(addr)\n\
         \x20       print('CONNECTED', addr)\n\
         \x20   except OSError as e:\n\
         \x20       print('failed', addr[0], type(e).__name__)\n\
         attempt(('127.0.0.1', {port}))\n\
         if ifaces == ['lo'] and not routes:\n\
         \x20   attempt(('1.1.1.1', 80))\n\
         try:\n\
         \x20   socket.getaddrinfo('example.com', 80)\n\
         \x20   print('RESOLVED')\n\
         except OSError as e:\n\
         \x20   print('no dns', type(e).__name__)\n"
    );
    let e = run(&sb, &Sandbox::new_container_id(), &code).await;
    assert_success(&e);
    assert!(e.stdout.contains("ifaces ['lo'] routes 0"), "{}", e.stdout);
    assert!(e.stdout.contains("failed 127.0.0.1 ConnectionRefusedError"), "{}", e.stdout);
    assert!(e.stdout.contains("failed 1.1.1.1 OSError"), "network unreachable: {}", e.stdout);
    assert!(e.stdout.contains("no dns"), "{}", e.stdout);
    assert!(!e.stdout.contains("CONNECTED") && !e.stdout.contains("RESOLVED"), "{}", e.stdout);
    assert!(listener.accept().is_err(), "the host listener got a connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_files_and_privileges_are_out_of_reach() {
    let Some(sb) = sandbox().await else { return };
    // A secret outside any container, a stand-in for the gateway's store file, and the
    // gateway's working directory.
    let secret_dir =
        tempfile::Builder::new().prefix("respgw-secret-").tempdir_in(work_root().parent().unwrap()).unwrap();
    std::fs::set_permissions(secret_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET-host-file").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = secret_dir.path().join("respgw.sqlite3");
    std::fs::File::create(&store).unwrap().write_all(b"SQLite format 3\0TOPSECRET-store").unwrap();
    let cwd = std::env::current_dir().unwrap();
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap();

    let code = format!(
        "import os\n\
         for p in [{secret:?}, {store:?}, {cwd:?}, {cargo:?}, {venv:?}, {root:?}, '/etc/shadow', '/root', '/home']:\n\
         \x20   print('exists' if os.path.exists(p) else 'absent', p)\n\
         print('passwd', repr(open('/etc/passwd').read()))\n\
         print('top', sorted(os.listdir('/')))\n\
         print('etc', sorted(os.listdir('/etc')))\n\
         print('pids', len([p for p in os.listdir('/proc') if p.isdigit()]))\n\
         status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
         print('uid', os.getuid(), os.getgid(), 'caps', status['CapEff'].strip(), status['CapBnd'].strip(), 'nnp', status['NoNewPrivs'].strip())\n\
         for p in ['/usr/evil', '/opt/venv/evil', '/etc/evil', '/evil', '/run/respgw/runner.py', '/dev/evil']:\n\
         \x20   try:\n\
         \x20       open(p, 'w').write('x')\n\
         \x20       print('WROTE', p)\n\
         \x20   except OSError as e:\n\
         \x20       print('readonly', p)\n\
         try:\n\
         \x20   os.setuid(0)\n\
         \x20   print('BECAME ROOT')\n\
         except OSError:\n\
         \x20   print('setuid denied')\n\
         try:\n\
         \x20   os.unshare(os.CLONE_NEWUSER)\n\
         \x20   print('NEW USERNS')\n\
         except (OSError, AttributeError) as e:\n\
         \x20   print('userns denied')\n",
        secret = secret.display().to_string(),
        store = store.display().to_string(),
        cwd = cwd.display().to_string(),
        cargo = env!("CARGO_MANIFEST_DIR"),
        venv = sb.config().venv.display().to_string(),
        root = work_root().display().to_string(),
    );
    let e = run(&sb, &Sandbox::new_container_id(), &code).await;
    assert_success(&e);
    let out = &e.stdout;
    assert!(!out.contains("exists"), "{out}");
    assert!(!out.contains("TOPSECRET"), "{out}");
    let first_host_line = host_passwd.lines().next().unwrap();
    assert!(!out.contains(first_host_line), "host /etc/passwd visible: {out}");
    assert!(out.contains("passwd 'sandbox:x:65534:65534:sandbox:/mnt/data:/usr/sbin/nologin\\n'"), "{out}");
    assert!(out.contains("etc ['fonts', 'group', 'ld.so.cache', 'passwd']"), "{out}");
    assert!(out.contains("top ["), "{out}");
    assert!(!out.contains("'home'") && !out.contains("'root'") && !out.contains("'work'"), "{out}");
    let pids: usize = out.split("pids ").nth(1).unwrap().lines().next().unwrap().trim().parse().unwrap();
    assert!(pids <= 4, "only the sandbox's own processes are visible: {out}");
    assert!(out.contains("uid 65534 65534 caps 0000000000000000 0000000000000000 nnp 1"), "{out}");
    assert!(!out.contains("WROTE"), "{out}");
    assert!(out.contains("setuid denied") && out.contains("userns denied"), "{out}");
}

/// A fork bomb, a memory hog, an infinite loop and a 10 GB write, all at once, while a
/// well-behaved execution runs next to them and completes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_code_is_stopped_while_other_executions_complete() {
    let config = SandboxConfig {
        max_concurrency: 6,
        // Page faults are slow on small VMs (~0.4 GB/s here): keep the hog's fill short.
        memory_bytes: 512 << 20,
        timeout: Duration::from_secs(10),
        ..base_config()
    };
    let Some(sb) = sandbox_with(config).await else { return };
    let cases: Vec<(&str, &str, &[&str])> = vec![
        ("fork bomb", "import os\nwhile True:\n    os.fork()\n", &["processes"]),
        ("memory hog", "hog = []\nwhile True:\n    hog.append(bytearray(50 * 1024 * 1024))\n", &["memory"]),
        // Stopped by the wall clock, or by RLIMIT_CPU if it got a whole core for 30 s.
        ("infinite loop", "while True:\n    pass\n", &["timeout", "CPU time"]),
        (
            "10 GB write",
            "chunk = b'\\0' * (1 << 20)\nwith open('big.bin', 'wb') as f:\n    for _ in range(10 * 1024):\n        f.write(chunk)\n",
            &["file size"],
        ),
    ];
    let benign_code = "import time\ntime.sleep(2.5)\nprint('benign done')\nsum(range(10))";
    let benign_container = Sandbox::new_container_id();
    let started = Instant::now();
    let benign = {
        let sb = sb.clone();
        let c = benign_container.clone();
        tokio::spawn(async move { sb.execute(&c, benign_code).await })
    };
    let mut tasks = Vec::new();
    for (name, code, _) in &cases {
        let sb = sb.clone();
        let (name, code) = (name.to_string(), code.to_string());
        tasks.push(tokio::spawn(async move {
            let c = Sandbox::new_container_id();
            let e = sb.execute(&c, &code).await;
            (name, c, e)
        }));
    }
    // Another one starts while the fork bomb runs, and itself starts a process and threads.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let late = sb
        .execute(
            &Sandbox::new_container_id(),
            "import subprocess, sys, threading\n\
             ts = [threading.Thread(target=lambda: None) for _ in range(8)]\n\
             [t.start() for t in ts]; [t.join() for t in ts]\n\
             subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, check=True).stdout",
        )
        .await
        .unwrap();
    assert_success(&late);
    assert_eq!(late.result.as_deref(), Some("b'42\\n'"));
    let benign = benign.await.unwrap().unwrap();
    assert_success(&benign);
    assert_eq!(benign.stdout, "benign done\n");
    assert_eq!(benign.result.as_deref(), Some("45"));
    eprintln!("benign execution next to the hostile ones: {:?} (total {:?})", benign.duration, started.elapsed());

    for (task, (name, _, want)) in tasks.into_iter().zip(&cases) {
        let (_, container, e) = task.await.unwrap();
        let e = e.unwrap_or_else(|err| panic!("{name}: {err}"));
        eprintln!("{name}: {} after {:?}", e.status, e.duration);
        let ok = match &e.status {
            ExecutionStatus::Timeout => want.contains(&"timeout"),
            ExecutionStatus::ResourceLimit(msg) => want.iter().any(|w| msg.contains(w)),
            _ => false,
        };
        assert!(ok, "{name}: expected {want:?}, got {:?}\nstdout: {}\nstderr: {}", e.status, e.stdout, e.stderr);
        assert!(e.duration < Duration::from_secs(15), "{name} took {:?}", e.duration);
        if *name == "10 GB write" {
            let big = sb.container_data_dir(&container).unwrap().join("big.bin");
            assert_eq!(std::fs::metadata(big).unwrap().len(), 100 << 20, "stopped at RLIMIT_FSIZE");
            assert!(e.stderr.contains("File too large"), "{}", e.stderr);
        }
        if *name == "memory hog" {
            assert!(e.stderr.contains("MemoryError"), "{}", e.stderr);
        }
    }
    // Nothing of theirs is left running, and the sandbox still works.
    let e = run(&sb, &benign_container, "print('still fine')").await;
    assert_success(&e);
}

/// RLIMIT_CPU stops a CPU burner before the wall clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_limit_stops_the_code() {
    let config = SandboxConfig { cpu_seconds: 2, timeout: Duration::from_secs(30), ..base_config() };
    let Some(sb) = sandbox_with(config).await else { return };
    let e = run(&sb, &Sandbox::new_container_id(), "while True:\n    pass\n").await;
    assert_eq!(e.status, ExecutionStatus::ResourceLimit("CPU time (2 s) exceeded".into()));
    assert!(e.duration < Duration::from_secs(20), "{:?}", e.duration);
}

/// Bytes allocated under `dir` (what the host's disk holds), never following links.
fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += disk_usage(&entry.path());
        }
    }
    total
}

/// Runs `code` in `container` while measuring the container's host directory every few
/// milliseconds; returns the execution and the largest size seen.
async fn run_measuring_disk(sb: &Sandbox, container: &str, code: &str) -> (Execution, u64) {
    let data = sb.container_data_dir(container).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(disk_usage(&data));
                std::thread::sleep(Duration::from_millis(2));
            }
            peak.max(disk_usage(&data))
        })
    };
    let e = run(sb, container, code).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    (e, poller.join().unwrap())
}

/// Many files, each below the file size limit, cannot take more than the container's limit: the
/// write past it fails with ENOSPC inside the sandbox (the code sees it and goes on), and the
/// host directory never holds more than the limit, at any moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_disk_limit_fails_inside_the_sandbox() {
    let limit: u64 = 24 << 20;
    let config = SandboxConfig { max_disk_bytes: limit, max_file_bytes: 8 << 20, ..base_config() };
    let Some(sb) = sandbox_with(config).await else { return };
    let c = Sandbox::new_container_id();
    let code = "import errno\n\
                chunk = b'\\1' * (1 << 20)\n\
                written = 0\n\
                try:\n\
                \x20   for i in range(20):\n\
                \x20       with open(f'f{i}.bin', 'wb') as f:\n\
                \x20           for _ in range(5):\n\
                \x20               f.write(chunk)\n\
                \x20               f.flush()\n\
                \x20               written += 1\n\
                except OSError as e:\n\
                \x20   print('stopped', errno.errorcode[e.errno], 'after', written, 'MiB')\n\
                import os\n\
                for name in os.listdir('.'):\n\
                \x20   if name >= 'f4':\n\
                \x20       os.remove(name)\n\
                open('after.txt', 'w').write('the code went on')\n";
    let (e, peak) = run_measuring_disk(&sb, &c, code).await;
    assert_success(&e);
    assert!(e.stdout.starts_with("stopped ENOSPC after 2"), "{}\n{}", e.stdout, e.stderr);
    assert!(peak <= limit, "the host directory reached {peak} bytes (limit {limit})");

    // Files written in one call are there in the next, and count against the limit: four files
    // of 5 MiB are kept, so only about 4 MiB more fit.
    let code = "import os\n\
                print(sorted(os.listdir('.')), open('after.txt').read())\n\
                with open('more.bin', 'wb') as f:\n\
                \x20   for _ in range(16):\n\
                \x20       f.write(b'\\2' * (1 << 20))\n";
    let (e, peak) = run_measuring_disk(&sb, &c, code).await;
    assert!(
        e.stdout.contains("['after.txt', 'f0.bin', 'f1.bin', 'f2.bin', 'f3.bin'] the code went on"),
        "{}\n{}",
        e.stdout,
        e.stderr
    );
    match &e.status {
        ExecutionStatus::ResourceLimit(msg) if msg.contains("no space left on device") => {}
        other => panic!("expected the disk limit, got {other:?}\n{}", e.stderr),
    }
    assert!(e.stderr.contains("No space left on device"), "{}", e.stderr);
    assert!(peak <= limit, "the host directory reached {peak} bytes (limit {limit})");
    let data = sb.container_data_dir(&c).unwrap();
    assert_eq!(std::fs::metadata(data.join("f3.bin")).unwrap().len(), 5 << 20);
}

/// A container keeps a bounded number of files; the code is told about the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_keeps_a_bounded_number_of_files() {
    let Some(sb) = sandbox_with(SandboxConfig { max_files: 50, ..base_config() }).await else { return };
    let c = Sandbox::new_container_id();
    let e = run(&sb, &c, "for i in range(80):\n    open(f'n{i:03}', 'w').write('x')").await;
    assert_success(&e);
    assert!(e.stderr.contains("30 files were not kept"), "{}", e.stderr);
    let e = run(&sb, &c, "import os\nlen(os.listdir('.'))").await;
    assert_eq!(e.result.as_deref(), Some("50"));
}

/// The containers of one gateway share a total cap: the least recently used idle container is
/// evicted to make room, and when every other container is in use the execution fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_disk_cap_evicts_idle_containers_then_refuses() {
    // Its own work root: eviction would delete the other tests' containers.
    let config = SandboxConfig {
        work_root: work_root().with_extension("total"),
        max_disk_bytes: 8 << 20,
        max_total_disk_bytes: 20 << 20,
        max_concurrency: 3,
        ..base_config()
    };
    let Some(sb) = sandbox_with(config).await else { return };
    let write_5_mib = "open('five.bin', 'wb').write(b'5' * (5 << 20))";
    let (a, b, c) = (Sandbox::new_container_id(), Sandbox::new_container_id(), Sandbox::new_container_id());
    assert_success(&run(&sb, &a, write_5_mib).await);
    assert_success(&run(&sb, &b, write_5_mib).await);
    // c needs room for 8 MiB: 5 + 5 + 8 fits in 20.
    assert_success(&run(&sb, &c, "1").await);
    let (data_a, data_b) = (sb.container_data_dir(&a).unwrap(), sb.container_data_dir(&b).unwrap());
    assert!(data_a.exists() && data_b.exists());
    // c filled: 5 + 5 + 5, then a new container needs 8: a (least recently used) goes.
    assert_success(&run(&sb, &c, write_5_mib).await);
    let d = Sandbox::new_container_id();
    assert_success(&run(&sb, &d, "1").await);
    assert!(!data_a.exists(), "the least recently used container is evicted");
    assert!(data_b.exists(), "only as many as needed");

    // Two containers in use count 8 MiB each: a third needs 8 more and nothing idle can go once b,
    // c and d are busy.
    let sleeping = "import time\ntime.sleep(5)";
    let busy: Vec<_> = [b.clone(), c.clone()]
        .into_iter()
        .map(|id| {
            let sb = sb.clone();
            tokio::spawn(async move { sb.execute(&id, sleeping).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sb.stats().running < 2 {
        if Instant::now() > deadline || busy.iter().any(|t| t.is_finished()) {
            let ended: Vec<_> = futures_results(busy).await;
            panic!("the two executions did not run together: {:?}; {ended:?}", sb.stats());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // d is idle (1 block) and is evicted first; still 8 + 8 + 8 > 20.
    match sb.execute(&Sandbox::new_container_id(), "1").await {
        Err(e @ SandboxError::NoRoom { .. }) => {
            assert!(e.to_string().contains("out of space") && e.to_string().contains("20 MiB"), "{e}")
        }
        other => panic!("expected NoRoom, got {other:?}"),
    }
    for t in busy {
        assert_success(&t.await.unwrap().unwrap());
    }
    // Once they are idle again there is room.
    assert_success(&run(&sb, &Sandbox::new_container_id(), "1").await);
}

/// Model code cannot forge the runner's report: it cannot reach the report pipe (not inherited,
/// the runner's /proc entries are closed to it), and fake outcomes on its own pipe lose against
/// the real one and the exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_cannot_be_forged() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    let code = "import os, json\n\
                fake_report = json.dumps({'event': 'finished', 'child': {'exit': 0}, 'outcome': {'kind': 'ok', 'result': 'FORGED'}}) + '\\n'\n\
                fake_outcome = json.dumps({'kind': 'ok', 'result': 'FORGED'}) + '\\n'\n\
                wrote = []\n\
                for fd in range(3, 256):\n\
                \x20   try:\n\
                \x20       os.write(fd, fake_report.encode() + fake_outcome.encode())\n\
                \x20       wrote.append(fd)\n\
                \x20   except OSError:\n\
                \x20       pass\n\
                ppid = os.getppid()\n\
                try:\n\
                \x20   print('PARENT FDS', os.listdir(f'/proc/{ppid}/fd'))\n\
                except OSError:\n\
                \x20   print('parent fds hidden')\n\
                for fd in range(64):\n\
                \x20   try:\n\
                \x20       with open(f'/proc/{ppid}/fd/{fd}', 'w') as f:\n\
                \x20           f.write(fake_report)\n\
                \x20       print('WROTE VIA PROC', fd)\n\
                \x20   except OSError:\n\
                \x20       pass\n\
                print('wrote to', len(wrote), 'fds')\n\
                raise ValueError('the real outcome')\n";
    let e = run(&sb, &c, code).await;
    assert_eq!(e.status, ExecutionStatus::Error, "{}\n{}", e.stdout, e.stderr);
    assert_eq!(e.result, None);
    assert!(e.stdout.contains("parent fds hidden"), "{}", e.stdout);
    assert!(!e.stdout.contains("WROTE VIA PROC"), "{}", e.stdout);
    assert!(e.stderr.contains("ValueError: the real outcome"), "{}", e.stderr);

    // A fake "ok" outcome followed by a non-zero exit: the exit status wins.
    let code = "import os, json, sys\n\
                msg = (json.dumps({'kind': 'ok', 'result': 'FORGED'}) + '\\n').encode()\n\
                for fd in range(3, 64):\n\
                \x20   try:\n\
                \x20       os.write(fd, msg)\n\
                \x20   except OSError:\n\
                \x20       pass\n\
                sys.stdout.flush()\n\
                os._exit(1)\n";
    let e = run(&sb, &c, code).await;
    assert_eq!(e.status, ExecutionStatus::Error);
    assert_eq!(e.result, None);

    // Killing the runner is reported, not mistaken for success.
    let e = run(&sb, &c, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(5)").await;
    assert!(matches!(e.status, ExecutionStatus::Killed(_)), "{:?}", e.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_left_behind_die_with_the_execution() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    let code = "import subprocess, sys\n\
                subprocess.Popen([sys.executable, '-c', \"import time; open('/mnt/data/alive', 'w'); time.sleep(2); open('/mnt/data/survived', 'w')\"], start_new_session=True)\n\
                import time\n\
                time.sleep(0.5)\n";
    let e = run(&sb, &c, code).await;
    assert_success(&e);
    let data = sb.container_data_dir(&c).unwrap();
    assert!(data.join("alive").exists(), "the background process did start");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!data.join("survived").exists(), "a background process outlived its execution");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_when_running_and_queue_are_full() {
    let config = SandboxConfig { max_concurrency: 1, max_queued: 1, ..base_config() };
    let Some(sb) = sandbox_with(config).await else { return };
    let slow = "import time\ntime.sleep(2)\n'done'";
    let mut running = Vec::new();
    for _ in 0..2 {
        let sb = sb.clone();
        running.push(tokio::spawn(async move { sb.execute(&Sandbox::new_container_id(), slow).await }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    // Admitted executions count as queued until their code starts, so wait for one to be running.
    let full = SandboxStats { running: 1, queued: 1 };
    loop {
        let stats = sb.stats();
        if stats == full {
            break;
        }
        assert!(Instant::now() < deadline, "expected one running and one queued: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match sb.execute(&Sandbox::new_container_id(), "1").await {
        Err(SandboxError::Busy) => {}
        other => panic!("expected Busy, got {other:?}"),
    }
    for t in running {
        let e = t.await.unwrap().unwrap();
        assert_success(&e);
        assert_eq!(e.result.as_deref(), Some("'done'"));
    }
    assert_eq!(sb.stats(), SandboxStats { running: 0, queued: 0 });
}

async fn futures_results(tasks: Vec<tokio::task::JoinHandle<Result<Execution, SandboxError>>>) -> Vec<String> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(format!("{:?}", t.await));
    }
    out
}

/// A queued execution waits at most `queue_wait`, then fails as busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_execution_gives_up_after_the_queue_wait() {
    let config = SandboxConfig { max_concurrency: 1, queue_wait: Duration::from_millis(500), ..base_config() };
    let Some(sb) = sandbox_with(config).await else { return };
    let long = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.execute(&Sandbox::new_container_id(), "import time\ntime.sleep(4)").await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while sb.stats().running < 1 {
        assert!(Instant::now() < deadline, "{:?}", sb.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    match sb.execute(&Sandbox::new_container_id(), "1").await {
        Err(e @ SandboxError::Busy) => assert!(e.to_string().contains("code interpreter busy"), "{e}"),
        other => panic!("expected Busy, got {other:?}"),
    }
    let waited = started.elapsed();
    // Well before the running execution (4 s) ends: the wait gave up rather than took a slot.
    assert!(waited >= Duration::from_millis(450) && waited < Duration::from_millis(3000), "{waited:?}");
    assert_eq!(sb.stats(), SandboxStats { running: 1, queued: 0 });
    assert_success(&long.await.unwrap().unwrap());
}

/// The containers live under the configured directory, which one gateway instance claims: a
/// second claim fails, a new claim deletes what a previous run left, and the end of the claim
/// deletes this run's containers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_live_under_the_instance_directory() {
    let dir = work_root().with_extension("instance");
    let claim = WorkRootClaim::take(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "no other user, the sandbox's included, enters it");
    match WorkRootClaim::take(&dir) {
        Err(msg) => assert!(msg.contains("in use by another respgw"), "{msg}"),
        Ok(_) => panic!("two instances claimed one directory"),
    }
    let Some(sb) = sandbox_with(SandboxConfig { work_root: dir.clone(), ..base_config() }).await else { return };
    let c = Sandbox::new_container_id();
    assert_success(&run(&sb, &c, "open('x', 'w').write('x')").await);
    let data = sb.container_data_dir(&c).unwrap();
    assert!(data.starts_with(&dir), "{}", data.display());
    assert!(data.join("x").exists());
    drop(sb);
    drop(claim);
    assert!(!data.exists(), "the containers go with the instance");

    // A container a previous run left behind goes when the directory is claimed again.
    let stale = dir.join(Sandbox::new_container_id());
    std::fs::create_dir_all(stale.join("data")).unwrap();
    let _claim = WorkRootClaim::take(&dir).unwrap();
    assert!(!stale.exists());
    assert!(dir.join(".runtime").exists(), "the runtime files stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_containers_are_deleted() {
    // Its own work root: its sweeper would delete the other tests' containers.
    let own_root = work_root().with_extension("idle");
    let config = SandboxConfig { container_idle: Duration::from_millis(400), work_root: own_root, ..base_config() };
    let Some(sb) = sandbox_with(config).await else { return };
    let c = Sandbox::new_container_id();
    // A container in use is not deleted, even when an execution lasts longer than the idle time.
    let e = run(&sb, &c, "import time\nopen('keep.txt', 'w').write('x')\ntime.sleep(1.5)").await;
    assert_success(&e);
    let data = sb.container_data_dir(&c).unwrap();
    assert!(data.join("keep.txt").exists());
    // Unused past the idle time: gone (the background sweeper or an explicit sweep).
    tokio::time::sleep(Duration::from_millis(900)).await;
    sb.cleanup_idle().await;
    assert!(!data.exists(), "idle container still there");
    let e = run(&sb, &c, "import os\nos.listdir('.')").await;
    assert_success(&e);
    assert_eq!(e.result.as_deref(), Some("[]"), "a new, empty container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_of_one_container_run_one_at_a_time() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    let code = "import os, time\nassert not os.path.exists('busy')\nopen('busy', 'w').close()\ntime.sleep(0.5)\nos.remove('busy')\n'ok'";
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let (sb, c) = (sb.clone(), c.clone());
            tokio::spawn(async move { sb.execute(&c, code).await })
        })
        .collect();
    for t in tasks {
        let e = t.await.unwrap().unwrap();
        assert_success(&e);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_container_ids_are_refused() {
    let Some(sb) = sandbox().await else { return };
    for bad in ["", "../../etc", "cntr_../../x", "cntr_1", "CNTR_x", "/tmp"] {
        match sb.execute(bad, "1").await {
            Err(SandboxError::InvalidContainerId(_)) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn unavailable_without_bubblewrap_or_venv() {
    let tmp = tempfile::tempdir().unwrap();
    let config = SandboxConfig { bwrap: "/nonexistent/bwrap".into(), work_root: tmp.path().join("w"), ..base_config() };
    match Sandbox::new(config).await {
        Err(SandboxError::Unavailable(msg)) => assert!(msg.contains("scripts/setup-code-interpreter"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let config = SandboxConfig { venv: tmp.path().join("no-venv"), work_root: tmp.path().join("w"), ..base_config() };
    match Sandbox::new(config).await {
        Err(SandboxError::Unavailable(msg)) => assert!(msg.contains("scripts/setup-code-interpreter"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // A "bwrap" that is not bubblewrap.
    let config = SandboxConfig { bwrap: "/bin/true".into(), work_root: tmp.path().join("w"), ..base_config() };
    assert!(matches!(Sandbox::new(config).await, Err(SandboxError::Unavailable(_))));
}

/// Cold-start costs (printed; loose bounds so a slow machine does not fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_start_timings() {
    let Some(sb) = sandbox().await else { return };
    let c = Sandbox::new_container_id();
    for (label, code) in [
        ("print(1)", "print(1)"),
        ("import numpy, matplotlib", "import numpy, matplotlib"),
        ("import numpy, pandas, matplotlib.pyplot", "import numpy, pandas, matplotlib.pyplot"),
        ("pyplot plot + savefig", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.savefig('t.png')"),
    ] {
        let mut times = Vec::new();
        for _ in 0..3 {
            let e = run(&sb, &c, code).await;
            assert_success(&e);
            times.push(e.duration);
        }
        times.sort();
        eprintln!("cold execution of {label:?}: median {:?} (min {:?}, max {:?})", times[1], times[0], times[2]);
        assert!(times[1] < Duration::from_secs(10), "{label}: {times:?}");
    }
}
