//! Embeds `assets/` in the crate: every file under it becomes one row of a table (its path, its
//! bytes, the same bytes gzipped once here, and an ETag from their SHA-256), written to
//! `$OUT_DIR/assets.rs` and included by `src/assets.rs`. Adding a file under `assets/` is enough
//! for it to be served; nothing needs node or any other tool.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let assets_dir = manifest_dir.join("assets");
    println!("cargo:rerun-if-changed=assets");

    let mut files = Vec::new();
    collect(&assets_dir, &mut files);
    files.sort();

    let gzip_dir = out_dir.join("gzip");
    std::fs::create_dir_all(&gzip_dir).expect("create the gzip directory");
    let mut table =
        String::from("/// Every file under `assets/`, sorted by path.\npub(crate) static ASSETS: &[Asset] = &[\n");
    for (index, file) in files.iter().enumerate() {
        let relative = file.strip_prefix(&assets_dir).expect("file under assets/");
        let path =
            relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/");
        let bytes = std::fs::read(file).expect("read an asset");
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(&bytes).expect("gzip an asset");
        let gzipped = encoder.finish().expect("gzip an asset");
        let gzip_file = gzip_dir.join(format!("{index}.gz"));
        std::fs::write(&gzip_file, &gzipped).expect("write a gzipped asset");
        let digest = Sha256::digest(&bytes);
        let etag: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
        writeln!(
            table,
            "    Asset {{ path: {path:?}, body: include_bytes!({body:?}), gzip: include_bytes!({gzip:?}), etag: {etag:?} }},",
            body = file.display().to_string(),
            gzip = gzip_file.display().to_string(),
        )
        .expect("write to a String");
    }
    table.push_str("];\n");
    std::fs::write(out_dir.join("assets.rs"), table).expect("write assets.rs");
}

/// Every regular file under `dir`, recursively; hidden files (editor swap files, `.DS_Store`) are skipped.
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("read a directory entry");
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}
